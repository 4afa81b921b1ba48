r"""The compiled loops of the level rule: slot values, the convex minorant, the swaps, a selection.

Each loop is the formula of :mod:`otbound.selection` written once, in the order of the slots
(the tokens in decreasing ``p / q``, position 0 at the top of the level line); the tests check
them against brute-force enumeration of the output law, HiGHS and POT.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "convex_minorant_blocks",
    "forward_swaps",
    "level_pieces",
    "rule_acceptance",
    "select_levels",
    "slot_values",
]


@numba.njit(cache=True)
def slot_values(q_sorted, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The slots ``[a_k, b_k]`` of the level line and their values ``v_k``.

    ``a_k = Σ_{j>k} q_j`` (the mass below slot ``k``), ``b_k = a_k + q_k``, and
    ``v_k = (b_k^n − a_k^n) / q_k = Σ_{i<n} b_k^{n−1−i} a_k^i``, summed by Horner's rule
    in ``b_k`` without cancellation: the mean of ``n s^{n−1}`` over the slot, the chance
    per unit of ``q`` that a draft whose level lies in the slot beats ``n − 1`` i.i.d. others.

    Returns
    -------
    (a, v) : two float64 arrays of shape (m,)
    """
    m = q_sorted.shape[0]
    a = np.empty(m)
    v = np.empty(m)
    below = 0.0
    for k in range(m - 1, -1, -1):
        top = below + q_sorted[k]
        total = 0.0
        power = 1.0
        for _ in range(n):  # ((1·b + a)·b + a²)·b + … = Σ_i b^{n−1−i} a^i
            total = total * top + power
            power *= below
        a[k] = below
        v[k] = total
        below = top
    return a, v


@numba.njit(cache=True)
def convex_minorant_blocks(gain, mass):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Blocks of the greatest convex minorant of the points ``(Σ_{j<i} gain_j, Σ_{j<i} mass_j)``.

    Pool-adjacent-violators on the increments: consecutive slots merge while the slope
    ``Σ mass / Σ gain`` of a block is not below the one before it, so the blocks' slopes
    increase strictly. A block with no ``gain`` (``p = 0`` on all its tokens) has slope
    ``+∞``.

    Returns
    -------
    numpy.ndarray of int64, shape (blocks + 1,)
        The blocks' first positions, then ``m``.
    """
    m = gain.shape[0]
    starts = np.empty(m + 1, dtype=np.int64)
    block_gain = np.empty(m)
    block_mass = np.empty(m)
    top = -1
    for k in range(m):
        top += 1
        starts[top] = k
        block_gain[top] = gain[k]
        block_mass[top] = mass[k]
        while top > 0 and _not_below(
            block_mass[top - 1], block_gain[top - 1], block_mass[top], block_gain[top]
        ):
            block_gain[top - 1] += block_gain[top]
            block_mass[top - 1] += block_mass[top]
            top -= 1
    starts[top + 1] = m
    return starts[: top + 2].copy()


@numba.njit(cache=True)
def _not_below(mass_a, gain_a, mass_b, gain_b):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Whether slope ``mass_a / gain_a`` ≥ slope ``mass_b / gain_b`` (``gain = 0``: ``+∞``)."""
    if gain_b <= 0.0:
        return gain_a <= 0.0
    if gain_a <= 0.0:
        return True
    return mass_a / gain_a >= mass_b / gain_b


@numba.njit(cache=True)
def forward_swaps(values, mass, gain, starts):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The swaps that move each block from the vertex masses to ``c · gain``.

    In a block of slope ``c``, a slot with ``mass_k > c · gain_k`` has a surplus and one with
    ``mass_k < c · gain_k`` a deficit; the prefix sums of ``mass − c · gain`` over a block
    are ``≥ 0`` (the minorant lies below the curve), so each deficit can be served by the
    surpluses above it, first come first served. A swap of measure ``μ`` between a surplus
    slot ``i`` and a deficit slot ``k > i`` moves ``μ (v_i − v_k)`` of selection mass from
    ``i`` to ``k``.

    Returns
    -------
    (giver, taker, measure) : arrays of shape (swaps,)
    """
    m = values.shape[0]
    giver = np.empty(2 * m, dtype=np.int64)
    taker = np.empty(2 * m, dtype=np.int64)
    measure = np.empty(2 * m)
    count = 0
    for b in range(starts.shape[0] - 1):
        lo, hi = starts[b], starts[b + 1]
        total_gain = 0.0
        total_mass = 0.0
        for k in range(lo, hi):
            total_gain += gain[k]
            total_mass += mass[k]
        if total_gain <= 0.0:
            continue  # p = 0 on the whole block: its slots keep their vertex masses
        slope = total_mass / total_gain
        source, spare, ahead = -1, 0.0, lo
        for k in range(lo, hi):
            need = slope * gain[k] - mass[k]
            while need > 0.0:
                if spare <= 0.0:  # the next slot above k with a surplus
                    if ahead >= k:
                        break  # rounding: nothing is left above k
                    source, spare = ahead, mass[ahead] - slope * gain[ahead]
                    ahead += 1
                    continue
                step = min(spare, need)  # one of the two becomes exactly 0 below
                gap = values[source] - values[k]
                if gap > 0.0:
                    if count == giver.shape[0]:  # cannot happen: each swap ends a slot's part
                        raise ValueError("level rule: more swaps than two per slot")
                    giver[count] = source
                    taker[count] = k
                    measure[count] = step / gap
                    count += 1
                spare -= step
                need -= step
    return giver[:count].copy(), taker[:count].copy(), measure[:count].copy()


@numba.njit(cache=True)
def level_pieces(q_sorted, values, giver, taker, measure):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Each slot owner's level law as pieces (CSR) and its exact selection mass.

    Owner ``k`` keeps ``q_k − Σ μ`` of its own slot and holds each partner's slot with the
    swapped measure ``μ``; its selection mass is ``Σ_pieces measure × v_slot``.

    Returns
    -------
    (start, slot, cumulative, selected)
        ``start`` (m + 1,), the pieces of owner ``k`` at ``start[k]:start[k + 1]``: ``slot``
        the slot position of each piece, ``cumulative`` its cumulative share of the owner's
        measure (ending at 1); ``selected`` (m,) the masses ``r``.
    """
    m = q_sorted.shape[0]
    count = np.ones(m, dtype=np.int64)
    kept = q_sorted.copy()
    for s in range(giver.shape[0]):
        count[giver[s]] += 1
        count[taker[s]] += 1
        kept[giver[s]] -= measure[s]
        kept[taker[s]] -= measure[s]
    start = np.zeros(m + 1, dtype=np.int64)
    for k in range(m):
        start[k + 1] = start[k] + count[k]
    slot = np.empty(start[m], dtype=np.int64)
    piece = np.empty(start[m])
    fill = start[:m].copy()
    for k in range(m):
        slot[fill[k]] = k
        piece[fill[k]] = max(kept[k], 0.0)
        fill[k] += 1
    for s in range(giver.shape[0]):
        i, k = giver[s], taker[s]
        slot[fill[i]] = k
        piece[fill[i]] = measure[s]
        fill[i] += 1
        slot[fill[k]] = i
        piece[fill[k]] = measure[s]
        fill[k] += 1
    selected = np.zeros(m)
    cumulative = np.empty(start[m])
    for k in range(m):
        held = 0.0
        for j in range(start[k], start[k + 1]):
            held += piece[j]
            selected[k] += piece[j] * values[slot[j]]
        running = 0.0
        for j in range(start[k], start[k + 1]):
            running += piece[j]
            cumulative[j] = running / held if held > 0.0 else 1.0
        cumulative[start[k + 1] - 1] = 1.0
    return start, slot, cumulative, selected


@numba.njit(cache=True)
def select_levels(positions, start, slot, cumulative, piece_u, level_u):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The selected draft of each trial: the highest level wins.

    Draft ``j`` of trial ``t`` (slot owner ``positions[t, j]``) takes the piece where
    ``piece_u[t, j]`` falls in its owner's cumulative shares and a uniform place
    ``level_u[t, j]`` inside that piece's slot. Levels compare as (slot position, place):
    a lower position is a higher slot; inside one slot the larger place wins. Comparing
    the pair instead of ``a + u q`` keeps slots too thin for a float apart.

    Returns
    -------
    numpy.ndarray of int64, shape (trials,)
        The index ``j`` of the selected draft of each trial.
    """
    trials, n = positions.shape
    out = np.empty(trials, dtype=np.int64)
    for t in range(trials):
        best_slot = np.int64(1) << np.int64(62)
        best_place = -1.0
        best = 0
        for j in range(n):
            k = positions[t, j]
            lo, hi = start[k], start[k + 1] - 1
            while lo < hi:  # the first piece whose cumulative share exceeds piece_u
                mid = (lo + hi) // 2
                if cumulative[mid] > piece_u[t, j]:
                    hi = mid
                else:
                    lo = mid + 1
            s = slot[lo]
            place = level_u[t, j]
            if s < best_slot or (s == best_slot and place > best_place):
                best_slot, best_place, best = s, place, j
        out[t] = best
    return out


@numba.njit(cache=True)
def rule_acceptance(q_sorted, p_sorted, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``Σ min(p, r)`` of the level rule from its slots: ``p(live) + min_k [f(B_k) − p(B_k)]``.

    The blocks of slope ``≤ 1`` of the convex minorant end where ``f(B_k) − p(B_k)`` is
    least, a point of the curve, so the rule's ``r = c_j p`` gives
    ``Σ_{c_j ≤ 1} Δf_j + Σ_{c_j > 1} Δp_j`` there (one pass, no swaps).
    """
    _, values = slot_values(q_sorted, n)
    curve = 0.0
    lowest = 0.0
    kept = 0.0
    for k in range(q_sorted.shape[0]):
        curve += q_sorted[k] * values[k] - p_sorted[k]
        kept += p_sorted[k]
        lowest = min(lowest, curve)
    return kept + lowest
