r"""The bookkeeping of one level of the without-replacement block sweep, compiled.

:func:`otbound.drafts._sequential_sweep.sequential_prefix_minimum` sweeps the tokens in levels
of segments. Around its two kernels (the power sums and the count distributions) each level
lays out its tokens, turns the trapezoid sums at the segment ends into ``Q(H)``, settles the
minimum of ``p(H) − Q(H)``, bounds ``p(H) − Q(H)`` inside each segment and cuts the
candidates into the next level's segments. As numpy expressions that was some forty calls a
level; here it is two. Every value is the numpy expressions' bit for bit (the same operations
in the same order; the one power of the candidate test aside, :func:`power`); where numpy's
checks would raise (a mass outside ``[0, 1]`` beyond
rounding, a NaN) :func:`settle_level` reports it and the caller runs the numpy lines, which
raise as before.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from otbound._checks import ROUNDING_TOLERANCE

__all__ = ["LEVEL_CHECK", "LEVEL_SETTLED", "level_layout", "power", "settle_level"]

#: :func:`settle_level` settled the level.
LEVEL_SETTLED = 0
#: A mass left ``[0, 1]`` by more than rounding, or a NaN: the caller's numpy path raises.
LEVEL_CHECK = 1


@numba.njit(cache=True)
def level_layout(q, suffix, starts, ends, scale, fold_min, tokens=True):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The level's tokens, segment after segment (``tokens=False``: ``vals`` and ``lam_after``
    left empty, for a caller that takes them as views: segments that follow each other,
    ``scale`` 1).

    Returns
    -------
    edges : int64 (segments + 1,)
        Where each segment starts among the level's tokens.
    vals, lam_after : float64 (tokens,)
        ``q`` of each token and ``λ`` of the prefix it ends (``suffix[i + 1]``), times ``scale``.
    rows : int64 (segments,)
        Each segment of more than ``fold_min`` tokens: its place among those (its block of
        power sums); 0 for a shorter one.
    total : int
        The segments of more than ``fold_min`` tokens.
    longest : int
        The longest segment's length.
    """
    segments = starts.shape[0]
    edges = np.zeros(segments + 1, dtype=np.int64)
    longest = 0
    for s in range(segments):
        length = ends[s] - starts[s]
        edges[s + 1] = edges[s] + length
        longest = max(longest, length)
    laid = edges[segments] if tokens else 0
    vals = np.empty(laid)
    lam_after = np.empty(laid)
    rows = np.zeros(segments, dtype=np.int64)
    total = 0
    for s in range(segments):
        for k in range(ends[s] - starts[s] if tokens else 0):
            i = starts[s] + k
            vals[edges[s] + k] = q[i] * scale
            lam_after[edges[s] + k] = suffix[i + 1] * scale
        if ends[s] - starts[s] > fold_min:
            rows[s] = total
            total += 1
    return edges, vals, lam_after, rows, total, longest


@numba.njit(inline="always")
def power(x, e):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``x ** e`` for an integer ``e ≥ 0``: numpy's special cases (``e ≤ 2``), else the C
    library's ``pow``, which can differ from numpy's vectorised one by an ulp. It only enters
    candidate tests, bounds that then move by a relative 1e-16, far inside their slack
    (``CANDIDATE_SLACK``, 1e-13, here; ``MARGIN``, 1e-9, in the bucket test of
    :mod:`otbound.drafts._sequential_bucketed`)."""
    if e == 0:
        return 1.0
    if e == 1:
        return x
    if e == 2:
        return x * x
    return math.pow(x, float(e))


@numba.njit(cache=True, error_model="numpy")
def _inside_lower(start, end, cum_p, suffix, known, slope):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``min_{s < i < e} [p(H_i) − \bar Q_i]``: a lower bound on ``p(H_i) − Q(H_i)`` at the
    prefixes inside the segment ``[s, e)``, with each prefix's own ``p(H_i)`` and
    ``\bar Q_i = min(Q(H_e), Q(H_s) + K_e m_i, Q(H_s) + (Q(H_e) − Q(H_s)) m_i / M)``, where
    ``m_i = q(H_i) − q(H_s)`` and ``M = q(H_e) − q(H_s)``.

    * ``Q`` grows with ``H``, by at most ``K_e`` per unit of mass added.
    * ``Q`` is convex in the mass along any order of the tokens (the chord): adding a token
      ``x`` to ``H`` raises ``Q`` by ``q_x S_x(H)``, and ``S_x(H) ≤ D(H ∪ x) ≤ S_y(H ∪ x)``
      for the next token ``y``, ``D`` the rate of a token of vanishing mass. With exponential
      clocks, ``a, b`` the ``(n−1)``-th and ``n``-th clock of ``H`` and ``λ = 1 − q(H)``:
      ``S_x(H) = E[e^{−(λ−q_x) a} (1 − e^{−q_x a}) / q_x + ∫_a^b e^{−λ s} ds]`` and
      ``D(H) = E[a e^{−λ a} + ∫_a^b e^{−λ s} ds]``, so ``S_y(H) ≥ D(H)`` because
      ``(e^{q_y a} − 1) / q_y ≥ a``, and ``D(H ∪ x) ≥ S_x(H)`` because the clocks of
      ``H ∪ x`` give ``D(H ∪ x) ≥ E[a e^{−(λ−q_x) a} + ∫_a^b e^{−λ s} ds]`` and
      ``(1 − e^{−q_x a}) / q_x ≤ a`` (``docs/mathematics.md``, "The chord of Q").

    ``m_i`` is the difference of the suffix sums rounded up and ``M`` rounded down: each of
    the ``i − s`` additions that built ``suffix[s]`` from ``suffix[i]`` rounds by at most half
    an ulp of ``suffix[s]``, and the subtraction by a relative half-ulp (tokens below the
    sum's last place would otherwise add no mass at all). The bound's own arithmetic rounds
    to nearest (the chord comes out above the exact one by at most 3.5e-17), far
    inside the caller's ``CANDIDATE_SLACK``. ``−inf`` (keep the segment) where a term is NaN
    (``K_e = inf`` times no mass).
    """
    lowest = np.inf
    top = known[end]
    low = known[start]
    rise = max(top - low, 0.0)
    base = suffix[start]
    span = (base - suffix[end]) * (1.0 - 2.0**-51) - (end - start) * 2.0**-53 * base
    for i in range(start + 1, end):
        added = (base - suffix[i]) * (1.0 + 2.0**-51) + (i - start) * 2.0**-53 * base
        cap = low + slope * added
        if cap > top:
            cap = top
        if span > 0.0 and added < span:
            chord = low + rise * (added / span)
            if chord < cap:
                cap = chord
        value = cum_p[i] - cap
        if value != value:
            return -np.inf
        if value < lowest:
            lowest = value
    return lowest


@numba.njit(cache=True, error_model="numpy")  # as in numpy: x / 0 is inf, 0 / 0 NaN
def settle_level(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    starts,
    ends,
    remaining,
    left,
    positives,
    cum_p,
    suffix,
    p,
    q,
    integrated,
    slots,
    growth,
    gap,
    index,
    known,
    may_refine,
    refine,
    slack,
):
    r"""Settle one level's segment ends and choose the next level's segments.

    For each integrated ``n`` (``integrated[k]``, at ``slots[k]`` of ``gap``, ``index``):
    ``Q(H_e) = 1 − (remaining[k] + left)`` where the prefix ``H_e`` has ``n`` positive masses
    and something outside it (else 1 or 0), clipped into ``[0, 1]`` where out by rounding,
    kept in ``known[k, e]``; the least ``p(H_e) − Q(H_e)`` below ``gap`` replaces it (the
    first end attaining it). Then, unless ``refine`` is 0, a segment ``[s, e)`` is a
    candidate where it holds more than one token, ``may_refine`` allows it and for some ``n``

    .. math::

        p(H_s) − Q(H_e) + \min\Bigl(\frac{r_s}{K q(H_e)^{n−1}}, 1\Bigr)
        \max(Q(H_e) − Q(H_s), 0) < \mathrm{gap}_n + \mathrm{slack}

    (``r_s`` the ratio ``p/q`` of token ``s``, ``K = growth[k]``, ``q(H_e)`` rounded up) and,
    with each inside prefix's own ``p(H_i)`` (:func:`_inside_lower`),
    ``min_{s<i<e} [p(H_i) − min(Q(H_e), Q(H_s) + K q(H_e)^{n−1} m_i, Q(H_s) + (Q(H_e) −
    Q(H_s)) m_i / M)]`` is too (``m_i = q(H_i) − q(H_s)``, ``M = q(H_e) − q(H_s)``; the last
    term is the chord of ``Q``, convex in the mass along the sweep; a NaN in either test keeps
    the segment); each candidate is cut into ``refine`` pieces of ``⌈length / refine⌉``
    tokens.

    Returns
    -------
    status : int
        :data:`LEVEL_SETTLED`, or :data:`LEVEL_CHECK` (nothing is chosen).
    chosen : int64
        The candidate segments.
    new_starts, new_ends : int64
        The next level's segments.
    groups : int64
        Candidate ``j``'s pieces are ``groups[j]:groups[j + 1]``.
    """
    segments = ends.shape[0]
    many = integrated.shape[0]
    empty = np.zeros(0, dtype=np.int64)
    for k in range(many):
        n = integrated[k]
        best = 0.0
        where = -1
        for s in range(segments):
            e = ends[s]
            if positives[e] >= n:
                mass = 1.0 - (remaining[k, s] + left[s]) if suffix[e] > 0.0 else 1.0
            else:
                mass = 0.0
            if mass != mass or max(0.0 - mass, mass - 1.0) > ROUNDING_TOLERANCE:
                return LEVEL_CHECK, empty, empty, empty, np.zeros(1, dtype=np.int64)
            mass = min(max(mass, 0.0), 1.0)
            value = cum_p[e] - mass
            if value != value:
                return LEVEL_CHECK, empty, empty, empty, np.zeros(1, dtype=np.int64)
            if where < 0 or value < best:
                best, where = value, s
            known[k, e] = mass
        if where >= 0 and best < gap[slots[k]]:
            gap[slots[k]] = best
            index[slots[k]] = ends[where]
    chosen = np.empty(segments if refine > 0 else 0, dtype=np.int64)
    count = 0
    for s in range(chosen.shape[0]):
        start, end = starts[s], ends[s]
        if end - start <= 1 or not may_refine[s]:
            continue
        reach = min(1.0 - suffix[end] / suffix[0] + 1e-12, 1.0)  # ≥ q(H_e), rounded up
        ratio = p[start] / q[start] if q[start] > 0.0 else np.inf
        for k in range(many):
            rise = max(known[k, end] - known[k, start], 0.0)
            slope = growth[k] * power(reach, integrated[k] - 1)
            share = ratio / slope
            if share > 1.0:
                share = 1.0  # np.minimum: a NaN stays NaN
            lower = cum_p[start] - known[k, end] + share * rise
            if lower >= gap[slots[k]] + slack:  # a NaN keeps the segment
                continue
            if _inside_lower(start, end, cum_p, suffix, known[k], slope) < gap[slots[k]] + slack:
                chosen[count] = s
                count += 1
                break
    chosen = chosen[:count]
    groups = np.zeros(count + 1, dtype=np.int64)
    for j in range(count):
        length = ends[chosen[j]] - starts[chosen[j]]
        step = -(-length // refine)
        groups[j + 1] = groups[j] + -(-length // step)
    new_starts = np.empty(groups[count], dtype=np.int64)
    new_ends = np.empty(groups[count], dtype=np.int64)
    for j in range(count):
        start, end = starts[chosen[j]], ends[chosen[j]]
        step = -(-(end - start) // refine)
        for piece in range(groups[j + 1] - groups[j]):
            at = start + piece * step
            new_starts[groups[j] + piece] = at
            new_ends[groups[j] + piece] = min(at + step, end)
    return LEVEL_SETTLED, chosen, new_starts, new_ends, groups
