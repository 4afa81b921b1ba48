r"""The round rule: a selection rule for draft *sets* (conditional Poisson, without replacement).

For designs that draw a set ``S`` of ``n`` distinct tokens the chances of a selection rule are
the bases of ``f(A) = P(S ∩ A ≠ ∅) = 1 − Q(V ∖ A)``, and ``max_r Σ min(p, r) = α*``
(``docs/mathematics.md``). The rule built here:

1. **Blocks.** The tokens with ``q > 0`` in decreasing ``p / q``, cut into blocks by the
   greatest convex minorant of the points ``(p(B_i), f(B_i))`` (``B_i``: the first ``i``
   tokens); the target is ``r = c_j p`` on block ``j`` (``c_j`` its chord's slope), whose
   ``Σ min(p, r)`` is ``α*``.
2. **Rounds.** Every member ``z`` of ``S`` draws, independently, a round ``k ∈ {1..K}`` with
   its token's shares ``s_k(z)`` (two adjacent rounds per token: a position
   ``τ_z ∈ [0, K − 1]``).
3. **Winner.** The member in the highest block; in that block, the highest round; in that
   round, the highest ``p / q``.

The selection marginal is the rule's own, exactly (no sampling, no fit enters it):

* conditional Poisson, ``P(S) ∝ Π_{x∈S} q_x``:
  ``r_z = q_z Σ_k s_k(z) e_{n−1}(u^{(z,k)}_{−z}) / e_n(q)``, with ``u_y = q_y`` for ``y`` in a
  lower block, ``q_y (s_1 + … + s_k)(y)`` below ``z`` in its block, ``q_y (s_1 + … +
  s_{k−1})(y)`` above it, 0 in a higher block (``u_y / q_y``: the chance ``z`` beats ``y``);
* without replacement (exponential clocks ``T_x ~ Exp(q_x)``, ``S`` the first ``n`` to fire):
  ``r_z = Σ_k s_k(z) ∫_0^∞ π_z(t) [ε X^{n−1}] Π_{y≠z} ((1 − π_y)(1 + ε q_y) + π_y G_y X) dt``,
  ``π_y = 1 − e^{−q_y t}``, ``G_y = u_y / q_y``, ``ε² = 0``; a trapezoid rule in ``log t``.

So the verifier is lossless for *any* shares; the fit (Gauss-Seidel on the positions) decides
only how close ``Σ min(p, r)`` comes to ``α*``, and the rule reports the gap it leaves
(:attr:`RoundRule.gap`). ``docs/mathematics.md`` derives the formulas.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from otbound._checks import clip_rounding
from otbound.drafts.registry import get_design
from otbound.selection.rule import residual_cdf, single_draft_test

__all__ = ["ROUND_RULE_DESIGNS", "RoundRule", "has_round_rule", "round_marginal", "round_rule"]

#: The designs the round rule serves (any ``n``, any vocabulary).
ROUND_RULE_DESIGNS: tuple[str, ...] = ("conditional_poisson", "without_replacement")
_CP, _WOR = ROUND_RULE_DESIGNS

#: Rounds of the first fit, and of the fallback fit where the first leaves a gap.
ROUNDS, MORE_ROUNDS = 3, 5
#: Over-relaxation of the Gauss-Seidel sweeps.
OMEGA = 1.3
#: Log-time step of the clock integral: for the fit's corrections, and for the marginal.
COARSE_STEP, FINE_STEP = 0.3, 0.15
#: Drafts up to which the clock steps hold; beyond, they shrink as ``1/√n`` (:func:`clock_nodes`).
CLOCK_DRAFTS = 16
#: Gauss-Seidel sweeps of the first fit (they stop early once no position moves), and of
#: each correction of the without-replacement fit.
SWEEPS, CORRECTION_SWEEPS = 60, 15
#: Violation of the ``α*`` conditions below which a fit stops.
FIT_TOLERANCE = 1e-13
#: A block's fit stops once its violation is at most this fraction of its selection mass
#: (summed over the blocks: a quarter of :data:`FIT_TOLERANCE`).
BLOCK_TOLERANCE = FIT_TOLERANCE / 4
#: A without-replacement fit at the coarse clock step whose violation stops falling above
#: this, and above a hundred times that step's own error, stops: its rounds leave no room,
#: and the fallbacks take over.
STALL_VIOLATION = 1e-8
#: Violation below which :meth:`RoundRule.exact_acceptance` is ``Σ min(p, r)``.
EXACT_VIOLATION = 5e-13
#: Largest ``|Σ r − 1|`` accepted as rounding (the clock integral's error is ~1e-15).
SUM_TOLERANCE = 1e-12


def has_round_rule(design: str, n: int) -> bool:
    """Whether :func:`round_rule` serves this design (it serves any ``n ≥ 1``)."""
    return design in ROUND_RULE_DESIGNS and n >= 1


@dataclass(frozen=True)
class RoundBlocks:
    """A step's blocks and target, in position order (decreasing ``p / q``, ``q > 0``).

    Attributes
    ----------
    order : numpy.ndarray of int64, shape (m,)
        The tokens by position.
    q_sorted, p_sorted : numpy.ndarray, shape (m,)
    starts : numpy.ndarray of int64, shape (blocks + 1,)
        The blocks' first positions, then ``m``.
    target : numpy.ndarray, shape (m,)
        ``c_j p`` on block ``j`` (the vertex masses ``Δf`` on a block with ``p = 0``).
    slope : numpy.ndarray, shape (m,)
        Each position's ``c_j`` (``inf`` on a block with ``p = 0``).
    alpha_star : float
        ``p(q > 0) + min_i [f(B_i) − p(B_i)]``, the sweep's ``α*``.
    """

    order: np.ndarray
    q_sorted: np.ndarray
    p_sorted: np.ndarray
    starts: np.ndarray
    target: np.ndarray
    slope: np.ndarray
    alpha_star: float

    def total_error(self, r_sorted: np.ndarray) -> float:
        """``Σ_j |r(L_j) − c_j p(L_j)|``: the blocks' totals do not depend on the shares, so
        this is the error of the computation of ``r`` (a clock rule's, for instance)."""
        totals = np.add.reduceat(r_sorted - self.target, self.starts[:-1])
        return float(np.abs(totals).sum())

    def violation(self, r_sorted: np.ndarray) -> float:
        """``Σ (r − p)⁺`` over blocks of slope ``< 1`` plus ``Σ (p − r)⁺`` over the others:
        zero exactly when ``Σ min(p, r) = α*``."""
        low = self.slope < 1.0
        over = np.maximum(r_sorted - self.p_sorted, 0.0)
        under = np.maximum(self.p_sorted - r_sorted, 0.0)
        return float(np.where(low, over, under).sum())


def round_blocks(p: np.ndarray, q: np.ndarray, n: int, design: str) -> RoundBlocks:
    """Step 1 of the module docstring: the order, ``f`` of its prefixes, the blocks, the target."""
    from otbound.selection._kernels import convex_minorant_blocks  # numba
    from otbound.selection.levels import slot_order

    order = slot_order(p, q)
    q_sorted, p_sorted = q[order], p[order]
    # f(B_i) = 1 − Q(the last m − i tokens): the design's prefix masses of the reversed order
    tail_mass = get_design(design).prefix_mass(q_sorted[::-1][None, :], n)[0]
    f_prefix = 1.0 - tail_mass[::-1]
    f_prefix[0] = 0.0
    steps = np.diff(f_prefix)
    starts = convex_minorant_blocks(p_sorted, steps)
    target, slope = np.empty(order.size), np.empty(order.size)
    for lo, hi in itertools.pairwise(starts):
        gain = p_sorted[lo:hi].sum()
        rise = f_prefix[hi] - f_prefix[lo]
        slope[lo:hi] = rise / gain if gain > 0 else np.inf
        target[lo:hi] = slope[lo] * p_sorted[lo:hi] if gain > 0 else steps[lo:hi]
    gaps = f_prefix - np.concatenate([[0.0], np.cumsum(p_sorted)])
    alpha = float(p_sorted.sum() + min(0.0, gaps.min()))
    return RoundBlocks(order, q_sorted, p_sorted, starts, target, slope, alpha)


def shares_from_positions(position: np.ndarray, rounds: int) -> np.ndarray:
    """Shares (rounds, m): ``1 − f`` in round ``⌊τ⌋`` and ``f`` in the next (``f = τ − ⌊τ⌋``,
    rounds counted from 0; ``τ = K − 1`` is all in the top round)."""
    shares = np.zeros((rounds, position.size))
    low = np.clip(np.floor(position).astype(np.int64), 0, rounds - 2)
    frac = position - low
    columns = np.arange(position.size)
    shares[low, columns] = 1.0 - frac
    shares[low + 1, columns] += frac
    return shares


def share_sums(shares: np.ndarray) -> np.ndarray:
    """``s_1 + … + s_k`` for ``k = 0..K`` (rows), row 0 zero and the last row exactly 1."""
    out = np.zeros((shares.shape[0] + 1, shares.shape[1]))
    out[1:] = np.cumsum(shares, axis=0)
    out[-1] = 1.0
    return out


def log2_elementary_symmetric(weights: np.ndarray, k: int) -> float:
    """``log₂ e_k(weights)`` from the design's power-of-two-scaled recursion (exact where
    ``e_k`` itself is far below the floats), ``-inf`` where fewer than ``k`` weights are
    positive."""
    from otbound.drafts.conditional_poisson import elementary_symmetric_prefix

    mant, expo = elementary_symmetric_prefix(weights[None, :], k)
    top_mant = float(mant[k - 1, 0, -1])
    return math.log2(top_mant) + float(expo[k - 1, 0, -1]) if top_mant > 0.0 else -math.inf


def clock_nodes(q_sorted: np.ndarray, n: int, step: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Nodes and weights of the trapezoid rule in ``s = log t`` for the clock integral.

    Step: :func:`~otbound.drafts._sequential_mass.narrowed_step` of ``step`` beyond
    :data:`CLOCK_DRAFTS` drafts (at a fixed 0.15 the marginal was off by 5e-12 at ``n = 30``
    and by 1e-6 at ``n = 60``).

    Left end: summed over the tokens, the integrand at ``t`` is the density of the
    ``(n + 1)``-th clock (the set is the first ``n``; the next one fires at ``t``), so what lies
    before ``t_lo`` is at most ``P[n + 1 clocks fired by t_lo] ≤ e_{n+1}(π(t_lo)) ≤
    t_lo^{n+1} e_{n+1}(q)`` (``π_x(t) ≤ q_x t``); ``t_lo`` is the ``t`` that puts this at
    1e-18, divided by 4 (the bound then ``4^{n+1}`` times smaller: room for the trapezoid's
    first node). Right end: past the ``n`` largest clocks it decays as ``e^{−x} x^{n−1} /
    (n − 1)!`` with ``x = t ·`` (the mass beyond them); ``t_hi`` puts that below 1e-18.
    ``dt = t ds``. Needs ``n + 1`` tokens of ``q > 0``.
    """
    from otbound.drafts._sequential_mass import narrowed_step  # numba

    log_top = log2_elementary_symmetric(q_sorted, n + 1) * math.log(2.0)  # it may underflow
    t_lo = math.exp((math.log(1e-18) - log_top) / (n + 1)) / 4.0
    ranked = np.sort(q_sorted)[::-1]
    rest = float(ranked[n:].sum()) if ranked.size > n else float(ranked[-1])
    x = 40.0
    while -x + (n - 1) * math.log(x) - math.lgamma(n) > math.log(1e-18):
        x *= 1.1
    t_hi = x / max(rest, 1e-300)
    step = narrowed_step(step, n, CLOCK_DRAFTS)
    s = np.arange(math.log(t_lo), math.log(t_hi) + step, step)
    t = np.exp(s)
    return t, step * t


def poisson_scaled(weights: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    r"""``c · weights`` with ``e_n(c · weights) ≈ 1``, and that ``e_n``.

    Conditional Poisson sampling does not change when every weight is multiplied by ``c``;
    ``c = e_n(w)^{−1/n}`` (``e_n`` from the design's scaled recursion, which keeps it below
    the smallest float) puts ``e_0 = 1`` and ``e_n ≈ 1`` at the ends, and the ``e_k`` between
    are log-concave in ``k``, so the fields stay floats where ``e_n(w)`` alone would
    underflow (masses to 1e-300 with ``n`` at the support).

    Raises
    ------
    ValueError
        Where ``e_n(c · weights)`` is still not a positive normal float.
    """
    from otbound.selection._round_kernels import elementary_symmetric  # numba

    log2_top = log2_elementary_symmetric(weights, n)
    whole = 0.0
    if log2_top > -math.inf:
        scaled = weights * 2.0 ** (-log2_top / n)
        whole = float(elementary_symmetric(scaled, n))
    if not (np.isfinite(whole) and whole >= np.finfo(np.float64).tiny):
        raise ValueError(
            f"round rule: e_n(q) at n={n} is not a positive normal float after scaling "
            "(masses too disparate for the round rule's conditional-Poisson marginal)"
        )
    return scaled, whole


def round_values(
    q_sorted: np.ndarray, shares: np.ndarray, starts: np.ndarray, n: int, design: str, step: float
) -> np.ndarray:
    """Each round's selection chance per unit share, ``V[k, z]`` (rounds, m):
    ``r_z = Σ_k s_k(z) V[k, z]`` (the formulas of the module docstring). With exactly ``n``
    tokens of ``q > 0`` both designs draw them all, and the clock integral (whose rate of the
    next clock is then 0) does not apply: the conditional-Poisson sum serves both."""
    from otbound.selection import _round_kernels as kernels  # numba

    if design == _CP or q_sorted.size == n:  # n of n tokens: one set, the designs agree
        scaled, whole = poisson_scaled(q_sorted, n)
        phi = kernels.cp_round_values(scaled, share_sums(shares) * scaled, starts, n)
        values: np.ndarray = (phi * scaled) / whole  # q_z φ ≤ e_n: no overflow
        return values
    import numba

    threads = numba.get_num_threads()  # also starts numba's threading layer
    nodes, weights = clock_nodes(q_sorted, n, step)
    out: np.ndarray = kernels.wor_round_values(
        q_sorted, share_sums(shares), starts, n, nodes, weights, threads
    )
    return out


def round_marginal(
    q_sorted: np.ndarray,
    shares: np.ndarray,
    starts: np.ndarray,
    n: int,
    design: str,
    step: float = FINE_STEP,
) -> np.ndarray:
    """The round rule's selection marginal ``r`` in position order, checked: finite, in
    ``[0, 1]`` and summing to one beyond rounding, or ``ValueError``."""
    r = (shares * round_values(q_sorted, shares, starts, n, design, step)).sum(axis=0)
    if not np.all(np.isfinite(r)):
        raise ValueError(f"round rule ({design}, n={n}): the selection marginal is not finite")
    r = clip_rounding(r, 0.0, 1.0, f"round rule ({design}, n={n}): r")
    if abs(float(r.sum()) - 1.0) > SUM_TOLERANCE:
        raise ValueError(
            f"round rule ({design}, n={n}): the selection marginal sums to {r.sum()!r}, not 1"
        )
    return r


@dataclass(frozen=True)
class _Fit:
    """A fitted rule's positions, shares, marginal (position order) and violation."""

    position: np.ndarray
    shares: np.ndarray
    r_sorted: np.ndarray
    violation: float


def _evaluate(blocks: RoundBlocks, position: np.ndarray, rounds: int, n: int, design: str) -> _Fit:
    """The exact marginal of the rule at these positions (:func:`round_marginal`)."""
    shares = shares_from_positions(position, rounds)
    r = round_marginal(blocks.q_sorted, shares, blocks.starts, n, design)
    return _Fit(position, shares, r, blocks.violation(r))


def _tilted(q_sorted: np.ndarray, n: int) -> np.ndarray:
    r"""Odds ``e^{q_y t*} − 1`` of the clocks at ``t*``, where ``Σ_y π_y(t*) = n``: a slice of
    the clock race at time ``t*`` is Poisson sampling with these odds (``q`` itself where the
    support is ``n``: one set, no race)."""
    if q_sorted.size <= n:
        return q_sorted
    lo, hi = 1e-12, 1e12
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if (-np.expm1(-q_sorted * mid)).sum() < n else (lo, mid)
    tilted: np.ndarray = np.expm1(q_sorted * math.sqrt(lo * hi))
    return tilted


def _has_poisson_fields(weights: np.ndarray, n: int) -> bool:
    """Whether :func:`poisson_scaled` serves ``weights`` (finite, ``e_n`` a normal float)."""
    if not np.all(np.isfinite(weights)):
        return False
    try:
        poisson_scaled(weights, n)
    except ValueError:
        return False
    return True


def _fit_surrogate(
    blocks: RoundBlocks,
    weights: np.ndarray,
    n: int,
    position: np.ndarray,
    scale: np.ndarray,
    sweeps: int,
) -> np.ndarray:
    """:func:`~otbound.selection._round_kernels.fit_positions` with conditional-Poisson fields
    of ``weights`` (scaled by :func:`poisson_scaled`) times ``scale``, aimed at the blocks'
    target."""
    from otbound.selection._round_kernels import fit_positions  # numba

    scaled, whole = poisson_scaled(weights, n)
    units, limit, low = blocks.target * whole, blocks.p_sorted * whole, blocks.slope < 1.0
    out: np.ndarray = fit_positions(
        scaled, units, limit, low, blocks.starts, n, position, scale, sweeps, OMEGA, BLOCK_TOLERANCE
    )
    if not np.all(np.isfinite(out)):
        raise ValueError(
            f"round rule (n={n}): the fitted positions are not finite "
            "(masses too disparate for the conditional-Poisson fields in floats)"
        )
    return out


def _fit_without_replacement(
    blocks: RoundBlocks, n: int, rounds: int, position: np.ndarray, weights: np.ndarray, sweeps: int
) -> np.ndarray:
    """Defect correction: fit with conditional-Poisson fields of ``weights``, then rescale each
    round's field by (exact clock value) / (surrogate value) and fit again; returns the
    positions with the least violation. The clock values take :data:`COARSE_STEP` until the
    violation is below 1e-6 or stops halving (the coarse rule's error can be its floor), then
    :data:`FINE_STEP`; the corrections stop below :data:`FIT_TOLERANCE`, when two at the coarse
    step have not cut by a tenth a violation above :data:`STALL_VIOLATION` and a hundred times
    the coarse rule's own error (:meth:`RoundBlocks.total_error`), or when three at the fine
    step have not halved it."""
    scale = np.ones((rounds, blocks.q_sorted.size))
    position = _fit_surrogate(blocks, weights, n, position, scale, sweeps)
    best, best_at, gained_at, step = (np.inf, position), 0, 0, COARSE_STEP
    for correction in range(15):
        shares = shares_from_positions(position, rounds)
        exact = round_values(blocks.q_sorted, shares, blocks.starts, n, _WOR, step)
        r = (shares * exact).sum(axis=0)
        violation = blocks.violation(r)
        if violation < 0.5 * best[0]:
            best_at = correction  # progress: the violation halved
        if violation < 0.9 * best[0]:
            gained_at = correction  # some progress: it fell by a tenth
        if violation < best[0]:
            best = (violation, position)
        if violation <= FIT_TOLERANCE:
            break
        floor = max(STALL_VIOLATION, 100.0 * blocks.total_error(r))
        if step == COARSE_STEP and correction - gained_at >= 2 and violation > floor:
            break  # stuck far above the coarse rule's error: no room in these rounds (fallbacks)
        if step == COARSE_STEP and (violation < 1e-6 or correction - best_at >= 2):
            step, best_at = FINE_STEP, correction  # near the end, or the coarse rule's floor
        elif correction - best_at >= 3:
            break  # no progress at the fine step
        surrogate = round_values(weights, shares, blocks.starts, n, _CP, step)
        scale = np.where(surrogate > 0.0, exact / np.where(surrogate > 0.0, surrogate, 1.0), 1.0)
        position = _fit_surrogate(blocks, weights, n, position, scale, sweeps)
    return best[1]


def _fit(
    blocks: RoundBlocks, n: int, design: str, rounds: int, start: np.ndarray, tilted: bool
) -> _Fit:
    """One fit with ``rounds`` rounds from the positions ``start`` (conditional Poisson: the
    fields of ``q``; without replacement: the defect correction from the fields of ``q``, or
    of the tilted odds)."""
    q_sorted = blocks.q_sorted
    if design == _CP:
        scale = np.ones((rounds, q_sorted.size))
        position = _fit_surrogate(blocks, q_sorted, n, start, scale, SWEEPS)
    else:
        weights = _tilted(q_sorted, n) if tilted else q_sorted
        position = _fit_without_replacement(blocks, n, rounds, start, weights, CORRECTION_SWEEPS)
    return _evaluate(blocks, position, rounds, n, design)


def _best_fit(blocks: RoundBlocks, n: int, design: str) -> _Fit:
    """:data:`ROUNDS` rounds from the top round; where a violation is left, the fallbacks in
    turn, keeping the fit with the least violation: :data:`MORE_ROUNDS` rounds started from
    the best positions so far (the new rounds above them, room for tokens held at the top
    round), the tilted fields (without replacement), :data:`MORE_ROUNDS` rounds with the new
    rounds below (room for tokens held at the bottom). Every candidate's marginal is exact,
    so choosing among them keeps the rule lossless."""
    top = np.full(blocks.q_sorted.size, ROUNDS - 1.0)
    best = _fit(blocks, n, design, ROUNDS, top, tilted=False)
    fallbacks = [(MORE_ROUNDS, False, "above")]
    if design == _WOR:
        fallbacks.append((ROUNDS, True, "top"))
    fallbacks.append((MORE_ROUNDS, False, "below"))
    for rounds, tilted, room in fallbacks:
        if best.violation <= FIT_TOLERANCE:
            break
        if tilted and not _has_poisson_fields(_tilted(blocks.q_sorted, n), n):
            continue  # odds e^{q t*} − 1 beyond the floats (a peaked q, n ≫ 1): no candidate
        start = {
            "top": top,
            "above": best.position,
            "below": best.position + (rounds - best.shares.shape[0]),
        }[room]
        fit = _fit(blocks, n, design, rounds, start, tilted)
        if fit.violation < best.violation:
            best = fit
    return best


def round_rule(p: np.ndarray, q: np.ndarray, n: int, design: str) -> RoundRule:
    r"""The round rule of one step (module docstring), fitted towards ``Σ min(p, r) = α*``.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated target and draft distributions.
    n : int
        Number of drafts (at most the number of tokens with ``q > 0``).
    design : str
        A design of :data:`ROUND_RULE_DESIGNS`.

    Returns
    -------
    RoundRule
        Its :attr:`~RoundRule.selection` is the rule's exact marginal whatever the fit
        reached; :attr:`~RoundRule.gap` is what the fit left of ``α*``.

    Raises
    ------
    ValueError
        Another design, ``n`` above the support of ``q``, or masses for which the marginal is
        not a finite distribution in floats.

    Examples
    --------
    >>> import numpy as np
    >>> p, q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])
    >>> rule = round_rule(p, q, 2, "conditional_poisson")
    >>> round(rule.alpha_star, 6), round(rule.acceptance(), 6)
    (1.0, 1.0)
    >>> rule.verify(np.array([[0, 1], [2, 0]]), np.random.default_rng(0)).shape
    (2,)
    """
    if design not in ROUND_RULE_DESIGNS:
        raise ValueError(
            f"the round rule serves designs {', '.join(ROUND_RULE_DESIGNS)}, got {design!r}"
        )
    get_design(design).check(q, n)
    blocks = round_blocks(p, q, n, design)
    if n == 1:  # one draft: it is selected, r = q
        fit = _evaluate(blocks, np.full(blocks.q_sorted.size, ROUNDS - 1.0), ROUNDS, n, design)
    else:
        fit = _best_fit(blocks, n, design)
    r = np.zeros(p.size)
    r[blocks.order] = fit.r_sorted
    return RoundRule(design, n, p, blocks, fit.shares, r, fit.violation)


@dataclass(frozen=True)
class RoundRule:
    r"""The round rule of one step: blocks, shares, and the exact selection marginal.

    Attributes
    ----------
    design, n : str, int
        The draft design (one of :data:`ROUND_RULE_DESIGNS`) and the number of drafts.
    target : numpy.ndarray, shape (V,)
        ``p``.
    blocks : RoundBlocks
        The order, blocks and target of the step.
    shares : numpy.ndarray, shape (K, m)
        Each position's round shares (round 0 the lowest).
    selection : numpy.ndarray, shape (V,)
        ``r(z) = P(Z = z)`` under the design, exact (0 where ``q = 0``).
    violation : float
        :meth:`RoundBlocks.violation` of ``r``: zero exactly when ``Σ min(p, r) = α*``.
    """

    design: str
    n: int
    target: np.ndarray
    blocks: RoundBlocks
    shares: np.ndarray
    selection: np.ndarray
    violation: float

    @property
    def alpha_star(self) -> float:
        """``α*`` of the step (the sweep along the rule's order)."""
        return self.blocks.alpha_star

    @property
    def gap(self) -> float:
        """``α* − Σ min(p, r)``: what the fit left (0 to rounding where it reached ``α*``)."""
        return self.alpha_star - self.acceptance()

    def acceptance(self) -> float:
        """``Σ min(p, r)``: the chance the selected draft passes its test."""
        return float(np.minimum(self.target, self.selection).sum())

    def exact_acceptance(self) -> float | None:
        r"""``P(Y ∈ S)`` of the verifier, where the rule leaves no violation to rounding.

        ``P(Y ∈ S) − Σ min(p, r)`` is the chance that a rejected selection's replacement ``y``
        is a draft. A rejection in a block of slope ``< 1`` has chance ``Σ (r − p)⁺`` there.
        After a rejection in a block ``j`` of slope ``≥ 1``, ``S`` meets no block above ``j``, so
        ``y ∈ S`` lies in block ``j`` or below (slopes ``≥ 1``), and ``P(rejection, Y = y) =
        (p − r)⁺(y)`` (a rejection has chance ``‖(p − r)⁺‖₁``). So ``Σ min(p, r) ≤ P(Y ∈ S) ≤
        Σ min(p, r) +`` :attr:`violation`: exact (to 5e-13) when :attr:`violation` ``≤ 5e-13``,
        else ``None``.
        """
        return self.acceptance() if self.violation <= EXACT_VIOLATION else None

    @cached_property
    def position(self) -> np.ndarray:
        """Each token's position, ``-1`` where ``q = 0`` (shape (V,))."""
        out = np.full(self.target.size, -1, dtype=np.int64)
        out[self.blocks.order] = np.arange(self.blocks.order.size)
        return out

    @cached_property
    def _rank(self) -> np.ndarray:
        """Per position, the priority of its round 0: ``(blocks − 1 − block) K m + (m − 1 −
        position)``; round ``k`` adds ``k m``. A larger key wins."""
        m, rounds = self.blocks.order.size, self.shares.shape[0]
        starts = self.blocks.starts
        block = np.repeat(np.arange(starts.size - 1), np.diff(starts))
        rank: np.ndarray = (starts.size - 2 - block) * rounds * m + (m - 1 - np.arange(m))
        return rank

    @cached_property
    def _cumulative_shares(self) -> np.ndarray:
        """``s_0 + … + s_k`` per position (m, K), the last column exactly 1."""
        out = np.cumsum(self.shares.T, axis=1)
        out[:, -1] = 1.0
        return out

    @cached_property
    def rest_cdf(self) -> np.ndarray:
        """:func:`~otbound.selection.rule.residual_cdf` of ``p`` and ``r``."""
        return residual_cdf(self.target, self.selection)

    def residual(self) -> np.ndarray:
        """``(p − r)⁺ / ‖(p − r)⁺‖₁``: where a rejected selection's replacement is drawn."""
        return np.diff(self.rest_cdf, prepend=0.0)

    def select(self, drafts: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The selected token of each row of ``drafts`` (trials, n) and its ``r``: every draft
        draws a round (one uniform), the highest (block, round, ``p / q``) wins."""
        positions = self.position[drafts]
        if np.any(positions < 0):
            raise ValueError("drafts contain a token with q = 0, which the design never draws")
        if drafts.shape[1] == 1:  # one draft: it is selected (no randomness spent on it)
            only: np.ndarray = drafts[:, 0].copy()
            return only, self.selection[only]
        u = rng.random(drafts.shape)
        below = self._cumulative_shares[positions][..., :-1]
        rounds = np.count_nonzero(u[..., None] >= below, axis=-1)
        key = self._rank[positions] + rounds * self.blocks.order.size
        index = np.argmax(key, axis=1)
        chosen: np.ndarray = drafts[np.arange(drafts.shape[0]), index]
        return chosen, self.selection[chosen]

    def verify(self, drafts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The output token of each row of ``drafts``: a selection, then its single-draft test."""
        selected, _ = self.select(drafts, rng)
        return single_draft_test(selected, self.target, self.selection, rng, self.rest_cdf)
