r"""The without-replacement prefix minimum from ratio buckets instead of a full sort.

:func:`otbound.drafts._sequential_mass.sequential_prefix_minimum` needs the tokens in
ascending ``p/q`` only where it looks inside a block of prefixes. Here a row is first put in
*bucket order* (:mod:`otbound.drafts._ratio_buckets`: ``O(V)``, no sort), and cheap two-sided
bounds on ``Q`` at the bucket boundaries pick the buckets that can hold the minimum, before
any integral:

* ``U = min_b [P_b − Q_lo(H_b)]`` with the product lower bound
  ``Q_lo(H) = Π_{j<n} (q(H) − M_j)/(1 − M_j)`` is a value some prefix does not exceed;
* a bucket ``b`` (lower ratio edge ``r_b``, mass ``q_b``) holds no prefix below
  ``min(P_b − C_b^n, P_b + r_b q_b − C_{b+1}^n)`` (``Q ≤ q(H)^n``; concave in the mass
  added, so the ends bound it).

Buckets whose bound exceeds ``U`` by more than ``MARGIN`` (far above the rounding of the
sums) are never looked inside; only the others are sorted by ratio. The exact integral then
runs over segments in bucket order: runs of excluded buckets as blocks cut only at bucket
boundaries (``Q`` depends on the set only), the candidate runs cut as usual, and nothing
past the last candidate (the grid's right end follows the smallest ``λ`` still needed). The
values are those of the sorted sweep (the same prefixes' ``Q``, integrated with the same error
bound, below 1e-12); the arg-min prefix may differ only between prefixes of equal value (ties
in ``p/q``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from otbound.drafts._ratio_buckets import (
    bucket_row,
    product_lower_bound,
    product_lower_kernel,
    sort_chosen_buckets,
)
from otbound.drafts._sequential_layout import bucket_columns
from otbound.drafts._sequential_level import power
from otbound.drafts._sequential_mass import REFINE, TOP_SEGMENTS, sequential_prefix_minimum

__all__ = ["MARGIN", "bucketed_candidates", "bucketed_prefix_minimum"]

#: A run of excluded buckets longer than ``stop / EXCLUDED_PIECES`` tokens is cut (at bucket
#: boundaries) into blocks of about that length, so that the threads share its power sums.
EXCLUDED_PIECES = 4

#: A bucket is excluded only when its lower bound exceeds ``U`` by more than this: the
#: rounding of the bucket sums (``V`` terms, ``V ε < 1e-10`` for ``V ≤ 1e6``) is far below.
MARGIN = 1e-9


def bucketed_candidates(
    cum_p: np.ndarray,
    cum_q: np.ndarray,
    edge: np.ndarray,
    mass: np.ndarray,
    tops: np.ndarray,
    n: int,
) -> np.ndarray:
    r"""The buckets that can hold the minimum of ``p(H) − Q_n(H)`` (bool, shape (K,)).

    Parameters
    ----------
    cum_p, cum_q : numpy.ndarray, shape (K + 1,)
        ``p`` and ``q`` of the prefix before each bucket boundary.
    edge, mass : numpy.ndarray, shape (K,)
        Each bucket's lower ratio edge ``r_b`` and its draft mass ``q_b``.
    tops : numpy.ndarray, shape (K, >= n)
        The largest masses of the buckets ``0..b`` together, descending (row ``b``).
    n : int

    Returns
    -------
    numpy.ndarray of bool, shape (K,)
        ``min(P_b − C_b^n, P_b + r_b q_b − C_{b+1}^n) ≤ U + MARGIN``.
    """
    chosen = np.zeros(mass.shape[0], dtype=bool)
    _mark_candidates(cum_p, cum_q, edge, mass, product_lower_bound(cum_q, tops, n), n, chosen)
    return chosen


@numba.njit(cache=True)
def _mark_candidates(cum_p, cum_q, edge, mass, lower_q, n, chosen):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Set ``chosen[b]`` where :func:`bucketed_candidates` keeps bucket ``b`` for ``n``
    (``lower_q``: the product lower bound at every boundary); the others stay as they were.

    ``U = min(0, min_b [P_b − Q_lo(H_b)])`` as numpy's ``min(0.0, np.min(...))`` gives it (a
    NaN among the values makes it 0); ``C^n`` by :func:`power`.
    """
    lowest = np.inf  # min_b [P_b − Q_lo(H_b)], a NaN if one is (as np.min)
    for b in range(lower_q.shape[0]):
        value = cum_p[b] - lower_q[b]
        if value != value or value < lowest:
            lowest = value
        if value != value:
            break
    upper_value = lowest if lowest < 0.0 else 0.0  # as min(0.0, lowest): NaN gives 0
    for b in range(mass.shape[0]):
        top_q = power(min(cum_q[b], 1.0), n)
        next_q = power(min(cum_q[b + 1], 1.0), n)
        lower = min(cum_p[b] - top_q, cum_p[b] + edge[b] * mass[b] - next_q)
        chosen[b] |= lower <= upper_value + MARGIN


@numba.njit(cache=True)
def _bucket_plan(p, q, order, ratio, starts, edge, sum_p, sum_q, tops, counts):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The buckets that can hold the minimum for some ``n`` in ``counts`` (ascending), sorted
    by ratio in place in ``order`` (:func:`bucketed_candidates` for each ``n``, then
    :func:`~otbound.drafts._ratio_buckets.sort_chosen_buckets`), in one compiled call.

    Returns
    -------
    chosen : bool (K,)
        The candidate buckets.
    stop : int
        The end of the last candidate bucket (0 when there is none).
    p_sorted, q_sorted : float64 (starts[K],)
        ``p`` and ``q`` of the tokens in the new bucket order.
    columns : int64
        The prefix lengths that are prefixes of the ``p/q`` order
        (:func:`~otbound.drafts._sequential_layout.bucket_columns`).
    """
    buckets = starts.shape[0] - 1
    cum_p = np.zeros(buckets + 1)  # sequential sums, as np.cumsum
    cum_q = np.zeros(buckets + 1)
    for b in range(buckets):
        cum_p[b + 1] = cum_p[b] + sum_p[b]
        cum_q[b + 1] = cum_q[b] + sum_q[b]
    chosen = np.zeros(buckets, dtype=np.bool_)
    lower_q = np.empty(buckets + 1)
    for n in counts:
        product_lower_kernel(cum_q, tops, n, lower_q)
        _mark_candidates(cum_p, cum_q, edge, sum_q, lower_q, n, chosen)
    picked = np.flatnonzero(chosen)
    sort_chosen_buckets(order, ratio, starts, picked)
    size = starts[buckets]
    stop = starts[picked[-1] + 1] if picked.shape[0] else 0
    p_sorted = np.empty(size)
    q_sorted = np.empty(size)
    for i in range(size):
        p_sorted[i] = p[order[i]]
        q_sorted[i] = q[order[i]]
    return chosen, stop, p_sorted, q_sorted, bucket_columns(starts, picked)


def _first_cuts(chosen: np.ndarray, starts: np.ndarray, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """First-level segments in bucket order up to ``stop``, the end of the last candidate
    run: each run of candidate buckets cut into pieces of a power of ``REFINE`` tokens
    (refinable), each run of excluded buckets into blocks cut at bucket boundaries only (not
    refinable). Returns the cut points and the refinable flags.

    An excluded run is one block as far as ``Q`` goes (its end is a prefix of the ``p/q``
    order, its inside unsorted), but one block of 90,000 tokens (a Zipf row at V = 151,936)
    leaves the power sums of :func:`~otbound.drafts._sequential_mass._segment_power_sums`, a
    loop over segments shared among the threads, to one thread. So a run is cut at the bucket
    boundaries (prefixes of the ``p/q`` order, so their values are valid candidates) that
    leave blocks of at least ``piece = max(length, ⌈stop / EXCLUDED_PIECES⌉)`` tokens on both
    sides; a shorter run stays one block. Not finer: each block costs a fold at every node.
    """
    runs: list[tuple[int, int, bool, int, int]] = []  # tokens [lo, hi), refinable, buckets [a, b)
    flags = np.concatenate(([False], chosen, [False]))
    change = np.flatnonzero(flags[1:] != flags[:-1])  # candidate runs [change[2i], change[2i+1])
    position, bucket = 0, 0
    for a, b in zip(change[::2], change[1::2], strict=True):
        lo, hi = int(starts[a]), int(starts[b])
        if lo > position:
            runs.append((position, lo, False, bucket, int(a)))
        runs.append((lo, hi, True, int(a), int(b)))
        position, bucket = hi, int(b)
    assert position == stop, "stop is the end of the last candidate run"
    inside = sum(hi - lo for lo, hi, keep, _, _ in runs if keep)
    length = 1
    while inside // (length * REFINE) >= TOP_SEGMENTS:
        length *= REFINE
    piece = max(length, -(-stop // EXCLUDED_PIECES))
    cuts = [0]
    refinable: list[bool] = []
    for lo, hi, keep, first, last in runs:
        if keep:
            points = list(range(lo + length, hi, length))
        else:  # bucket boundaries inside the run, each at least `piece` past the last cut
            points = []
            for boundary in starts[first + 1 : last].tolist():
                if boundary - (points[-1] if points else lo) >= piece and hi - boundary >= piece:
                    points.append(int(boundary))
        for point in [*points, hi]:
            refinable.append(keep)
            cuts.append(point)
    return np.asarray(cuts, dtype=np.int64), np.asarray(refinable, dtype=bool)


def bucketed_prefix_minimum(
    p: np.ndarray, q: np.ndarray, counts: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    r"""``min(0, min_H [p(H) − Q_n(H)])`` over the ``p/q``-sorted prefixes of one row, per ``n``.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        One row's target and draft probabilities (unsorted).
    counts : sequence of int
        The ``n`` values, each ``>= 1``.

    Returns
    -------
    gap : numpy.ndarray, shape (len(counts),)
        As :func:`~otbound.drafts._sequential_mass.sequential_prefix_minimum` on the sorted
        row (error below 1e-12).
    index : numpy.ndarray of int64, shape (len(counts),)
        The arg-min's length: ``H = order[:index]``.
    order : numpy.ndarray of int64
        The tokens with ``q > 0`` in bucket order, the candidate buckets sorted by ratio.

    ``None`` when some ratio is not a normal float (the caller sorts the row).
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)
    wanted = [int(n) for n in counts]
    buckets, order, ratio, starts, edge, sum_p, sum_q, tops = bucket_row(p, q, max(wanted))
    if buckets < 0:
        return None
    chosen, stop, p_sorted, q_sorted, columns = _bucket_plan(
        p, q, order, ratio, starts, edge, sum_p, sum_q, tops, np.unique(wanted)
    )
    order = order[: int(starts[-1])]
    cuts, refinable = _first_cuts(chosen, starts, stop)
    gap, index = sequential_prefix_minimum(
        p_sorted,
        q_sorted,
        wanted,
        cuts=cuts,
        refinable=refinable,
        columns=columns,
        stop=stop,
        largest=tops[-1] if buckets else None,  # the row's largest masses, descending
    )
    return gap, index, order
