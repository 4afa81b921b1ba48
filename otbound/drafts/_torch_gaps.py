"""Torch-free shims: the ``torch_gap`` methods of ``without_replacement`` and
``conditional_poisson``, importing torch (:mod:`otbound.drafts._torch_distinct`) only when
called, so that ``import otbound`` does not need torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from otbound.drafts.base import DraftDesign

__all__ = ["conditional_poisson_torch_gap", "without_replacement_torch_gap"]


def without_replacement_torch_gap(
    self: DraftDesign, p: torch.Tensor, q: torch.Tensor, n: int
) -> torch.Tensor:
    """``α* − 1`` per row for sequential draws without replacement
    (:func:`otbound.drafts._torch_block_sweep.without_replacement_gap`)."""
    from otbound.drafts._torch_block_sweep import without_replacement_gap

    return without_replacement_gap(p, q, n)


def conditional_poisson_torch_gap(
    self: DraftDesign, p: torch.Tensor, q: torch.Tensor, n: int
) -> torch.Tensor:
    """``α* − 1`` per row for conditional Poisson sets
    (:func:`otbound.drafts._torch_distinct.conditional_poisson_gap`)."""
    from otbound.drafts._torch_distinct import conditional_poisson_gap

    return conditional_poisson_gap(p, q, n)
