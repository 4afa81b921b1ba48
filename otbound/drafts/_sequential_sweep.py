r"""The minimum of ``p(H) − Q_n(H)`` over the prefixes of one row, for sequential draws
without replacement, compiled end to end.

:func:`sequential_prefix_minimum` (for a sorted row) and
:mod:`otbound.drafts._sequential_bucketed` (a row in ratio buckets, and a batch of rows on
numba's threads) call one compiled function per row, :func:`prefix_minimum_kernel`: the
prefix sums, the closed forms of ``n ≤ 2``, the growth bounds, the log-time grid and the
block sweep of ``n ≥ 3`` (:func:`_sweep_levels`, over the kernels of
:mod:`otbound.drafts._sequential_mass`). No Python runs between the row's steps, so a batch
can give each thread whole rows (:func:`otbound.drafts._sequential_bucketed.bucketed_rows`).

Where numpy's checks would raise (a mass outside ``[0, 1]`` beyond rounding, a NaN), the
kernel reports it (:data:`ROW_CLOSED_CHECK`, :data:`ROW_EARLY_CHECK`,
:data:`ROW_LEVEL_CHECK`) and the Python
wrapper runs the numpy lines, which raise as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np

from otbound._checks import clip_rounding
from otbound._pairwise import pairwise_sum
from otbound._scratch import kept, scratch
from otbound._threads import SERIAL_WORK
from otbound.drafts._row_batch import ROW_DONE
from otbound.drafts._sequential_layout import (
    CLOSED_CHECK,
    CLOSED_INTEGRATE,
    closed_minimum,
    largest_masses,
    prefix_sums,
)
from otbound.drafts._sequential_level import LEVEL_SETTLED, level_layout, settle_level
from otbound.drafts._sequential_mass import (
    FOLD_MIN,
    LARGEST_TIME,
    LN2,
    MOST_TERMS,
    NODE_CHUNKS,
    RIGHT_TAIL,
    fold_limits,
    left_time,
    left_weight_inverses,
    left_weight_kernel,
    log_time_step,
    segment_mass,
    segment_mass_serial,
    segment_power_sums,
    segment_power_sums_serial,
    series_table,
)

__all__ = [
    "CANDIDATE_SLACK",
    "REFINE",
    "ROW_CLOSED_CHECK",
    "ROW_EARLY_CHECK",
    "ROW_LEVEL_CHECK",
    "TOP_SEGMENTS",
    "first_length",
    "prefix_minimum_kernel",
    "remember_needed",
    "row_buffers",
    "row_constants",
    "sequential_prefix_minimum",
]

#: Each refinement cuts a segment into this many.
REFINE = 8
#: The first level cuts the tokens swept inside into this many segments (:func:`first_length`).
TOP_SEGMENTS = 16
#: Slack on the candidate test: a block is refined unless its lower bound exceeds the best
#: value found by more than the integration error.
CANDIDATE_SLACK = 1e-13

#: A closed form (``n ≤ 2``) left ``[0, 1]`` beyond rounding, or gave a NaN: numpy raises.
ROW_CLOSED_CHECK = 1
#: A level of the block sweep did: numpy raises.
ROW_LEVEL_CHECK = 2
#: No prefix was live (``Q`` is 0 or 1 at every end) and some ``p(H) − Q(H)`` is NaN.
ROW_EARLY_CHECK = 3


def _closed_form_mass(q: np.ndarray, suffix: np.ndarray, n: int) -> np.ndarray:
    r"""``Q(H_i)`` of every prefix for ``n ≤ 2`` drafts, with no integral.

    ``n = 1``: ``q(H)``. ``n = 2``: ``∫ λ e^{−λt} e^{−q(H) t} Σ_{k<2} e_k(e^{q_x t} − 1) dt``
    with ``λ + q(H) = 1`` gives ``1 − Q(H) = λ (1 + Σ_{x∈H} q_x / (1 − q_x))``; ``1 − q_x`` is
    taken as the sum of the other masses (a prefix and a suffix sum), so that a token holding
    nearly all the mass keeps its relative precision. Exact to rounding.
    """
    before = np.concatenate(([0.0], np.cumsum(q)))
    if n == 1:
        return before
    rest = before[:-1] + suffix[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        odds = np.where(q > 0, q / rest, 0.0)
    return 1.0 - suffix * (1.0 + np.concatenate(([0.0], np.cumsum(odds))))


#: Below this, ``1 − m_j`` computed as ``q.sum() − Σ_{k<j} top_k`` may have lost more than the
#: relative 1e-12 the growth bound allows for (the sum and the subtraction round by a few
#: 1e-16 of the total): the other masses are then summed directly instead.
RELIABLE_REST = 1e-2


@numba.njit(cache=True)
def _other_masses(q, most, largest):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``rest[j]``, the mass of ``q`` outside its ``j`` largest entries, ``j = 0..most``
    (``most <= q.size``), each rounded down by a relative 1e-12 (a lower bound).

    ``q.sum() − Σ_{k<j} top_k`` (numpy's pairwise sum, :func:`pairwise_sum`) cancels when the
    largest entries hold nearly all the mass (``1 − m_j`` of 1e-18 came out as 2e-16): where
    the smallest of them is below :data:`RELIABLE_REST`, the entries past the ``most``
    largest are summed on their own (in token order; of entries equal to the ``most``-th
    largest, the first ones count among the largest, where numpy's ``argpartition`` in the
    earlier code took any, so on such rows that sum may differ from the earlier one in its
    last bit: ``K`` only chooses segments, within ``CANDIDATE_SLACK``) and the largest added
    back, sums of non-negative terms only. ``largest``: the ``most`` (or more) largest entries,
    descending, where the caller has them (else empty).
    """
    top = largest[:most].copy() if largest.shape[0] >= most else largest_masses(q, most)
    total = pairwise_sum(q, 0, q.shape[0])
    rest = np.empty(most + 1)
    rest[0] = total - 0.0
    drawn = 0.0
    for j in range(most):
        drawn += top[j]
        rest[j + 1] = total - drawn
    if most and rest[most] < RELIABLE_REST:
        edge = top[most - 1]
        skip = most  # the entries of the `most` largest not yet met
        for j in range(most):
            skip -= top[j] > edge
        others = np.empty(q.shape[0])
        count = 0
        for x in range(q.shape[0]):
            if q[x] > edge or (q[x] == edge and skip > 0):
                skip -= q[x] == edge
                continue
            others[count] = q[x]
            count += 1
        tail = pairwise_sum(others, 0, count)
        above = 0.0
        rest[most] = tail + 0.0
        for j in range(most - 1, -1, -1):
            above += top[j]
            rest[j] = tail + above
    for j in range(most + 1):
        rest[j] *= 1.0 - 1e-12  # rounding of the sums: keep K an upper bound
    return rest


@numba.njit(cache=True, error_model="numpy")  # 1 / 0 is inf, as in numpy
def growth_kernel(q, counts, largest):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_growth_bound` for each ``n`` in ``counts`` (int64, ``>= 1``), from the other
    masses of :func:`_other_masses`."""
    most = 0
    for n in counts:
        most = max(most, n)
    rest = _other_masses(q, min(most, q.shape[0]), largest)
    inverse = 1.0 / rest
    out = np.empty(counts.shape[0])
    for c in range(counts.shape[0]):
        used = min(counts[c], rest.shape[0])
        # rest never rises with j (a total minus a growing sum): its last entry used decides
        out[c] = pairwise_sum(inverse, 0, used) if rest[used - 1] > 0.0 else np.inf
    return out


def _growth_bound(q: np.ndarray, n: int) -> float:
    r"""``K = Σ_{j<n} 1 / (1 − m_j)``, ``m_j`` the mass of the ``j`` largest tokens: adding
    tokens of mass ``m`` to ``H`` raises ``Q(H)`` by at most ``K m``.

    ``Q(H ∪ D) − Q(H) ≤ Σ_j P(draw j+1 ∈ D) ≤ Σ_j q(D) / (1 − s_j)`` with ``s_j ≤ m_j`` the
    mass drawn before. ``1 − m_j`` is the mass of the other tokens (``inf`` when none is left),
    from :func:`_other_masses`.

    With ``c = q(H ∪ D)`` the increase is also at most ``c^{n−1} K q(D)``: it is at most
    ``Σ_j P(all n draws in H ∪ D, draw j+1 in D)``, and in that event each of the other
    ``n − 1`` draws lands in ``H ∪ D`` with probability ``(c − s)/(1 − s) ≤ c``.
    """
    bounds = growth_kernel(
        np.ascontiguousarray(q, dtype=np.float64), np.array([n], dtype=np.int64), np.empty(0)
    )
    return float(bounds[0])


@numba.njit(cache=True, inline="always")
def _take(buffer, size):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The first ``size`` entries of ``buffer``, or fresh memory where it is shorter."""
    if size <= buffer.shape[0]:
        return buffer[:size]
    return np.empty(size)


@numba.njit(cache=True)
def _balanced_schedule(edges, threads):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The segments of ``edges`` longer than ``FOLD_MIN`` shared among ``threads`` by length:
    longest first (ties in segment order), each to the thread with the least so far (a
    segment's power sums cost about its length). Thread ``w`` takes
    ``schedule[bounds[w]:bounds[w + 1]]``."""
    lengths = edges[1:] - edges[:-1]
    threads = max(threads, 1)
    ranked = np.argsort(-lengths, kind="mergesort")  # longest first, ties in segment order
    owner = np.full(lengths.shape[0], -1, dtype=np.int64)
    load = np.zeros(threads, dtype=np.int64)
    for s in ranked:
        if lengths[s] <= FOLD_MIN:
            break
        w = int(np.argmin(load))  # the first of the least loaded
        load[w] += lengths[s]
        owner[s] = w
    bounds = np.zeros(threads + 1, dtype=np.int64)
    for s in range(owner.shape[0]):
        if owner[s] >= 0:
            bounds[owner[s] + 1] += 1
    for w in range(threads):
        bounds[w + 1] += bounds[w]
    schedule = np.empty(bounds[threads], dtype=np.int64)
    fill = bounds[:threads].copy()
    for s in ranked:  # each thread's segments, longest first
        if owner[s] >= 0:
            schedule[fill[owner[s]]] = s
            fill[owner[s]] += 1
    return schedule, bounds


@numba.njit(cache=True)
def _sweep_levels(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    q, suffix, positives, cum_p, p, integrated, slots, growth, gap, index, known, beta, limits,
    first, may_refine, t_lo, scale, h, num_nodes, layout_buffer, work_buffer, sigma_buffer,
    stored_buffer, inverse, threads, serial_work,
):  # fmt: skip
    """The levels of :func:`sequential_prefix_minimum`'s block sweep, from the first level's
    segment ends ``first`` (and which of them ``may_refine``) down to single tokens.

    Each level lays out its segments' tokens (:func:`level_layout`), takes the power sums of
    the long ones (:func:`segment_power_sums`), sweeps the count distributions at every node
    (:func:`segment_mass`) and settles the segment ends and the next level's segments
    (:func:`settle_level`), updating ``gap``, ``index`` and ``known`` in place: one compiled
    call per row instead of some twenty Python and numpy calls per level.

    A level of at most ``serial_work`` tokens times nodes runs the kernels' serial builds on
    this thread alone (waking the others costs more, :mod:`otbound._threads`); the others
    run on numba's ``threads`` (the power sums' shares). The buffers are work memory (their
    values do not matter): ``work_buffer`` of shape (3, ``q.size``) at least (a level's
    tokens are never more), the others of any size (a level that needs more takes fresh
    memory).

    Returns
    -------
    status : int
        :data:`LEVEL_SETTLED`, or :data:`LEVEL_CHECK` (a mass out of ``[0, 1]`` beyond
        rounding, or a NaN), with the failing level's ``remaining``, ``left`` and segment
        ``ends`` for the caller's numpy checks.
    """
    top = integrated[integrated.shape[0] - 1]
    fold_min = FOLD_MIN if _fold_fits(top) else q.shape[0]  # else no segment is folded
    chunks = max(1, min(NODE_CHUNKS, num_nodes))
    starts = first[:-1]
    ends = first[1:]
    groups = np.zeros(2, dtype=np.int64)
    groups[1] = starts.shape[0]
    states = np.zeros((num_nodes, 1, top))
    for j in range(num_nodes):
        states[j, 0, 0] = 1.0
    remaining = np.zeros((integrated.shape[0], 0))
    left = np.zeros(0)
    while starts.shape[0]:
        # the level's tokens, segment after segment: on the first level (segments that
        # follow each other from 0) and unscaled, views of the row's own arrays
        whole = scale == 1.0 and starts[0] == 0
        for s in range(1, starts.shape[0]):
            whole = whole and starts[s] == ends[s - 1]
        edges, vals, lam_after, rows, total, longest = level_layout(
            q, suffix, starts, ends, scale, fold_min, not whole
        )
        if whole:
            vals = q[: ends[-1]]
            lam_after = suffix[1 : ends[-1] + 1]
        store = 1 if longest > 1 else 0  # the next level starts from this one's states
        layout = _take(layout_buffer, vals.shape[0])
        sigma = _take(sigma_buffer, total * num_nodes * MOST_TERMS).reshape(
            (total, num_nodes, MOST_TERMS)
        )
        fold_end = np.empty((total, num_nodes), dtype=np.int64)
        peaks = np.empty((total, num_nodes))  # each block's largest folded mass, per node
        serial = vals.shape[0] * num_nodes <= serial_work  # this thread alone
        if total:
            schedule, bounds = _balanced_schedule(edges, 1 if serial else threads)
            if serial:
                segment_power_sums_serial(
                    vals, edges, rows, limits, h, layout, sigma, fold_end, peaks, schedule,
                    bounds, work_buffer,
                )  # fmt: skip
            else:
                segment_power_sums(
                    vals, edges, rows, limits, h, layout, sigma, fold_end, peaks, schedule,
                    bounds, work_buffer,
                )  # fmt: skip
        segments = edges.shape[0] - 1
        stored = _take(stored_buffer, num_nodes * segments * top if store else 0)
        if serial:
            remaining, stored = segment_mass_serial(
                vals, lam_after, integrated, t_lo / scale, h, num_nodes, groups, edges, layout,
                sigma, rows, fold_end, peaks, beta, states, store, chunks, stored,
            )  # fmt: skip
        else:
            remaining, stored = segment_mass(
                vals, lam_after, integrated, t_lo / scale, h, num_nodes, groups, edges, layout,
                sigma, rows, fold_end, peaks, beta, states, store, chunks, stored,
            )  # fmt: skip
        left = left_weight_kernel(suffix[ends], t_lo, h, inverse)
        # Q at the segment ends, the minimum so far, and the next level: inside a segment
        # p(H_i) ≥ p(H_s) + r_s m and Q(H_i) ≤ min(Q(H_e), Q(H_s) + K_e m) (m = q(H_i) −
        # q(H_s)), so p(H_i) − Q(H_i) ≥ p(H_s) − Q(H_e) + min(r_s/K_e, 1) ΔQ with
        # K_e = q(H_e)^{n−1} K (:func:`_growth_bound`); then each inside prefix with its own
        # p(H_i) and also the chord of Q; each candidate is cut into REFINE pieces (of at
        # least one token)
        status, chosen, next_starts, next_ends, groups = settle_level(
            starts, ends, remaining, left, positives, cum_p, suffix, p, q, integrated, slots,
            growth, gap, index, known, may_refine, REFINE if longest > 1 else 0,
            CANDIDATE_SLACK,
        )  # fmt: skip
        if status != LEVEL_SETTLED:
            return status, remaining, left, ends
        if longest == 1:
            break
        starts = next_starts
        ends = next_ends
        may_refine = np.ones(starts.shape[0], dtype=np.bool_)
        states = np.empty((num_nodes, chosen.shape[0], top))  # the candidates' start states
        for j in range(num_nodes):
            for c in range(chosen.shape[0]):
                for k in range(top):
                    states[j, c, k] = stored[j, chosen[c], k]
    return LEVEL_SETTLED, remaining, left, ends


@numba.njit(cache=True)
def _fold_fits(top):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Whether a block of tokens can join the count distributions of ``top`` drafts at once
    (:func:`~otbound.drafts._sequential_mass._fold`): ``top − 1 ≤ MOST_TERMS``.

    The fold's generating function ``e^{−A} exp(Σ_{m<top} c_m z^m)`` takes every ``c_m`` from
    its terms ``β[m, r] u^r σ_r``, ``r = m, m + 1, …``: at least ``top − 1`` power sums
    ``σ_r``, and a block keeps ``MOST_TERMS`` of them (as does the series table ``β``). Beyond,
    every segment is swept token by token (the torch sweep's ``degree <= MOST_TERMS``)."""
    return top - 1 <= MOST_TERMS


@numba.njit(cache=True)
def _grid(smallest, t_lo, h):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``(num_nodes, scale)`` of the log-time grid from ``t_lo`` for prefixes whose mass
    outside is at least ``smallest`` (:func:`otbound.drafts._sequential_mass.
    sequential_prefix_masses` explains the scale)."""
    log_t_hi = math.log(RIGHT_TAIL) - math.log(smallest)
    num_nodes = math.ceil((log_t_hi - math.log(t_lo)) / h) + 1
    shift = max(0, math.ceil((log_t_hi - math.log(LARGEST_TIME)) / LN2))
    return num_nodes, math.ldexp(1.0, shift)


@numba.njit(cache=True)
def first_length(tokens):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The first level's segment length for ``tokens`` swept inside: ``⌈tokens /
    TOP_SEGMENTS⌉`` (at least 1), so ``TOP_SEGMENTS`` segments of a run of ``tokens`` (9 to
    15 below 240 tokens, where the length rounds up by much; ``tokens`` up to 16).

    Any length will do for the values (a refinement cuts a segment into ``REFINE`` pieces of
    ``⌈length / REFINE⌉`` tokens). It was the largest power of ``REFINE`` leaving at least 12
    segments, which left 12 to 95: a row with 5,500 tokens inside got 87 segments of 64
    tokens, each folded at every node, and took 40 % longer than one with 7,600 tokens
    (15 segments of 512); ``benchmarks/bench_without_replacement.py`` measures the change."""
    return max(1, -(-tokens // TOP_SEGMENTS))


@numba.njit(cache=True)
def _first_level(stop):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The default first level: segments of :func:`first_length` tokens over ``[0, stop)``."""
    length = first_length(stop)
    segments = -(-stop // length)
    first = np.empty(segments + 1, dtype=np.int64)
    for s in range(segments):
        first[s] = s * length
    first[segments] = stop
    return first


@numba.njit(cache=True)
def prefix_minimum_kernel(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    p, q, distinct, columns, first, may_refine, stop, largest, left_times, h, beta, inverse,
    layout_buffer, work_buffer, sigma_buffer, stored_buffer, threads, serial_work,
):  # fmt: skip
    r""":func:`sequential_prefix_minimum` of one row in one compiled call.

    Parameters
    ----------
    p, q : float64 (V,)
        The row in sweep order.
    distinct : int64
        The ``n`` values, ascending, each ``>= 1``.
    columns : int64
        The prefix lengths the closed forms take (ascending).
    first, may_refine : int64, bool
        The first level's segment ends (empty: :func:`_first_level`) and which segments may
        be swept inside.
    stop : int
        The last prefix any integrated ``n`` needs.
    largest : float64
        The ``max(distinct)`` largest masses of ``q``, descending (empty: found here).
    left_times, h, beta, inverse
        :func:`row_constants`.
    layout_buffer, work_buffer, sigma_buffer, stored_buffer
        Work memory (their values do not matter): (V,), (3, V), and any size (a level
        that needs more takes fresh memory; ``needed`` says how much the first level took).
    threads, serial_work : int
        numba's threads for the power sums' shares, and the work (tokens times nodes) up to
        which a level runs the kernels' serial builds (:func:`_sweep_levels`).

    Returns
    -------
    status : int
        :data:`ROW_DONE`, :data:`ROW_CLOSED_CHECK` or :data:`ROW_EARLY_CHECK` (``slots``
        holds the failing ``n``'s place in ``distinct``) or :data:`ROW_LEVEL_CHECK`
        (``remaining``, ``left``, ``ends`` are the failing level's, ``slots`` the
        integrated ``n``'s places).
    gap, index : float64, int64 (len(distinct),)
    remaining, left, ends, slots
    needed : int64 (2,)
        The sizes of the first level's power sums and stored states.
    """
    size = q.shape[0]
    cum_p, suffix, positives = prefix_sums(p, q)
    many = distinct.shape[0]
    gap = np.zeros(many)
    index = np.zeros(many, dtype=np.int64)
    needed = np.zeros(2, dtype=np.int64)
    nothing = np.zeros((0, 0))  # the returns that have no level to report
    no_left = np.zeros(0)
    no_ends = np.zeros(0, dtype=np.int64)
    closed = np.zeros(many, dtype=np.bool_)
    for c in range(many):
        if distinct[c] <= 2:  # the closed forms; an overflow of the odds integrates n = 2
            status, value, where = closed_minimum(q, suffix, positives, cum_p, columns, distinct[c])
            if status == CLOSED_CHECK:
                return ROW_CLOSED_CHECK, gap, index, nothing, no_left, no_ends, \
                    np.full(1, c), needed  # fmt: skip
            if status != CLOSED_INTEGRATE:
                closed[c], gap[c], index[c] = True, value, where
    slots = np.flatnonzero(~closed)  # where each integrated n sits in `distinct`
    if slots.shape[0] == 0:
        return ROW_DONE, gap, index, nothing, no_left, no_ends, slots, needed
    integrated = distinct[slots]
    # The live prefixes (at least n positive masses, something outside, at most `stop`) are
    # one range: `positives` never falls and `suffix` never rises (sums of masses >= 0), so
    # the least mass outside them is the last one's.
    first_live = np.searchsorted(positives, integrated[0])
    last_live = min(stop, np.count_nonzero(suffix > 0.0) - 1)
    if first_live > last_live:  # no live prefix: Q is 0 or 1 at every end
        for slot in slots:
            best = np.inf
            where = -1
            for i in columns:
                if i > stop:
                    break
                value = cum_p[i] - (1.0 if positives[i] >= distinct[slot] else 0.0)
                if value != value:
                    return ROW_EARLY_CHECK, gap, index, nothing, no_left, no_ends, \
                        np.full(1, slot), needed  # fmt: skip
                if where < 0 or value < best:
                    best, where = value, int(i)
            if where >= 0 and best < gap[slot]:
                gap[slot], index[slot] = best, where
        return ROW_DONE, gap, index, nothing, no_left, no_ends, slots, needed
    t_lo = np.inf
    for n in integrated:
        t_lo = min(t_lo, left_times[n])
    num_nodes, scale = _grid(suffix[last_live], t_lo, h)
    top = integrated[-1]
    known = np.zeros((integrated.shape[0], size + 1))  # Q at the prefixes evaluated so far
    growth = growth_kernel(q, integrated, largest)
    limits = fold_limits(t_lo / scale, h, num_nodes)  # masses each node folds
    if first.shape[0] == 0:
        first = _first_level(stop)
        may_refine = np.ones(first.shape[0] - 1, dtype=np.bool_)
    segments = first.shape[0] - 1
    needed[0] = segments * num_nodes * MOST_TERMS if _fold_fits(top) else 0
    needed[1] = segments * num_nodes * top
    status, remaining, left, ends = _sweep_levels(
        q, suffix, positives, cum_p, p, integrated, slots, growth, gap, index, known, beta,
        limits, first, may_refine, t_lo, scale, h, num_nodes, layout_buffer, work_buffer,
        sigma_buffer, stored_buffer, inverse, threads, serial_work,
    )  # fmt: skip
    if status != LEVEL_SETTLED:
        return ROW_LEVEL_CHECK, gap, index, remaining, left, ends, slots, needed
    return ROW_DONE, gap, index, remaining, left, ends, slots, needed


def row_constants(
    counts: Sequence[int], h: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`prefix_minimum_kernel` takes for every row with these ``counts``:
    ``(distinct, left_times, beta, inverse)``, the distinct ``n`` ascending, each ``n``'s
    left end of the grid (``left_times[n]``,
    :func:`~otbound.drafts._sequential_mass.left_time`), the power series' table for the
    largest ``n`` and the left weight's coefficients."""
    h = log_time_step(counts) if h is None else h
    distinct = np.asarray(sorted({int(n) for n in counts}), dtype=np.int64)
    top = int(distinct[-1])
    left_times = np.array([math.inf] + [left_time(n, h) for n in range(1, top + 1)])
    return distinct, left_times, series_table(top, MOST_TERMS), left_weight_inverses(h)


#: The names of this thread's work buffers (:mod:`otbound._scratch`) for a row's sweep.
_LAYOUT, _WORK = "sequential layout", "sequential power-sum work"
_POWER_SUMS, _STORED = "sequential power sums", "sequential stored states"


def row_buffers(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This thread's work memory for :func:`prefix_minimum_kernel` on a row of ``size``
    tokens: the layout (V,), the power sums' work (3, V), and the power sums' and stored
    states' buffers as large as the rows before needed (:func:`remember_needed`)."""
    return scratch(_LAYOUT, (size,)), scratch(_WORK, (3, size)), kept(_POWER_SUMS), kept(_STORED)


def remember_needed(needed: np.ndarray) -> None:
    """Grow the power sums' and stored states' buffers to the sizes a row's first level
    took (``needed``, as :func:`prefix_minimum_kernel` returns it), for the next rows."""
    kept(_POWER_SUMS, int(needed[0]))
    kept(_STORED, int(needed[1]))


def sequential_prefix_minimum(
    p_sorted: np.ndarray,
    q_sorted: np.ndarray,
    counts: Sequence[int],
    h: float | None = None,
    *,
    cuts: np.ndarray | None = None,
    refinable: np.ndarray | None = None,
    columns: np.ndarray | None = None,
    stop: int | None = None,
    largest: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""``min_i [p(H_i) − Q_n(H_i)]`` and its first arg-min ``i``, for each ``n`` in ``counts``.

    The same values as :func:`~otbound.drafts._sequential_mass.sequential_prefix_masses`
    followed by a minimum (to its error, below 1e-12), without computing ``Q`` at every
    prefix (:func:`prefix_minimum_kernel`):

    * ``n ≤ 2`` need no integral (:func:`_closed_form_mass`, taken by
      :func:`~otbound.drafts._sequential_layout.closed_minimum`); where the odds of ``n = 2``
      overflow (``1 − q_x`` below the normal range), ``n = 2`` is integrated as below.
    * For ``n ≥ 3`` the tokens are cut into blocks of consecutive prefixes. At each node the
      block's tokens with ``q_x t ≤ SMALL_RATE`` join the count distribution at once (up to
      ``MOST_TERMS + 1`` drafts, :func:`_fold_fits`; one by one beyond), by the
      generating function ``Π_x (e^{−a_x} + (1 − e^{−a_x}) z) = e^{−A} exp(Σ_m c_m z^m)``
      with ``a_x = q_x t``, ``A = Σ a_x`` and ``c_m = (−1)^{m−1}/m Σ_x (e^{a_x} − 1)^m``, a
      power series in the power sums ``Σ_x a_x^r`` (precomputed per block) whose tail beyond
      ``D`` terms is at most ``A (m u)^D / (m u (D+1)!)`` with ``u = max a_x`` (kept below
      1e-19); the other tokens join one by one. This gives ``Q`` at the block boundaries.
    * ``Q`` grows with ``H`` and so does ``p(H)``: inside a block,
      ``p(H_i) − Q(H_i) ≥ p(H_{start}) − Q(H_{end})``; ``Q`` is also convex in the mass along
      the sweep, so it stays below the chord between the block's ends
      (:func:`~otbound.drafts._sequential_level._inside_lower`). Only blocks where these lower
      bounds are below the best boundary value (less ``CANDIDATE_SLACK``) are swept token by
      token, from the count distributions stored at their start.

    Parameters
    ----------
    p_sorted, q_sorted : numpy.ndarray, shape (V,)
        Target and draft probabilities in sweep order.
    counts : sequence of int
        The ``n`` values, each ``>= 1``.
    h : float, optional
        Trapezoid step in log time (default
        :func:`~otbound.drafts._sequential_mass.log_time_step` of ``counts``).
    cuts, refinable, columns, stop : optional
        For a row in *bucket order* (:mod:`otbound.drafts._sequential_bucketed`): only some
        prefixes are prefixes of the ``p/q`` order and only some can hold the minimum.
        ``cuts`` (increasing prefix lengths from 0 to ``stop``) are the first level's segment
        ends, ``refinable`` (bool per segment) says which segments may be swept inside (their
        tokens sorted by ``p/q``), ``columns`` (int, ascending) are the prefix lengths the
        closed forms may take, and ``stop`` is the last prefix any integrated ``n`` needs.
        Default: every prefix, ``stop = V``, segments of equal length, all refinable.
    largest : numpy.ndarray, optional
        The ``max(counts)`` (or more) largest masses of the row, descending, where the caller
        has them.

    Returns
    -------
    gap : numpy.ndarray, shape (len(counts),)
        ``min(0, min_i [p(H_i) − Q_n(H_i)])``.
    index : numpy.ndarray of int64, shape (len(counts),)
        The prefix length ``i`` attaining it (0 when ``gap = 0``).
    """
    p = np.ascontiguousarray(p_sorted, dtype=np.float64)
    q = np.ascontiguousarray(q_sorted, dtype=np.float64)
    size = q.shape[0]
    h = log_time_step(counts) if h is None else h
    distinct, left_times, beta, inverse = row_constants(counts, h)
    columns = np.arange(size + 1) if columns is None else np.asarray(columns, dtype=np.int64)
    if cuts is None:
        first, may_refine = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
    else:
        first = np.ascontiguousarray(cuts, dtype=np.int64)
        may_refine = np.ones(first.size - 1, dtype=np.bool_) if refinable is None else refinable
    status, gap, index, remaining, left, ends, slots, needed = prefix_minimum_kernel(
        p, q, distinct, np.ascontiguousarray(columns), first,
        np.ascontiguousarray(may_refine, dtype=np.bool_), size if stop is None else int(stop),
        np.empty(0) if largest is None else np.ascontiguousarray(largest, dtype=np.float64),
        left_times, h, beta, inverse, *row_buffers(size), numba.get_num_threads(), SERIAL_WORK,
    )  # fmt: skip
    remember_needed(needed)
    if status != ROW_DONE:
        _raise_numpy_checks(status, p, q, distinct, columns, stop, remaining, left, ends, slots)
    at = np.searchsorted(distinct, np.asarray(list(counts), dtype=np.int64))
    return gap[at], index[at]


def _raise_numpy_checks(
    status: int,
    p: np.ndarray,
    q: np.ndarray,
    distinct: np.ndarray,
    columns: np.ndarray,
    stop: int | None,
    remaining: np.ndarray,
    left: np.ndarray,
    ends: np.ndarray,
    slots: np.ndarray,
) -> None:
    """The numpy lines whose checks :func:`prefix_minimum_kernel` reported failing (a
    ``Q(H)`` out of ``[0, 1]`` beyond rounding, a NaN in ``p(H) − Q(H)``): they raise."""
    cum_p, suffix, positives = prefix_sums(p, q)

    def settle(n: int, at: np.ndarray, mass: np.ndarray) -> None:
        clip_rounding(mass, 0.0, 1.0, "without_replacement Q(H) (exponential clocks)")
        if np.isnan(cum_p[at] - mass).any():
            raise ValueError(f"NaN in p(H) − Q(H) of without_replacement, n={n}")

    for k, c in enumerate(slots.tolist()):
        n = int(distinct[c])
        if status == ROW_LEVEL_CHECK:
            enough = positives[ends] >= n
            mass = 1.0 - (remaining[k] + left)
            settle(n, ends, np.where(enough & (suffix[ends] > 0), mass, np.where(enough, 1.0, 0.0)))
        elif status == ROW_CLOSED_CHECK:
            with np.errstate(over="ignore", invalid="ignore"):
                mass = _closed_form_mass(q, suffix, n)
            mass = np.where(positives >= n, np.where(suffix > 0, mass, 1.0), 0.0)
            settle(n, columns, mass[columns])
        else:
            at = columns[columns <= (q.size if stop is None else stop)]
            settle(n, at, np.where(positives[at] >= n, 1.0, 0.0))
    raise AssertionError("prefix_minimum_kernel reported a value that numpy's checks passed")
