"""The ``iid`` design: ``n`` drafts drawn independently from ``q`` (with replacement).

``Q(H) = q(H)^n``. The sweep is the bucketed ``O(V)`` kernel (:mod:`otbound.drafts._bucketed`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from otbound.drafts.base import DraftDesign
from otbound.drafts.tokens import inverse_cdf, prefix_probability, product_tuples

if TYPE_CHECKING:
    import torch

__all__ = ["IID"]


class IID(DraftDesign):
    """i.i.d. drafts (with replacement): ``Q(H) = q(H)^n``."""

    name = "iid"
    title = "i.i.d. drafts"
    direct_sweep_name = "bucketed sweep"
    torch_sweep = True
    topk_interval = True

    def sample(self, q, n, size, rng):
        return inverse_cdf(q, rng.random((size, n)))

    def tuple_support(self, q, n):
        tokens = np.flatnonzero(q > 0)
        tuples = product_tuples(tokens, n)
        return tuples, np.prod(q[tuples], axis=1)

    def prefix_mass(self, q_sorted, n):
        return prefix_probability(q_sorted, self.name) ** n

    def direct_sweep(self, p, q, n):
        from otbound.drafts._bucketed import iid_bucketed_sweep  # numba, loaded on first use

        return iid_bucketed_sweep(p, q, n)

    def torch_gap(self, p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
        from otbound.drafts._torch_closed_forms import iid_gap

        return iid_gap(p, q, n)
