"""``log_distributions``: log target and draft next-token logits from two causal LMs.

    python scripts/log_distributions.py --target DIR --draft DIR --prompts FILE --out DUMP
    python scripts/log_distributions.py --target T.gguf --draft D.gguf \
        --prompts data/prompts/mt_bench.jsonl --chat-template --out DUMP

For each prompt the generator (``--generator``, the target by default) samples a
continuation; both models are then run teacher-forced over prompt + continuation and their
raw logits at the continuation's positions go to the otbound dump DUMP (read it with
``compute_bounds DUMP``). See :mod:`otbound.capture`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otbound.cli._common import (
    EXIT_FAILURE,
    CommandError,
    HelpFormatter,
    OneLineParser,
    add_options,
    run_command,
    writable_directory,
)

PROG = "log_distributions"

#: Library parameter names as they appear in messages -> the command line's options.
_OPTION_NAMES = {
    "resume=True": "--resume",
    "batch_size": "--batch-size",
    "max_new_tokens": "--max-new-tokens",
    "max_prompt_tokens": "--max-prompt-tokens",
    "max_prompts": "--max-prompts",
    "shard_steps": "--shard-steps",
    "storage_dtype": "--storage-dtype",
    "truncation_side": "--truncation-side",
    "top_p": "--top-p",
    "dtype float32": "--dtype float32",
    "store topk": "--store topk",
    "(give one,": "(pass --tokenizer,",
    "chat_template=True": "--chat-template",
}


def _flag(text: str) -> dict[str, Any]:
    """An on/off option (``store_true``) with help ``text``."""
    return {"action": "store_true", "help": text}


#: The command's options, by argument group: each option's flag and ``add_argument`` keywords.
_OPTIONS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "models": (
        (
            "--target",
            dict(
                required=True,
                help="target model: a Hugging Face directory, a GGUF file (*.gguf, dequantised "
                "to --dtype; needs the gguf and accelerate packages) or a hub name; required",
            ),
        ),
        ("--draft", dict(required=True, help="draft model, as --target")),
        (
            "--tokenizer",
            dict(
                default=None,
                help="tokenizer directory or GGUF file (default: the target's directory's, or "
                "its GGUF file's; needed for text prompts; the logged vocabulary is cut to its "
                "length)",
            ),
        ),
        (
            "--dtype",
            dict(choices=("float32", "float16", "bfloat16"), default="float32", help="model dtype"),
        ),
        (
            "--device",
            dict(default=None, help="torch device (default: cuda when present, else cpu)"),
        ),
        ("--trust-remote-code", _flag("allow model code from the checkpoint")),
    ),
    "prompts": (
        (
            "--prompts",
            dict(
                required=True,
                help='JSON lines with "input_ids" (or "input_tokens"), "text", "messages" (a chat: '
                '[{"role": ..., "content": ...}]) or "turns" (MT-bench: the first turn is used), '
                "or a text file (one prompt per line)",
            ),
        ),
        (
            "--chat-template",
            _flag(
                "put text, messages and turns prompts in the tokenizer's chat template, ready for "
                "the assistant's reply (add_generation_prompt), as instruct models are used; a "
                "text is one user message, token ids are used as given. Off by default: base "
                "models have no template, and the text is then tokenized as it stands (as "
                "earlier dumps were); turn it on for instruct models"
            ),
        ),
        ("--max-prompts", dict(type=int, default=None, help="use the first N prompts")),
        ("--max-prompt-tokens", dict(type=int, default=None, help="truncate longer prompts")),
        (
            "--truncation-side",
            dict(
                choices=("left", "right"),
                default="left",
                help="left: drop a long prompt's first tokens (keep the last); right: keep the "
                "first",
            ),
        ),
        ("--no-special-tokens", _flag("tokenize text prompts without special tokens (no BOS)")),
    ),
    "generation": (
        ("--max-new-tokens", dict(type=int, default=128, help="continuation length")),
        ("--temperature", dict(type=float, default=1.0, help="sampling temperature (0: greedy)")),
        ("--top-p", dict(type=float, default=1.0, help="nucleus sampling threshold")),
        (
            "--generator",
            dict(
                choices=("target", "draft"),
                default="target",
                help="the model whose samples form the text",
            ),
        ),
        ("--ignore-eos", _flag("do not stop at end-of-sequence tokens")),
        ("--seed", dict(type=int, default=0, help="seed (per prompt: seed and prompt id)")),
        ("--batch-size", dict(type=int, default=8, help="prompts run at once")),
    ),
    "output": (
        ("--out", dict(required=True, help="the dump directory")),
        (
            "--store",
            dict(default="full", help="'full' rows or 'topk:K' (the K largest and logsumexp)"),
        ),
        (
            "--storage-dtype",
            dict(
                choices=("float16", "bfloat16", "float32"),
                default=None,
                help="dtype of the stored logits (default: the model dtype; float32 for top-k)",
            ),
        ),
        (
            "--shard-steps",
            dict(
                type=int,
                default=None,
                help="steps per shard (default: up to 1024 and about 256 MiB)",
            ),
        ),
        ("--resume", _flag("continue an interrupted dump at --out")),
    ),
}


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The argument parser (see ``--help``); ``prog`` names the command in messages."""
    parser = OneLineParser(
        prog=prog,
        description=(
            "Sample continuations of prompts and log the target's and the draft's raw "
            "next-token logits at every continuation position (teacher-forced over the same "
            "tokens) to an otbound dump, for compute_bounds."
        ),
        formatter_class=HelpFormatter,
    )
    for title, options in _OPTIONS.items():
        add_options(parser.add_argument_group(title), options)
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    return parser


def _cli_words(text: str) -> str:
    for library, option in _OPTION_NAMES.items():
        text = re.sub(rf"(?<![\w-]){re.escape(library)}(?![\w])", option, text)
    return text


def _check_output(out: Path, resume: bool) -> Path:
    """Refuse an unusable --out before any model is loaded."""
    if (out / "manifest.json").exists():
        if not resume:
            raise CommandError(
                f"--out {out}: already holds a dump; pass --resume to continue it, or choose "
                "another directory"
            )
    elif out.is_dir() and any(out.iterdir()):
        raise CommandError(f"--out {out}: exists and is not empty (and holds no dump)")
    return writable_directory(out)


def run(args: argparse.Namespace) -> int:
    """The command's body; the exit status."""
    try:
        import otbound.capture as capture
    except ImportError as exc:
        raise CommandError(
            f"needs torch and transformers ({exc}): pip install 'otbound[torch]'"
        ) from None
    out = _check_output(Path(args.out), args.resume)
    capture.quiet_transformers()
    capture.check_gguf_paths(args.target, args.draft)
    tokenizer = capture.prompt_tokenizer(
        args.target, args.tokenizer, trust_remote_code=args.trust_remote_code
    )
    options = {
        "add_special_tokens": not args.no_special_tokens,
        "max_prompts": args.max_prompts,
        "max_prompt_tokens": args.max_prompt_tokens,
        "truncation_side": args.truncation_side,
        "chat_template": args.chat_template,
    }
    draft_tokenizer = capture.draft_tokenizer(
        args.draft, args.tokenizer, target=args.target, trust_remote_code=args.trust_remote_code
    )
    capture.check_shared_vocabulary(tokenizer, draft_tokenizer)
    prompts = capture.read_prompts(args.prompts, tokenizer, **options)
    source = capture.prompt_file_info(args.prompts)
    load = {"dtype": args.dtype, "device": args.device, "trust_remote_code": args.trust_remote_code}
    target = capture.load_model(args.target, **load)
    draft = capture.load_model(args.draft, **load)
    path = capture.log_distributions(
        target,
        draft,
        prompts,
        out,
        tokenizer=tokenizer,
        draft_tokenizer=draft_tokenizer,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        generator=args.generator,
        batch_size=args.batch_size,
        store=args.store,
        storage_dtype=args.storage_dtype,
        shard_steps=args.shard_steps,
        seed=args.seed,
        stop_at_eos=not args.ignore_eos,
        prompt_source=source,
        resume=args.resume,
        progress=not args.quiet,
        extra={"command": [PROG, *sys.argv[1:]] if args.argv is None else [PROG, *args.argv]},
        **options,
    )
    if not args.quiet:
        from otbound.dumps import open_dump

        dump = open_dump(path)
        print(f"{dump.num_steps} steps in {len(dump.shards)} shard(s) in {path}")
    return 0


def _exit_status(exc: Exception) -> int:
    """The status for a library refusal: 2 for an unusable model file or pair (as for unusable
    arguments), else 1."""
    return int(getattr(exc, "exit_status", EXIT_FAILURE))


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run ``log_distributions`` with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    ``prog`` names the command in its help and messages (``otbound`` runs it too).
    """
    args = build_parser(prog).parse_args(argv)
    args.argv = None if argv is None else list(argv)

    def work() -> int:
        try:
            return run(args)
        except (CommandError, OSError, ImportError):
            raise
        except ValueError as exc:
            raise CommandError(_cli_words(str(exc)), _exit_status(exc)) from None
        except Exception as exc:  # a model's own failure: still one line, no traceback
            text = str(exc).strip().splitlines()
            raise CommandError(f"{type(exc).__name__}: {text[0] if text else ''}") from None

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
