r"""Exact ``Q(H)`` along a prefix sweep for sequential sampling without replacement.

Drafts drawn one after another without replacement (Gumbel-top-k,
``torch.multinomial(replacement=False)``) are the firing order of independent exponential
clocks ``T_x ~ Exp(q_x)``. The first ``n`` draws all lie in ``H`` exactly when the ``n``-th
clock of ``H`` rings before the first clock outside ``H``, which rings at ``Exp(λ)`` with
``λ = 1 − q(H)``. Writing ``N_H(t)`` for the number of ``H`` clocks rung by time ``t`` (a
Poisson-binomial count with probabilities ``1 − exp(−q_x t)``),

.. math::

    1 - Q(H) = R(H) = \int_0^\infty λ e^{-λ t} P[N_H(t) < n]\,dt
                    = \int_{-\infty}^{\infty} λ t e^{-λ t} P[N_H(t) < n]\,ds,\quad t = e^s .

Numerical method (every error term bounded):

* **Log-time trapezoid rule.** The integrand is analytic in ``s`` in the strip
  ``|Im s| < π/2`` and decays at both ends, so the trapezoid rule with step ``h`` converges
  like ``exp(−π²/h)`` (``h = 0.2``: below 1e-20 for the Gumbel weight alone). Log time covers
  every time scale from ``1/max q`` to ``1/min λ`` (1e30 and beyond) with the same relative
  resolution, which is what a general-purpose quadrature misses.
* **Right truncation** at ``t_hi = 40 / λ_min``: the neglected weight is at most
  ``e^{−40} < 5e-18`` for every prefix.
* **Left end.** Below ``t_lo`` we use ``P[N < n] = 1``; the error is at most
  ``h (c t_lo)^{n+1} / (n! (1 − e^{−h(n+1)}))`` since ``P[N ≥ n] ≤ (c t)^n / n!``, and
  ``t_lo`` is chosen to make this below 1e-17. The remaining sum of the weight over the
  infinite left grid has a closed series (:func:`_left_weight`).
* **Poisson-binomial recursion** in linear space: all terms are non-negative, so there is no
  cancellation; values that underflow are below 1e-300 and irrelevant at the absolute
  accuracy we need. Along the sweep the count distribution truncated at ``n`` is updated in
  ``O(n)`` when a token joins ``H``, and a node stops as soon as ``P[N < n]`` drops below
  1e-30 (it can only decrease as ``H`` grows).

The total cost is ``O(V · n · nodes)`` with ``nodes ≈ 5 · ln(t_hi / t_lo)`` (about 150-300),
much of it skipped by the early stop. The kernel is compiled with numba.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numba
import numpy as np

from otbound._checks import clip_rounding

#: Trapezoid step in log time.
LOG_TIME_STEP = 0.2
#: ``λ t_hi`` for the largest node; the neglected tail weight is ``exp(-40)``.
RIGHT_TAIL = 40.0
#: Bound on the error of treating ``P[N < n] = 1`` left of the grid.
LEFT_TOLERANCE = 1e-17
#: A node's recursion stops once ``P[N < n]`` falls below this.
NEGLIGIBLE = 1e-30
#: The largest node ``t`` of the grid; beyond, the rates are rescaled (see the code).
LARGEST_TIME = 1e300
_LN2 = math.log(2.0)


def _left_time(n: int, h: float) -> float:
    """The first node ``t_lo`` such that the left-end error is below ``LEFT_TOLERANCE``."""
    bound = LEFT_TOLERANCE * math.factorial(n) * (-math.expm1(-h * (n + 1))) / h
    return min(bound ** (1.0 / (n + 1)), 1.0)


def _left_weight(lam: np.ndarray, t_lo: float, h: float) -> np.ndarray:
    r"""``Σ_{j≥1} h λ t_j e^{−λ t_j}`` over the nodes ``t_j = t_lo e^{−jh}`` left of the grid.

    Expanding ``e^{−x}`` gives ``h Σ_m (−1)^m (λ t_lo)^{m+1} / (m! (e^{h(m+1)} − 1))``; with
    ``λ t_lo ≤ 1`` sixty terms are exact to rounding.
    """
    x = lam * t_lo
    total = np.zeros_like(x)
    term = x.copy()  # (λ t_lo)^{m+1} / m!
    for m in range(60):
        total += (-1) ** m * term / math.expm1(h * (m + 1))
        term = term * x / (m + 1)
    return h * total


@numba.njit(cache=True, inline="always")
def _decay(x):  # pragma: no cover - compiled
    """``(e^{−x}, 1 − e^{−x})`` for ``x ≥ 0``, each to full precision, one ``exp`` at most.

    Below ``x = 1e-3`` a Taylor polynomial gives ``1 − e^{−x}`` to a relative ``x^5/120 < 1e-17``;
    above 745 ``e^{−x}`` underflows to zero.
    """
    if x < 1e-3:
        fire = x * (1.0 - x * (0.5 - x * (1.0 / 6.0 - x * (1.0 / 24.0))))
        return 1.0 - fire, fire
    if x > 745.0:
        return 0.0, 1.0
    stay = math.exp(-x)
    return stay, 1.0 - stay


@numba.njit(cache=True, parallel=True)
def _remaining_mass(q, suffix, counts, t_lo, h, num_nodes, groups):  # pragma: no cover - compiled
    """Trapezoid sum of ``λ_i t e^{−λ_i t} P[N_{H_i}(t) < n]`` over the grid, per ``n`` and prefix.

    ``counts`` holds the ``n`` values, strictly increasing. The count distribution is kept
    truncated at the largest; its first ``n`` entries are exact for every smaller ``n``
    (``P[N = k]`` only feeds ``k + 1``), so one pass over the tokens serves every ``n``.
    """
    size = q.shape[0]
    many = counts.shape[0]
    top = counts[many - 1]
    acc = np.zeros((groups, many, size + 1))
    for g in numba.prange(groups):
        state = np.empty(top)
        for j in range(g, num_nodes, groups):
            if j * h < 700.0:
                t = t_lo * math.exp(j * h)
            else:  # e^{jh} alone would overflow while t_lo e^{jh} does not
                t = math.exp(math.log(t_lo) + j * h)
            state[:] = 0.0
            state[0] = 1.0
            for i in range(size):
                stay, fire = _decay(q[i] * t)
                for k in range(top - 1, 0, -1):
                    state[k] = state[k] * stay + state[k - 1] * fire
                state[0] *= stay
                lam_t = suffix[i + 1] * t
                weight = 0.0
                if 0.0 < lam_t < 745.0:  # beyond, the weight underflows (t may even be inf)
                    weight = h * lam_t * _decay(lam_t)[0]
                below = 0.0
                c = 0
                for k in range(top):
                    below += state[k]
                    if k + 1 == counts[c]:  # below = P[N < counts[c]]
                        acc[g, c, i + 1] += weight * below
                        c += 1
                if below < NEGLIGIBLE:  # P[N < n] for the largest n bounds every other
                    break
    out = np.zeros((many, size + 1))
    for g in range(groups):
        out += acc[g]
    return out


def sequential_prefix_mass(q_sorted: np.ndarray, n: int, h: float = LOG_TIME_STEP) -> np.ndarray:
    """``Q(H_i)`` for every prefix ``H_i`` of ``q_sorted`` (sequential draws without replacement).

    Parameters
    ----------
    q_sorted : numpy.ndarray, shape (V,)
        Draft probabilities in sweep order, summing to one, with at least ``n`` positive.
    n : int
        Number of drafts.
    h : float
        Trapezoid step in log time.

    Returns
    -------
    numpy.ndarray, shape (V + 1,)
        ``Q[i] = P(all n drafts lie in the first i tokens)``; ``Q[0] = 0``.
    """
    return sequential_prefix_masses(q_sorted, [n], h)[0]


def sequential_prefix_masses(
    q_sorted: np.ndarray, counts: Sequence[int], h: float = LOG_TIME_STEP
) -> np.ndarray:
    """:func:`sequential_prefix_mass` for several ``n`` at once, from one pass per node.

    The grid starts at the smallest ``t_lo`` of the ``n`` values (a smaller ``t_lo`` only
    shrinks the left-end error of the others) and a node stops once ``P[N < max n]`` is
    negligible, so the cost is about that of a single ``n``: on real draft distributions the
    per-token work is the ``exp`` of the decay, not the ``O(n)`` recursion.

    Parameters
    ----------
    q_sorted : numpy.ndarray, shape (V,)
        Draft probabilities in sweep order, summing to one.
    counts : sequence of int
        The ``n`` values (any order, repeats allowed), each ``>= 1``.
    h : float
        Trapezoid step in log time.

    Returns
    -------
    numpy.ndarray, shape (len(counts), V + 1)
        Row ``j``: ``Q`` of every prefix for ``counts[j]`` drafts (0 where a prefix holds fewer
        than ``counts[j]`` tokens of positive mass).
    """
    q = np.ascontiguousarray(q_sorted, dtype=np.float64)
    wanted = np.asarray(list(counts), dtype=np.int64)
    distinct = np.unique(wanted)
    size = q.shape[0]
    suffix = np.zeros(size + 1)
    suffix[:-1] = np.cumsum(q[::-1])[::-1]
    positives = np.concatenate(([0], np.cumsum(q > 0)))
    enough = positives[None, :] >= distinct[:, None]  # fewer than n positive: Q(H) = 0 exactly
    outside = suffix > 0  # nothing outside H: Q(H) = 1 exactly
    live = enough & outside[None, :]
    mass = np.where(enough, 1.0, 0.0)
    if np.any(live):
        t_lo = min(_left_time(int(n), h) for n in distinct)
        # log(t_hi / t_lo) in logs, so that suffix masses down to the smallest subnormal stay
        # finite; the smallest n has the most live prefixes
        log_t_hi = math.log(RIGHT_TAIL) - math.log(suffix[live[0]].min())
        num_nodes = math.ceil((log_t_hi - math.log(t_lo)) / h) + 1
        # Multiplying every rate by c and every time by 1/c leaves the firing order, hence
        # Q(H), unchanged. Where t_hi would pass LARGEST_TIME (suffix masses below ~1e-298) the
        # nodes t themselves overflow, so the rates are scaled up by a power of two (exact,
        # subnormals included) and the grid down by the same factor: every product q t is the
        # same number.
        scale = math.ldexp(1.0, max(0, math.ceil((log_t_hi - math.log(LARGEST_TIME)) / _LN2)))
        groups = max(1, min(numba.get_num_threads(), num_nodes))
        remaining = _remaining_mass(
            q * scale, suffix * scale, distinct, t_lo / scale, h, num_nodes, groups
        )
        left = _left_weight(suffix, t_lo, h)
        mass = np.where(live, 1.0 - (remaining + left[None, :]), mass)
    # the integral's error is below 1e-12 (module docstring): more than that outside [0, 1]
    # is a bug, not rounding
    mass = clip_rounding(mass, 0.0, 1.0, "without_replacement Q(H) (exponential-clock integral)")
    return mass[np.searchsorted(distinct, wanted)]
