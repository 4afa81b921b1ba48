r"""The ``conditional_poisson`` design: a set ``S`` of ``n`` distinct tokens with
``P(S) ∝ Π_{x∈S} q_x``, so that ``Q(H) = e_n(q_H) / e_n(q)`` (the ratio of Hu et al.'s proof).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from otbound._checks import clip_rounding
from otbound.drafts._torch_gaps import conditional_poisson_torch_gap
from otbound.drafts.base import DraftDesign
from otbound.drafts.tokens import distinct_rows, product_tuples

__all__ = ["ConditionalPoisson"]


#: The scaled ``e_k`` kernel (:mod:`otbound.drafts._poisson_esp`) renormalises a mantissa once
#: it leaves ``(_LOW, _HIGH)``.
_LOW, _HIGH = 2.0**-100, 2.0**100
#: ``2^d`` for ``|d| ≤ _SPAN``: the fast path multiplies by a table entry instead of ``ldexp``.
_SPAN = 900
_POW2 = np.ldexp(1.0, np.arange(-_SPAN, _SPAN + 1))


def elementary_symmetric_prefix(q_sorted: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    r"""``e_k`` of every prefix, ``k = 1..top``, as mantissas and exponents of two.

    ``e_k(q_{≤i}) = e_k(q_{<i}) + q_i e_{k−1}(q_{<i})``: sums of non-negative terms, each
    ``e_k`` with its own power-of-two scale, so that ``e_n`` stays exact (to rounding) when
    it falls far below the smallest float (``q`` down to 5e-324, ``n = 8``: ``1e-2600``).

    Returns
    -------
    mant : numpy.ndarray, shape (top, B, V + 1)
        Mantissas in ``(2^-100, 2^100)``, or 0 where ``e_k = 0`` (fewer than ``k`` positive
        masses).
    expo : numpy.ndarray of int64, same shape
        ``e_k = mant · 2^expo``.
    """
    from otbound.drafts._poisson_esp import scaled_esp_kernel  # numba, loaded on first use

    q2 = np.ascontiguousarray(q_sorted, dtype=np.float64).reshape(-1, q_sorted.shape[-1])
    shape = (top, q2.shape[0], q2.shape[1] + 1)
    mant_out = np.zeros(shape)
    expo_out = np.zeros(shape, dtype=np.int64)
    scaled_esp_kernel(q2, top, _POW2, mant_out, expo_out)
    return mant_out, expo_out


def _conditional_poisson_ratio(q_sorted: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    r"""``e_n(q_{H_i}) / e_n(q)`` for every prefix and each ``n`` in ``counts``:
    shape (len(counts), B, V + 1), unclipped.

    The ratio of mantissas is a normal float and the difference of exponents is exact, so the
    result carries a few roundings only (relative error ~1e-15), down to the subnormals; it
    underflows to 0 only where the true ratio is below 5e-324.
    """
    wanted = np.asarray(list(counts), dtype=np.int64)
    mant, expo = elementary_symmetric_prefix(q_sorted, int(wanted.max()))
    mant, expo = mant[wanted - 1], expo[wanted - 1]
    whole_m, whole_e = mant[..., -1:], expo[..., -1:]
    shift = np.clip(expo - whole_e, -2400, 300)  # past -2400 the ratio is 0 anyway
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.ldexp(mant / whole_m, shift.astype(np.int32))
    return ratio.reshape(len(wanted), *q_sorted.shape[:-1], q_sorted.shape[-1] + 1)


class ConditionalPoisson(DraftDesign):
    r"""A set of ``n`` distinct tokens with ``P(S) ∝ Π_{x∈S} q_x`` (conditional Poisson sampling).

    ``Q(H) = e_n(q_H) / e_n(q)``. This is the ratio in Hu et al.'s proof, not what a sequential
    sampler draws (see :class:`WithoutReplacement`). The order inside a tuple is uniform.

    The elementary symmetric polynomials of the prefixes are carried with one power-of-two
    scale per ``e_k`` (:func:`elementary_symmetric_prefix`), so ``Q(H)`` keeps its relative
    precision when ``e_n`` falls below the smallest float (masses down to 5e-324).
    """

    name = "conditional_poisson"
    title = "conditional Poisson sets"
    shared_sweep = True
    distinct = True
    torch_sweep = True
    torch_gap = conditional_poisson_torch_gap

    def sample(self, q, n, size, rng):
        mant, expo = elementary_symmetric_prefix(q[None, :], n)
        mant, shift = np.frexp(mant[:, 0])  # (n, V + 1), mantissas in [0.5, 1)
        expo = expo[:, 0] + shift
        # A float key with the order of e_k along the prefixes: exponent + mantissa offset
        # (each exponent's values lie in [expo, expo + 1)), relative to e_k(q) so that the
        # keys near the top keep every bit; -inf where e_k = 0.
        with np.errstate(divide="ignore"):
            key = np.where(mant > 0, (expo - expo[:, -1:]) + (2.0 * mant - 1.0), -np.inf)
        limit = np.full(size, q.shape[-1])  # draw among tokens < limit
        out = np.empty((size, n), dtype=np.int64)
        for k in range(n, 0, -1):
            # P(largest chosen token = x | k left, tokens < limit) ∝ q_x e_{k-1}(q_{<x}),
            # whose cumulative sum is e_k of the prefixes: invert it at u · e_k(q_{<limit}).
            frac, shift = np.frexp(rng.random(size) * mant[k - 1, limit])
            target = (expo[k - 1, limit] + shift - expo[k - 1, -1]) + (2.0 * frac - 1.0)
            target = np.where(frac > 0, target, -np.inf)
            x = np.searchsorted(key[k - 1], target, side="right") - 1
            rounded = x >= limit  # u e_k(<limit) rounded up onto e_k(<limit)
            if np.any(rounded):
                last = _last_step(key[k - 1])
                x[rounded] = last[limit[rounded]]
            out[:, k - 1] = x
            limit = x
        return rng.permuted(out, axis=1)

    def tuple_support(self, q, n):
        tuples = product_tuples(np.flatnonzero(q > 0), n)
        tuples = tuples[distinct_rows(tuples)]
        weight = np.prod(q[tuples], axis=1)
        return tuples, weight / weight.sum()

    def set_support(self, q, n):
        tokens = np.flatnonzero(q > 0)
        sets = np.array(list(itertools.combinations(tokens, n)), dtype=np.int64)
        weight = np.prod(q[sets], axis=1)
        return sets, weight / weight.sum()

    def prefix_mass(self, q_sorted, n):
        return self.prefix_masses(q_sorted, [n])[0]

    def prefix_masses(self, q_sorted, counts):
        ratio = _conditional_poisson_ratio(q_sorted, counts)
        return clip_rounding(ratio, 0.0, 1.0, "conditional_poisson Q(H) = e_n(q_H) / e_n(q)")

    def bucketed_minimum(
        self, p: np.ndarray, q: np.ndarray, counts: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``min(0, min_i [p(H_i) − Q_n(H_i)])`` of one unsorted row without sorting it:
        ``(gap, index, order)`` with the arg-min ``H = order[:index]``, or ``None`` where the
        plain-float kernel does not apply (then the row is sorted and takes the scaled path)
        (:func:`otbound.drafts._poisson_bucketed.poisson_bucketed_minimum`)."""
        from otbound.drafts._poisson_bucketed import poisson_bucketed_minimum  # numba

        return poisson_bucketed_minimum(p, q, counts)

    def bucketed_minima(
        self, p: np.ndarray, q: np.ndarray, counts: Sequence[int], orders: bool = False
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None] | None]:
        """:meth:`bucketed_minimum` of every row of ``p``, ``q`` (B, V), the rows shared
        among numba's threads (``order`` only with ``orders``, else ``None``)
        (:func:`otbound.drafts._poisson_bucketed.poisson_bucketed_minima`)."""
        from otbound.drafts._poisson_bucketed import poisson_bucketed_minima  # numba

        return poisson_bucketed_minima(p, q, counts, orders)


def _last_step(key: np.ndarray) -> np.ndarray:
    """``out[j]`` = the last token ``x < j`` whose step ``key[x] < key[x + 1]`` is positive
    (-1 if none): where to land when a target rounds up to ``key[j]``."""
    step = np.flatnonzero(key[1:] > key[:-1])
    marks = np.full(key.size, -1, dtype=np.int64)
    marks[step + 1] = step
    return np.maximum.accumulate(marks)
