r"""The without-replacement prefix minimum from ratio buckets instead of a full sort.

:func:`otbound.drafts._sequential_sweep.sequential_prefix_minimum` needs the tokens in
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

from otbound._threads import SERIAL_WORK
from otbound.drafts._ratio_buckets import (
    bucket_row_kernel,
    product_lower_bound,
    product_lower_kernel,
    sort_chosen_buckets,
)
from otbound.drafts._row_batch import (
    ROW_DECLINED,
    ROW_DONE,
    Found,
    batch_outputs,
    rows_on_threads,
    store_row,
)
from otbound.drafts._sequential_layout import bucket_columns
from otbound.drafts._sequential_level import power
from otbound.drafts._sequential_mass import log_time_step
from otbound.drafts._sequential_sweep import (
    first_length,
    prefix_minimum_kernel,
    remember_needed,
    row_buffers,
    row_constants,
    sequential_prefix_minimum,
)

__all__ = [
    "MARGIN",
    "bucketed_candidates",
    "bucketed_prefix_minima",
    "bucketed_prefix_minimum",
    "bucketed_row",
    "bucketed_rows",
    "first_cuts",
]

#: A row of a batch runs every level on its own thread (:func:`bucketed_rows`).
_ALWAYS_SERIAL = 1 << 62

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


@numba.njit(cache=True)
def first_cuts(chosen, starts, stop):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """First-level segments in bucket order up to ``stop``, the end of the last candidate
    run: each run of candidate buckets cut into pieces of :func:`first_length` tokens
    (refinable), each run of excluded buckets into blocks cut at bucket boundaries only (not
    refinable). Returns the cut points (int64, from 0 to ``stop``) and the refinable flags.
    ``stop`` must be the end of the last chosen bucket (0 when none is chosen).

    An excluded run is one block as far as ``Q`` goes (its end is a prefix of the ``p/q``
    order, its inside unsorted), but one block of 90,000 tokens (a Zipf row at V = 151,936)
    leaves the power sums of :func:`~otbound.drafts._sequential_mass.segment_power_sums`, a
    loop over segments shared among the threads, to one thread. So a run is cut at the bucket
    boundaries (prefixes of the ``p/q`` order, so their values are valid candidates) that
    leave blocks of at least ``piece = max(length, ⌈stop / EXCLUDED_PIECES⌉)`` tokens on both
    sides; a shorter run stays one block. Not finer: each block costs a fold at every node.
    """
    buckets = chosen.shape[0]
    inside = 0
    runs = 0
    for b in range(buckets):
        if chosen[b]:
            inside += starts[b + 1] - starts[b]
            runs += b == 0 or not chosen[b - 1]
    length = first_length(inside)
    piece = max(length, -(-stop // EXCLUDED_PIECES))
    # at most inside / length + 1 pieces per candidate run, and the excluded runs' blocks
    # (each at least `piece` tokens but the last of a run) within the row's tokens
    cuts = np.empty(inside // length + starts[buckets] // piece + 2 * runs + 2, dtype=np.int64)
    refinable = np.empty(cuts.shape[0], dtype=np.bool_)
    cuts[0] = 0
    count = 1
    position = 0  # the end of the last candidate run: tokens, buckets
    bucket = 0
    b = 0
    while b < buckets:
        if not chosen[b]:
            b += 1
            continue
        first = b
        while b < buckets and chosen[b]:
            b += 1
        lo, hi = starts[first], starts[b]
        if lo > position:  # the excluded run before: cut where both sides keep `piece`
            last = position
            for k in range(bucket + 1, first):
                if starts[k] - last >= piece and lo - starts[k] >= piece:
                    last = starts[k]
                    cuts[count], refinable[count - 1] = last, False
                    count += 1
            cuts[count], refinable[count - 1] = lo, False
            count += 1
        for point in range(lo + length, hi, length):
            cuts[count], refinable[count - 1] = point, True
            count += 1
        cuts[count], refinable[count - 1] = hi, True
        count += 1
        position, bucket = hi, b
    return cuts[:count], refinable[: count - 1]


@numba.njit(cache=True)
def bucketed_row(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    p, q, distinct, left_times, h, beta, inverse, layout_buffer, work_buffer, sigma_buffer,
    stored_buffer, threads, serial_work,
):  # fmt: skip
    """:func:`bucketed_prefix_minimum` of one row in one compiled call: the ratio buckets
    (:func:`~otbound.drafts._ratio_buckets.bucket_row`), the candidates and their sort
    (:func:`_bucket_plan`), the first level (:func:`first_cuts`) and the prefix minimum
    (:func:`~otbound.drafts._sequential_sweep.prefix_minimum_kernel`, whose arguments the
    others are).

    Returns
    -------
    status : int
        :data:`ROW_DECLINED` (a ratio is not a normal float), or the kernel's status.
    gap, index : float64, int64 (len(distinct),)
    order : int64
        The tokens with ``q > 0`` in bucket order, the candidate buckets sorted.
    needed : int64 (2,)
        The first level's buffer sizes.
    p_sorted, q_sorted, cuts, refinable, columns, stop, largest
        What :func:`~otbound.drafts._sequential_sweep.sequential_prefix_minimum` takes to
        redo the row (its numpy checks raise where the status is not ``ROW_DONE``).
    """
    vocab = p.shape[0]
    order = np.empty(vocab, dtype=np.int64)
    ratio = np.empty(vocab)
    buckets, starts, edge, sum_p, sum_q, tops = bucket_row_kernel(
        p, q, distinct[distinct.shape[0] - 1], order, ratio
    )
    if buckets < 0:  # the outputs of a row with no values, shaped as the others
        none, count = np.zeros(0), np.zeros(0, dtype=np.int64)
        return ROW_DECLINED, np.zeros(distinct.shape[0]), \
            np.zeros(distinct.shape[0], dtype=np.int64), count, np.zeros(2, dtype=np.int64), \
            none, none, count, np.zeros(0, dtype=np.bool_), count, 0, none  # fmt: skip
    chosen, stop, p_sorted, q_sorted, columns = _bucket_plan(
        p, q, order, ratio, starts, edge, sum_p, sum_q, tops, distinct
    )
    cuts, refinable = first_cuts(chosen, starts, stop)
    largest = tops[buckets - 1].copy() if buckets else np.zeros(0)  # descending
    status, gap, index, _, _, _, _, needed = prefix_minimum_kernel(
        p_sorted, q_sorted, distinct, columns, cuts, refinable, stop, largest, left_times, h,
        beta, inverse, layout_buffer, work_buffer, sigma_buffer, stored_buffer, threads,
        serial_work,
    )  # fmt: skip
    return status, gap, index, order[: starts[buckets]], needed, p_sorted, q_sorted, cuts, \
        refinable, columns, stop, largest  # fmt: skip


@numba.njit(cache=True, parallel=True)
def bucketed_rows(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    p, q, distinct, left_times, h, beta, inverse, threads, sizes, orders
):  # fmt: skip
    """:func:`bucketed_row` of every row of ``p``, ``q`` (B, V), whole rows to each of
    ``threads`` threads (row ``r`` to thread ``r mod threads``), every level on the row's
    own thread (its kernels' serial builds): one parallel region for the batch instead of
    two per level, and the rows' ``O(V)`` passes shared too. The same bits as one row at a
    time (every kernel gives the same bits on any number of threads).

    ``sizes``: the power sums' and stored states' buffer sizes to start from (a thread's
    buffer grows where a row needs more). ``orders``: whether to return each row's order.

    Returns
    -------
    status : int64 (B,)
    gap, index : (len(distinct), B)
    orders : int64 (B, V), lengths : int64 (B,)
        Row ``r``'s order is ``orders[r, :lengths[r]]`` (shape (0, V) without ``orders``).
    needed : int64 (B, 2)
    """
    rows, vocab = p.shape
    status, gap, index, kept_orders, lengths = batch_outputs(rows, vocab, distinct.size, orders)
    needed = np.zeros((rows, 2), dtype=np.int64)
    for w in numba.prange(threads):
        layout = np.empty(vocab)
        work = np.empty((3, vocab))
        sigma = np.empty(max(sizes[0], 1))
        stored = np.empty(max(sizes[1], 1))
        for r in range(w, rows, threads):
            found = bucketed_row(
                p[r], q[r], distinct, left_times, h, beta, inverse, layout, work, sigma,
                stored, 1, _ALWAYS_SERIAL,
            )  # fmt: skip
            needed[r] = found[4]
            store_row(
                r, found[0], found[1], found[2], found[3], status, gap, index, kept_orders,
                lengths, orders,
            )  # fmt: skip
            if found[4][0] > sigma.shape[0]:  # the thread's next rows fit
                sigma = np.empty(found[4][0])
            if found[4][1] > stored.shape[0]:
                stored = np.empty(found[4][1])
    return status, gap, index, kept_orders, lengths, needed


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
        As :func:`~otbound.drafts._sequential_sweep.sequential_prefix_minimum` on the sorted
        row (error below 1e-12).
    index : numpy.ndarray of int64, shape (len(counts),)
        The arg-min's length: ``H = order[:index]``.
    order : numpy.ndarray of int64
        The tokens with ``q > 0`` in bucket order, the candidate buckets sorted by ratio.

    ``None`` when some ratio is not a normal float (the caller sorts the row).
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)
    distinct, left_times, beta, inverse = row_constants(counts)
    status, gap, index, order, needed, *redo = bucketed_row(
        p, q, distinct, left_times, log_time_step(counts), beta, inverse,
        *row_buffers(q.size), numba.get_num_threads(), SERIAL_WORK,
    )  # fmt: skip
    if status == ROW_DECLINED:
        return None
    remember_needed(needed)
    if status != ROW_DONE:  # the numpy checks raise
        p_sorted, q_sorted, cuts, refinable, columns, stop, largest = redo
        sequential_prefix_minimum(
            p_sorted, q_sorted, counts, cuts=cuts, refinable=refinable, columns=columns,
            stop=stop, largest=largest,
        )  # fmt: skip
        raise AssertionError("bucketed_row reported a value that numpy's checks passed")
    at = np.searchsorted(distinct, np.asarray(list(counts), dtype=np.int64))
    return gap[at], index[at], order


def bucketed_prefix_minima(
    p: np.ndarray, q: np.ndarray, counts: Sequence[int], orders: bool = False
) -> list[Found]:
    """:func:`bucketed_prefix_minimum` of every row of ``p``, ``q`` (B, V): ``(gap, index,
    order)`` per row (``order`` only with ``orders``, else ``None``), or ``None`` for a row
    it declines.

    With two or more rows and numba threads, the rows share the threads
    (:func:`bucketed_rows`); a row whose checks fail is redone on its own, which raises
    (:func:`~otbound.drafts._row_batch.rows_on_threads`). Otherwise one row after another,
    each with the threads inside its levels.
    """
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)

    def batch(threads: int) -> tuple[np.ndarray, ...]:
        distinct, left_times, beta, inverse = row_constants(counts)
        *_, sigma, stored = row_buffers(0)  # the sizes the threads' buffers start from
        status, gap, index, kept_orders, lengths, needed = bucketed_rows(
            p, q, distinct, left_times, log_time_step(counts), beta, inverse, threads,
            np.array([sigma.size, stored.size], dtype=np.int64), orders,
        )  # fmt: skip
        remember_needed(needed.max(axis=0))  # the next batch's threads start there
        return distinct, status, gap, index, kept_orders, lengths

    return rows_on_threads(p, q, counts, orders, bucketed_prefix_minimum, batch)
