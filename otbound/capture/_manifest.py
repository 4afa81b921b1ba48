"""What a run records in the manifest's ``extra``: models, vocabulary, settings, versions."""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from otbound.capture._models import gguf_source, logit_width, model_dtype_name, model_name
from otbound.capture._settings import CaptureSettings
from otbound.capture._vocabulary import Vocabulary

#: Version of what otbound.capture records (manifest ``extra`` and the extra Parquet columns).
CAPTURE_VERSION = 1


def model_entry(model: Any) -> dict[str, Any]:
    """A model as the manifest (and ``simulate_trees``' ``run.json``) records it: name, class,
    model type, vocabulary widths, hub commit, and ``gguf``, the GGUF file's record (sha256,
    size, architecture, quantisation, ``general.name``; :func:`gguf_source`) or None."""
    config = model.config
    return {
        "name": model_name(model),
        "class": type(model).__name__,
        "model_type": getattr(config, "model_type", None),
        "config_vocab_size": getattr(config.get_text_config(), "vocab_size", None),
        "logit_width": logit_width(model),
        "commit": getattr(config, "_commit_hash", None),
        "gguf": gguf_source(model),
    }


def _versions() -> dict[str, str]:
    import transformers

    from otbound._version import __version__

    return {
        "otbound": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def build_extra(
    *,
    target: Any,
    draft: Any,
    tokenizer: Any,
    vocab: Vocabulary,
    settings: CaptureSettings,
    store: str,
    shard_steps: int,
    prompts: Mapping[str, Any],
    eos: Sequence[int],
    device: torch.device,
    extra: Mapping[str, Any] | None,
) -> dict[str, Any]:
    tok = None
    if tokenizer is not None:
        tok = {"name": str(getattr(tokenizer, "name_or_path", "")), "length": len(tokenizer)}
    return {
        "capture_version": CAPTURE_VERSION,
        "target": model_entry(target),
        "draft": model_entry(draft),
        "tokenizer": tok,
        "model_dtype": model_dtype_name(target),
        "device": str(device),
        "batch_size": settings.batch_size,
        "store": store,
        "storage_dtype": settings.storage_dtype,
        "shard_steps": shard_steps,
        "vocabulary": vocab.as_dict(),
        "prompts": dict(prompts),
        "generation": {
            "generator": settings.generator,
            "max_new_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "seed": settings.seed,
            "seeding": "per prompt: CPU torch.Generator seeded from "
            "numpy.random.SeedSequence([seed, prompt_id]); one uniform per step, inverse CDF",
            "stop_at_eos": settings.stop_at_eos,
            "eos_token_ids": list(eos),
            "kv_cache": True,
        },
        "logged_positions": "continuation: one step per generated token (the EOS included); "
        "'position' is the index of the predicted token in prompt + continuation (0-based), "
        "'token' the token that followed; both models teacher-forced over the same sequence",
        "metadata_columns": {
            "prompt_length": "tokens of the prompt as run (after truncation)",
            "last": "true on the continuation's final step",
        },
        "versions": _versions(),
        "user": dict(extra or {}),
    }
