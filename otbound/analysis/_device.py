"""Where ``α*`` is computed: numpy (default) or torch on a device (a GPU, usually)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from otbound.bounds import optimal_acceptance


def check_device(device: str | None) -> None:
    """Raise ``ValueError`` (naming ``device``) unless torch can compute there.

    ``None`` (numpy) always works; ``"cpu"``, ``"cuda"``, ``"cuda:1"``... need torch, and a
    CUDA device needs a visible GPU.
    """
    if device is None:
        return
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"device {device!r} needs torch: pip install 'otbound[torch]' (or leave the device "
            "unset to compute with numpy)"
        ) from None
    try:
        where = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r} is not a torch device (try cpu or cuda)") from None
    if where.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no CUDA device on this machine")


def bound_on(device: str | None) -> Callable[..., object] | None:
    """``α*`` as :func:`otbound.compare` takes it (``bound(p, q, n, design)``).

    ``None`` for numpy. Otherwise the designs with a torch sweep
    (:data:`otbound.bounds.torch_sweep.TORCH_DESIGNS`: ``iid``, ``greedy``, ``topk``, ``hub``)
    are computed there in float64 (equal to numpy's to 1e-9) and the others with numpy.
    """
    if device is None:
        return None
    from otbound.bounds.torch_sweep import TORCH_DESIGNS, optimal_acceptance_torch

    def bound(p: np.ndarray, q: np.ndarray, n: int, design: str) -> object:
        if design not in TORCH_DESIGNS:
            return optimal_acceptance(p, q, n, design)
        return optimal_acceptance_torch(p, q, n, design, device=device).cpu().numpy()

    bound.designs = TORCH_DESIGNS  # type: ignore[attr-defined]  # compare: the rest by numpy
    return bound
