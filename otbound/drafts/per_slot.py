r"""The ``per_slot`` design: slot ``j`` drawn from its own ``q_j``, ``Q(H) = Π_j q_j(H)``."""

from __future__ import annotations

import numpy as np

from otbound.drafts.base import DraftDesign
from otbound.drafts.tokens import inverse_cdf, prefix_probability, product_tuples, sweep_key

__all__ = ["PerSlot"]


class PerSlot(DraftDesign):
    r"""A different draft distribution for each slot, drawn independently: ``q`` has shape
    ``(..., n, V)`` and ``Q(H) = Π_j q_j(H)``.

    No single token order is known to be exact for this design: the sweep tries the orders
    by ``p / q_j`` for every slot and by ``p`` over the slots' arithmetic and geometric means,
    and returns the best ``H`` found, a certified **upper bound** on ``α*``. The LPs
    (:func:`otbound.solve_primal`) are exact on small supports.
    """

    name = "per_slot"
    exact_sweep = False
    slot_axis = True

    def sample(self, q, n, size, rng):
        u = rng.random((size, n))
        return np.stack([inverse_cdf(q[j], u[:, j]) for j in range(n)], axis=1)

    def tuple_support(self, q, n):
        tuples = product_tuples(np.arange(q.shape[-1]), n)
        probs = np.prod(q[np.arange(n), tuples], axis=1)
        keep = probs > 0
        return tuples[keep], probs[keep]

    def sweep_orders(self, p, q, n):
        candidates = [q[..., j, :] for j in range(n)]
        candidates.append(q.mean(axis=-2))
        with np.errstate(divide="ignore"):
            candidates.append(np.exp(np.log(q).mean(axis=-2)))
        return [np.argsort(sweep_key(p, c), axis=-1) for c in candidates]

    def prefix_mass(self, q_sorted, n):
        return np.prod(prefix_probability(q_sorted, self.name), axis=-2)
