r"""The conditional Poisson prefix minimum from ratio buckets, without a full sort.

``Q_n(H) = e_n(q_H) / e_n(q)``. The elementary symmetric sums of every bucket-boundary
prefix come from one ``O(nV)`` pass over the tokens in bucket order
(:mod:`otbound.drafts._ratio_buckets`; ``e_k(≤ i) = e_k(< i) + q_i e_{k−1}(< i)``, all terms
non-negative). Inside bucket ``b`` (lower ratio edge ``r_b``, mass ``q_b``) a prefix
``H_b ∪ S`` with ``m = q(S)`` has ``p(S) ≥ r_b m`` and

.. math::

    e_n(H_b ∪ S) = \sum_j e_{n−j}(H_b)\, e_j(S) ≤ \sum_j e_{n−j}(H_b)\, m^j / j!,

convex in ``m``; so ``p(H) − Q(H)`` is at least a concave function of ``m``, whose minimum
over ``[0, q_b]`` is at an end. Only the buckets where that bound falls below the best
boundary value (plus ``MARGIN``) are sorted and swept token by token.

Plain floats: the kernel serves rows whose positive masses keep every ``e_k`` (``k ≤ n``) in
the normal range (``q_min^n ≥ 1e-290``); other rows take the scaled path of
:mod:`otbound.drafts.conditional_poisson`. The values equal that path's to rounding (relative
error of ``Q`` about ``V ε``, sums of non-negative terms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np

from otbound.drafts import _row_batch as batches
from otbound.drafts._ratio_buckets import bucket_row_kernel, sort_chosen_buckets

__all__ = [
    "MARGIN",
    "poisson_bucketed_minima",
    "poisson_bucketed_minimum",
    "poisson_row",
    "poisson_rows",
]

#: A bucket is swept inside unless its lower bound exceeds the best value by more than this
#: (far above the rounding of the sums).
MARGIN = 1e-9
#: The smallest ``log10(q_min^n)`` the plain-float kernel accepts.
_SMALLEST_LOG10 = -290.0


@numba.njit(cache=True)
def _kernel(p, q, order, ratio, starts, edge, ns, gap_out, index_out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    buckets = starts.shape[0] - 1
    top = ns[ns.shape[0] - 1]
    many = ns.shape[0]
    # e_k of every bucket-boundary prefix, and p of it
    esp = np.zeros((buckets + 1, top + 1))
    cum_p = np.zeros(buckets + 1)
    cum_q = np.zeros(buckets + 1)
    state = np.zeros(top + 1)
    state[0] = 1.0
    esp[0, 0] = 1.0
    for b in range(buckets):
        sp = 0.0
        sq = 0.0
        for i in range(starts[b], starts[b + 1]):
            x = order[i]
            value = q[x]
            for k in range(top, 0, -1):
                state[k] += value * state[k - 1]
            sp += p[x]
            sq += value
        esp[b + 1, :] = state
        cum_p[b + 1] = cum_p[b] + sp
        cum_q[b + 1] = cum_q[b] + sq
    # best boundary value per n, and the candidate buckets (any n)
    chosen = np.zeros(buckets, dtype=np.bool_)
    factorial = np.ones(top + 1)
    for j in range(1, top + 1):
        factorial[j] = factorial[j - 1] * j
    for c in range(many):
        n = ns[c]
        total = esp[buckets, n]
        best = 0.0
        where = 0
        for b in range(buckets + 1):
            f = cum_p[b] - esp[b, n] / total
            if f < best:
                best = f
                where = starts[b]
        gap_out[c] = best
        index_out[c] = where
        for b in range(buckets):
            m = cum_q[b + 1] - cum_q[b]
            bound = 0.0  # Σ_j e_{n−j}(H_b) m^j / j!
            power = 1.0
            for j in range(n + 1):
                bound += esp[b, n - j] * power / factorial[j]
                power *= m
            low = min(cum_p[b] - esp[b, n] / total, cum_p[b] + edge[b] * m - bound / total)
            if low <= best + MARGIN and starts[b + 1] - starts[b] > 1:
                chosen[b] = True
    # sweep the candidate buckets token by token, in ratio order
    sort_chosen_buckets(order, ratio, starts, np.flatnonzero(chosen))
    for b in range(buckets):
        if not chosen[b]:
            continue
        a, e = starts[b], starts[b + 1]
        state[:] = esp[b]
        run_p = cum_p[b]
        for i in range(a, e - 1):  # the bucket's last prefix is its boundary
            x = order[i]
            value = q[x]
            for k in range(top, 0, -1):
                state[k] += value * state[k - 1]
            run_p += p[x]
            for c in range(many):
                n = ns[c]
                f = run_p - state[n] / esp[buckets, n]
                if f < gap_out[c]:
                    gap_out[c] = f
                    index_out[c] = i + 1


@numba.njit(cache=True)
def poisson_row(p, q, distinct):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`poisson_bucketed_minimum` of one row in one compiled call (``distinct``: the
    ``n``, ascending): its checks (at least ``max n`` positive masses, ``q_min^{max n}`` in
    the plain floats' range), the ratio buckets and :func:`_kernel`.

    Returns
    -------
    status : int
        :data:`~otbound.drafts._row_batch.ROW_DONE`, or
        :data:`~otbound.drafts._row_batch.ROW_DECLINED` (the caller takes the scaled path).
    gap, index : float64, int64 (len(distinct),)
    order : int64
        The tokens with ``q > 0`` in bucket order, swept buckets sorted by ratio.
    """
    vocab = p.shape[0]
    top = distinct[distinct.shape[0] - 1]
    gap = np.zeros(distinct.shape[0])
    index = np.zeros(distinct.shape[0], dtype=np.int64)
    positive = 0
    smallest = np.inf
    for x in range(vocab):  # the size and the least of q[q > 0]
        if q[x] > 0.0:
            positive += 1
            smallest = min(smallest, q[x])
    if positive < top or top * math.log10(smallest) < _SMALLEST_LOG10:
        return batches.ROW_DECLINED, gap, index, np.zeros(0, dtype=np.int64)
    order = np.empty(vocab, dtype=np.int64)
    ratio = np.empty(vocab)
    buckets, starts, edge, _, _, _ = bucket_row_kernel(p, q, 0, order, ratio)
    if buckets <= 0:
        return batches.ROW_DECLINED, gap, index, np.zeros(0, dtype=np.int64)
    _kernel(p, q, order, ratio, starts, edge, distinct, gap, index)
    return batches.ROW_DONE, gap, index, order[: starts[buckets]]


@numba.njit(cache=True, parallel=True)
def poisson_rows(p, q, distinct, threads, orders):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`poisson_row` of every row of ``p``, ``q`` (B, V), row ``r`` on thread
    ``r mod threads`` (the same bits as one row at a time: the same compiled row). Returns
    :func:`~otbound.drafts._row_batch.batch_outputs`'s arrays."""
    rows, vocab = p.shape
    outputs = batches.batch_outputs(rows, vocab, distinct.size, orders)
    status, gap, index, kept_orders, lengths = outputs
    for w in numba.prange(threads):
        for r in range(w, rows, threads):
            found = poisson_row(p[r], q[r], distinct)
            batches.store_row(
                r, found[0], found[1], found[2], found[3], status, gap, index, kept_orders,
                lengths, orders,
            )  # fmt: skip
    return status, gap, index, kept_orders, lengths


def poisson_bucketed_minimum(
    p: np.ndarray, q: np.ndarray, counts: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    r"""``min(0, min_i [p(H_i) − e_n(q_{H_i}) / e_n(q)])`` over the ``p/q``-sorted prefixes.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        One row (unsorted).
    counts : sequence of int
        The ``n`` values, each ``>= 1`` and at most the number of positive masses.

    Returns
    -------
    gap : numpy.ndarray, shape (len(counts),)
    index : numpy.ndarray of int64, shape (len(counts),)
        The arg-min's length: ``H = order[:index]``.
    order : numpy.ndarray of int64
        The tokens with ``q > 0`` in bucket order, swept buckets sorted by ratio.

    ``None`` when a ratio is not a normal float or ``q_min^n`` would leave the normal range
    (the caller takes the scaled path).
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)
    wanted = np.asarray([int(n) for n in counts], dtype=np.int64)
    distinct = np.unique(wanted)
    status, gap, index, order = poisson_row(p, q, distinct)
    if status == batches.ROW_DECLINED:
        return None
    at = np.searchsorted(distinct, wanted)
    return gap[at], index[at], order


def poisson_bucketed_minima(
    p: np.ndarray, q: np.ndarray, counts: Sequence[int], orders: bool = False
) -> list[batches.Found]:
    """:func:`poisson_bucketed_minimum` of every row of ``p``, ``q`` (B, V), the rows shared
    among numba's threads (:func:`poisson_rows`, through
    :func:`~otbound.drafts._row_batch.rows_on_threads`): ``(gap, index, order)`` per row
    (``order`` only with ``orders``, else ``None``), or ``None`` for a row it declines."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)

    def batch(threads: int) -> tuple[np.ndarray, ...]:
        distinct = np.unique(np.asarray([int(n) for n in counts], dtype=np.int64))
        return (distinct, *poisson_rows(p, q, distinct, threads, orders))

    return batches.rows_on_threads(p, q, counts, orders, poisson_bucketed_minimum, batch)
