"""A run's settings, checked before any work, and the prompts checked against the models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from otbound.capture._config import CaptureConfig
from otbound.capture._errors import CaptureError, check_limits
from otbound.capture._models import context_length
from otbound.capture._prompts import Prompt
from otbound.capture._vocabulary import Vocabulary
from otbound.dumps import DumpError, parse_storage

#: Models whose samples may form the text.
GENERATORS = ("target", "draft")
#: Dtypes the logits may be stored in.
STORAGE_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class CaptureSettings:
    max_new_tokens: int
    temperature: float
    top_p: float
    generator: str
    batch_size: int
    topk: int | None
    storage_dtype: str
    seed: int
    stop_at_eos: bool


def check_settings(config: CaptureConfig, model_dtype: str) -> CaptureSettings:
    """The settings of a capture, checked (one :class:`CaptureError` naming the first bad
    one); ``model_dtype`` is the storage dtype of full rows unless ``config`` names one."""
    c = config
    check_limits(
        max_new_tokens=c.max_new_tokens, batch_size=c.batch_size, shard_steps=c.shard_steps
    )
    if not c.temperature >= 0 or not np.isfinite(c.temperature):
        raise CaptureError(f"temperature must be >= 0, got {c.temperature}")
    if not 0 < c.top_p <= 1:
        raise CaptureError(f"top_p must be in (0, 1], got {c.top_p}")
    if c.generator not in GENERATORS:
        raise CaptureError(f"generator must be 'target' or 'draft', got {c.generator!r}")
    if c.seed < 0:
        raise CaptureError(f"seed must be >= 0, got {c.seed}")
    try:
        topk = parse_storage(c.store, "store")
    except DumpError as exc:
        raise CaptureError(str(exc)) from None
    storage_dtype = c.storage_dtype
    if storage_dtype is None:
        storage_dtype = "float32" if topk is not None else model_dtype
    if storage_dtype not in STORAGE_DTYPES:
        raise CaptureError(
            f"storage_dtype must be one of {', '.join(STORAGE_DTYPES)}, got {storage_dtype!r}"
        )
    if topk is not None and storage_dtype != "float32":
        raise CaptureError(f"top-k storage needs storage_dtype float32, got {storage_dtype}")
    return CaptureSettings(
        c.max_new_tokens,
        float(c.temperature),
        float(c.top_p),
        c.generator,
        c.batch_size,
        topk,
        storage_dtype,
        int(c.seed),
        c.stop_at_eos,
    )


def check_prompts(
    prompts: Sequence[Prompt], vocab: Vocabulary, models: Mapping[str, Any], new_tokens: int
) -> None:
    """Token ids inside the vocabulary; prompt + continuation inside each model's context."""
    ids = [p.id for p in prompts]
    if len(set(ids)) != len(ids):
        raise CaptureError("prompt ids must be distinct")
    contexts = {side: context_length(m) for side, m in models.items()}
    for side, context in contexts.items():
        if context is not None and new_tokens >= context:
            raise CaptureError(
                f"max_new_tokens {new_tokens} leaves no room for a prompt in the {side}'s "
                f"context of {context} positions"
            )
    for prompt in prompts:
        if not prompt.input_ids:
            raise CaptureError(f"{prompt.where}: the prompt is empty")
        if max(prompt.input_ids) >= vocab.size:
            raise CaptureError(
                f"{prompt.where}: token id {max(prompt.input_ids)} is beyond the vocabulary "
                f"({vocab.size} tokens): the prompts do not fit these models"
            )
        for side, context in contexts.items():
            if context is not None and len(prompt.input_ids) + new_tokens > context:
                raise CaptureError(
                    f"{prompt.where}: {len(prompt.input_ids)} prompt tokens + max_new_tokens "
                    f"{new_tokens} exceed the {side}'s context of {context} positions; set "
                    f"max_prompt_tokens to {context - new_tokens} or fewer"
                )
