"""What a capture logs and how: the keywords of :func:`otbound.capture.log_distributions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["CAPTURE_KEYWORDS", "CaptureConfig"]


@dataclass(frozen=True)
class CaptureConfig:
    """The settings of :func:`~otbound.capture.log_distributions`, one object (checked when
    the run starts, in the order the run needs them).

    Parameters
    ----------
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
        Passed to :func:`~otbound.capture.read_prompts` for a prompt file
        (``truncation_side="left"`` keeps a long prompt's last tokens; ``chat_template=True``
        puts text and chat prompts in the tokenizer's chat template, as instruct models are
        used).
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
    """

    tokenizer: Any = None
    draft_tokenizer: Any = None
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    generator: str = "target"
    batch_size: int = 8
    store: str = "full"
    storage_dtype: str | None = None
    shard_steps: int | None = None
    seed: int = 0
    stop_at_eos: bool = True
    dtype: str = "float32"
    device: Any = None
    max_prompts: int | None = None
    max_prompt_tokens: int | None = None
    truncation_side: str = "left"
    add_special_tokens: bool = True
    chat_template: bool = False
    prompt_source: Mapping[str, Any] | None = None
    resume: bool = False
    progress: bool = True
    trust_remote_code: bool = False
    extra: Mapping[str, Any] | None = None

    @property
    def prompt_options(self) -> dict[str, Any]:
        """The keywords of :func:`~otbound.capture.read_prompts` (recorded in the manifest)."""
        return {
            "max_prompts": self.max_prompts,
            "max_prompt_tokens": self.max_prompt_tokens,
            "truncation_side": self.truncation_side,
            "add_special_tokens": self.add_special_tokens,
            "chat_template": bool(self.chat_template),
        }

    @property
    def model_options(self) -> dict[str, Any]:
        """The keywords of :func:`~otbound.capture.load_model` for models given as paths."""
        return {
            "dtype": self.dtype,
            "device": self.device,
            "trust_remote_code": self.trust_remote_code,
        }


#: The keyword arguments of ``log_distributions``, the fields of :class:`CaptureConfig`.
CAPTURE_KEYWORDS: tuple[str, ...] = tuple(f.name for f in fields(CaptureConfig))
