r"""The compiled loops of the round rule: the rounds' selection values and the fit.

Positions run over the tokens with ``q > 0`` in decreasing ``p / q`` (position 0 at the top),
``starts`` are the blocks' first positions then ``m``, and ``cumulative[k, y]`` is
``q_y (s_1 + … + s_k)(y)`` (``s_k(y)`` the share of round ``k``; row 0 zero, row ``K`` equal to
``q_y``). Selecting among the drafts gives each member ``y`` a weight ``u_y`` in the generating
polynomial of the others: ``q_y`` for tokens in lower blocks (always beaten),
``cumulative[k, y]`` for tokens below ``z`` in ``z``'s block (beaten in rounds ``≤ k``),
``cumulative[k − 1, y]`` above it (beaten in rounds ``< k``), 0 in higher blocks. The formulas
are in :mod:`otbound.selection.rounds`; the tests check them against enumeration.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "cp_round_values",
    "elementary_symmetric",
    "fit_positions",
    "wor_round_values",
]

# -- the rounds' values ---------------------------------------------------------------------


@numba.njit(cache=True)
def elementary_symmetric(x, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``e_n(x)`` by the recursion ``e_d ← e_d + x_i e_{d−1}`` (non-negative terms)."""
    e = np.zeros(n + 1)
    e[0] = 1.0
    for value in x:
        for d in range(n, 0, -1):
            e[d] += value * e[d - 1]
    return e[n]


@numba.njit(cache=True)
def _times_linear(poly, c):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``poly ← poly · (1 + c X)`` truncated at its length, in place."""
    for d in range(poly.shape[0] - 1, 0, -1):
        poly[d] += c * poly[d - 1]


@numba.njit(cache=True)
def _copy_row(src, dst):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``dst[:] = src`` as a loop (no temporary)."""
    for d in range(src.shape[0]):
        dst[d] = src[d]


@numba.njit(cache=True)
def _block_fields(q, cumulative, base, n, prefix, phi):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``phi[k, z] = e_{n−1}(u^{(z, k+1)}_{−z})`` for the tokens of one block (listed top-down).

    ``Π_y (1 + u_y X)`` over the other tokens is ``base`` (the blocks below, ``u = q``) times
    the prefix of the block above ``z`` (``u = cumulative[k − 1]``) and its suffix below ``z``
    (``u = cumulative[k]``); the prefix products are kept in ``prefix`` (size + 1, n), the
    suffix is built running upwards, so a round costs ``O(n · size)``.
    """
    rounds, size = cumulative.shape[0] - 1, q.shape[0]
    below = np.zeros(n)
    for k in range(1, rounds + 1):
        prefix[0, :] = 0.0
        prefix[0, 0] = 1.0
        for z in range(size):
            _copy_row(prefix[z], prefix[z + 1])
            _times_linear(prefix[z + 1], cumulative[k - 1, z])
        below[:] = base
        for z in range(size - 1, -1, -1):
            total = 0.0
            for i in range(n):
                total += prefix[z, i] * below[n - 1 - i]
            phi[k - 1, z] = total
            _times_linear(below, cumulative[k, z])


@numba.njit(cache=True)
def cp_round_values(q_sorted, cumulative, starts, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``φ[k, z] = e_{n−1}(u^{(z, k+1)}_{−z})``: the conditional-Poisson field of round ``k + 1``,
    block by block from the lowest (:func:`_block_fields`, ``base`` the blocks below)."""
    rounds = cumulative.shape[0] - 1
    m = q_sorted.shape[0]
    phi = np.zeros((rounds, m))
    base = np.zeros(n)
    base[0] = 1.0
    prefix = np.zeros((m + 1, n))
    for b in range(starts.shape[0] - 2, -1, -1):
        lo, hi = starts[b], starts[b + 1]
        _block_fields(q_sorted[lo:hi], cumulative[:, lo:hi], base, n, prefix, phi[:, lo:hi])
        for z in range(lo, hi):
            _times_linear(base, q_sorted[z])
    return phi


@numba.njit(cache=True)
def _times_clock(a, b, stay, rate, fire):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``(a + ε b) ← (a + ε b) · (stay (1 + ε rate) + fire X)`` with ``ε² = 0``, in place."""
    for d in range(a.shape[0] - 1, 0, -1):
        b[d] = stay * (b[d] + rate * a[d]) + fire * b[d - 1]
        a[d] = stay * a[d] + fire * a[d - 1]
    b[0] = stay * (b[0] + rate * a[0])
    a[0] = stay * a[0]


@numba.njit(cache=True)
def _clock_state(q_sorted, t, stay, fired):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``stay = e^{−q t}`` and ``fired = 1 − stay`` (``−expm1`` where ``q t < 1/2``), one exp."""
    for y in range(q_sorted.shape[0]):
        x = q_sorted[y] * t
        stay[y] = np.exp(-x)
        fired[y] = -np.expm1(-x) if x < 0.5 else 1.0 - stay[y]


@numba.njit(cache=True)
def _wor_node(q_sorted, share_sums, starts, n, t, weight, out, work):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""Add one node ``t`` of the clock integral to ``out[k, z]`` (see :func:`wor_round_values`).

    ``share_sums[k, y] = (s_1 + … + s_k)(y)``; ``work`` holds the room for a block's prefix
    products (``pre_a``, ``pre_b``: (m + 1, n)) and the clocks' states (``stay``, ``fired``).
    """
    pre_a, pre_b, stay, fired = work
    rounds = share_sums.shape[0] - 1
    _clock_state(q_sorted, t, stay, fired)
    blocks = starts.shape[0] - 1
    high_a, high_b = np.ones(blocks + 1), np.zeros(blocks + 1)  # blocks above: never fired
    for j in range(blocks):
        a_, b_ = high_a[j], high_b[j]
        for y in range(starts[j], starts[j + 1]):
            b_ = stay[y] * (b_ + q_sorted[y] * a_)
            a_ = stay[y] * a_
        high_a[j + 1], high_b[j + 1] = a_, b_
    low_a, low_b = np.zeros(n), np.zeros(n)  # blocks below: fired counts as beaten
    low_a[0] = 1.0
    run_a, run_b = np.zeros(n), np.zeros(n)
    for j in range(blocks - 1, -1, -1):
        lo, hi = starts[j], starts[j + 1]
        for k in range(1, rounds + 1):
            pre_a[lo, :], pre_b[lo, :] = 0.0, 0.0
            pre_a[lo, 0], pre_b[lo, 0] = high_a[j], high_b[j]
            for y in range(lo, hi):
                _copy_row(pre_a[y], pre_a[y + 1])
                _copy_row(pre_b[y], pre_b[y + 1])
                beaten = fired[y] * share_sums[k - 1, y]
                _times_clock(pre_a[y + 1], pre_b[y + 1], stay[y], q_sorted[y], beaten)
            _copy_row(low_a, run_a)
            _copy_row(low_b, run_b)
            for z in range(hi - 1, lo - 1, -1):
                total = 0.0
                for i in range(n):
                    total += pre_a[z, i] * run_b[n - 1 - i] + pre_b[z, i] * run_a[n - 1 - i]
                out[k - 1, z] += weight * fired[z] * total
                beaten = fired[z] * share_sums[k, z]
                _times_clock(run_a, run_b, stay[z], q_sorted[z], beaten)
        for y in range(lo, hi):
            _times_clock(low_a, low_b, stay[y], q_sorted[y], fired[y])


@numba.njit(cache=True, parallel=True)
def wor_round_values(q_sorted, share_sums, starts, n, nodes, weights, threads):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The without-replacement value of each round per unit share, by the clock integral.

    ``V[k, z] = Σ_t w_t π_z(t) [ε X^{n−1}] Π_{y≠z} ((1 − π_y)(1 + ε q_y) + π_y G_y X)``,
    ``π_y(t) = 1 − e^{−q_y t}``, ``G_y`` the chance that ``y`` is beaten by ``z`` in round
    ``k + 1`` (``u_y / q_y`` of the module docstring); ``ε² = 0`` carries the rate
    ``Σ_{y ∉ S} q_y`` of the clock that fires next; ``G_y`` is read from ``share_sums[k, y] =
    (s_1 + … + s_k)(y)`` (:func:`~otbound.selection.rounds.share_sums`). The nodes are dealt to
    ``threads`` parts, each summing into its own row (the sum does not depend on the threads
    numba runs).
    """
    rounds = share_sums.shape[0] - 1
    m = q_sorted.shape[0]
    chunks = max(1, min(threads, nodes.shape[0]))
    parts = np.zeros((chunks, rounds, m))
    for c in numba.prange(chunks):
        work = (np.zeros((m + 1, n)), np.zeros((m + 1, n)), np.empty(m), np.empty(m))
        for i in range(c, nodes.shape[0], chunks):
            _wor_node(q_sorted, share_sums, starts, n, nodes[i], weights[i], parts[c], work)
    out = np.zeros((rounds, m))
    for c in range(chunks):
        out += parts[c]
    return out


@numba.njit(cache=True)
def _split(position, rounds):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The two rounds of ``position ∈ [0, K − 1]`` (counted from 0): the lower one, ``⌊position⌋``
    kept below ``K − 1``, and the share ``f = position − low`` of the one above it."""
    low = min(max(int(np.floor(position)), 0), rounds - 2)
    return low, position - low


@numba.njit(cache=True)
def _cumulate(q, position, rounds, out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``out[k] = q (s_1 + … + s_k)`` for the two-round split at ``position ∈ [0, K − 1]``:
    share ``1 − f`` in round ``⌊position⌋ + 1`` and ``f`` in the next (:func:`_split`)."""
    low, frac = _split(position, rounds)
    out[0] = 0.0
    for k in range(rounds):
        share = 0.0
        if k == low:
            share = 1.0 - frac
        elif k == low + 1:
            share = frac
        out[k + 1] = out[k] + share * q
    out[rounds] = q


@numba.njit(cache=True)
def _position_for(values, target, rounds):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The position whose value hits ``target``: between the highest pair of adjacent rounds
    that brackets it (the values increase with the round), clipped at the ends."""
    if target >= values[rounds - 1]:
        return float(rounds - 1)
    for k in range(rounds - 2, -1, -1):
        if values[k] <= target:
            step = values[k + 1] - values[k]
            return float(k + 1) if step <= 0.0 else k + (target - values[k]) / step
    return 0.0


@numba.njit(cache=True)
def _relax(q, position, values, target, rounds, omega, cum):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Move ``position`` by ``omega`` times the step to :func:`_position_for`; refresh ``cum``."""
    aim = _position_for(values, target, rounds)
    new = min(max(position + omega * (aim - position), 0.0), rounds - 1.0)
    _cumulate(q, new, rounds, cum)
    return new


@numba.njit(cache=True)
def _sweep_down(q, target, below, position, scale, cum, omega):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """One top-down pass over a block (listed bottom-up): the factors below a token from the
    state before the pass, the factors above it updated as each token moves."""
    rounds, size, n = cum.shape[0] - 1, q.shape[0], below.shape[0]
    lower = np.zeros((rounds + 1, size + 1, n))
    for k in range(1, rounds + 1):
        lower[k, 0, :] = below
        for z in range(size):
            _copy_row(lower[k, z], lower[k, z + 1])
            _times_linear(lower[k, z + 1], cum[k, z])
    upper = np.zeros((rounds + 1, n))
    upper[:, 0] = 1.0
    values = np.zeros(rounds)
    for z in range(size - 1, -1, -1):
        for k in range(1, rounds + 1):
            total = 0.0
            for i in range(n):
                total += lower[k, z, i] * upper[k - 1, n - 1 - i]
            values[k - 1] = q[z] * total * scale[k - 1, z]
        position[z] = _relax(q[z], position[z], values, target[z], rounds, omega, cum[:, z])
        for k in range(rounds):
            _times_linear(upper[k], cum[k, z])


@numba.njit(cache=True)
def _sweep_up(q, target, below, position, scale, cum, omega):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """One bottom-up pass: the mirror of :func:`_sweep_down`."""
    rounds, size, n = cum.shape[0] - 1, q.shape[0], below.shape[0]
    upper = np.zeros((rounds + 1, size + 1, n))
    for k in range(rounds):
        upper[k, size, 0] = 1.0
        for z in range(size - 1, -1, -1):
            _copy_row(upper[k, z + 1], upper[k, z])
            _times_linear(upper[k, z], cum[k, z])
    lower = np.zeros((rounds + 1, n))
    for k in range(rounds + 1):
        lower[k, :] = below
    values = np.zeros(rounds)
    for z in range(size):
        for k in range(1, rounds + 1):
            total = 0.0
            for i in range(n):
                total += lower[k, i] * upper[k - 1, z + 1, n - 1 - i]
            values[k - 1] = q[z] * total * scale[k - 1, z]
        position[z] = _relax(q[z], position[z], values, target[z], rounds, omega, cum[:, z])
        for k in range(1, rounds + 1):
            _times_linear(lower[k], cum[k, z])


@numba.njit(cache=True)
def _block_violation(q, limit, low, below, position, scale, cum, prefix, phi):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""The block's exact violation in the units of ``limit`` (``p`` in the units of ``φ``):
    ``Σ (v − limit)⁺`` where ``low`` (slope ``< 1``), else ``Σ (limit − v)⁺``, with ``v_z = q_z
    Σ_k s_k(z) φ_k(z) scale[k, z]`` at the current positions (block listed bottom-up)."""
    rounds = scale.shape[0]
    _block_fields(q[::-1], cum[:, ::-1], below, below.shape[0], prefix, phi[:, ::-1])
    total = 0.0
    for z in range(q.shape[0]):
        k, frac = _split(position[z], rounds)
        value = (1.0 - frac) * phi[k, z] * scale[k, z] + frac * phi[k + 1, z] * scale[k + 1, z]
        value *= q[z]
        total += max(value - limit[z], 0.0) if low else max(limit[z] - value, 0.0)
    return total


@numba.njit(cache=True)
def _fit_block(q, target, limit, low, below, position, scale, sweeps, omega, tolerance):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Symmetric Gauss-Seidel sweeps over one block (listed bottom-up), until its exact
    violation (:func:`_block_violation`) is at most ``tolerance``, no position moves by more
    than 1e-15, or ``sweeps`` sweeps are done."""
    rounds = scale.shape[0]
    cum = np.zeros((rounds + 1, q.shape[0]))
    for z in range(q.shape[0]):
        _cumulate(q[z], position[z], rounds, cum[:, z])
    prefix = np.zeros((q.shape[0] + 1, below.shape[0]))
    phi = np.zeros((rounds, q.shape[0]))
    for _ in range(sweeps):
        if _block_violation(q, limit, low, below, position, scale, cum, prefix, phi) <= tolerance:
            break
        before = position.copy()
        _sweep_down(q, target, below, position, scale, cum, omega)
        _sweep_up(q, target, below, position, scale, cum, omega)
        if np.max(np.abs(position - before)) <= 1e-15:
            break


@numba.njit(cache=True)
def fit_positions(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    q_sorted, target, limit, low, starts, n, position, scale, sweeps, omega, tolerance
):
    r"""Fit every token's position so that its conditional-Poisson value meets its target.

    Token ``z``'s value ``q_z Σ_k s_k(z) φ_k(z) scale[k, z]`` (``φ`` of
    :func:`cp_round_values`, ``scale`` a per-round correction, 1 for conditional Poisson)
    increases with the round; given the others, :func:`_position_for` picks the split that
    hits ``target[z]`` (in the units of ``φ``). A block's values depend on the blocks below it
    only through ``Π (1 + q_y X)`` and not on the blocks above, so the blocks are fitted one
    at a time; inside a block, symmetric Gauss-Seidel sweeps with over-relaxation ``omega``,
    until the block's violation against ``limit`` (``p`` in the same units; ``low[z]`` where
    ``z``'s block has slope ``< 1``) is at most ``tolerance`` times its target's total.

    Returns
    -------
    numpy.ndarray, shape (m,)
        The positions (``position`` is the starting point, left unchanged).
    """
    out = position.copy()
    below = np.zeros(n)  # Π (1 + q_y X) over the blocks below the current one
    below[0] = 1.0
    for j in range(starts.shape[0] - 2, -1, -1):
        lo, hi = starts[j], starts[j + 1]
        if hi - lo > 1:
            part = out[lo:hi][::-1].copy()
            _fit_block(
                q_sorted[lo:hi][::-1].copy(),
                target[lo:hi][::-1].copy(),
                limit[lo:hi][::-1].copy(),
                low[lo],
                below,
                part,
                scale[:, lo:hi][:, ::-1].copy(),
                sweeps,
                omega,
                tolerance * target[lo:hi].sum(),
            )
            out[lo:hi] = part[::-1]
        for y in range(lo, hi):
            _times_linear(below, q_sorted[y])
    return out
