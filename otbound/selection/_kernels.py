r"""The compiled loops of the level rule: slot values, the minorant, the transfers, a selection.

Each loop is the formula of :mod:`otbound.selection` written once, in the order of the slots
(the tokens in decreasing ``p / q``, position 0 at the top of the level line); the tests check
them against brute-force enumeration of the output law, HiGHS and POT.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "convex_minorant_blocks",
    "level_tables",
    "own_pieces",
    "partner_pieces",
    "rule_acceptance",
    "select_levels",
    "slot_values",
    "transfer_ledger",
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
def transfer_ledger(mass, gain, starts):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Where each block's surpluses and deficits lie on one line of transfers.

    In a block of slope ``c`` slot ``k`` has the excess ``e_k = mass_k − c · gain_k``: a
    surplus where ``e_k > 0``, a deficit where ``e_k < 0`` (none in a block with no gain).
    Laid end to end in slot order, the surpluses cover ``[0, S)`` and the deficits ``[0, D)``
    of one line (``S = D``: the block's excesses sum to zero), and the prefix sums of ``e``
    are ``≥ 0`` (the minorant lies below the curve), so every deficit's interval is covered by
    the intervals of surpluses *above* it. A surplus slot ``i`` and a deficit slot ``k``
    exchange ``T_{ik}``, the length their intervals share: first come, first served.

    Returns
    -------
    (excess, rank, surplus_pos, surplus_end, surplus_first, deficit_pos, deficit_end,
    deficit_first)
        ``excess`` (m,); ``rank[k]`` the index of slot ``k`` in its list (``-1``: neither);
        ``surplus_pos`` the surplus slots in order, ``surplus_end`` where each one's interval
        ends, ``surplus_first`` (blocks + 1,) where each block's surpluses start in the list;
        likewise for the deficits.
    """
    m = mass.shape[0]
    blocks = starts.shape[0] - 1
    excess = np.zeros(m)
    rank = np.full(m, -1, dtype=np.int64)
    surplus_pos = np.empty(m, dtype=np.int64)
    surplus_end = np.empty(m)
    deficit_pos = np.empty(m, dtype=np.int64)
    deficit_end = np.empty(m)
    surplus_first = np.zeros(blocks + 1, dtype=np.int64)
    deficit_first = np.zeros(blocks + 1, dtype=np.int64)
    ns = nd = 0
    for b in range(blocks):
        lo, hi = starts[b], starts[b + 1]
        surplus_first[b], deficit_first[b] = ns, nd
        total_gain = 0.0
        total_mass = 0.0
        for k in range(lo, hi):
            total_gain += gain[k]
            total_mass += mass[k]
        if total_gain <= 0.0:
            continue  # p = 0 on the whole block: its slots keep their vertex masses
        slope = total_mass / total_gain
        ahead = 0.0
        behind = 0.0
        for k in range(lo, hi):
            e = mass[k] - slope * gain[k]
            excess[k] = e
            if e > 0.0:
                ahead += e
                rank[k], surplus_pos[ns], surplus_end[ns] = ns, k, ahead
                ns += 1
            elif e < 0.0:
                behind -= e
                rank[k], deficit_pos[nd], deficit_end[nd] = nd, k, behind
                nd += 1
    surplus_first[blocks], deficit_first[blocks] = ns, nd
    return (
        excess, rank, surplus_pos[:ns].copy(), surplus_end[:ns].copy(), surplus_first,
        deficit_pos[:nd].copy(), deficit_end[:nd].copy(), deficit_first,
    )  # fmt: skip


@numba.njit(cache=True)
def _block_of(first, index):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The block whose list range ``first[b]:first[b + 1]`` holds ``index``."""
    lo, hi = 0, first.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if first[mid] <= index:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def partner_pieces(k, values, ledger, out_slot, out_measure, write):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The pieces of other slots that slot ``k`` holds after its block's transfers.

    A transfer of ``T`` between a surplus slot ``i`` and a deficit slot ``j > i`` is a swap of
    measure ``μ = T / (v_i − v_j)``: ``i`` holds ``μ`` of ``j``'s slot and ``j`` holds ``μ``
    of ``i``'s, which moves ``T`` of selection mass from ``i`` to ``j``. Both ends compute
    ``T`` from the same two interval ends, so each swap is the same seen from either side.
    The partners are found by bisection: ``O(log m)`` plus one step per partner.

    Returns
    -------
    int
        The number of pieces (written to ``out_slot``, ``out_measure`` when ``write``).
    """
    excess, rank, s_pos, s_end, s_first, d_pos, d_end, d_first = ledger
    e = excess[k]
    if e == 0.0 or rank[k] < 0:
        return 0
    if e > 0.0:
        mine_end, other_pos, other_end, first = s_end, d_pos, d_end, d_first
        block = _block_of(s_first, rank[k])
    else:
        mine_end, other_pos, other_end, first = d_end, s_pos, s_end, s_first
        block = _block_of(d_first, rank[k])
    high = mine_end[rank[k]]
    low = high - abs(e)
    lo, hi = first[block], first[block + 1]
    while lo < hi:  # the first interval of the other kind that ends after `low`
        mid = (lo + hi) // 2
        if other_end[mid] > low:
            hi = mid
        else:
            lo = mid + 1
    count = 0
    for j in range(lo, first[block + 1]):
        size = abs(excess[other_pos[j]])
        begin = other_end[j] - size
        if begin >= high:
            break
        shared = min(high, other_end[j]) - max(low, begin)
        giver, taker = (k, other_pos[j]) if e > 0.0 else (other_pos[j], k)
        if shared > 0.0 and giver < taker and values[giver] > values[taker]:
            if write:
                out_slot[count] = other_pos[j]
                out_measure[count] = shared / (values[giver] - values[taker])
            count += 1
    return count


@numba.njit(cache=True)
def own_pieces(k, q_sorted, values, ledger, out_slot, out_measure):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Slot ``k``'s whole level law: the part of its own slot it keeps, then its partners'
    pieces (``out_*`` hold room for them). Returns ``(count, held, selected)``: the pieces,
    their measure (``q_k`` to rounding) and the selection mass ``r_k = q_k Σ measure · v /
    held`` (the ratio first: a product of two tiny masses underflows)."""
    count = 1 + partner_pieces(k, values, ledger, out_slot[1:], out_measure[1:], True)
    kept = q_sorted[k]
    for j in range(1, count):
        kept -= out_measure[j]
    out_slot[0], out_measure[0] = k, max(kept, 0.0)
    held = 0.0
    mass = 0.0
    for j in range(count):
        held += out_measure[j]
        mass += out_measure[j] * values[out_slot[j]]
    return count, held, mass * (q_sorted[k] / held) if held > 0.0 else 0.0


@numba.njit(cache=True)
def level_tables(q_sorted, values, ledger):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Every slot owner's level law as pieces (CSR), and every selection mass.

    Returns
    -------
    (start, slot, cumulative, selected)
        ``start`` (m + 1,): owner ``k``'s pieces are ``start[k]:start[k + 1]``, its own slot
        first; ``slot`` each piece's slot position, ``cumulative`` its cumulative share of the
        owner's measure (ending at 1); ``selected`` (m,) the masses ``r``.
    """
    m = q_sorted.shape[0]
    start = np.zeros(m + 1, dtype=np.int64)
    for k in range(m):
        start[k + 1] = start[k] + 1 + partner_pieces(k, values, ledger, start, values, False)
    slot = np.empty(start[m], dtype=np.int64)
    cumulative = np.empty(start[m])
    selected = np.empty(m)
    for k in range(m):
        lo, hi = start[k], start[k + 1]
        _, held, selected[k] = own_pieces(
            k, q_sorted, values, ledger, slot[lo:hi], cumulative[lo:hi]
        )
        running = 0.0
        for j in range(lo, hi):
            running += cumulative[j]
            cumulative[j] = running / held if held > 0.0 else 1.0
        cumulative[hi - 1] = 1.0
    return start, slot, cumulative, selected


@numba.njit(cache=True)
def select_levels(positions, q_sorted, values, ledger, piece_u, level_u):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The selected draft of each trial: the highest level wins.

    Draft ``j`` of trial ``t`` (slot owner ``positions[t, j]``) takes the piece of its level
    law where ``piece_u[t, j]`` falls in the pieces' measure, and a uniform place
    ``level_u[t, j]`` inside that piece's slot. Levels compare as (slot position, place): a
    lower position is a higher slot; inside one slot the larger place wins. Comparing the
    pair instead of ``a + u q`` keeps slots too thin for a float apart.

    Returns
    -------
    (index, selected)
        ``index`` (trials,) the selected draft of each trial; ``selected`` its token's
        selection mass ``r``.
    """
    trials, n = positions.shape
    index = np.empty(trials, dtype=np.int64)
    selected = np.empty(trials)
    room = 1
    for t in range(trials):  # the most pieces a drafted slot can hold
        for j in range(n):
            extra = partner_pieces(positions[t, j], values, ledger, index, values, False)
            room = max(room, 1 + extra)
    slots = np.empty(room, dtype=np.int64)
    measures = np.empty(room)
    for t in range(trials):
        best_slot = np.int64(1) << np.int64(62)
        best_place = -1.0
        for j in range(n):
            k = positions[t, j]
            count, held, mass = own_pieces(k, q_sorted, values, ledger, slots, measures)
            target = piece_u[t, j] * held
            piece = 0
            while piece < count - 1 and target >= measures[piece]:
                target -= measures[piece]
                piece += 1
            s, place = slots[piece], level_u[t, j]
            if s < best_slot or (s == best_slot and place > best_place):
                best_slot, best_place = s, place
                index[t], selected[t] = j, mass
    return index, selected


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
