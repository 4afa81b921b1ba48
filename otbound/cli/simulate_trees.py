"""``simulate_trees``: real tree speculative decoding with a draft and a target model.

    python scripts/simulate_trees.py --trees binary:1-5,ternary:1-3 --out out/trees

For every verifier and tree the draft model grows the tree with the verifier's draft design,
the target scores all nodes in one forward pass with a tree attention mask, and the verifier
walks the tree (:mod:`otbound.tree_decoding`). DIR gets ``tree_steps.parquet`` (one row per
target call), ``tree_summary.csv`` (tokens per call with 95% intervals clustered over prompts,
the prediction and the token-level bound, which bounds token-level verifiers only),
``tree_differences.csv`` (every pair of runs, at one budget in budget runs, compared on the
same prompts: the difference in tokens per call with its paired 95% interval and whether it
excludes zero; :func:`otbound.tree_decoding.tree_differences`),
``tokens_per_call.png`` and ``run.json`` (the settings and the
fingerprint of settings, prompts and models); the table is printed.

Each finished (verifier, tree) pair is saved at once under ``DIR/parts``; ``--resume`` keeps
the pairs of an earlier, interrupted run into the same DIR and computes only the others (the
tables equal an uninterrupted run's), and refuses if the settings, prompts or models changed.
Without ``--resume`` the parts and outputs of an earlier run in DIR are removed first.

Dynamic drafting (:mod:`otbound.tree_decoding._dynamic`): ``--trees beam4:1-5`` grows RSD-S
beam trees (verified by ``rrs_without_replacement``); ``--root target`` draws the root's child
from the target; ``--stopping confidence:0.3`` (or ``confidence-path:T``, ``learned:MODEL``
from ``train_stopping``) stops branches early; ``--budget 8,16,32,64`` runs each system with
the largest tree of its family within each budget (``--trees`` then names families:
``binary,beam4``) and draws ``tokens_per_call_vs_budget.png``; the summary gains the budget
columns and a speed-up from the cost model (``--c-target``, ``--c-draft``; default: measured).

``--verifiers`` also takes the sequence-level ``block`` (chains), ``traversal`` (chains and
trees) and ``multipath`` (independent paths: ``--trees paths3:1-4``); they walk the whole tree
at once and get no prediction. A sequence-level verifier that can walk none of the trees is
refused with one line; on a mixed list of trees it skips the others with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from otbound._files import atomic_output, write_json
from otbound.cli._common import (
    CommandError,
    HelpFormatter,
    OneLineParser,
    check_choices,
    list_option,
    run_command,
    writable_directory,
)
from otbound.verifiers import VERIFIERS

if TYPE_CHECKING:
    from otbound.tree_decoding import TreeDecodingResult

PROG = "simulate_trees"

_DATA = Path(__file__).resolve().parents[2] / "data"
#: The sample pair and prompts shipped with the source tree.
SAMPLE_TARGET = _DATA / "models" / "target"
SAMPLE_DRAFT = _DATA / "models" / "draft"
SAMPLE_PROMPTS = _DATA / "prompts" / "c4_heldout.jsonl"

STEPS_FILE = "tree_steps.parquet"
SUMMARY_FILE = "tree_summary.csv"
DIFFERENCES_FILE = "tree_differences.csv"
FIGURE_FILE = "tokens_per_call.png"
BUDGET_FIGURE_FILE = "tokens_per_call_vs_budget.png"
RUN_FILE = "run.json"
#: The checkpoint directory under ``--out``: one file per finished (verifier, tree) pair.
PARTS_DIR = "parts"

_DEFAULT_VERIFIERS = "rrs,rrs_without_replacement,spechub,greedy,kseq"

#: Library parameter names that messages mention, written as the command line's options.
_PARAMETERS = re.compile(
    r"\b(max_new_tokens|max_prompt_tokens|max_prompts|batch_size|trees|budget|stopping)\b"
)


#: The sequence-level verifiers (:data:`otbound.tree_decoding.SEQUENCE_TREE_VERIFIERS`).
_SEQUENCE = ("block", "traversal", "multipath")


def _check_sequence_trees(verifiers: list[str], trees: list[Any]) -> None:
    """One readable error when a sequence-level verifier can walk none of the trees."""
    from otbound.tree_decoding import TreeLayout, tree_verifier

    for name in verifiers:
        if name not in _SEQUENCE:
            continue
        verifier = tree_verifier(name)
        reasons = [verifier.not_applicable(TreeLayout.from_paths(t.as_lists())) for t in trees]
        if all(reasons):
            raise CommandError(f"--verifiers {name}: none of --trees fits: {reasons[0]}")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The argument parser (see ``--help``); ``prog`` names the command in messages."""
    parser = OneLineParser(
        prog=prog,
        description=(
            "Tree speculative decoding with a draft and a target model: tokens per target call "
            "of each verifier on each draft tree, with 95% intervals, beside the prediction "
            "from the positional acceptance and the token-level bound from α* (which bounds "
            "token-level verifiers only, not block, traversal or multipath)."
        ),
        formatter_class=HelpFormatter,
    )
    _add_model_options(parser)
    _add_prompt_options(parser)
    _add_tree_options(parser)
    _add_run_options(parser)
    return parser


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    """The two models and the tokenizer."""
    add = parser.add_argument
    add(
        "--target",
        default=str(SAMPLE_TARGET),
        help="target model: a Hugging Face directory, a GGUF file (*.gguf, dequantised to "
        "float32) or a hub name",
    )
    add("--draft", default=str(SAMPLE_DRAFT), help="draft model, as --target")
    add(
        "--tokenizer",
        default=None,
        help="tokenizer for text prompts (default: the target's directory's or GGUF file's)",
    )


def _add_prompt_options(parser: argparse.ArgumentParser) -> None:
    """The prompts and how much each generates."""
    add = parser.add_argument
    add(
        "--prompts",
        default=str(SAMPLE_PROMPTS),
        help='JSON lines with "input_ids" (or "input_tokens"), "text", "messages" or "turns" '
        "(MT-bench: the first turn), or a text file",
    )
    add(
        "--chat-template",
        action="store_true",
        help="put text and chat prompts in the tokenizer's chat template (add_generation_prompt),"
        " as instruct models are used; off by default: base models have no template",
    )
    add("--max-prompts", type=int, default=8, help="use the first N prompts")
    add(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="cut longer prompts to N tokens (see --truncation-side)",
    )
    add(
        "--truncation-side",
        choices=("left", "right"),
        default="left",
        help="left: keep a long prompt's last tokens; right: keep its first ones",
    )
    add("--max-new-tokens", type=int, default=32, help="tokens generated per prompt")


def _add_tree_options(parser: argparse.ArgumentParser) -> None:
    """The verifiers, the trees, their roots, stopping and budgets."""
    add = parser.add_argument
    add(
        "--verifiers",
        type=list_option(str, "--verifiers"),
        default=_DEFAULT_VERIFIERS,
        help=f"verifiers, from {', '.join([*VERIFIERS, *_SEQUENCE])}",
    )
    add(
        "--trees",
        default="binary:1-5,ternary:1-3",
        help="trees as FAMILY:DEPTHS items (families chain, binary, ternary, kN, pathsN; "
        "depths 3 or 1-5), comma-separated",
    )
    add(
        "--root",
        type=list_option(str, "--root"),
        default=None,
        help="draft (default), target (the root's child drawn from the target) or both: "
        "draft,target",
    )
    add(
        "--stopping",
        default=None,
        help="stopping policies, comma-separated: fixed, confidence:THRESHOLD (the token's "
        "draft probability), confidence-path:THRESHOLD, learned:MODEL[@THRESHOLD] (a model from "
        "train_stopping)",
    )
    add(
        "--budget",
        type=list_option(int, "--budget"),
        default=None,
        help="target budgets (nodes scored per call), e.g. 8,16,32,64: each system runs the "
        "largest tree of its family within each; --trees then names families (binary,beam4)",
    )
    add("--c-target", type=float, default=None, help="cost of a target pass (default: measured)")
    add("--c-draft", type=float, default=None, help="cost of a draft pass (default: measured)")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """Sampling, seeds, predictions, the device and the output."""
    add = parser.add_argument
    add("--temperature", type=float, default=1.0, help="applied to both models (> 0)")
    add(
        "--seed",
        type=int,
        default=0,
        help="seed of the random numbers, common to every run: call t of the c-th prompt draws "
        "from streams seeded by (seed, c, t)",
    )
    add("--batch-size", type=int, default=8, help="prompts decoded side by side")
    add(
        "--prediction-trials",
        type=int,
        default=2000,
        help="Monte Carlo trials per call for predictions without an exact positional vector",
    )
    add("--no-prediction", action="store_true", help="skip the prediction and the bound")
    add(
        "--no-kv-cache",
        action="store_true",
        help="re-read every prefix at each call instead of keeping the models' key/value caches "
        "(same results to float rounding, slower; for models whose cache cannot be cropped)",
    )
    add("--ignore-eos", action="store_true", help="do not stop at end-of-sequence tokens")
    add("--device", default=None, help="torch device (default: cuda when present, else cpu)")
    add("--out", default="out/trees", help="output directory")
    add(
        "--resume",
        action="store_true",
        help="continue an interrupted run into --out: keep the (verifier, tree) pairs it "
        "finished (refused if the settings, prompts or models changed); without it, an earlier "
        "run's results in --out are removed first",
    )
    add("--quiet", action="store_true", help="no progress bar and no table")


def _dynamic_options(args: argparse.Namespace) -> tuple[list[Any] | None, list[Any]]:
    """Parse ``--trees``, ``--stopping`` and ``--budget`` up front: one line, exit status 2."""
    from otbound.tree_decoding import parse_trees
    from otbound.tree_decoding._dynamic import family_width
    from otbound.tree_decoding._stopping import parse_stopping

    try:
        if args.budget is None:
            trees = parse_trees(args.trees)
        else:
            trees = []
            for item in str(args.trees).split(","):
                if item.strip():
                    family_width(item.strip().split(":")[0])
            bad = [b for b in args.budget if b < 1]
            if bad:
                raise ValueError(
                    f"budget {bad[0]} is smaller than one node; each budget is the number of "
                    "tree nodes the target may score per call (>= 1)"
                )
        stopping = None
        if args.stopping is not None:
            items = [t.strip() for t in str(args.stopping).split(",") if t.strip()]
            stopping = [parse_stopping(t) for t in items]
            if not stopping:
                raise ValueError("stopping is empty")
    except ValueError as exc:
        raise CommandError(_cli_words(str(exc)), 2) from None
    if (args.c_target is not None and args.c_target <= 0) or (
        args.c_draft is not None and (args.c_draft < 0)
    ):
        raise CommandError("--c-target must be > 0 and --c-draft >= 0", 2)
    return stopping, trees


def format_table(summary: pd.DataFrame) -> str:
    """The summary as printed: tokens per call [95% interval], prediction, token-level bound."""
    rows = summary.copy()
    interval = rows.apply(
        lambda r: f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if r["applicable"] else "", axis=1
    )
    rows["95% interval"] = interval
    rows.loc[~rows["applicable"], "note"] = "not applicable"
    cols = ["verifier", "tree", "nodes", "calls", "tokens_per_call", "95% interval"]
    if "budget" in rows:
        cols[2:2] = ["root", "stopping", "budget"]
        cols += ["target_tokens_per_call", "draft_calls_per_call", "mcsd_acceptance", "speedup"]
    cols += ["predicted", "token_level_bound", "note"]
    return str(rows[cols].round(3).fillna("").to_string(index=False))


def _write(
    result: TreeDecodingResult, out: Path, models: Mapping[str, object] | None = None
) -> list[Path]:
    from otbound.plots import save_figure
    from otbound.plots_trees import tokens_per_call_vs_budget, tokens_per_call_vs_tree_size

    steps_path, summary_path = out / STEPS_FILE, out / SUMMARY_FILE
    with atomic_output(steps_path) as tmp:
        result.steps.to_parquet(tmp, index=False)
    with atomic_output(summary_path) as tmp:
        result.summary.to_csv(tmp, index=False)
    with atomic_output(out / DIFFERENCES_FILE) as tmp:
        result.differences.to_csv(tmp, index=False)
    if result.systems and result.summary["budget"].notna().any():
        figure = save_figure(tokens_per_call_vs_budget(result.summary), out / BUDGET_FIGURE_FILE)
    elif result.systems:
        static = result.summary[result.summary["root"].eq("draft")]
        static = static[static["stopping"].eq("fixed")]
        static = static if len(static[static["applicable"]]) else result.summary
        figure = save_figure(tokens_per_call_vs_tree_size(static), out / FIGURE_FILE)
    else:
        figure = save_figure(tokens_per_call_vs_tree_size(result.summary), out / FIGURE_FILE)
    written = [steps_path, summary_path, out / DIFFERENCES_FILE, figure]
    record = {
        "otbound": _version(),
        "fingerprint": result.fingerprint,
        "settings": result.settings,
        "verifiers": list(dict.fromkeys(result.summary["verifier"])),
        "systems": [s.key for s in result.systems],
        "trees": [spec.name for spec in result.trees],
        "resumed_pairs": result.resumed,
        "models": models,
        "files": [p.name for p in written],
    }
    write_json(out / RUN_FILE, record)
    return [*written, out / RUN_FILE]


def _version() -> str:
    from otbound._version import __version__

    return __version__


def _start_afresh(out: Path) -> None:
    """Remove an earlier run's parts and outputs from ``out`` (what ``compute_bounds`` does)."""
    from otbound.tree_decoding import clear_parts

    clear_parts(out / PARTS_DIR)
    for name in (
        STEPS_FILE,
        SUMMARY_FILE,
        DIFFERENCES_FILE,
        FIGURE_FILE,
        BUDGET_FIGURE_FILE,
        RUN_FILE,
    ):
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()


def run(args: argparse.Namespace) -> int:
    """The command's body; the exit status."""

    check_choices(args.verifiers, [*VERIFIERS, *_SEQUENCE], "--verifiers")
    roots = args.root or ["draft"]
    bad_roots = [r for r in roots if r not in ("draft", "target")]
    if bad_roots:
        raise CommandError(f"--root: unknown value(s) {', '.join(bad_roots)}; use draft, target", 2)
    stopping, trees = _dynamic_options(args)
    if args.budget is None:
        _check_sequence_trees(args.verifiers, trees)
    if args.temperature <= 0:
        raise CommandError(f"--temperature must be > 0, got {args.temperature:g}")
    try:
        import otbound.capture as capture
        from otbound.tree_decoding import run_tree_decoding
    except ImportError as exc:
        raise CommandError(
            f"needs torch and transformers ({exc}): pip install 'otbound[torch]'"
        ) from None
    out = writable_directory(args.out)
    if not args.resume:
        _start_afresh(out)
    capture.quiet_transformers()
    capture.check_gguf_paths(args.target, args.draft)
    tokenizer = capture.prompt_tokenizer(args.target, args.tokenizer)
    own = capture.draft_tokenizer(args.draft, args.tokenizer, target=args.target)
    capture.check_shared_vocabulary(tokenizer, own)
    prompts = capture.read_prompts(
        args.prompts,
        tokenizer,
        max_prompts=args.max_prompts,
        max_prompt_tokens=args.max_prompt_tokens,
        truncation_side=args.truncation_side,
        chat_template=args.chat_template,
    )
    target = capture.load_model(args.target, "float32", args.device)
    draft = capture.load_model(args.draft, "float32", args.device)
    models = {"target": capture.model_entry(target), "draft": capture.model_entry(draft)}
    result = run_tree_decoding(
        target,
        draft,
        prompts,
        verifiers=args.verifiers,
        trees=args.trees if args.budget is not None else trees,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        batch_size=args.batch_size,
        stop_at_eos=not args.ignore_eos,
        predict=not args.no_prediction,
        prediction_trials=args.prediction_trials,
        progress=not args.quiet,
        kv_cache=not args.no_kv_cache,
        parts_dir=out / PARTS_DIR,
        root=roots,
        stopping=stopping,
        budgets=args.budget,
        c_target=args.c_target,
        c_draft=args.c_draft,
    )
    written = _write(result, out, models)
    if not args.quiet:
        print(format_table(result.summary))
        if result.resumed:
            print(f"kept {result.resumed} finished (verifier, tree) pair(s) from {out / PARTS_DIR}")
        print(f"wrote {', '.join(p.name for p in written)} to {out}")
    return 0


def _cli_words(text: str) -> str:
    """A library message in the command line's words (``max_prompts`` -> ``--max-prompts``)."""
    return _PARAMETERS.sub(lambda m: "--" + m[1].replace("_", "-"), text)


def _reason(exc: Exception) -> str:
    """One line for a failure: the library's message, or a model's exception and first line."""
    from otbound.tree_decoding import CheckpointMismatch

    if isinstance(exc, CheckpointMismatch):
        return (
            f"cannot resume {exc.directory.parent}: its earlier run used other settings, "
            f"prompts or models ({exc.changes}); drop --resume to start again, or choose "
            "another --out"
        )
    if isinstance(exc, ValueError):
        return _cli_words(str(exc))
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def main(argv: Sequence[str] | None = None, prog: str = PROG) -> int:
    """Run ``simulate_trees`` with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    ``prog`` names the command in its help and messages (``otbound`` runs it too).
    """
    args = build_parser(prog).parse_args(argv)

    def work() -> int:
        try:
            return run(args)
        except (CommandError, OSError, ImportError):
            raise
        except Exception as exc:  # bad input (ValueError) or a model's own failure
            raise CommandError(_reason(exc), int(getattr(exc, "exit_status", 1))) from None

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
