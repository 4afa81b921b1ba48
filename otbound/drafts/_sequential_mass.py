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

import functools
import math
from collections.abc import Sequence

import numba
import numpy as np

from otbound._checks import clip_rounding
from otbound._threads import serial_build
from otbound.drafts._sequential_layout import (
    prefix_sums,
)

#: Trapezoid step in log time.
LOG_TIME_STEP = 0.2
#: ``λ t_hi`` for the largest node; the neglected tail weight is ``exp(-40)``.
RIGHT_TAIL = 40.0
#: Bound on the error of treating ``P[N < n] = 1`` left of the grid.
LEFT_TOLERANCE = 1e-17
#: A node's recursion stops once ``P[N < n]`` falls below this.
NEGLIGIBLE = 1e-30
#: Inside a block the node's ``P[N < max n]`` is checked after every this many tokens (an
#: excluded run of buckets is one block of up to ``V`` tokens; at the largest nodes its first
#: tokens already make the rest negligible).
DEATH_CHECK = 32
#: The largest node ``t`` of the grid; beyond, the rates are rescaled (see the code).
LARGEST_TIME = 1e300
LN2 = math.log(2.0)
#: ``2^-54``: a term at most this times a positive sum ``s`` is below half of ``s``'s last place.
_HALF_ULP = 2.0**-54
#: The grid's nodes are split into this many interleaved chunks (node ``j`` in chunk
#: ``j mod NODE_CHUNKS``), shared among numba's threads, each with its own accumulator, summed
#: in chunk order: the same bits on any number of threads (one chunk per thread made the
#: bound depend, by rounding, on the machine's cores and on ``numba.set_num_threads``).
NODE_CHUNKS = 16


def narrowed_step(step: float, n: int, widest: int) -> float:
    r"""``step · min(1, √(widest / n))``: a trapezoid step in ``ln t`` for the clock integral
    of ``n`` drafts. The integrand's peak in ``ln t`` is the law of ``ln T_(n)`` (the ``n``-th
    firing), whose variance is at least ``ψ′(n) ≈ 1/n``; the rule's error falls as
    ``exp(−2π² σ² / h²)``, so beyond ``widest`` drafts the step shrinks as ``1/√n``, keeping
    ``n h²`` at its value there."""
    return step * min(1.0, math.sqrt(widest / n))


def log_time_step(counts: Sequence[int]) -> float:
    r"""The trapezoid step in ``ln t`` for these ``n``: :data:`LOG_TIME_STEP` up to 8 drafts,
    ``LOG_TIME_STEP · √(8 / n)`` beyond. The integrand's peak in ``ln t`` narrows as
    ``1/√n`` (the ``n``-th clock's time concentrates), and a fixed step left errors of 2e-12
    at ``n = 16``, 3e-9 at 30 and 4e-7 at 60 against the converged integral; with the shrinking
    step they stay at rounding (tested against the reference at a fine step)."""
    return narrowed_step(LOG_TIME_STEP, max(int(n) for n in counts), 8)


def left_time(n: int, h: float) -> float:
    """The first node ``t_lo`` such that the left-end error is below ``LEFT_TOLERANCE``."""
    log_bound = (
        math.log(LEFT_TOLERANCE)
        + math.lgamma(n + 1)
        + math.log(-math.expm1(-h * (n + 1)))
        - math.log(h)
    )  # in logs: n! leaves the floats at n = 171
    return min(math.exp(log_bound / (n + 1)), 1.0)


def _left_weight(lam: np.ndarray, t_lo: float, h: float) -> np.ndarray:
    r"""``Σ_{j≥1} h λ t_j e^{−λ t_j}`` over the nodes ``t_j = t_lo e^{−jh}`` left of the grid.

    Expanding ``e^{−x}`` gives ``h Σ_m (−1)^m (λ t_lo)^{m+1} / (m! (e^{h(m+1)} − 1))``; with
    ``λ t_lo ≤ 1`` sixty terms are exact to rounding. The terms fall in size, so the sum stops
    at the first one below half of its last place (adding it, or any later one, would
    round back to the same sum): the same value as all sixty, in a few terms.
    """
    return left_weight_kernel(
        np.ascontiguousarray(lam, dtype=np.float64), t_lo, h, left_weight_inverses(h)
    )


@functools.lru_cache(maxsize=8)
def left_weight_inverses(h: float) -> np.ndarray:
    """``1 / (e^{h(m+1)} − 1)`` for ``m < 60`` (kept per ``h``, read-only)."""
    inverse = np.array([1.0 / math.expm1(h * (m + 1)) for m in range(60)])
    inverse.setflags(write=False)
    return inverse


@numba.njit(cache=True)
def left_weight_kernel(lam, t_lo, h, inverse):  # pragma: no cover - compiled
    out = np.empty(lam.shape[0])
    for i in range(lam.shape[0]):
        x = lam[i] * t_lo
        total = 0.0
        term = x  # (λ t_lo)^{m+1} / m!
        sign = 1.0
        for m in range(inverse.shape[0]):
            value = term * inverse[m]
            if value <= total * _HALF_ULP:  # this and every later term leave the sum as it is
                break
            total += sign * value
            term = term * x / (m + 1)
            sign = -sign
        out[i] = h * total
    return out


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


def sequential_prefix_mass(q_sorted: np.ndarray, n: int, h: float | None = None) -> np.ndarray:
    """``Q(H_i)`` for every prefix ``H_i`` of ``q_sorted`` (sequential draws without replacement).

    Parameters
    ----------
    q_sorted : numpy.ndarray, shape (V,)
        Draft probabilities in sweep order, summing to one, with at least ``n`` positive.
    n : int
        Number of drafts.
    h : float, optional
        Trapezoid step in log time (default :func:`log_time_step` of the ``n``).

    Returns
    -------
    numpy.ndarray, shape (V + 1,)
        ``Q[i] = P(all n drafts lie in the first i tokens)``; ``Q[0] = 0``.
    """
    return sequential_prefix_masses(q_sorted, [n], h)[0]


def _prefix_layout(
    q_sorted: np.ndarray, counts: Sequence[int], p_sorted: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``q`` as float64, the wanted and distinct ``n``, the mass outside each prefix
    (``suffix[i] = q(V \\ H_i)``), the number of positive masses in each prefix and the
    prefix sums of ``p_sorted`` (of zeros when it is not given), from one compiled pass
    (:func:`otbound.drafts._sequential_layout.prefix_sums`, numpy's sums bit for bit)."""
    q = np.ascontiguousarray(q_sorted, dtype=np.float64)
    wanted = np.asarray(list(counts), dtype=np.int64)
    p = np.zeros_like(q) if p_sorted is None else np.ascontiguousarray(p_sorted, np.float64)
    cum_p, suffix, positives = prefix_sums(p, q)
    distinct = np.asarray(sorted(set(wanted.tolist())), dtype=np.int64)  # np.unique's
    return q, wanted, distinct, suffix, positives, cum_p


def sequential_prefix_masses(
    q_sorted: np.ndarray, counts: Sequence[int], h: float | None = None
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
    h : float, optional
        Trapezoid step in log time (default :func:`log_time_step` of the ``n``).

    Returns
    -------
    numpy.ndarray, shape (len(counts), V + 1)
        Row ``j``: ``Q`` of every prefix for ``counts[j]`` drafts (0 where a prefix holds fewer
        than ``counts[j]`` tokens of positive mass).
    """
    h = log_time_step(counts) if h is None else h
    q, wanted, distinct, suffix, positives, _ = _prefix_layout(q_sorted, counts)
    enough = positives[None, :] >= distinct[:, None]  # fewer than n positive: Q(H) = 0 exactly
    outside = suffix > 0  # nothing outside H: Q(H) = 1 exactly
    live = enough & outside[None, :]
    mass = np.where(enough, 1.0, 0.0)
    if np.any(live):
        t_lo = min(left_time(int(n), h) for n in distinct)
        # log(t_hi / t_lo) in logs, so that suffix masses down to the smallest subnormal stay
        # finite; the smallest n has the most live prefixes
        log_t_hi = math.log(RIGHT_TAIL) - math.log(suffix[live[0]].min())
        num_nodes = math.ceil((log_t_hi - math.log(t_lo)) / h) + 1
        # Multiplying every rate by c and every time by 1/c leaves the firing order, hence
        # Q(H), unchanged. Where t_hi would pass LARGEST_TIME (suffix masses below ~1e-298) the
        # nodes t themselves overflow, so the rates are scaled up by a power of two (exact,
        # subnormals included) and the grid down by the same factor: every product q t is the
        # same number.
        scale = math.ldexp(1.0, max(0, math.ceil((log_t_hi - math.log(LARGEST_TIME)) / LN2)))
        groups = max(1, min(NODE_CHUNKS, num_nodes))
        remaining = _remaining_mass(
            q * scale, suffix * scale, distinct, t_lo / scale, h, num_nodes, groups
        )
        left = _left_weight(suffix, t_lo, h)
        mass = np.where(live, 1.0 - (remaining + left[None, :]), mass)
    # the integral's error is below 1e-12 (module docstring): more than that outside [0, 1]
    # is a bug, not rounding
    mass = clip_rounding(mass, 0.0, 1.0, "without_replacement Q(H) (exponential-clock integral)")
    return mass[np.searchsorted(distinct, wanted)]


# -- the minimum of p(H) − Q(H) without every prefix's Q: blocks and refinement --------------

#: Tokens with ``q t`` at most this are folded into their block's power-series update.
SMALL_RATE = 0.05
#: Most power-sum terms a block update uses (enough for ``SMALL_RATE``; see the bound).
MOST_TERMS = 18
#: Bound on the truncation error of each log-coefficient of a block update.
SERIES_TOLERANCE = 1e-19
#: Segments of at most this many tokens are swept token by token (a fold costs more).
FOLD_MIN = 16


@functools.lru_cache(maxsize=32)
def series_table(top: int, terms: int) -> np.ndarray:
    r"""``β[m, r] = (−1)^{m−1} (m−1)! S(r, m) / r!`` for ``1 ≤ m < top``, ``r ≤ terms``
    (kept per ``(top, terms)``, read-only).

    ``log(1 + (e^a − 1) z) = Σ_m (−1)^{m−1} (e^a − 1)^m z^m / m`` and
    ``(e^a − 1)^m = m! Σ_r S(r, m) a^r / r!`` (Stirling numbers of the second kind).
    """
    stirling = np.zeros((terms + 1, top + 1))
    stirling[0, 0] = 1.0
    for r in range(1, terms + 1):
        for m in range(1, top + 1):
            stirling[r, m] = m * stirling[r - 1, m] + stirling[r - 1, m - 1]
    beta = np.zeros((top, terms + 1))
    for m in range(1, top):
        for r in range(m, terms + 1):
            beta[m, r] = (
                (-1) ** (m - 1) * math.factorial(m - 1) * stirling[r, m] / math.factorial(r)
            )
    beta.setflags(write=False)
    return beta


@numba.njit(cache=True)
def _group_power_sums(masses, largest, out, ratio, power):  # pragma: no cover - compiled
    r"""``out[r − 1] = Σ_x (m_x / largest)^r`` for ``r = 1..len(out)`` (the masses at most
    ``largest``), one pass over the masses per two powers ``r``, ``r + 1``, with four running
    sums of each (vectorised); ``ratio`` and ``power`` are work arrays at least as long as
    ``masses``.

    Each power is the one before times the ratio, as one pass per power took it (the same
    bits: the same products and the same sums in the same order), with half the passes over
    ``power``."""
    count = masses.shape[0]
    for k in range(count):
        ratio[k] = masses[k] / largest
        power[k] = ratio[k]
    whole = count - count % 4
    terms = out.shape[0]
    for r in range(0, terms, 2):
        a0 = a1 = a2 = a3 = 0.0  # Σ ratio^(r+1)
        b0 = b1 = b2 = b3 = 0.0  # Σ ratio^(r+2)
        for k in range(0, whole, 4):
            x0, x1, x2, x3 = power[k], power[k + 1], power[k + 2], power[k + 3]
            y0, y1 = x0 * ratio[k], x1 * ratio[k + 1]
            y2, y3 = x2 * ratio[k + 2], x3 * ratio[k + 3]
            a0 += x0
            a1 += x1
            a2 += x2
            a3 += x3
            b0 += y0
            b1 += y1
            b2 += y2
            b3 += y3
            power[k] = y0 * ratio[k]
            power[k + 1] = y1 * ratio[k + 1]
            power[k + 2] = y2 * ratio[k + 2]
            power[k + 3] = y3 * ratio[k + 3]
        for k in range(whole, count):
            x0 = power[k]
            y0 = x0 * ratio[k]
            a0 += x0
            b0 += y0
            power[k] = y0 * ratio[k]
        out[r] = (a0 + a1) + (a2 + a3)
        if r + 1 < terms:
            out[r + 1] = (b0 + b1) + (b2 + b3)


@numba.njit(cache=True)
def fold_limits(t_lo, h, num_nodes):  # pragma: no cover - compiled
    """``SMALL_RATE / t_j`` at every node: the masses node ``j`` folds (falling in ``j``)."""
    limits = np.empty(num_nodes)
    for j in range(num_nodes):
        limits[j] = SMALL_RATE / _node_time(t_lo, h, j)
    return limits


#: ``log2(1 + (k + 1/2) / 64)``: the mantissa's part of ``log2 x`` for a float ``x`` whose top
#: six mantissa bits are ``k``, to within ``log2(1 + 1/128) < 0.012``.
_LOG2_MANTISSA = np.log2(1.0 + (np.arange(64) + 0.5) / 64.0)
#: The bits of a float64 above its top six mantissa bits: sign, exponent, those six.
_TOP_BITS = np.uint64(52 - 6)
_SIX_BITS = np.uint64(6)
_LAST_SIX = np.uint64(63)


@numba.njit(cache=True, inline="always")
def _bits_log(word):  # pragma: no cover - compiled
    """``log x`` of a positive normal float64 ``x`` from its IEEE-754 bits ``word``, to within
    0.008: its exponent and top six mantissa bits (:data:`_LOG2_MANTISSA`), no ``log`` call."""
    top = word >> _TOP_BITS  # sign (0), exponent and six mantissa bits
    exponent = np.int64(top >> _SIX_BITS) - 1023
    return (exponent + _LOG2_MANTISSA[np.int64(top & _LAST_SIX)]) * LN2


@numba.njit(cache=True, inline="always")
def _fold_class(value, word, limits, first_log, h):  # pragma: no cover - compiled
    """The number of nodes at which a mass is folded: the ``c`` with ``value ≤ limits[j]``
    exactly for ``j < c`` (``limits`` falls by ``e^{−h}`` a node).

    ``word`` is ``value``'s IEEE-754 bits: :func:`_bits_log` guesses ``c``, and the
    comparisons settle it (from any guess: the answer is the comparisons')."""
    nodes = limits.shape[0]
    if value <= limits[nodes - 1]:
        return nodes
    if value > limits[0]:
        return 0
    guess = int((first_log - _bits_log(word)) / h) + 1
    c = min(max(guess, 1), nodes - 1)
    while c < nodes and value <= limits[c]:
        c += 1
    while c > 1 and value > limits[c - 1]:
        c -= 1
    return c


@numba.njit(cache=True, parallel=True)
def segment_power_sums(
    vals, edges, rows, limits, h, layout, sigma, fold_end, largest, schedule, bounds, work
):  # pragma: no cover - compiled
    """Per segment ``[edges[s], edges[s+1])`` of ``vals`` longer than ``FOLD_MIN``: its masses
    laid out for :func:`_fold` at every node, without sorting them.

    At node ``j`` the masses at most ``limits[j] = SMALL_RATE / t_j`` are folded, the others
    swept one by one. A mass's *class* is the number of nodes that fold it
    (:func:`_fold_class`); ``layout[edges[s]:edges[s+1]]`` holds the segment's masses by class,
    the largest class first (each class in sweep order), so node ``j`` folds the first
    ``fold_end[b, j]`` of them (the classes above ``j``; ``b = rows[s]``), whose largest
    mass is ``largest[b, j]``, with ``σ_r = Σ (q_x / largest[b, j])^r`` for ``r = 1..terms`` in
    ``sigma[b, j]`` (0 where nothing is folded or the largest mass is 0). Node ``j``'s sums
    are node ``j + 1``'s rescaled plus the class ``j + 1`` (:func:`_group_power_sums`).

    Thread ``w`` takes the segments ``schedule[bounds[w]:bounds[w + 1]]``
    (:func:`_balanced_schedule`: every segment longer than ``FOLD_MIN``, the threads' shares
    about equal in tokens). ``work`` (float64, (3, ``vals.size``) at least; its values do not
    matter) holds each segment's temporaries at the segment's own columns: reused memory
    rather than fresh pages.
    """
    first_log = math.log(limits[0])
    words = vals.view(np.uint64)  # the masses' bits, for their classes
    classes = work[0].view(np.int64)
    for w in numba.prange(bounds.shape[0] - 1):
        for at in range(bounds[w], bounds[w + 1]):
            s = schedule[at]
            start, stop = edges[s], edges[s + 1]
            _one_segment_sums(
                vals, words, start, stop, rows[s], limits, first_log, h, layout, sigma, fold_end,
                largest, classes[start:stop], work[1, start:stop], work[2, start:stop],
            )  # fmt: skip


@numba.njit(cache=True, inline="always")
def _one_segment_sums(
    vals,
    words,
    start,
    stop,
    block,
    limits,
    first_log,
    h,
    layout,
    sigma,
    fold_end,
    largest,
    classes,
    ratio_work,
    power_work,
):  # pragma: no cover - compiled
    """:func:`segment_power_sums` of the segment ``[start, stop)`` (row ``block``), with work
    arrays of its length."""
    nodes = limits.shape[0]
    terms = sigma.shape[2]
    length = stop - start
    count = np.zeros(nodes + 1, dtype=np.int64)
    for i in range(length):
        c = _fold_class(vals[start + i], words[start + i], limits, first_log, h)
        classes[i] = c
        count[c] += 1
    # class c at [begin[c], begin[c] + count[c]); node j folds [0, begin[j])
    begin = np.empty(nodes + 2, dtype=np.int64)
    begin[nodes + 1] = 0
    begin[nodes] = 0
    for c in range(nodes - 1, -1, -1):
        begin[c] = begin[c + 1] + count[c + 1]
    fill = begin[: nodes + 1].copy()
    for i in range(length):
        c = classes[i]
        layout[start + fill[c]] = vals[start + i]
        fill[c] += 1
    added = np.empty(terms)
    previous = 0.0
    for j in range(nodes - 1, -1, -1):
        lo, hi = begin[j + 1], begin[j]
        fold_end[block, j] = hi
        if hi == lo:  # nothing joins: node j + 1's sums (zero at the last node)
            for r in range(terms):
                sigma[block, j, r] = sigma[block, j + 1, r] if j + 1 < nodes else 0.0
            largest[block, j] = previous
            continue
        top = previous
        for k in range(start + lo, start + hi):
            top = max(top, layout[k])
        largest[block, j] = top
        if top <= 0.0:  # only zero masses: nothing to fold
            for r in range(terms):
                sigma[block, j, r] = 0.0
            continue
        _group_power_sums(layout[start + lo : start + hi], top, added, ratio_work, power_work)
        ratio = previous / top
        power = 1.0
        for r in range(terms):
            power *= ratio
            carried = sigma[block, j + 1, r] if j + 1 < nodes else 0.0
            sigma[block, j, r] = power * carried + added[r]
        previous = top


@numba.njit(cache=True, inline="always")
def _fire(state, stay, fire, top):  # pragma: no cover - compiled
    """One token joins ``H``: the count distribution ``state`` (truncated at ``top``), given
    its ``(e^{−q t}, 1 − e^{−q t})`` (:func:`_decay`)."""
    for k in range(top - 1, 0, -1):
        state[k] = state[k] * stay + state[k - 1] * fire
    state[0] *= stay


@numba.njit(cache=True, inline="always")
def _fold(state, sums, u, beta, top, work, gen, inverse_factorial):  # pragma: no cover - compiled
    r"""Tokens with ``q t ≤ u`` and power sums ``σ_r u^r = Σ (q_x t)^r`` join ``H`` at once.

    Their count has the generating function ``e^{−A} exp(Σ_{m<top} c_m z^m)`` with
    ``A = Σ q_x t`` and ``c_m = Σ_{r ≥ m} β[m, r] u^r σ_r``, truncated where the tail
    ``A (m u)^D / (m u (D + 1)!)`` is below ``SERIES_TOLERANCE``. Returns False (nothing done)
    when ``MOST_TERMS`` terms do not reach it.
    """
    mass = u * sums[0]
    if mass > 745.0:
        state[:] = 0.0
        return True
    mu = (top - 1) * u
    terms = top - 1
    if terms > MOST_TERMS:  # the sums, β and the factorials hold MOST_TERMS terms
        return False
    tail = mass * mu**terms * inverse_factorial[terms + 1] if mu > 0.0 else 0.0
    while tail > SERIES_TOLERANCE:
        terms += 1
        if terms > MOST_TERMS:
            return False
        tail *= mu / (terms + 1)
    for m in range(1, top):
        work[m] = 0.0
    power = 1.0
    for r in range(1, terms + 1):
        power *= u
        term = power * sums[r - 1]
        for m in range(1, min(r, top - 1) + 1):
            work[m] += beta[m, r] * term
    gen[0] = 1.0
    for k in range(1, top):  # exp of the series: k g_k = Σ_j j c_j g_{k−j}
        total = 0.0
        for j in range(1, k + 1):
            total += j * work[j] * gen[k - j]
        gen[k] = total / k
    scale = math.exp(-mass)
    for k in range(top - 1, -1, -1):
        total = 0.0
        for j in range(k + 1):
            total += state[k - j] * gen[j]
        state[k] = total * scale
    return True


@numba.njit(cache=True, inline="always")
def _negligible(state, top):  # pragma: no cover - compiled
    """Whether ``P[N < max n]`` (the sum of ``state``) is below ``NEGLIGIBLE``."""
    below = 0.0
    for k in range(top):
        below += state[k]
    return below < NEGLIGIBLE


@numba.njit(cache=True, inline="always")
def _record(acc, state, counts, weight, column):  # pragma: no cover - compiled
    """Add ``weight · P[N < n]`` for each ``n`` to ``acc[:, column]``; return ``P[N < max n]``."""
    below = 0.0
    c = 0
    for k in range(state.shape[0]):
        below += state[k]
        if k + 1 == counts[c]:
            acc[c, column] += weight * below
            c += 1
    return below


@numba.njit(cache=True, inline="always")
def _node_time(t_lo, h, j):  # pragma: no cover - compiled
    if j * h < 700.0:
        return t_lo * math.exp(j * h)
    return math.exp(math.log(t_lo) + j * h)


@numba.njit(cache=True, inline="always")
def _weight(lam, t, h):  # pragma: no cover - compiled
    lam_t = lam * t
    if 0.0 < lam_t < 745.0:
        return h * lam_t * _decay(lam_t)[0]
    return 0.0


@numba.njit(cache=True, parallel=True)
def segment_mass(
    vals,
    lam_after,
    counts,
    t_lo,
    h,
    num_nodes,
    groups,
    edges,
    layout,
    sigma,
    rows,
    fold_end,
    largest,
    beta,
    start_states,
    store,
    chunks,
    stored_buffer,
):  # pragma: no cover - compiled
    """Count distributions swept over segments, per node.

    ``vals`` holds the tokens of several groups in sweep order, group ``g`` being the
    segments ``groups[g]:groups[g+1]`` of ``edges``; ``lam_after[i]`` is ``λ`` of the prefix
    ending with token ``i``. Each group starts from ``start_states[j, g]`` at node ``j``.
    Inside a segment of more than ``FOLD_MIN`` tokens the tokens with ``q t ≤ SMALL_RATE``
    join at once by :func:`_fold` (where ``sigma`` is given; the ``layout``, ``fold_end`` and
    ``largest`` of :func:`segment_power_sums`), the others one by one. Returns
    the trapezoid sums ``Σ_j w_j P[N < n]`` at every segment end (len(counts), segments) and,
    when ``store``, every node's state at every segment start (num_nodes, segments, max n),
    zero once negligible (else an empty array), a view of ``stored_buffer`` (float64, at least
    that size; :func:`otbound._scratch.scratch`). The nodes are split into ``chunks``
    interleaved chunks (:data:`NODE_CHUNKS`), each with its own accumulator.
    """
    many = counts.shape[0]
    top = counts[many - 1]
    segments = edges.shape[0] - 1
    # plain loops, not array expressions: each of those would be a parallel region of its
    # own, and waking the other threads for it costs more than the work (tens of µs each)
    acc = np.empty((chunks, many, segments))
    _fill(acc.reshape(-1), 0.0)
    kept = num_nodes if store else 0
    flat = stored_buffer[: kept * segments * top]
    _fill(flat, 0.0)
    stored = flat.reshape((kept, segments, top))
    inverse_factorial = np.empty(MOST_TERMS + 3)
    inverse_factorial[0] = 1.0
    for r in range(1, MOST_TERMS + 3):
        inverse_factorial[r] = inverse_factorial[r - 1] / r
    folding = sigma.shape[0] > 0
    for chunk in numba.prange(chunks):
        state = np.zeros(top)
        work = np.zeros(top)
        gen = np.zeros(top)
        for j in range(chunk, num_nodes, chunks):
            t = _node_time(t_lo, h, j)
            value, stay, fire = -1.0, 1.0, 0.0  # the last mass fired at this node, its decay
            for g in range(groups.shape[0] - 1):
                empty = True
                for k in range(top):
                    state[k] = start_states[j, g, k]
                    empty = empty and state[k] == 0.0
                if empty:
                    continue  # negligible before this group: nothing to add
                for s in range(groups[g], groups[g + 1]):
                    if store:
                        stored[j, s, :] = state
                    start, stop = edges[s], edges[s + 1]
                    if folding and stop - start > FOLD_MIN:
                        block = rows[s]
                        fold = fold_end[block, j]
                        done = fold == 0
                        if not done:
                            done = _fold(
                                state,
                                sigma[block, j],
                                largest[block, j] * t,
                                beta,
                                top,
                                work,
                                gen,
                                inverse_factorial,
                            )
                        first = start + fold if done else start
                        dead = _negligible(state, top)
                        for k in range(first, stop):
                            if dead:
                                break
                            if layout[k] != value:  # equal masses in a row share their decay
                                value = layout[k]
                                stay, fire = _decay(value * t)
                            _fire(state, stay, fire, top)
                            if (k - first) % DEATH_CHECK == DEATH_CHECK - 1:
                                dead = _negligible(state, top)
                        if dead:  # as the break below, inside the segment: nothing to add
                            break
                    else:
                        for k in range(start, stop):
                            if vals[k] != value:
                                value = vals[k]
                                stay, fire = _decay(value * t)
                            _fire(state, stay, fire, top)
                    weight = _weight(lam_after[stop - 1], t, h)
                    below = _record(acc[chunk], state, counts, weight, s)
                    if below < NEGLIGIBLE:
                        break
    out = np.empty((many, segments))
    for c in range(many):  # the chunks in order, as acc.sum(axis=0)
        for s in range(segments):
            total = 0.0
            for chunk in range(chunks):
                total += acc[chunk, c, s]
            out[c, s] = total
    return out, stored


@numba.njit(cache=True, inline="always")
def _fill(array, value):  # pragma: no cover - compiled
    """``array[:] = value`` as a plain loop (in a parallel kernel, not a parallel region)."""
    for i in range(array.shape[0]):
        array[i] = value


#: The kernels above without parallel loops, for the levels too small to wake the other
#: threads and for the rows of a batch (:func:`otbound.drafts._sequential_sweep._sweep_levels`).
segment_power_sums_serial = serial_build(segment_power_sums)
segment_mass_serial = serial_build(segment_mass)
