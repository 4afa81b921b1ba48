"""Where ``α*`` and the verifiers' exact acceptance are computed: numpy (default) or torch on
a device (a GPU, usually)."""

from __future__ import annotations

import numpy as np

from otbound.bounds.solvers import Solver
from otbound.verifiers.batched import BatchAcceptance


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


def bound_on(device: str | None) -> Solver | None:
    """``α*`` on a torch device, as :func:`otbound.compare` takes it (its ``bound``).

    ``None`` for numpy. Otherwise a :class:`~otbound.bounds.solvers.Solver` serving the designs
    with a torch sweep (:data:`otbound.bounds.torch_sweep.TORCH_DESIGNS`: ``iid``,
    ``without_replacement``, ``conditional_poisson``, ``greedy``, ``topk``, ``hub``), computed
    there in float64 (equal to numpy's to 1e-9); ``compare`` computes the other designs
    (``per_slot``) with numpy.
    """
    if device is None:
        return None
    from otbound.bounds.torch_sweep import TORCH_DESIGNS, optimal_acceptance_torch

    def on_device(p: np.ndarray, q: np.ndarray, n: int, design: str) -> object:
        return optimal_acceptance_torch(p, q, n, design, device=device).cpu().numpy()

    return Solver(f"torch on {device}", on_device, TORCH_DESIGNS)


def acceptance_on(device: str | None) -> BatchAcceptance | None:
    """The verifiers' exact acceptance on a torch device, as :func:`otbound.compare` takes it
    (its ``acceptance``).

    ``None`` for numpy. Otherwise a :class:`~otbound.verifiers.batched.BatchAcceptance`
    serving the verifiers with a torch formula
    (:data:`otbound.verifiers.torch_acceptance.TORCH_VERIFIERS`: ``single``, ``rrs``,
    ``rrs_without_replacement`` at ``n ≤ 2``, ``kseq``, ``spechub``, ``greedy``, ``topk``,
    ``gls``, ``importance`` at ``n ≤ 2`` with its default ``top``, ``optimal``'s level rule),
    each computed there for the whole batch of steps in float64 (equal to numpy's to 1e-9);
    ``compare`` computes the others (``rrs_without_replacement`` and ``importance`` at
    ``n ≥ 3``, ``optimal`` by its LP plan) with numpy, step by step.
    """
    if device is None:
        return None
    from otbound.verifiers.torch_acceptance import torch_acceptance_on

    return torch_acceptance_on(device)
