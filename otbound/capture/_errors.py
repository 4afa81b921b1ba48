"""The error every part of capture raises, and the checks shared by its modules."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class CaptureError(ValueError):
    """Logging cannot go on: the message is one readable line naming the input at fault.

    ``exit_status`` is the status a command line exits with for it.
    """

    exit_status = 1


class ModelFileError(CaptureError):
    """A model file or pair that cannot be used at all: a truncated or corrupt GGUF file, an
    architecture transformers cannot load, or a draft whose vocabulary differs from the
    target's. Command lines exit with status 2 for it, as for unusable arguments."""

    exit_status = 2


def check_limits(**limits: int | None) -> None:
    for name, value in limits.items():
        if value is not None and value < 1:
            raise CaptureError(f"{name} must be at least 1, got {value}")


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def is_out_of_memory(exc: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    return isinstance(exc, (oom, torch.cuda.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


@contextlib.contextmanager
def out_of_memory_guard(batch_size: int | None, what: str) -> Iterator[None]:
    """Turn running out of (GPU) memory into a :class:`CaptureError` with advice."""
    try:
        yield
    except (RuntimeError, MemoryError) as exc:
        if not (is_out_of_memory(exc) or isinstance(exc, MemoryError)):
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        advice = (
            f"use a smaller batch_size (now {batch_size}) or fewer max_new_tokens"
            if batch_size is not None
            else "use a smaller dtype or a larger device"
        )
        raise CaptureError(f"out of memory while {what}: {advice}") from None
