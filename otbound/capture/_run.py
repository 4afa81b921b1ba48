"""The run: :func:`log_distributions`, from models and prompts to a complete dump."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from otbound.capture._config import CAPTURE_KEYWORDS, CaptureConfig
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


def _as_model(model: Any, config: CaptureConfig) -> Any:
    if isinstance(model, (str, Path)):
        return load_model(model, **config.model_options)
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
    config: CaptureConfig | None = None,
) -> Path:
    """Log aligned target and draft next-token logits over sampled continuations to a dump.

    The keywords are the fields of :class:`CaptureConfig`, documented there; ``config``
    gives them all at once.

    Parameters
    ----------
    target, draft : str, pathlib.Path or transformers.PreTrainedModel
        Model directories, GGUF files (``*.gguf``) or hub names (loaded with ``dtype`` on
        ``device``), or loaded models (on one device).
    prompts : str, pathlib.Path or sequence of Prompt
        A prompt file (see :func:`read_prompts`) or prompts already read.
    out : str or pathlib.Path
        The dump directory (created; must be empty, or hold a dump when ``resume``).
    tokenizer, draft_tokenizer, max_new_tokens, ..., extra
        The settings (:class:`CaptureConfig`).
    config : CaptureConfig, optional
        The settings as one object; then no other keyword may be given.

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
    arguments = dict(locals())  # the parameters, before any other name is bound
    given = CaptureConfig(**{k: v for k, v in arguments.items() if k in CAPTURE_KEYWORDS})
    if config is None:
        config = given
    elif given != CaptureConfig():
        raise CaptureError("give the settings as keywords or as config, not both")
    return _log(target, draft, prompts, Path(out), config)


def _log(target: Any, draft: Any, prompts: Any, out: Path, config: CaptureConfig) -> Path:
    """:func:`log_distributions`: the settings checked, the tokenizers, prompts and models
    loaded and checked against each other, then the prompts logged batch by batch."""
    check_limits(max_prompts=config.max_prompts, max_prompt_tokens=config.max_prompt_tokens)
    model_dtype = config.dtype if isinstance(target, (str, Path)) else model_dtype_name(target)
    settings = check_settings(config, model_dtype)
    previous = existing_dump(out, config.resume)
    draft_tokenizer = _as_draft_tokenizer(config.draft_tokenizer, draft, config.tokenizer, target)
    tokenizer = _as_tokenizer(config.tokenizer, target)
    prompt_list, prompt_info = _prompt_list(
        prompts, tokenizer, config.prompt_options, config.prompt_source
    )
    models = {
        "target": _as_model(target, config),
        "draft": _as_model(draft, config),
    }
    vocab = _shared_vocabulary(models, tokenizer, draft_tokenizer, settings)
    check_prompts(prompt_list, vocab, models, settings.max_new_tokens)
    gen_model = models[settings.generator]
    eos = eos_token_ids(gen_model, tokenizer) if settings.stop_at_eos else []
    eos = [t for t in eos if t < vocab.size]
    steps_per_shard = config.shard_steps or auto_shard_steps(
        vocab.size, settings.storage_dtype, settings.topk
    )
    record = build_extra(
        target=models["target"],
        draft=models["draft"],
        tokenizer=tokenizer,
        vocab=vocab,
        settings=settings,
        store=config.store,
        shard_steps=steps_per_shard,
        prompts=prompt_info,
        eos=eos,
        device=model_device(gen_model),
        extra=config.extra,
    )
    state = DumpProgress(0, {}, frozenset(), {})
    if previous is not None:
        check_resumable(previous, record, out)
        state = dump_progress(out)
    todo = [p for p in prompt_list if p.id not in state.finished]
    writer = _DumpOpener(out, record, tokenizer is not None, vocab, config.store, previous)
    buffer = ShardBuffer(writer.open, steps_per_shard)
    _run_batches(todo, models, settings, vocab, eos, state, buffer, config.progress)
    buffer.finish()
    return out


def _shared_vocabulary(
    models: Mapping[str, Any], tokenizer: Any, draft_tokenizer: Any, settings: CaptureSettings
) -> Vocabulary:
    """The vocabulary both models share, the models on one device and a top-k within it."""
    if model_device(models["target"]) != model_device(models["draft"]):
        raise CaptureError("the target and the draft must be on the same device")
    vocab = plan_vocabulary(models["target"], models["draft"], tokenizer, draft_tokenizer)
    if settings.topk is not None and settings.topk > vocab.size:
        raise CaptureError(f"store topk:{settings.topk} exceeds the vocabulary ({vocab.size})")
    return vocab


@dataclass(frozen=True)
class _DumpOpener:
    """Opens the dump's writer when the first shard is full (a resumed dump is continued)."""

    out: Path
    record: Mapping[str, Any]
    named_tokenizer: bool
    vocab: Vocabulary
    store: str
    previous: Mapping[str, Any] | None

    def open(self) -> DumpWriter:
        record = self.record
        return DumpWriter(
            self.out,
            target_model=record["target"]["name"],
            draft_model=record["draft"]["name"],
            tokenizer=record["tokenizer"]["name"] if self.named_tokenizer else None,
            vocab_size=self.vocab.size,
            tokenizer_vocab_size=self.vocab.tokenizer_length,
            dtype=record["storage_dtype"],
            storage=self.store,
            extra=dict(record),
            resume=self.previous is not None,
        )
