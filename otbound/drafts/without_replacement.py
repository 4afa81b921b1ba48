"""The ``without_replacement`` design: sequential draws without replacement.

What Gumbel-top-k and ``torch.multinomial(replacement=False)`` draw:
``P(x̄) = Π_j q(x_j) / (1 − Σ_{k<j} q(x_k))``. ``Q(H)`` is the exponential-clock integral of
:mod:`otbound.drafts._sequential_mass`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otbound.drafts._torch_gaps import without_replacement_torch_gap
from otbound.drafts.base import DraftDesign
from otbound.drafts.tokens import distinct_rows, inverse_cdf, product_tuples

__all__ = ["WithoutReplacement"]


#: Above this drawn mass a row's next draft is drawn from its own renormalised CDF.
_SHIFT_LIMIT = 0.5


def _draw_excluding_shifted(
    q: np.ndarray, cdf: np.ndarray, taken: np.ndarray, u: np.ndarray
) -> np.ndarray:
    """Next draft of each row by inverting the CDF of ``q`` without the row's ``taken`` tokens.

    The removed tokens' masses are added to the target as the search passes them (in
    ascending id order), so the full CDF serves every row: ``O(j log V)`` per row. Returns −1
    where rounding landed on a taken token (the caller redraws those exactly).
    """
    target = u * (cdf[-1] - q[taken].sum(axis=1))
    idx = np.searchsorted(cdf, target, side="right")
    for d in np.sort(taken, axis=1).T:
        passed = d <= idx
        target = np.where(passed, target + q[d], target)
        idx = np.where(passed, np.searchsorted(cdf, target, side="right"), idx)
    idx = np.minimum(idx, int(np.flatnonzero(q > 0)[-1]))
    clash = np.any(taken == idx[:, None], axis=1) | (q[idx] <= 0)
    return np.where(clash, -1, idx)


def _draw_excluding_exactly(q: np.ndarray, taken: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Next draft by inverting each distinct ``taken`` set's own renormalised CDF (``O(V)`` per
    distinct set): exact however much mass the taken tokens hold."""
    keys, inverse = np.unique(np.sort(taken, axis=1), axis=0, return_inverse=True)
    out = np.empty(u.size, dtype=np.int64)
    for group, removed in enumerate(keys):
        rows = np.flatnonzero(inverse.ravel() == group)
        rest = q.copy()
        rest[removed] = 0.0
        out[rows] = inverse_cdf(rest, u[rows])
    return out


def _sample_sequentially(q: np.ndarray, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of ``n`` distinct tokens, each from ``q`` renormalised over the tokens
    not drawn yet (the law of Gumbel-top-k and ``multinomial(replacement=False)``).

    Inverse-CDF draws, one uniform per draft: ``O(n² log V)`` per row, with no per-token
    noise. Rows whose drawn tokens hold more than half the mass (where subtracting it from
    the CDF would lose precision) are drawn from their own renormalised CDF instead.
    """
    u = rng.random((size, n))
    cdf = np.cumsum(q)
    drafts = np.empty((size, n), dtype=np.int64)
    drafts[:, 0] = inverse_cdf(q, u[:, 0])
    for j in range(1, n):
        taken = drafts[:, :j]
        nxt = np.full(size, -1, dtype=np.int64)
        shifted = q[taken].sum(axis=1) <= _SHIFT_LIMIT * cdf[-1]
        nxt[shifted] = _draw_excluding_shifted(q, cdf, taken[shifted], u[shifted, j])
        redo = nxt < 0
        if redo.any():
            nxt[redo] = _draw_excluding_exactly(q, taken[redo], u[redo, j])
        drafts[:, j] = nxt
    return drafts


class WithoutReplacement(DraftDesign):
    """Sequential sampling without replacement (Gumbel-top-k, ``multinomial(replacement=False)``).

    ``P(x̄) = Π_j q(x_j) / (1 − Σ_{k<j} q(x_k))``; ``Q(H)`` is the exponential-clock integral
    computed by :func:`otbound.drafts._sequential_mass.sequential_prefix_masses` (error below
    1e-12), one pass over the tokens per integration node for every ``n`` at once.
    """

    name = "without_replacement"
    title = "sequential, without replacement"
    distinct = True
    shared_sweep = True
    torch_sweep = True
    torch_gap = without_replacement_torch_gap

    def sample(self, q, n, size, rng):
        return _sample_sequentially(q, n, size, rng)

    def tuple_support(self, q, n):
        tokens = np.flatnonzero(q > 0)
        tuples = product_tuples(tokens, n)
        tuples = tuples[distinct_rows(tuples)]
        mass = q[tuples]
        # Mass left before each draw, summed over the tokens not yet drawn: never 1 − used,
        # which cancels when a token holds nearly all the mass. Blocks bound the memory.
        left = np.empty_like(mass)
        block = max(1, (1 << 22) // max(q.size, 1))
        for start in range(0, len(tuples), block):
            rows = slice(start, start + block)
            remaining = np.tile(q, (len(tuples[rows]), 1))
            index = np.arange(len(tuples[rows]))
            for j in range(n):
                left[rows, j] = remaining.sum(axis=1)
                remaining[index, tuples[rows, j]] = 0.0
        return tuples, np.prod(mass / left, axis=1)

    def prefix_mass(self, q_sorted, n):
        return self.prefix_masses(q_sorted, [n])[0]

    def prefix_masses(self, q_sorted, counts):
        from otbound.drafts._sequential_mass import sequential_prefix_masses  # numba

        rows = [sequential_prefix_masses(row, counts) for row in q_sorted]
        return np.stack(rows, axis=1)  # one pass per node serves every n

    def prefix_minimum(
        self, p_sorted: np.ndarray, q_sorted: np.ndarray, counts: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``min(0, min_i [p(H_i) − Q_n(H_i)])`` and its prefix length ``i`` per ``n`` and row,
        shapes (len(counts), B), without ``Q`` at every prefix
        (:func:`otbound.drafts._sequential_sweep.sequential_prefix_minimum`; equal to the minimum of
        :meth:`prefix_masses` within its error)."""
        from otbound.drafts._sequential_sweep import sequential_prefix_minimum  # numba

        found = [
            sequential_prefix_minimum(p, q, counts) for p, q in zip(p_sorted, q_sorted, strict=True)
        ]
        gap = np.stack([g for g, _ in found], axis=1)
        return gap, np.stack([i for _, i in found], axis=1)

    def bucketed_minimum(
        self, p: np.ndarray, q: np.ndarray, counts: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`prefix_minimum` of one unsorted row without sorting it: ``(gap, index,
        order)`` with the arg-min ``H = order[:index]``, or ``None`` where a ratio ``p/q``
        is not a normal float (then the row is sorted)
        (:func:`otbound.drafts._sequential_bucketed.bucketed_prefix_minimum`)."""
        from otbound.drafts._sequential_bucketed import bucketed_prefix_minimum  # numba

        return bucketed_prefix_minimum(p, q, counts)

    def bucketed_minima(
        self, p: np.ndarray, q: np.ndarray, counts: Sequence[int], orders: bool = False
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None] | None]:
        """:meth:`bucketed_minimum` of every row of ``p``, ``q`` (B, V), the rows shared
        among numba's threads (``order`` only with ``orders``, else ``None``)
        (:func:`otbound.drafts._sequential_bucketed.bucketed_prefix_minima`)."""
        from otbound.drafts._sequential_bucketed import bucketed_prefix_minima  # numba

        return bucketed_prefix_minima(p, q, counts, orders)
