r"""Gumbel list coupling (GLS; Daliri et al. for ``n = 1``): drafter-invariant, no rejection step.

Shared noise ``E^{(k)}_i = −\ln U^{(k)}_i ~ Exp(1)`` for slots ``k = 1..n`` and tokens ``i``.
Draft ``k`` is ``x_k = argmin_i E^{(k)}_i / q_i`` (an exponential race: ``x_k ~ q``, i.i.d.).
The output is

.. math::

    Y = \arg\min_i \min_k E^{(k)}_i / p_i ,

a race with rates ``n p_i``, so ``Y ~ p`` exactly; it is accepted iff it equals a draft. For
``n = 1`` the match probability is

.. math::

    α = \sum_j \frac{1}{\sum_i \max(p_i / p_j,\ q_i / q_j)} ≥ \frac{1 − TV}{1 + TV},

and for ``n`` drafts ``Σ_j n p_j / (n − 1 + Σ_i max(p_i, p_j q_i / q_j))`` is a lower bound
(:meth:`GumbelListCoupling.lower_bound`). Both sums are evaluated with one sort of ``p / q``
(``O(V log V)``).

**Exact acceptance for any n: a one-dimensional integral.** Condition on the output race
instead of the drafts. Its winner is a (slot ``k*``, token ``j``) pair at time
``T = min_{k,i} E^{(k)}_i / p_i``: ``P(T ∈ dt, Y = j, k* = k) = p_j e^{−nt} dt`` (``nV`` clocks of
rates ``p_i``). Given that, ``E^{(k*)}_j = p_j t`` and every other ``E^{(k)}_i = p_i t + F^{(k)}_i``
with ``F`` i.i.d. ``Exp(1)`` (memorylessness): the slots are *independent*. With
``ρ_i = p_i / q_i`` and ``G(u) = Σ_i (u q_i − p_i)⁺`` (convex, piecewise linear):

* slot ``k*`` drafts ``j`` iff ``F_i > t (ρ_j q_i − p_i)`` for every ``i ≠ j``:
  ``a_j(t) = e^{−t G(ρ_j)}``;
* another slot drafts ``j`` iff ``j`` wins the race of arrival times
  ``(p_i t + F_i) / q_i ≥ ρ_i t``, i.e. ``b_j(t) = t q_j ∫_{ρ_j}^∞ e^{−t G(u)} du``.

Hence

.. math::

    α = \sum_j p_j \int_0^∞ n e^{−nt} \Bigl[1 − \bigl(1 − a_j(t)\bigr)
        \bigl(1 − b_j(t)\bigr)^{n−1}\Bigr] dt,

which at ``n = 1`` is ``Σ_j p_j / (1 + G(ρ_j))``, the closed form above. On each linear piece
of ``G`` the ``u``-integral is elementary, so one suffix sum over the tokens sorted by ``ρ``
gives every ``b_j(t)`` at a node ``t`` in ``O(V)``: one compiled pass over the tokens from the
top, the nodes innermost and vectorised, with the two ``expm1`` a token and node computed in
that loop by a branch-free polynomial (:func:`_gls_quadrature_fused`; the previous path,
:func:`_gls_quadrature_many`, one node at a time with libm's ``expm1``, stays as the
reference). The ``t``-integral is the trapezoid rule
in ``x = ln t`` (:func:`gls_acceptance`, which integrates ``1 − α`` so that the integrand
vanishes at both ends): the integrand is analytic in the strip ``|Im x| < π/2``, so the rule
converges like ``e^{−2π d / h}``; at the step ``h = 0.3`` used, a third of that step changes
``α`` by less than 1e-12 on the tests' cases, and ``n = 1`` matches the closed form to 1e-13.
At each node the tokens with ``t G(ρ_j) > 60`` are dropped (their ``a_j``, ``b_j`` are below
``e^{−60}``). Cost ``O(V log V + V · nodes)``, about 60–140 nodes.

Simulation without the ``n × V`` noise matrix. Condition on the race of slot ``k``: its winner
``x_k ~ q`` and time ``M_k ~ Exp(1)`` are independent, ``E^{(k)}_{x_k} = M_k q_{x_k}``, and for
``i ≠ x_k`` memorylessness gives ``E^{(k)}_i = M_k q_i + F`` with ``F ~ Exp(1)`` fresh. The
output race then has an atom for each draft at ``D_k = M_k q_{x_k} / p_{x_k}`` and, for every other
(slot, token), a hazard ``p_i`` once ``t > M_k q_i / p_i``, so the cumulative hazard is

.. math::

    Λ(t) = \sum_k \sum_{i ≠ x_k:\ q_i/p_i < t/M_k} (p_i t − M_k q_i),

piecewise linear in ``t`` and evaluated by binary search in the tokens sorted by ``q / p``. The
first continuous arrival is ``Λ^{-1}(Z)``, ``Z ~ Exp(1)``; if it comes after the earliest atom the
output is that draft, else the arriving (slot, token) is drawn ``∝`` its hazard, which only needs
the linear piece of ``Λ`` holding the arrival (found by bisection), not the time itself.
Cost ``O(n log V)`` per bisection step per trial; exact in law.
:meth:`GumbelListCoupling.verify` draws the conditional noise explicitly (``O(nV)``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import numba
import numpy as np

from otbound._pairwise import pairwise_sum
from otbound._sorting import stable_argsort
from otbound.problem import Step
from otbound.verifiers._step_cache import ratio_order, step_digest
from otbound.verifiers.base import BaseVerifier

__all__ = ["GumbelListCoupling", "gls_acceptance", "gls_acceptances", "gls_match_probability"]

#: Step of the trapezoid rule in ``ln t`` of :func:`gls_acceptance`.
QUADRATURE_STEP = 0.3

#: :meth:`GumbelListCoupling.acceptance` at ``n ≤ 2 SHARED_N`` also computes ``n = 2..SHARED_N``
#: in the same pass over the nodes (a few multiplications a token), for the next calls.
SHARED_N = 8

#: Steps whose quadrature values :class:`GumbelListCoupling` keeps (a digest and a few floats
#: each).
VALUE_CACHE_SIZE = 16_384


def _max_sums(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens ``j`` with ``p_j, q_j > 0`` and ``Σ_i max(p_i, (p_j/q_j) q_i)`` for each."""
    both = np.flatnonzero((p > 0) & (q > 0))
    with np.errstate(divide="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)  # q = 0: p/q = ∞
    order = stable_argsort(ratio)
    r_sorted = ratio[order]
    cum_q = np.concatenate(([0.0], np.cumsum(q[order])))  # tokens with p/q < ρ give ρ q_i
    tail_p = np.concatenate((np.cumsum(p[order][::-1])[::-1], [0.0]))  # p/q ≥ ρ give p_i
    rho = ratio[both]
    j = np.searchsorted(r_sorted, rho, side="left")
    return both, tail_p[j] + rho * cum_q[j]


def gls_match_probability(p: np.ndarray, q: np.ndarray) -> float:
    """``n = 1``: ``Σ_j 1 / Σ_i max(p_i/p_j, q_i/q_j) = Σ_j p_j / Σ_i max(p_i, p_j q_i / q_j)``."""
    both, sums = _max_sums(p, q)
    return float(np.sum(p[both] / sums))


@numba.njit(cache=True)
def _first_beyond(g, t):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The first index of the increasing ``g`` with ``t g > 60`` (``e^{−t g}`` below 1e-26
    from there on), by bisection; ``len(g)`` when there is none."""
    lo = 0
    hi = g.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if t * g[mid] <= 60.0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _gls_quadrature(n, nodes, ps, qs, rho, g, slope):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``Σ_nodes w_t Σ_j p_j (1 − a_j(t)) (1 − b_j(t))^{n−1}`` (module docstring).

    ``nodes`` (k, 2): ``t`` and its weight ``h n t e^{−nt}``; tokens sorted by ``ρ``, ``g`` the
    values of ``G`` at the ``ρ``'s and ``slope`` the slope of ``G`` after each. The tokens with
    ``t G(ρ_j) > 60`` count ``p_j`` (their ``a_j``, ``b_j`` are below ``e^{−60}``).
    """
    m = rho.shape[0]
    tail_p = np.zeros(m + 1)
    for i in range(m - 1, -1, -1):
        tail_p[i] = tail_p[i + 1] + ps[i]
    total = 0.0
    for node in range(nodes.shape[0]):
        t = nodes[node, 0]
        cut = _first_beyond(g, t)
        tail = 0.0  # t ∫_{ρ_i}^∞ e^{-t G(u)} du, built from the top
        miss = tail_p[cut]
        for i in range(cut - 1, -1, -1):
            decay = np.exp(-t * g[i])
            if i == m - 1:
                piece = decay / slope[i]
            else:
                piece = decay * -np.expm1(-t * slope[i] * (rho[i + 1] - rho[i])) / slope[i]
            tail += piece
            b = qs[i] * tail
            if b > 1.0:
                b = 1.0
            miss += ps[i] * -np.expm1(-t * g[i]) * (1.0 - b) ** (n - 1)
        total += nodes[node, 1] * miss
    return total


@numba.njit(cache=True)
def _fused_inputs(ps, rho, slope):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``tail_p = [cumsum of ps from the end, 0]``, ``gap = slope[:-1] * np.diff(ρ)`` and
    ``1 / slope``, as numpy computes them (sequential sums)."""
    m = ps.shape[0]
    tail_p = np.zeros(m + 1)
    for i in range(m - 1, -1, -1):
        tail_p[i] = tail_p[i + 1] + ps[i]
    gap = np.empty(max(m - 1, 0))
    for i in range(m - 1):
        gap[i] = slope[i] * (rho[i + 1] - rho[i])
    inv_slope = np.empty(m)
    for i in range(m):
        inv_slope[i] = 1.0 / slope[i]
    return tail_p, gap, inv_slope


@numba.njit(cache=True)
def _gls_quadrature_many(ns, first, last, step, ps, qs, rho, g, slope):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_gls_quadrature` for several ``n`` at once, on the lattice ``x = k · step``.

    ``ns`` (r,) increasing ``n ≥ 1``; node ``k`` (``t = e^{k · step}``) counts for ``ns[r]``
    when ``first[r] ≤ k ≤ last[r]``. ``a_j(t)`` and ``b_j(t)`` do not depend on ``n``, so each
    node evaluates them once (two ``expm1`` a token: ``a_j = 1 + expm1(−t G(ρ_j))``) and
    accumulates ``p_j (1 − a_j)(1 − b_j)^{n−1}`` for every ``n`` by repeated multiplication.
    Each ``n`` has its own accumulators, so its value does not depend on the other ``n``.
    Returns ``Σ_nodes h n t e^{−nt} · miss_n(t)`` for each ``n``.

    The reference of :func:`_gls_quadrature_fused` (which :func:`gls_acceptances` uses): the
    same sums, one node at a time, with libm's ``expm1`` called in the loop.
    """
    m = rho.shape[0]
    r_count = ns.shape[0]
    n_max = ns[r_count - 1]
    tail_p, gap, inv_slope = _fused_inputs(ps, rho, slope)
    k_lo = first.min()
    k_hi = last.max()
    totals = np.zeros(r_count)
    miss = np.empty(r_count)
    active = np.zeros(r_count, dtype=np.bool_)
    for k in range(k_lo, k_hi + 1):
        any_active = False
        for r in range(r_count):
            active[r] = first[r] <= k <= last[r]
            any_active = any_active or active[r]
        if not any_active:
            continue
        t = np.exp(k * step)
        cut = _first_beyond(g, t)
        for r in range(r_count):
            miss[r] = tail_p[cut]
        tail = 0.0  # t ∫_{ρ_i}^∞ e^{-t G(u)} du, built from the top
        for i in range(cut - 1, -1, -1):
            lost = -np.expm1(-t * g[i])  # 1 − a_i
            decay = 1.0 - lost
            if i == m - 1:
                piece = decay * inv_slope[i]
            else:
                piece = decay * -np.expm1(-t * gap[i]) * inv_slope[i]
            tail += piece
            b = qs[i] * tail
            if b > 1.0:
                b = 1.0
            stay = 1.0 - b
            term = ps[i] * lost
            r = 0
            if ns[0] == 1:
                miss[0] += term
                r = 1
            for power in range(1, n_max):  # term = p_i (1 − a_i)(1 − b_i)^{power}
                term *= stay
                if ns[r] == power + 1:
                    miss[r] += term
                    r += 1
        for r in range(r_count):
            if active[r]:
                n = ns[r]
                totals[r] += step * n * t * np.exp(-n * t) * miss[r]
    return totals


@numba.njit(cache=True)
def _node_times(k_lo, k_hi, step):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``t = e^{k · step}`` for ``k = k_lo..k_hi`` (as :func:`_gls_quadrature_many` has them)."""
    count = k_hi - k_lo + 1
    ts = np.empty(count)
    for k in range(k_lo, k_hi + 1):
        ts[k - k_lo] = np.exp(k * step)
    return ts


@numba.njit(cache=True)
def _node_cuts(g, ts):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_first_beyond` at each node (non-increasing, as ``t`` increases)."""
    cuts = np.empty(ts.shape[0], dtype=np.int64)
    for node in range(ts.shape[0]):
        cuts[node] = _first_beyond(g, ts[node])
    return cuts


@numba.njit(cache=True)
def _gls_weigh(ns, first, last, k_lo, step, ts, acc):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``Σ_nodes h n t e^{−nt} miss_n(t)`` over each ``n``'s nodes (``miss_n = acc[r]`` for
    ``n = ns[r]``)."""
    r_count = ns.shape[0]
    totals = np.zeros(r_count)
    for node in range(ts.shape[0]):
        k = k_lo + node
        t = ts[node]
        for r in range(r_count):
            if first[r] <= k <= last[r]:
                n = ns[r]
                totals[r] += step * n * t * np.exp(-n * t) * acc[r, node]
    return totals


#: Below this argument :func:`_expm1_neg` is its seven-term Taylor polynomial
#: (:func:`_expm1_neg_small`); nodes ``t`` with ``t · G(ρ_i)`` or ``t · gap_i`` below it form a
#: prefix of the nodes (``t`` increases), taken by the short loop.
EXPM1_SMALL = 1.0 / 64.0

_LN2_HI = 6.93147180369123816490e-01  # ln 2 to 32 bits: k · _LN2_HI is exact for k < 2^21
_LN2_LO = 1.90821492927058770002e-10  # ln 2 − _LN2_HI
_INV_LN2 = 1.0 / math.log(2.0)
# (−1)^j / j!, j = 1..16: the Taylor coefficients of expm1(−r)
_C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13, _C14, _C15, _C16 = (
    (-1.0) ** j / math.factorial(j) for j in range(1, 17)
)


@numba.njit(inline="always")
def _expm1_neg_small(x):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``expm1(−x)`` for ``0 ≤ x < EXPM1_SMALL``: Taylor to ``x^7`` (the rest is below
    ``x^7 / 8! < 6·10^{−18}`` relative), by Estrin's scheme (short dependency chains): the
    terms fall by ``x / 2 < 2^{−7}`` each, so it is within ~1 ulp."""
    x2 = x * x
    return x * ((_C1 + x * _C2) + x2 * (_C3 + x * _C4) + (x2 * x2) * ((_C5 + x * _C6) + x2 * _C7))


@numba.njit(inline="always")
def _expm1_neg(x):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``expm1(−x)`` for ``x ≥ 0``, to a few ulp relative, without a branch, a call or a table
    (so the node loops vectorise; libm's ``expm1`` does not).

    ``x = k ln 2 + r`` (``x`` capped at 40, where ``expm1(−x)`` rounds to −1), ``0 ≤ r < ln 2``
    (``k · _LN2_HI`` exact, so ``r`` is within ~1 ulp): ``expm1(−x) = (2^{−k} − 1) +
    2^{−k} expm1(−r)``. ``2^{−k}`` (``k ≤ 57``) is a product of exact powers of two picked by
    the bits of ``k``, ``2^{−k} − 1`` is exact for ``k ≤ 53``, and the two terms have the same
    sign (no cancellation); ``expm1(−r)`` is Taylor to ``r^16`` (the rest below
    ``ln(2)^16 / 17! < 10^{−17}`` relative).
    """
    y = x if x < 40.0 else 40.0
    k = int(y * _INV_LN2)
    kf = float(k)
    r = (y - kf * _LN2_HI) - kf * _LN2_LO
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    # Estrin's scheme (short dependency chains: the node loop is latency-bound with Horner)
    p01 = _C1 + r * _C2
    p23 = _C3 + r * _C4
    p45 = _C5 + r * _C6
    p67 = _C7 + r * _C8
    p89 = _C9 + r * _C10
    pab = _C11 + r * _C12
    pcd = _C13 + r * _C14
    pef = _C15 + r * _C16
    lo = (p01 + r2 * p23) + r4 * (p45 + r2 * p67)
    hi = (p89 + r2 * pab) + r4 * (pcd + r2 * pef)
    em = r * (lo + r8 * hi)
    s = 0.5 if k & 1 else 1.0
    s *= 0.25 if k & 2 else 1.0
    s *= 0.0625 if k & 4 else 1.0
    s *= 0.00390625 if k & 8 else 1.0
    s *= 1.52587890625e-05 if k & 16 else 1.0
    s *= 2.3283064365386963e-10 if k & 32 else 1.0
    return (s - 1.0) + s * em


@numba.njit(inline="always")
def _fill_expm1(out, ts, scale, small, width):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``out[node] = expm1(−ts[node] · scale)`` for ``node < width`` (a multiple of 8, as
    ``out`` and ``ts`` are long): the short polynomial below ``small`` rounded down to a
    multiple of 8 (``ts · scale < EXPM1_SMALL`` there), :func:`_expm1_neg` from there on.

    Every loop starts at 0 on a view and runs a multiple of 8 times: numba's loops that start
    elsewhere, and the scalar remainder of a vectorised loop, cost several times more.
    """
    split = min(small - small % 8, width)
    head = out[:split]
    ts_head = ts[:split]
    for node in range(split):
        head[node] = _expm1_neg_small(ts_head[node] * scale)
    rest = out[split:width]
    ts_rest = ts[split:width]
    for node in range(width - split):
        rest[node] = _expm1_neg(ts_rest[node] * scale)


@numba.njit(inline="always")
def _small_below(ts, scale, start):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The number of nodes with ``ts · scale < EXPM1_SMALL`` (``ts`` increasing), searched
    from ``start`` up (``start`` must have ``ts[start − 1] · scale < EXPM1_SMALL``)."""
    lo = start
    hi = ts.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if ts[mid] * scale < EXPM1_SMALL:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _gls_fused(ts, cuts, ps, qs, g, gap, inv_slope, acc, slots, reuse=True):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_gls_quadrature_many`'s inner loop for every node at once (the node loop
    innermost: independent accumulators, vectorised), computing its two ``expm1`` itself
    (:func:`_expm1_neg`) instead of calling libm's.

    ``ts`` holds the nodes' ``t`` padded (with its last value) to a multiple of 8, ``cuts``
    one entry a node; ``acc`` (one row per wanted ``n``, nodes) starts at ``tail_p[cut]`` and
    row ``slots[w]`` gets ``Σ_i p_i (1 − a_i)(1 − b_i)^w`` for each power ``w`` with
    ``slots[w] ≥ 0`` (``w = n − 1``; the other powers are only multiplied through), each
    node's terms added in the same order (descending ``i``) and the powers taken by the same
    repeated multiplications as the one-node loop. Tokens whose ratio ties the previous one's
    (logits rounded to float16 give long runs) have the same ``G``, so the same
    ``expm1(−t G)``, and a gap of 0, which adds ``±0`` to the suffix sum: neither is computed
    again, and the sums are the same bit for bit (``reuse=False`` computes them, for the
    tests).
    """
    m = ps.shape[0]
    nodes = cuts.shape[0]
    pad = ts.shape[0]
    powers = slots.shape[0]
    eg = np.empty(pad)
    ea = np.zeros(pad)
    tail = np.zeros(nodes)
    stay = np.empty(nodes)
    term = np.empty(nodes)
    top = cuts[0] if nodes else 0
    live = 0  # nodes [0, live) have cut > i (the cuts do not increase with t)
    small_g = 0  # nodes [0, small_g) have t G(ρ_i) < EXPM1_SMALL (grows as i falls)
    filled_g = -1.0  # eg holds expm1(−t G) for this G on the first `filled` nodes
    filled = 0
    for i in range(top - 1, -1, -1):
        while live < nodes and cuts[live] > i:
            live += 1
        width = min(live + (-live) % 8, pad)
        g_i = g[i]
        if not reuse or g_i != filled_g or width > filled:  # a tied ratio: eg as it was
            small_g = _small_below(ts[:nodes], g_i, small_g)
            _fill_expm1(eg, ts, g_i, small_g, width)
            filled_g, filled = g_i, width
        p_i = ps[i]
        q_i = qs[i]
        s_i = inv_slope[i]
        if i == m - 1:
            for node in range(live):
                decay = 1.0 + eg[node]
                tail[node] += decay * s_i
        elif not reuse or gap[i] != 0.0:  # a tie (gap 0) adds ±0 to the suffix sum
            gap_i = gap[i]
            _fill_expm1(ea, ts, gap_i, _small_below(ts[:nodes], gap_i, 0), width)
            for node in range(live):
                decay = 1.0 + eg[node]
                tail[node] += decay * -ea[node] * s_i
        for node in range(live):
            b = min(q_i * tail[node], 1.0)
            stay[node] = 1.0 - b
            term[node] = p_i * -eg[node]
        if slots[0] >= 0:
            acc0 = acc[slots[0]]
            for node in range(live):
                acc0[node] += term[node]
        for w in range(1, powers):
            if slots[w] < 0:
                for node in range(live):
                    term[node] *= stay[node]
            else:
                row = acc[slots[w]]
                for node in range(live):
                    term[node] *= stay[node]
                    row[node] += term[node]


#: Least token-node work (``Σ_node cut``) that :func:`_gls_quadrature_fused` splits over
#: threads; below it one thread's pass is faster than starting the others.
PARALLEL_WORK = 200_000


def _node_splits(cuts: np.ndarray, threads: int) -> np.ndarray:
    """Boundaries of up to ``threads`` runs of nodes with about equal work (a node costs its
    ``cut``, the tokens it still has), each starting at a multiple of 8 (so that
    :func:`_fill_expm1`'s blocks of 8 fall where they fall in one pass); ``[0, nodes]`` for
    one run."""
    nodes = cuts.shape[0]
    work = np.cumsum(cuts)
    if threads < 2 or nodes < 16 or work[-1] < PARALLEL_WORK:
        return np.array([0, nodes])
    goals = work[-1] * np.arange(1, threads) / threads
    inner = (np.searchsorted(work, goals) + 4) // 8 * 8  # the nearest multiple of 8
    return np.unique(np.concatenate(([0], inner[(inner > 0) & (inner < nodes)], [nodes])))


@numba.njit(cache=True, parallel=True)
def _gls_fused_parallel(ts, cuts, ps, qs, g, gap, inv_slope, acc, slots, splits):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_gls_fused` with the nodes cut at ``splits`` (multiples of 8), one run a thread.

    A node's sums involve no other node, and a run that starts at a multiple of 8 takes the
    same ``expm1`` branch at each node as one pass, so the result is one pass's, bit for bit.
    """
    for run in numba.prange(splits.shape[0] - 1):
        lo = splits[run]
        hi = splits[run + 1]
        width = hi - lo + (-(hi - lo)) % 8
        part = np.ascontiguousarray(acc[:, lo:hi])
        _gls_fused(ts[lo : lo + width], cuts[lo:hi], ps, qs, g, gap, inv_slope, part, slots)
        acc[:, lo:hi] = part


def _gls_quadrature_fused(
    ns: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    step: float,
    ps: np.ndarray,
    qs: np.ndarray,
    rho: np.ndarray,
    g: np.ndarray,
    slope: np.ndarray,
) -> np.ndarray:
    """:func:`_gls_quadrature_many` in one compiled pass over the tokens (:func:`_gls_fused`),
    which :func:`gls_acceptances` uses: the same nodes, cuts and sums in the same order, with
    its own ``expm1`` (:func:`_expm1_neg`, :func:`_expm1_neg_small`) instead of libm's.

    Error against the reference. Only the ``expm1`` values differ: within 2 ulp of the exact
    ``expm1`` on ``[0, ∞]`` (4 ulp of numpy's, tested), against libm's ≤ 1 ulp, so each
    ``E = expm1(−x)`` moves by a relative ``δ ≤ 4·2^{−53} ≈ 4.4·10^{−16}``. Then
    ``1 − a_i = −E_g`` moves by ``≤ δ (1 − a_i)``, and ``a_i = 1 + E_g`` is rounded to the
    same ``2^{−53}``-spaced grid as the reference's (it moves by one grid step at most, where
    the two ``E_g`` straddle a rounding boundary); every piece of the suffix sum moves by
    ``≤ δ`` relative (a product of ``−E_gap`` and ``a_i``), so ``b_i`` (a sum of positive
    pieces, clipped at 1) by ``≤ δ b_i ≤ δ`` and ``(1 − b_i)^{n−1}`` by ``≤ (n − 1) δ``. As
    ``Σ_i p_i (1 − a_i) ≤ 1`` at each node and the node weights ``h n t e^{−nt}`` sum to about
    ``∫ n e^{−nt} dt = 1``, each ``n``'s total moves by about ``n δ ≤ 4·10^{−15}`` at
    ``n = 8`` (plus the grid steps of ``a_i``, each ``2^{−53}`` times a weight below 1): far
    below the 1e-13 the tests allow (``tests/test_gls_speed.py``); the largest difference
    seen there and in ``benchmarks/bench_gls.py`` is 2.2e-16.

    Left end. Near ``t = 0`` the integrand is ``c_w t`` to second order with a bounded rest
    (:func:`_left_coefficients`); the nodes where that rest moves the value by less than
    :data:`LEFT_TOLERANCE` in all (:func:`_left_split`: about 15 of the 75 nodes on the
    end-to-end benchmark's rows) take ``c_w t`` instead of a pass over the tokens.
    """
    slope_at_zero, bound = _left_coefficients(ns, ps, qs, rho, g, slope)
    split = _left_split(ns, first, last, step, bound)
    k_lo, k_hi = int(split.min()), int(last.max())
    ts = _node_times(k_lo, k_hi, step)
    cuts = _node_cuts(g, ts)
    tail_p, gap, inv_slope = _fused_inputs(ps, rho, slope)
    slots = np.full(int(ns[-1]), -1, dtype=np.int64)  # power n − 1 goes to n's row
    slots[ns - 1] = np.arange(ns.size)
    acc = np.empty((ns.size, ts.shape[0]))
    acc[:] = tail_p[cuts]
    padded = np.concatenate((ts, np.full(-ts.shape[0] % 8, ts[-1])))
    splits = _node_splits(cuts, numba.get_num_threads())
    if splits.size > 2:
        _gls_fused_parallel(padded, cuts, ps, qs, g, gap, inv_slope, acc, slots, splits)
    else:
        _gls_fused(padded, cuts, ps, qs, g, gap, inv_slope, acc, slots)
    totals: np.ndarray = _gls_weigh(ns, split, last, k_lo, step, ts, acc)
    totals += _left_sum(ns, first, split, step, slope_at_zero)
    return totals


#: The most the first-order left end (:func:`_left_split`) may move each ``n``'s value.
LEFT_TOLERANCE = 1e-17


@numba.njit(cache=True)
def _left_coefficients(ns, ps, qs, rho, g, slope):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""For each ``n`` (``w = n − 1``): the slope at ``t = 0`` of the quadrature's integrand
    ``miss_w(t) = Σ_i p_i (1 − a_i(t))(1 − b_i(t))^w`` and a bound on its second-order rest.

    At ``t → 0``, ``1 − a_i = 1 − e^{−t G_i} → t G_i`` and the suffix sum behind ``b_i`` tends
    to its top term ``1 / S`` (``S = Σ q``), so ``miss_w(t) ≈ c_w t`` with
    ``c_w = Σ_i p_i G_i (1 − min(q_i / S, 1))^w``. As ``|1 − e^{−x} − x| ≤ x²/2``,
    ``|(1 − b)^w − (1 − b')^w| ≤ w |b − b'|`` on ``[0, 1]`` and the suffix sum moves by at
    most ``t (G_{m−1}/S + ρ_{m−1} − ρ_i)`` (its pieces ``e^{−t G_k}(1 − e^{−t gap_k})/slope_k``
    with ``gap_k / slope_k = ρ_{k+1} − ρ_k``, and ``1 − e^{−t G_{m−1}}``),

    .. math::

        |miss_w(t) − c_w t| ≤ t^2 \Bigl(\tfrac12 \sum_i p_i G_i^2
            + w \sum_i p_i G_i q_i \bigl(G_{m−1}/S + ρ_{m−1} − ρ_i\bigr)\Bigr) = C_w t^2,

    returned doubled (for the rounding of the sums).
    """
    count = ns.shape[0]
    m = ps.shape[0]
    total = slope[m - 1]
    reach = g[m - 1] / total + rho[m - 1]
    slope_at_zero = np.zeros(count)
    square = 0.0
    cross = 0.0
    for i in range(m):
        stay = 1.0 - min(qs[i] / total, 1.0)
        weight = ps[i] * g[i]
        square += weight * g[i]
        cross += weight * qs[i] * (reach - rho[i])
        for r in range(count):
            slope_at_zero[r] += weight * stay ** (ns[r] - 1)
    bound = np.empty(count)
    for r in range(count):
        bound[r] = 2.0 * (0.5 * square + (ns[r] - 1) * cross)
    return slope_at_zero, bound


def _left_split(
    ns: np.ndarray, first: np.ndarray, last: np.ndarray, step: float, bound: np.ndarray
) -> np.ndarray:
    r"""Per ``n``, the first node ``k`` the pass over the tokens computes; the nodes
    ``first ≤ k < split`` take ``miss_w(t_k) = c_w t_k`` (:func:`_left_coefficients`).

    Those nodes' weights ``h n t e^{−nt} ≤ h n t`` and the rest ``C_w t²`` move the value by
    at most ``h n C_w Σ_{k < split} t_k³ = h n C_w t_{split}^3 e^{−3h} / (1 − e^{−3h})``,
    kept below :data:`LEFT_TOLERANCE`. At least the last node is computed.
    """
    out = np.array(first, dtype=np.int64)
    for r, n in enumerate(ns):
        if bound[r] == 0.0:  # miss_w is c_w t exactly (every p_i G_i = 0)
            out[r] = int(last[r])
            continue
        room = LEFT_TOLERANCE * -math.expm1(-3.0 * step) / (step * float(n) * bound[r])
        if room > 0.0:  # else (a bound that overflowed, or NaN): every node computed
            k = math.floor(math.log(room) / (3.0 * step))  # e^{3kh} ≤ room
            out[r] = min(max(int(first[r]), k), int(last[r]))
    return out


@numba.njit(cache=True)
def _left_sum(ns, first, split, step, slope_at_zero):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``Σ_{first ≤ k < split} h n t_k e^{−n t_k} · c_w t_k`` for each ``n``."""
    totals = np.zeros(ns.shape[0])
    for r in range(ns.shape[0]):
        n = ns[r]
        for k in range(first[r], split[r]):
            t = np.exp(k * step)
            totals[r] += step * n * t * np.exp(-n * t) * (slope_at_zero[r] * t)
    return totals


def _gls_prepare(
    p: np.ndarray, q: np.ndarray, order: np.ndarray | None = None
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """``p(q = 0)``, the tokens with ``q > 0`` sorted by ``ρ`` (``p``, ``q``, ``ρ``), ``G`` at
    the ``ρ``'s, ``G``'s slope after each, and ``K = Σ_j p_j G(ρ_j)``.

    Every drafted token shapes ``G`` (``p = 0`` ones weigh nothing); the sort is the one
    :func:`otbound.verifiers._step_cache.ratio_order` shares with other verifiers (or
    ``order``, that sort already made: :attr:`otbound.problem.Step.ratio_order`).
    """
    never, ps, qs, rho, g, slope, _, spread = _prepare_pass(
        p, q, ratio_order(p, q) if order is None else order
    )
    return never, ps, qs, rho, g, slope, spread


@numba.njit(cache=True)
def _prepare_pass(p, q, ids):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_gls_prepare`'s numpy lines in one pass, bit for bit: ``never = p[q <= 0].sum()``
    and ``K = np.sum(ps * g)`` by numpy's pairwise summation, ``slope = np.cumsum(qs)`` and
    ``g = [0, cumsum(gap)]`` sequentially, with ``gap = slope[:-1] * np.diff(ρ)`` (returned
    too, for the tests; :func:`_fused_inputs` makes it again beside the other inputs of the
    pass, as the reference quadrature takes them)."""
    vocab = p.shape[0]
    m = ids.shape[0]
    off = np.empty(vocab - m)
    k = 0
    for y in range(vocab):
        if not q[y] > 0.0:
            off[k] = p[y]
            k += 1
    never = pairwise_sum(off, 0, k)
    ps = np.empty(m)
    qs = np.empty(m)
    rho = np.empty(m)
    slope = np.empty(m)
    total = 0.0
    for i in range(m):
        y = ids[i]
        ps[i] = p[y]
        qs[i] = q[y]
        rho[i] = p[y] / q[y]
        total += q[y]
        slope[i] = total
    gap = np.empty(max(m - 1, 0))
    g = np.zeros(m)
    weighted = np.empty(m)
    if m > 0:
        weighted[0] = ps[0] * 0.0
    for i in range(m - 1):
        gap[i] = slope[i] * (rho[i + 1] - rho[i])
        g[i + 1] = g[i] + gap[i]
        weighted[i + 1] = ps[i + 1] * g[i + 1]
    return never, ps, qs, rho, g, slope, gap, pairwise_sum(weighted, 0, m)


def _start(n: int, spread: float) -> float:
    """``ln t_0``: ``t_0 = min(sqrt(2·10^{−16} / (n K)), 10^{−3} / n)``."""
    return min(math.log(math.sqrt(2e-16 / (n * spread))), math.log(1e-3 / n))


def gls_acceptances(
    p: np.ndarray,
    q: np.ndarray,
    ns: Sequence[int],
    step: float = QUADRATURE_STEP,
    *,
    order: np.ndarray | None = None,
) -> dict[int, float]:
    r"""Exact GLS acceptance for each ``n`` in ``ns`` (:func:`gls_acceptance`), sharing work.

    The trapezoid nodes lie on one lattice ``ln t ∈ step · ℤ`` for every ``n`` (node ``k``
    counts for ``n`` from ``⌊ln t_0(n) / step⌋`` to ``⌈ln(45/n) / step⌉``, a superset of
    :func:`gls_acceptance`'s range, so the same truncation bounds hold; the trapezoid rule's
    ``e^{−2π d / h}`` error does not depend on the lattice's offset), and ``a_j(t)``, ``b_j(t)``
    do not depend on ``n``: one pass over the nodes serves every ``n``, with two ``expm1`` a
    token and node. Each ``n``'s value is the same whatever the other ``n`` asked for.

    Parameters
    ----------
    p, q : numpy.ndarray, (V,)
        Validated target and draft distributions.
    ns : sequence of int
        Numbers of drafts, each ``≥ 1`` (``n = 1`` has a closed form too).
    step : float, default QUADRATURE_STEP
        Step of the rule in ``ln t``.

    Returns
    -------
    dict of int to float
        ``α`` for each ``n`` (not clipped).
    """
    wanted = sorted({int(k) for k in ns})
    if not wanted or wanted[0] < 1:
        raise ValueError(f"gls_acceptances needs numbers of drafts >= 1, got {list(ns)}")
    never, ps, qs, rho, g, slope, spread = _gls_prepare(p, q, order)
    if spread <= 0.0:  # every G(ρ_j) = 0: slot k* always drafts the output
        return {k: 1.0 - never for k in wanted}
    first = np.array([math.floor(_start(k, spread) / step) for k in wanted], dtype=np.int64)
    last = np.array([math.ceil(math.log(45.0 / k) / step) for k in wanted], dtype=np.int64)
    totals = _gls_quadrature_fused(
        np.array(wanted, dtype=np.int64), first, last, float(step), ps, qs, rho, g, slope
    )
    return {k: 1.0 - never - float(totals[r]) for r, k in enumerate(wanted)}


def gls_acceptance(p: np.ndarray, q: np.ndarray, n: int, step: float = QUADRATURE_STEP) -> float:
    r"""Exact GLS acceptance for ``n`` drafts (module docstring), by quadrature.

    ``1 − α = p(q = 0) + ∫_0^∞ n e^{−nt} Σ_j p_j (1 − a_j)(1 − b_j)^{n−1} dt`` (``j`` over the
    tokens with ``p, q > 0``), by the trapezoid rule in ``x = ln t`` with step ``step``. As
    ``1 − a_j ≤ t G(ρ_j)``, the integrand is at most ``n t K`` with ``K = Σ_j p_j G(ρ_j)``, so
    starting at ``t_0 = sqrt(2·10^{−16} / (n K))`` drops at most ``10^{−16}``; it ends at
    ``t = 45 / n`` (``e^{−45}`` dropped). :func:`gls_acceptances` for several ``n``.
    """
    return gls_acceptances(p, q, [n], step)[n]


def _gls_acceptance_reference(
    p: np.ndarray, q: np.ndarray, n: int, step: float = QUADRATURE_STEP
) -> float:
    """The former :func:`gls_acceptance` (nodes from ``t_0``, one ``n`` a pass), for tests."""
    never, ps, qs, rho, g, slope, spread = _gls_prepare(p, q)
    if spread <= 0.0:
        return 1.0 - never
    x = np.arange(_start(n, spread), math.log(45.0 / n) + step, step)
    t = np.exp(x)
    nodes = np.ascontiguousarray(np.stack((t, step * n * t * np.exp(-n * t)), axis=1))
    return 1.0 - never - float(_gls_quadrature(n, nodes, ps, qs, rho, g, slope))


@numba.njit(cache=True)
def _hazard(t, m, ratio, cum_p, cum_q, idx):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``Λ(t)``, its slope, and the per-slot cut indices (written to ``idx``).

    Slot ``k``'s own draft needs no special case: its hazard would start at its atom
    ``D_k``, and nothing after the earliest atom is ever used.
    """
    n = m.shape[0]
    lam = 0.0
    slope = 0.0
    for k in range(n):
        s = t / m[k]
        lo = 0
        hi = ratio.shape[0]
        while lo < hi:  # number of sorted tokens with ratio < s
            mid = (lo + hi) // 2
            if ratio[mid] < s:
                lo = mid + 1
            else:
                hi = mid
        idx[k] = lo
        slope += cum_p[lo]
        lam += cum_p[lo] * t - m[k] * cum_q[lo]
    return lam, slope


@numba.njit(cache=True)
def _simulate(drafts, m, z, u, p, q, order, ratio, cum_p, cum_q):  # type: ignore[no-untyped-def]  # pragma: no cover
    trials, n = drafts.shape
    out = np.empty(trials, dtype=np.int64)
    idx = np.zeros(n, dtype=np.int64)
    idx_hi = np.zeros(n, dtype=np.int64)
    for t in range(trials):
        mk = m[t]
        row = drafts[t]
        # earliest draft atom
        atom = np.inf
        atom_token = -1
        for k in range(n):
            x = row[k]
            if p[x] > 0.0:
                d = mk[k] * q[x] / p[x]
                if d < atom:
                    atom = d
                    atom_token = x
        target = z[t]
        if atom < np.inf:
            lam_atom, _ = _hazard(atom, mk, ratio, cum_p, cum_q, idx)
            if lam_atom <= target:
                out[t] = atom_token
                continue
            hi = atom
        else:
            hi = 1.0
            while _hazard(hi, mk, ratio, cum_p, cum_q, idx)[0] <= target:
                hi *= 2.0
        lo = 0.0
        # bisect until [lo, hi] lies on one linear piece of Λ, then solve Λ(t) = Z exactly
        for _ in range(4000):
            _hazard(lo, mk, ratio, cum_p, cum_q, idx)
            _hazard(hi, mk, ratio, cum_p, cum_q, idx_hi)
            same = True
            for k in range(n):
                if idx[k] != idx_hi[k]:
                    same = False
                    break
            if same:
                break
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            if _hazard(mid, mk, ratio, cum_p, cum_q, idx)[0] > target:
                hi = mid
            else:
                lo = mid
        # Λ(lo) <= Z < Λ(hi) on one linear piece: the arrival time Λ^{-1}(Z) lies in (lo, hi],
        # where the hazard sets (the cut indices idx_hi) are constant. The arriving
        # (slot, token) is drawn ∝ its hazard p_i over those sets.
        _hazard(hi, mk, ratio, cum_p, cum_q, idx_hi)
        total = 0.0
        for k in range(n):
            total += cum_p[idx_hi[k]]
        v = u[t] * total
        slot = n - 1
        for k in range(n):
            w = cum_p[idx_hi[k]]
            if v < w:
                slot = k
                break
            v -= w
        cut = idx_hi[slot]
        lo_i = 0
        hi_i = cut - 1
        while lo_i < hi_i:  # first sorted position with cum_p[pos + 1] > v
            mid = (lo_i + hi_i) // 2
            if cum_p[mid + 1] > v:
                hi_i = mid
            else:
                lo_i = mid + 1
        out[t] = order[lo_i]
    return out


class GumbelListCoupling(BaseVerifier):
    """GLS: shared exponential noise couples drafts and output; ``Y ~ p`` with no rejection.

    ``acceptance`` is exact: ``Σ_j 1 / Σ_i max(p_i/p_j, q_i/q_j)`` for ``n = 1``, the
    one-dimensional integral of :func:`gls_acceptance` for ``n > 1``; :meth:`lower_bound`
    gives Daliri et al.'s ``n``-draft bound.
    """

    name = "gls"
    default_design = "iid"

    def lower_bound(self, p: object, q: object, n: int = 2) -> float:
        """``Σ_j n p_j / (n − 1 + Σ_i max(p_i, p_j q_i / q_j))`` (exact at ``n = 1``)."""
        p_arr, q_arr, n = self._validate(p, q, n)
        both, sums = _max_sums(p_arr, q_arr)
        return float(np.sum(n * p_arr[both] / (n - 1 + sums)))

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        if n == 1:
            return gls_match_probability(p, q)
        return self._quadrature_values(p, q, n)[n]

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """Every ``n ≥ 2`` of the step from one pass over the nodes (:func:`gls_acceptances`,
        which gives each ``n`` the value it gives alone), on the step's sort, with no digest."""
        out: dict[int, float | None] = {}
        if 1 in ns:
            out[1] = gls_match_probability(step.p, step.q)
        several = [n for n in ns if n >= 2]
        if several:
            out.update(gls_acceptances(step.p, step.q, several, order=step.ratio_order))
        return out

    def _quadrature_values(self, p: np.ndarray, q: np.ndarray, n: int) -> dict[int, float]:
        """:func:`gls_acceptances` for ``n`` and every ``2..SHARED_N`` (``n ≤ 2 SHARED_N``),
        cached on a digest of ``(p, q)`` for :data:`VALUE_CACHE_SIZE` steps.

        :func:`otbound.compare` asks for one ``n`` at a time over every step, so the other
        ``n`` of a step come back after all the steps: one pass serves them all (each value
        is the same as computed alone).
        """
        key = (p.shape, q.shape, step_digest(p, q))
        cache: OrderedDict[object, dict[int, float]] = self.__dict__.setdefault(
            "_quadrature_cache", OrderedDict()
        )
        values = cache.get(key)
        if values is not None and n in values:
            cache.move_to_end(key)
            return values
        ns = [n, *range(2, SHARED_N + 1)] if n <= 2 * SHARED_N else [n]
        values = {**(values or {}), **gls_acceptances(p, q, ns)}
        cache[key] = values
        cache.move_to_end(key)
        while len(cache) > VALUE_CACHE_SIZE:
            cache.popitem(last=False)
        return values

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        vocab = p.size
        noise = np.empty((len(drafts), vocab))
        for k, x in enumerate(drafts):
            # Slot k's noise conditioned on its race being won by x: E_x = M q_x and
            # E_i = M q_i + Exp(1) for i ≠ x, with M ~ Exp(1) the winning time.
            race_time = rng.exponential()
            noise[k] = race_time * q + rng.exponential(size=vocab)
            noise[k, x] = race_time * q[x]
        with np.errstate(divide="ignore"):
            arrival = np.where(p > 0, noise.min(axis=0) / np.where(p > 0, p, 1.0), np.inf)
        return int(np.argmin(arrival))  # Y = argmin_i min_k E_i^(k) / p_i

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials, n = drafts.shape
        live = np.flatnonzero(p > 0)
        with np.errstate(divide="ignore"):
            key = q[live] / p[live]
        sort = stable_argsort(key)
        order = live[sort]
        ratio = key[sort]
        cum_p = np.concatenate(([0.0], np.cumsum(p[order])))
        cum_q = np.concatenate(([0.0], np.cumsum(q[order])))
        m = rng.exponential(size=(trials, n))
        z = rng.exponential(size=trials)
        u = rng.random(trials)
        tokens: np.ndarray = _simulate(drafts, m, z, u, p, q, order, ratio, cum_p, cum_q)
        return tokens
