"""The run: :func:`log_distributions`, from models and prompts to a complete dump."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from otbound.capture._errors import CaptureError, check_limits, out_of_memory_guard
from otbound.capture._generate import aligned_logits, generate_continuations, prompt_generator
from otbound.capture._manifest import build_extra
from otbound.capture._models import draft_tokenizer as _own_draft_tokenizer
from otbound.capture._models import (
    eos_token_ids,
    has_tokenizer,
    load_model,
    load_tokenizer,
    model_dtype_name,
)
from otbound.capture._prompts import Prompt, prompt_file_info, prompts_digest, read_prompts
from otbound.capture._resume import (
    DumpProgress,
    already_logged,
    check_resumable,
    dump_progress,
    existing_dump,
)
from otbound.capture._settings import CaptureSettings, check_prompts, check_settings
from otbound.capture._shards import ShardBuffer, auto_shard_steps, prompt_frame, storage_rows
from otbound.capture._vocabulary import Vocabulary, plan_vocabulary
from otbound.capture.calls import model_device
from otbound.dumps import DumpWriter


def _as_model(model: Any, dtype: str, device: Any, trust_remote_code: bool) -> Any:
    if isinstance(model, (str, Path)):
        return load_model(model, dtype, device, trust_remote_code=trust_remote_code)
    return model


def _as_tokenizer(tokenizer: Any, target: Any) -> Any:
    if isinstance(tokenizer, (str, Path)):
        return load_tokenizer(tokenizer)
    if tokenizer is None and isinstance(target, (str, Path)) and has_tokenizer(target):
        return load_tokenizer(target)
    return tokenizer


def _as_draft_tokenizer(given: Any, draft: Any, tokenizer: Any, target: Any) -> Any:
    """The draft's own tokenizer: ``given``, else its path's (directory or GGUF file)."""
    if given is not None or not isinstance(draft, (str, Path)):
        return given
    path = tokenizer if isinstance(tokenizer, (str, Path)) else None
    if tokenizer is not None and path is None:  # a tokenizer object: not a GGUF file
        target = None
    target = target if isinstance(target, (str, Path)) else None
    return _own_draft_tokenizer(draft, path, target=target)


def _prompt_list(
    prompts: Any, tokenizer: Any, options: Mapping[str, Any], source: Mapping[str, Any] | None
) -> tuple[list[Prompt], dict[str, Any]]:
    if isinstance(prompts, (str, Path)):
        info = prompt_file_info(prompts)
        return read_prompts(prompts, tokenizer, **options), {**info, **options}
    prompts = list(prompts)
    if source is None:
        source = {"file": None, "sha256": prompts_digest(prompts), "format": "objects"}
    if options["max_prompts"] is not None:
        prompts = prompts[: options["max_prompts"]]
    return prompts, {**source, **options}


def _run_batches(
    todo: Sequence[Prompt],
    models: Mapping[str, Any],
    settings: CaptureSettings,
    vocab: Vocabulary,
    eos: Sequence[int],
    state: DumpProgress,
    buffer: ShardBuffer,
    progress: bool,
) -> None:
    bar = tqdm(total=len(todo), unit="prompt", desc="logging", disable=None if progress else True)
    with bar:
        for start in range(0, len(todo), settings.batch_size):
            batch = todo[start : start + settings.batch_size]
            inputs = [list(p.input_ids) for p in batch]
            with out_of_memory_guard(settings.batch_size, f"running {batch[0].where}"):
                continuations = generate_continuations(
                    models[settings.generator],
                    inputs,
                    [prompt_generator(settings.seed, p.id) for p in batch],
                    max_new_tokens=settings.max_new_tokens,
                    temperature=settings.temperature,
                    top_p=settings.top_p,
                    vocab_size=vocab.size,
                    eos_token_ids=eos,
                )
                steps = aligned_logits(
                    models["target"], models["draft"], inputs, continuations, vocab_size=vocab.size
                )
            skips = [already_logged(p, c, state) for p, c in zip(batch, continuations, strict=True)]
            keep = np.concatenate(
                [np.arange(len(c)) >= s for c, s in zip(continuations, skips, strict=True)]
            )
            frames = [
                prompt_frame(p, c, s) for p, c, s in zip(batch, continuations, skips, strict=True)
            ]
            buffer.add(
                storage_rows(steps.target[keep], settings.storage_dtype, settings.topk),
                storage_rows(steps.draft[keep], settings.storage_dtype, settings.topk),
                pd.concat(frames, ignore_index=True),
            )
            bar.update(len(batch))
            bar.set_postfix(steps=state.steps + buffer.written + buffer.pending)


def log_distributions(
    target: Any,
    draft: Any,
    prompts: str | Path | Sequence[Prompt],
    out: str | Path,
    *,
    tokenizer: Any = None,
    draft_tokenizer: Any = None,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: str = "target",
    batch_size: int = 8,
    store: str = "full",
    storage_dtype: str | None = None,
    shard_steps: int | None = None,
    seed: int = 0,
    stop_at_eos: bool = True,
    dtype: str = "float32",
    device: str | torch.device | None = None,
    max_prompts: int | None = None,
    max_prompt_tokens: int | None = None,
    truncation_side: str = "left",
    add_special_tokens: bool = True,
    chat_template: bool = False,
    prompt_source: Mapping[str, Any] | None = None,
    resume: bool = False,
    progress: bool = True,
    trust_remote_code: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Log aligned target and draft next-token logits over sampled continuations to a dump.

    Parameters
    ----------
    target, draft : str, pathlib.Path or transformers.PreTrainedModel
        Model directories, GGUF files (``*.gguf``) or hub names (loaded with ``dtype`` on
        ``device``), or loaded models (on one device).
    prompts : str, pathlib.Path or sequence of Prompt
        A prompt file (see :func:`read_prompts`) or prompts already read.
    out : str or pathlib.Path
        The dump directory (created; must be empty, or hold a dump when ``resume``).
    tokenizer : str, pathlib.Path or tokenizer, optional
        Needed for text prompts; cuts the vocabulary to its length. Default: the target's
        directory when it holds tokenizer files, or its GGUF file's tokenizer.
    draft_tokenizer : tokenizer, optional
        The draft's own tokenizer, checked against ``tokenizer``. Default, for a draft given
        as a path: its directory's or GGUF file's tokenizer, when it has one.
    max_new_tokens : int, default 128
        Continuation length (shorter when the generator samples an end-of-sequence token).
    temperature, top_p : float
        Sampling of the continuation (``temperature = 0``: greedy). The logged logits are raw.
    generator : {"target", "draft"}, default "target"
        The model whose samples form the text.
    batch_size : int, default 8
        Prompts run at once (left-padded).
    store : str, default "full"
        ``"full"`` rows or ``"topk:K"``.
    storage_dtype : {"float16", "bfloat16", "float32"}, optional
        Default: the models' dtype for full rows (lossless), float32 for top-k.
    shard_steps : int, optional
        Steps per shard; default: up to 1024, and about 256 MiB of logits.
    seed : int, default 0
        Each prompt's sampling is seeded from ``(seed, prompt_id)``.
    stop_at_eos : bool, default True
        Stop a continuation at the end-of-sequence token(s) the generator's config or the
        tokenizer define (the EOS step is logged).
    dtype : {"float32", "float16", "bfloat16"}, default "float32"
        Model dtype, for models given as paths.
    device : str or torch.device, optional
        For models given as paths; default ``cuda`` when present, else ``cpu``.
    max_prompts, max_prompt_tokens, truncation_side, add_special_tokens, chat_template
        Passed to :func:`read_prompts` for a prompt file (``truncation_side="left"`` keeps a
        long prompt's last tokens; ``chat_template=True`` puts text and chat prompts in the
        tokenizer's chat template, as instruct models are used).
    prompt_source : mapping, optional
        How prompts given as objects were made (recorded; ``sha256`` is checked on resume).
    resume : bool, default False
        Continue the dump at ``out``: prompts already complete are skipped, a prompt cut by
        the interruption is regenerated (same seed, same text) and its missing steps appended.
    progress : bool, default True
        Show a progress bar (on a terminal).
    trust_remote_code : bool, default False
    extra : mapping, optional
        Recorded in the manifest's ``extra["user"]``.

    Returns
    -------
    pathlib.Path
        The dump directory (read it with :func:`otbound.dumps.open_dump`).

    Raises
    ------
    CaptureError
        Bad input or settings, a tokenizer that does not fit the models, settings that differ
        from those of the dump being resumed, or running out of memory (shards already
        written stay, complete, for ``resume``); a :class:`ModelFileError` for a truncated or
        corrupt GGUF file, an architecture transformers cannot load, or a draft whose
        vocabulary differs from the target's.
    """
    out = Path(out)
    options = {
        "max_prompts": max_prompts,
        "max_prompt_tokens": max_prompt_tokens,
        "truncation_side": truncation_side,
        "add_special_tokens": add_special_tokens,
        "chat_template": bool(chat_template),
    }
    check_limits(max_prompts=max_prompts, max_prompt_tokens=max_prompt_tokens)
    if isinstance(target, (str, Path)):
        dtype_name = dtype
    else:
        dtype_name = model_dtype_name(target)
    settings = check_settings(
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        generator=generator,
        batch_size=batch_size,
        store=store,
        storage_dtype=storage_dtype,
        shard_steps=shard_steps,
        seed=seed,
        model_dtype=dtype_name,
        stop_at_eos=stop_at_eos,
    )
    previous = existing_dump(out, resume)
    draft_tokenizer = _as_draft_tokenizer(draft_tokenizer, draft, tokenizer, target)
    tokenizer = _as_tokenizer(tokenizer, target)
    prompt_list, prompt_info = _prompt_list(prompts, tokenizer, options, prompt_source)
    models = {
        "target": _as_model(target, dtype, device, trust_remote_code),
        "draft": _as_model(draft, dtype, device, trust_remote_code),
    }
    if model_device(models["target"]) != model_device(models["draft"]):
        raise CaptureError("the target and the draft must be on the same device")
    vocab = plan_vocabulary(models["target"], models["draft"], tokenizer, draft_tokenizer)
    if settings.topk is not None and settings.topk > vocab.size:
        raise CaptureError(f"store topk:{settings.topk} exceeds the vocabulary ({vocab.size})")
    check_prompts(prompt_list, vocab, models, settings.max_new_tokens)
    gen_model = models[settings.generator]
    eos = [t for t in eos_token_ids(gen_model, tokenizer) if t < vocab.size] if stop_at_eos else []
    steps_per_shard = shard_steps or auto_shard_steps(
        vocab.size, settings.storage_dtype, settings.topk
    )
    record = build_extra(
        target=models["target"],
        draft=models["draft"],
        tokenizer=tokenizer,
        vocab=vocab,
        settings=settings,
        store=store,
        shard_steps=steps_per_shard,
        prompts=prompt_info,
        eos=eos,
        device=model_device(gen_model),
        extra=extra,
    )
    state = DumpProgress(0, {}, frozenset(), {})
    if previous is not None:
        check_resumable(previous, record, out)
        state = dump_progress(out)
    todo = [p for p in prompt_list if p.id not in state.finished]

    def open_writer() -> DumpWriter:
        return DumpWriter(
            out,
            target_model=record["target"]["name"],
            draft_model=record["draft"]["name"],
            tokenizer=None if tokenizer is None else record["tokenizer"]["name"],
            vocab_size=vocab.size,
            tokenizer_vocab_size=vocab.tokenizer_length,
            dtype=settings.storage_dtype,
            storage=store,
            extra=record,
            resume=previous is not None,
        )

    buffer = ShardBuffer(open_writer, steps_per_shard)
    _run_batches(todo, models, settings, vocab, eos, state, buffer, progress)
    buffer.finish()
    return out
