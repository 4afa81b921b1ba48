r"""Recursive rejection sampling without replacement (RSD, MCSD, Sequoia, EAGLE).

Drafts are drawn sequentially without replacement: ``x_k ~ q_k``, where ``q_1 = q`` and
``q_{k+1}`` is ``q_k`` with ``x_k`` removed and renormalised. Starting from ``p_1 = p``, draft
``x_k`` is accepted with probability ``min(1, p_k(x_k) / q_k(x_k))``; on rejection
``p_{k+1} = res(p_k, q_k)``. After ``n`` rejections ``Y ~ p_{n+1}``. Given the history, each round
is single-draft speculative sampling of ``p_k`` against ``q_k``, so ``Y ~ p``.

Exact acceptance:

* ``n = 1``: ``β(p, q)``.
* ``n = 2``:

  .. math::

      α = β(p, q) + \sum_{x_1} (q_{x_1} − p_{x_1})^+ \, β\bigl(p_2, q^{(−x_1)}\bigr),
      \qquad p_2 = res(p, q),

  with ``q^{(−x_1)} = q`` without ``x_1``, renormalised. Since ``p_2(x_1) = 0`` for every
  rejectable ``x_1``, ``β(p_2, q^{(−x_1)}) = g(1 / (1 − q_{x_1}))`` with
  ``g(s) = Σ_y min(p_2(y), s q_y)``, which one sort of ``p_2 / q`` evaluates for every ``x_1``:
  ``O(V log V)``.
* ``n ≥ 3``: a sum over the *rejected* prefixes ``x_1..x_{n−1}`` (below), ``O(V^{n−1} log V)``;
  computed when ``V^{n−1} ≤`` :data:`MAX_TUPLES` (``V`` counts the tokens with ``q > 0``),
  ``None`` above, where :meth:`~otbound.verifiers.base.BaseVerifier.estimate` averages the
  Rao-Blackwellised value ``1 − f(t_{n+1})`` over sampled rejection paths.

A rejected draft has ``p_k(x) < q_k(x)``, hence ``p_{k+1}(x) = 0``: the acceptance event is
exactly ``Y ∈ x̄``.

**The residuals are one family.** Let ``f(t) = Σ_y (p_y − t q_y)⁺`` (convex, decreasing,
``f(0) = 1``) and ``R_k = q(x_1..x_{k−1})`` the mass already drafted. Along a path of
rejections every residual is a threshold of ``p`` against ``q``,

.. math::

    p_k = (p − t_k q)^+ / f(t_k),\qquad t_1 = 0,\quad
    t_{k+1} = t_k + \frac{f(t_k)}{1 − R_k},

by induction: the removed tokens have ``p_k = 0`` (they were rejected), so
``(p_k − q/(1 − R_k))⁺ = (p − t_{k+1} q)⁺ / f(t_k)``. Summing the probability that draft ``k``
is ``x`` and is rejected, ``(q_x/(1 − R_k) − p_k(x))⁺``, over the tokens not yet drafted gives
``f(t_{k+1}) / f(t_k)`` (the drafted ones would add exactly ``R_k/(1 − R_k)``), and the weight of
``x`` itself is ``[g_x(t_{k+1}) − g_x(t_k)] / f(t_k)`` with ``g_x(t) = (t q_x − p_x)⁺``. So

.. math::

    1 − α = \sum_{x_1..x_{n−1}} \prod_{k<n} \frac{g_{x_k}(t_{k+1}) − g_{x_k}(t_k)}{f(t_k)}
    \cdot \frac{f(t_{n+1})}{f(t_n)}
          = E\bigl[f(t_{n+1})\bigr],

the expectation over *rejection paths*: ``x_k`` drawn ``∝ g_x(t_{k+1}) − g_x(t_k)`` among the
tokens not yet drafted (the factors ``f(t_{k+1})/f(t_k)`` telescope to ``f(t_{n+1})``, as
``f(t_1) = 1``). ``t_{n+1}`` depends on the path only through ``R_2..R_n``. One sort of
``p / q`` with prefix sums evaluates ``f`` and the kernel's CDF by binary search: a path costs
``O(n log V + n²)``. ``1 − f(t_{n+1})`` is the conditional expectation, given the path, of the
0/1 event "some draft accepted" under a coupling in which each level's rejection is an
independent coin of probability ``f(t_{k+1})/f(t_k)``: an unbiased estimate of ``α`` whose variance
is at most the 0/1 estimator's (total variance), and in practice far below it (it varies only
through the drafted masses ``R_k``). The sort of ``p / q`` is shared with ``gls`` and kept
across calls (:func:`otbound.verifiers._step_cache.ratio_order`); the binary searches run in
two levels, the first level's kernel CDF tabled once a step for every path and every ``n``
(:func:`_rejection_paths_fast`, equal to the one-level :func:`_rejection_paths`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from otbound._sorting import stable_argsort
from otbound.verifiers._step_cache import ratio_order
from otbound.verifiers.base import BaseVerifier, residual, sample_tokens

__all__ = ["MAX_TUPLES", "RecursiveRejectionWithoutReplacement"]

#: Largest number of rejected prefixes, ``V^{n−1}``, for which the exact acceptance is
#: enumerated at ``n ≥ 3`` (``V`` counts the tokens with ``q > 0``).
MAX_TUPLES = 200_000


#: What :func:`_rejection_paths_fast` takes of a step: ``(tables, total_q, ends, first_cdf)``.
_PathTables = tuple[tuple[np.ndarray, ...], float, tuple[np.ndarray, ...], np.ndarray]


class _Ratios:
    """Tokens with ``q > 0`` sorted by ``ρ = p / q``, with the sums that evaluate ``f(t)``,
    ``G_i(t) = Σ_{j ≤ i} (t q_j − p_j)⁺`` and the rejection kernels by binary search.

    Attributes
    ----------
    order : int64 (m,)
        Token ids in increasing ``ρ``.
    rho : float64 (m,)
    cum_p, cum_q : float64 (m + 1,)
        Prefix sums of ``p`` and ``q`` in that order.
    tail_p, tail_q : float64 (m + 1,)
        Suffix sums; ``tail_p`` includes the tokens with ``q = 0`` (their ``ρ`` is infinite).
    """

    def __init__(self, p: np.ndarray, q: np.ndarray) -> None:
        # the sort is shared with other verifiers and kept across calls (_step_cache)
        self.order = ratio_order(p, q)
        off = float(p[q <= 0].sum())  # tokens never drafted: always in the residual
        self.rho, self.cum_p, self.cum_q, self.tail_p, self.tail_q, self.q_sorted = _ratio_sums(
            p, q, self.order, off
        )
        self._paths: _PathTables | None = None

    def path_tables(self) -> _PathTables:
        """The step's arguments of :func:`_rejection_paths_fast` after ``n`` and ``u``:
        ``(tables, total_q, ends, first_cdf)`` (:func:`_search_ends`, :func:`_first_level_cdf`).

        They depend on the step only, so they are built on the first call and kept: the pilot
        and the final sample of every ``n`` of a step share them (the first level's CDF, an
        ``O(m)`` pass, took as long as a pilot's 64 paths at ``n = 3`` when every call of
        :func:`_rejection_paths_fast` built it: 0.1 ms a step on ``data/sample``).
        """
        if self._paths is None:
            tables = (self.rho, self.cum_p, self.cum_q, self.tail_p, self.tail_q, self.q_sorted)
            total_q = float(self.tail_q[0])
            ends = _search_ends(self)
            self._paths = (tables, total_q, ends, _first_level_cdf(tables, total_q, ends[0]))
        return self._paths

    def f(self, t: np.ndarray) -> np.ndarray:
        """``f(t) = Σ_y (p_y − t q_y)⁺`` (vectorised; never negative)."""
        a = np.searchsorted(self.rho, t, side="right")
        out: np.ndarray = np.maximum(self.tail_p[a] - t * self.tail_q[a], 0.0)
        return out


@numba.njit(cache=True)
def _ratio_sums(p, q, order, off):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``ρ``, the prefix and suffix sums of ``p`` and ``q`` and ``q`` in ``order``, as
    :class:`_Ratios` keeps them (sequential sums, the order of ``np.cumsum``); ``off`` is added
    to every suffix sum of ``p``."""
    m = order.shape[0]
    rho = np.empty(m)
    q_sorted = np.empty(m)
    cum_p = np.zeros(m + 1)
    cum_q = np.zeros(m + 1)
    tail_p = np.zeros(m + 1)
    tail_q = np.zeros(m + 1)
    for i in range(m):
        token = order[i]
        rho[i] = p[token] / q[token]
        q_sorted[i] = q[token]
        if i == 0:
            cum_p[1] = p[token]
            cum_q[1] = q[token]
        else:
            cum_p[i + 1] = cum_p[i] + p[token]
            cum_q[i + 1] = cum_q[i] + q[token]
    tail_p[m] = off
    for i in range(m - 1, -1, -1):
        token = order[i]
        if i == m - 1:
            tail_p[i] = p[token]
            tail_q[i] = q[token]
        else:
            tail_p[i] = tail_p[i + 1] + p[token]
            tail_q[i] = tail_q[i + 1] + q[token]
    for i in range(m):
        tail_p[i] += off
    return rho, cum_p, cum_q, tail_p, tail_q, q_sorted


@numba.njit(cache=True)
def _f_at(t, rho, tail_p, tail_q):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``f(t) = Σ (p − t q)⁺`` from the sorted ratios and suffix sums (binary search)."""
    lo = _count_le(rho, t)
    value = tail_p[lo] - t * tail_q[lo]
    return value if value > 0.0 else 0.0


@numba.njit(cache=True)
def _kernel_cdf(i, t0, t1, a0, a1, rho, cum_p, cum_q, removed_pos, removed_q, count):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``Σ_{j ≤ i, j not drafted} g_j(t1) − g_j(t0)`` with ``g_j(t) = (t q_j − p_j)⁺``.

    ``a0``, ``a1``: numbers of sorted tokens with ``ρ ≤ t0``, ``ρ ≤ t1``. A drafted token has
    ``ρ ≤ t0``, so its weight ``(t1 − t0) q`` is subtracted.
    """
    k = i + 1
    if k <= a0:
        value = (t1 - t0) * cum_q[k]
    elif k <= a1:
        value = (t1 - t0) * cum_q[a0] + t1 * (cum_q[k] - cum_q[a0]) - (cum_p[k] - cum_p[a0])
    else:
        value = (t1 - t0) * cum_q[a0] + t1 * (cum_q[a1] - cum_q[a0]) - (cum_p[a1] - cum_p[a0])
    for r in range(count):
        if removed_pos[r] <= i:
            value -= (t1 - t0) * removed_q[r]
    return value


@numba.njit(cache=True, inline="always")
def _undrafted_mass(total_q, drafted, q_sorted, removed_pos, count):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``1 − R_k``, the draft mass not drafted yet: ``total_q − drafted``, or, once nearly all
    of ``q`` is drafted (below 1e-6), the sum of the undrafted masses (no cancellation)."""
    left = total_q - drafted
    if left >= 1e-6:
        return left
    left = 0.0
    for j in range(q_sorted.shape[0]):
        keep = True
        for r in range(count):
            if removed_pos[r] == j:
                keep = False
        if keep:
            left += q_sorted[j]
    return left


@numba.njit(cache=True, inline="always")
def _nearest_weighted(lo, rho, q_sorted, t_next, removed_pos, count):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Position ``lo`` of a rejection path's binary search, moved off a drafted token or one of
    zero weight (``ρ ≥ t_next``), where rounding can leave it: the nearest position below of
    positive weight, else the nearest not drafted above."""
    m = rho.shape[0]
    pos = lo
    while pos >= 0:
        ok = rho[pos] < t_next and q_sorted[pos] > 0.0
        for r in range(count):
            if removed_pos[r] == pos:
                ok = False
        if ok:
            return pos
        pos -= 1
    pos = lo
    while pos < m:
        ok = rho[pos] < t_next
        for r in range(count):
            if removed_pos[r] == pos:
                ok = False
        if ok:
            return pos
        pos += 1
    return pos


@numba.njit(cache=True)
def _count_le(rho, t):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The number of entries of the increasing ``rho`` at most ``t`` (a branch-free bisection:
    ``⌈log2 m⌉`` steps whose outcome selects the next base instead of a jump)."""
    length = rho.shape[0]
    if length == 0:
        return 0
    base = 0
    while length > 1:  # the count lies in [base, base + length]
        half = length // 2
        base = base + half if rho[base + half] <= t else base
        length -= half
    return base + 1 if rho[base] <= t else base


@numba.njit(cache=True)
def _rejection_paths(n, u, rho, cum_p, cum_q, tail_p, tail_q, q_sorted, total_q):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``f(t_{n+1})`` along ``u.shape[0]`` sampled rejection paths (module docstring).

    ``u`` (trials, n − 1) are the uniforms of the kernel draws. A path whose ``f`` reaches
    zero stops there (no rejection is possible past it: ``f(t_{n+1}) = 0``).
    """
    trials = u.shape[0]
    m = rho.shape[0]
    out = np.empty(trials)
    removed_pos = np.empty(max(n - 1, 1), dtype=np.int64)
    removed_q = np.empty(max(n - 1, 1))
    for trial in range(trials):
        t = 0.0
        f = _f_at(0.0, rho, tail_p, tail_q)
        drafted = 0.0
        count = 0
        value = 0.0
        for k in range(n):
            left = _undrafted_mass(total_q, drafted, q_sorted, removed_pos, count)
            t_next = t + f / left
            f_next = _f_at(t_next, rho, tail_p, tail_q)
            if k == n - 1 or f_next <= 0.0:
                value = f_next
                break
            a0 = _count_le(rho, t)
            a1 = _count_le(rho, t_next)
            total = _kernel_cdf(
                m - 1, t, t_next, a0, a1, rho, cum_p, cum_q, removed_pos, removed_q, count
            )
            target = u[trial, k] * total
            lo = 0
            hi = m - 1
            while lo < hi:  # first position whose cumulative weight exceeds the target
                mid = (lo + hi) // 2
                cdf = _kernel_cdf(
                    mid, t, t_next, a0, a1, rho, cum_p, cum_q, removed_pos, removed_q, count
                )
                if cdf > target:
                    hi = mid
                else:
                    lo = mid + 1
            pos = _nearest_weighted(lo, rho, q_sorted, t_next, removed_pos, count)
            removed_pos[count] = pos
            removed_q[count] = q_sorted[pos]
            count += 1
            drafted += q_sorted[pos]
            t = t_next
            f = f_next
        out[trial] = value
    return out


#: Tokens per block of the two-level searches of :func:`_rejection_paths_fast` (their top
#: level, every 16th value, stays in the L1 cache).
SEARCH_BLOCK = 16


@numba.njit(cache=True)
def _kernel_cdf_at(k, cq_k, cp_k, t0, t1, a0, a1, cum_p, cum_q, removed_pos, removed_q, count):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_kernel_cdf` at ``i = k − 1`` given ``cum_q[k]``, ``cum_p[k]`` (same arithmetic)."""
    if k <= a0:
        value = (t1 - t0) * cq_k
    elif k <= a1:
        value = (t1 - t0) * cum_q[a0] + t1 * (cq_k - cum_q[a0]) - (cp_k - cum_p[a0])
    else:
        value = (t1 - t0) * cum_q[a0] + t1 * (cum_q[a1] - cum_q[a0]) - (cum_p[a1] - cum_p[a0])
    for r in range(count):
        if removed_pos[r] <= k - 1:
            value -= (t1 - t0) * removed_q[r]
    return value


@numba.njit(cache=True)
def _count_le_blocked(rho, rho_ends, t):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_count_le` in two levels: the full blocks whose last entry (``rho_ends``) is at
    most ``t``, then the entries of the next block."""
    block = SEARCH_BLOCK
    full = _count_le(rho_ends, t)
    start = full * block
    stop = min(start + block, rho.shape[0])
    return start + _count_le(rho[start:stop], t)


@numba.njit(cache=True)
def _first_level_cdf(tables, total_q, rho_ends):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The kernel CDF of a rejection path's first level at each of the ``m`` positions.

    Every path's first level has ``t_1 = 0``, ``t_2 = f(0) / (1 − R_1)`` with ``R_1 = 0``
    and nothing drafted, so its CDF ``Σ_{j ≤ i} g_j(t_2) − g_j(0)`` is one array of the step:
    :func:`_kernel_cdf`'s value at each position. Empty where ``total_q < 1e-6`` (the first
    level then sums the undrafted masses, :func:`_undrafted_mass`, and is not tabled).
    """
    rho, cum_p, cum_q, tail_p, tail_q, _ = tables
    m = rho.shape[0]
    removed_pos = np.empty(1, dtype=np.int64)  # nothing drafted: never read (count 0)
    removed_q = np.empty(1)
    first_t = _f_at(0.0, rho, tail_p, tail_q) / total_q
    first_a0 = _count_le_blocked(rho, rho_ends, 0.0)
    first_a1 = _count_le_blocked(rho, rho_ends, first_t)
    first_cdf = np.empty(m if total_q >= 1e-6 else 0)
    for i in range(first_cdf.shape[0]):
        first_cdf[i] = _kernel_cdf(
            i, 0.0, first_t, first_a0, first_a1, rho, cum_p, cum_q, removed_pos, removed_q, 0
        )
    return first_cdf


@numba.njit(cache=True)
def _rejection_paths_fast(n, u, tables, total_q, ends, first_cdf):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_rejection_paths`, with its searches in two levels.

    ``tables``: ``(rho, cum_p, cum_q, tail_p, tail_q, q_sorted)``; ``ends``: the top levels
    (:func:`_search_ends`): ``rho`` at the last position of each full block of
    :data:`SEARCH_BLOCK`, and ``cum_q``, ``cum_p`` just after the last position ``e_b`` of
    each block of the kernel's positions ``0..m − 2`` (``e_b = min((b + 1) B, m − 1) − 1``).
    The kernel search finds the first block whose last position's weight exceeds the
    target, then the position inside it: for a non-decreasing CDF the position of the
    one-level bisection (the two could differ only where rounding makes the CDF step down
    at a drafted token). The search of ``ρ ≤ t`` is shared by ``f(t)`` and the kernel, and
    carried from one level to the next. ``first_cdf``: the first level's kernel CDF, the same
    for every path and every ``n`` (:func:`_first_level_cdf`, built once a step by
    :meth:`_Ratios.path_tables`); where it is empty the first level is searched as the others.
    """
    rho, cum_p, cum_q, tail_p, tail_q, q_sorted = tables
    rho_ends, cq_ends, cp_ends = ends
    block = SEARCH_BLOCK
    trials = u.shape[0]
    m = rho.shape[0]
    positions = m - 1  # the kernel search returns a position in [0, m − 2], else m − 1
    blocks = cq_ends.shape[0]
    out = np.empty(trials)
    removed_pos = np.empty(max(n - 1, 1), dtype=np.int64)
    removed_q = np.empty(max(n - 1, 1))
    for trial in range(trials):
        t = 0.0
        a_t = _count_le_blocked(rho, rho_ends, 0.0)  # sorted tokens with ρ ≤ t
        f = _f_at(0.0, rho, tail_p, tail_q)
        drafted = 0.0
        count = 0
        value = 0.0
        for k in range(n):
            left = _undrafted_mass(total_q, drafted, q_sorted, removed_pos, count)
            t_next = t + f / left
            a0 = a_t
            a1 = _count_le_blocked(rho, rho_ends, t_next)
            f_next = tail_p[a1] - t_next * tail_q[a1]  # _f_at(t_next)
            if not f_next > 0.0:
                f_next = 0.0
            if k == n - 1 or f_next <= 0.0:
                value = f_next
                break
            tabled = k == 0 and first_cdf.shape[0] > 0  # the first level's array serves
            if tabled:
                total = first_cdf[m - 1]
            else:
                total = _kernel_cdf(
                    m - 1, t, t_next, a0, a1, rho, cum_p, cum_q, removed_pos, removed_q, count
                )
            target = u[trial, k] * total
            lo = 0
            hi = blocks
            while lo < hi:  # the first block whose last position's weight exceeds the target
                mid = (lo + hi) // 2
                end = min((mid + 1) * block, positions)
                if tabled:
                    cdf = first_cdf[end - 1]
                else:
                    cdf = _kernel_cdf_at(
                        end, cq_ends[mid], cp_ends[mid], t, t_next, a0, a1, cum_p, cum_q,
                        removed_pos, removed_q, count,
                    )  # fmt: skip
                if cdf > target:
                    hi = mid
                else:
                    lo = mid + 1
            if lo == blocks:
                lo = positions
            else:
                hi = min((lo + 1) * block, positions) - 1
                lo = lo * block
                while lo < hi:  # the first position inside it
                    mid = (lo + hi) // 2
                    if tabled:
                        cdf = first_cdf[mid]
                    else:
                        cdf = _kernel_cdf(
                            mid, t, t_next, a0, a1, rho, cum_p, cum_q, removed_pos, removed_q,
                            count,
                        )  # fmt: skip
                    if cdf > target:
                        hi = mid
                    else:
                        lo = mid + 1
            pos = _nearest_weighted(lo, rho, q_sorted, t_next, removed_pos, count)
            removed_pos[count] = pos
            removed_q[count] = q_sorted[pos]
            count += 1
            drafted += q_sorted[pos]
            t = t_next
            a_t = a1
            f = f_next
        out[trial] = value
    return out


def _search_ends(tab: _Ratios) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top levels of :func:`_rejection_paths_fast`'s searches (its docstring)."""
    block = SEARCH_BLOCK
    m = tab.rho.size
    rho_ends = np.ascontiguousarray(tab.rho[block - 1 :: block])
    ends = np.minimum(np.arange(1, -(-(m - 1) // block) + 1) * block, m - 1)  # e_b + 1
    return rho_ends, tab.cum_q[ends], tab.cum_p[ends]


def _acceptance_paths(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """Exact ``α`` as the sum over rejected prefixes ``x_1..x_{n−1}`` (module docstring),
    vectorised level by level: ``O(V^{n−1})`` paths, ``f`` by binary search."""
    tab = _Ratios(p, q)
    total_q = float(tab.tail_q[0])
    vocab = p.size
    t = np.zeros(1)
    f = tab.f(t)  # f(t_1) = Σ p = 1 up to rounding
    weight = np.ones(1)  # P(path drawn and rejected so far)
    removed = np.zeros((1, vocab), dtype=bool)
    for k in range(n):
        left = total_q if k == 0 else np.where(removed, 0.0, q[None, :]).sum(axis=1)
        t_next = t + f / left  # 1 − R_k summed from the undrafted tokens: no cancellation
        f_next = tab.f(t_next)
        if k == n - 1:
            break
        live = f_next > 0
        # weights of the next rejected draft: g_x(t_next) − g_x(t), drafted tokens excluded
        g1 = np.maximum(t_next[live, None] * q[None, :] - p[None, :], 0.0)
        g0 = np.maximum(t[live, None] * q[None, :] - p[None, :], 0.0)
        w = np.where(removed[live], 0.0, g1 - g0) / f[live, None]
        parent, token = np.nonzero(w > 0)
        rows = np.flatnonzero(live)[parent]
        weight = weight[rows] * w[parent, token]
        removed = removed[rows]
        removed[np.arange(token.size), token] = True
        t, f = t_next[rows], f_next[rows]
        if weight.size == 0:
            return 1.0
    return 1.0 - float(np.sum(weight * f_next / np.where(f > 0, f, 1.0)))


@numba.njit(cache=True)
def _two_prepare(p, q):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``1 − β``, and ``p_2 = res(p, q)``, ``q`` and ``p_2 / q`` on the tokens with ``p > q``."""
    vocab = p.shape[0]
    miss = 0.0
    count = 0
    for y in range(vocab):
        d = p[y] - q[y]
        if d > 0.0:
            miss += d  # 1 − β(p, q), summed without cancellation
            count += 1
    ratio = np.empty(count)
    mass = np.empty(count)
    draft = np.empty(count)
    k = 0
    for y in range(vocab):
        d = p[y] - q[y]
        if d > 0.0:
            mass[k] = d / miss
            draft[k] = q[y]
            ratio[k] = mass[k] / q[y] if q[y] > 0.0 else np.inf
            k += 1
    return miss, ratio, mass, draft


@numba.njit(cache=True)
def _two_sum(p, q, miss, ratio, mass, draft, order):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``β + Σ_{x_1} (q − p)⁺_{x_1} g(1 / (1 − q_{x_1}))`` given the sort ``order`` of ``ratio``."""
    vocab = p.shape[0]
    count = ratio.shape[0]
    cum_p = np.zeros(count + 1)
    tail_q = np.zeros(count + 1)
    sorted_ratio = np.empty(count)
    for i in range(count):
        cum_p[i + 1] = cum_p[i] + mass[order[i]]
        sorted_ratio[i] = ratio[order[i]]
    for i in range(count - 1, -1, -1):
        tail_q[i] = tail_q[i + 1] + draft[order[i]]
    total = 0.0
    for y in range(vocab):
        total += q[y]
    alpha = 1.0 - miss
    for x in range(vocab):
        reject = q[x] - p[x]  # P(x_1 = x and rejected)
        if reject <= 0.0:
            continue
        if q[x] <= 0.5:
            rest = total - q[x]
        else:  # 1 − q_x by summing the others: no cancellation
            rest = 0.0
            for y in range(vocab):
                if y != x:
                    rest += q[y]
        scale = 1.0 / rest
        lo = 0
        hi = count
        while lo < hi:  # tokens with ratio <= scale give p_2, the others scale * q
            mid = (lo + hi) // 2
            if sorted_ratio[mid] <= scale:
                lo = mid + 1
            else:
                hi = mid
        alpha += reject * (cum_p[lo] + scale * tail_q[lo])
    return alpha


def _acceptance_two(p: np.ndarray, q: np.ndarray) -> float:
    """The ``n = 2`` closed form in ``O(V log V)``.

    ``g(s) = Σ_y min(p_2(y), s q_y)`` needs only the tokens with ``p_2 > 0`` (``p > q``): sorted
    by ``p_2 / q``, those at or below ``s`` give ``p_2``, the others ``s q``.
    """
    miss, ratio, mass, draft = _two_prepare(p, q)
    if miss <= 0.0:
        return 1.0
    return float(_two_sum(p, q, miss, ratio, mass, draft, stable_argsort(ratio)))


def _acceptance_enumerated(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """Exact acceptance by expanding every draft prefix (vectorised level by level)."""
    targets = p[None, :]  # p_k for each live prefix
    drafts = q[None, :]  # q_k for each live prefix
    reach = np.ones(1)  # P(prefix drawn and every draft in it rejected)
    alpha = 0.0
    for k in range(n):
        alpha += float(np.sum(reach * np.minimum(targets, drafts).sum(axis=1)))
        if k == n - 1:
            break
        reject = np.maximum(drafts - targets, 0.0)  # (m, V): x_k drawn and rejected
        miss = np.maximum(targets - drafts, 0.0)
        norm = miss.sum(axis=1, keepdims=True)
        nxt = np.divide(miss, norm, out=targets.copy(), where=norm > 0)
        parent, token = np.nonzero(reject > 0)
        reach = reach[parent] * reject[parent, token]
        targets = nxt[parent]
        child = drafts[parent].copy()
        child[np.arange(token.size), token] = 0.0
        child /= child.sum(axis=1, keepdims=True)
        drafts = child
        if reach.size == 0:
            break
    return alpha


@numba.njit(cache=True)
def _next_residual(targets, level, q, drafts, total):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``targets[level + 1] = res(targets[level], q without drafts[:level], renormalised)``.

    An empty residual (the target is covered) keeps the previous target.
    """
    left = total
    for j in range(level):
        left -= q[drafts[j]]
    norm = 0.0
    for y in range(targets.shape[1]):
        d = targets[level, y] - q[y] / left
        d = d if d > 0.0 else 0.0
        targets[level + 1, y] = d
        norm += d
    if norm > 0.0:
        for y in range(targets.shape[1]):
            targets[level + 1, y] /= norm
    else:
        targets[level + 1, :] = targets[level, :]


@numba.njit(cache=True)
def _verify_sorted(p, q, drafts, u, v):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Per-trial RRS without replacement; trials sorted lexicographically by their drafts.

    ``targets[k]`` (``p_{k+1}`` in the module's 1-based notation) depends on the drafts
    ``x_1..x_{k−1}`` only, so it is recomputed only when that prefix changes between
    consecutive trials. The last level keeps a CDF for the final residual draw.
    """
    trials, n = drafts.shape
    vocab = p.shape[0]
    targets = np.zeros((n + 1, vocab))
    cdf = np.zeros(vocab)
    targets[0, :] = p
    valid = 0  # targets[0..valid] are valid for the current prefix
    cdf_valid = False
    out = np.empty(trials, dtype=np.int64)
    total = 0.0
    for y in range(vocab):
        total += q[y]
    for t in range(trials):
        if t > 0:
            common = 0
            while common < n and drafts[t, common] == drafts[t - 1, common]:
                common += 1
            # targets[k] depends on drafts[0..k-2]; valid while k - 1 <= common
            if valid > common + 1:
                valid = common + 1
                cdf_valid = False
        rem = total
        token = -1
        for k in range(n):
            x = drafts[t, k]
            while valid < k:  # build targets[valid + 1] = res(targets[valid], q_valid)
                _next_residual(targets, valid, q, drafts[t], total)
                valid += 1
                cdf_valid = False
            qx = q[x] / rem
            ratio = targets[k, x] / qx
            if u[t, k] < ratio:
                token = x
                break
            rem -= q[x]
        if token < 0:
            while valid < n:
                _next_residual(targets, valid, q, drafts[t], total)
                valid += 1
                cdf_valid = False
            if not cdf_valid:
                acc = 0.0
                for y in range(vocab):
                    acc += targets[n, y]
                    cdf[y] = acc
                cdf_valid = True
            w = v[t] * cdf[vocab - 1]
            lo = 0
            hi = vocab - 1
            while lo < hi:  # first y with cdf[y] > w
                mid = (lo + hi) // 2
                if cdf[mid] > w:
                    hi = mid
                else:
                    lo = mid + 1
            while lo > 0 and targets[n, lo] <= 0.0:  # never return a zero (rounding at the top)
                lo -= 1
            token = lo
        out[t] = token
    return out


class RecursiveRejectionWithoutReplacement(BaseVerifier):
    """RRS without replacement: each round is speculative sampling of ``p_k`` against ``q_k``.

    ``α = β(p, q) + Σ_{x_1} (q_{x_1} − p_{x_1})⁺ β(res(p, q), q^{(−x_1)})`` at ``n = 2``;
    for ``n ≥ 3`` the sum over rejected prefixes when ``V^{n−1} ≤ 200,000``, else ``None``
    (:meth:`estimate` then averages ``1 − f(t_{n+1})`` over sampled rejection paths).
    """

    name = "rrs_without_replacement"
    default_design = "without_replacement"

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        if n == 1:
            return float(np.minimum(p, q).sum())
        if n == 2:
            return _acceptance_two(p, q)
        support = int(np.count_nonzero(q > 0))
        if float(support) ** (n - 1) > MAX_TUPLES:
            return None
        return _acceptance_paths(p, q, n)

    def _conditional(
        self, p: np.ndarray, q: np.ndarray, n: int, trials: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``1 − f(t_{n+1})`` on ``trials`` rejection paths (module docstring): unbiased, the
        conditional expectation of a 0/1 acceptance event given the path. The ratio table and
        the searches' tables (:meth:`_Ratios.path_tables`) depend on the step only, so they are
        built once for the pilot and the final sample of :meth:`estimate` and for every ``n``
        of a step (:meth:`_memo`)."""
        tab = self._memo("ratios", p, q, 0, lambda: _Ratios(p, q))
        u = rng.random((trials, max(n - 1, 1)))
        rejected = _rejection_paths_fast(n, u, *tab.path_tables())
        out: np.ndarray = 1.0 - rejected
        return out

    def _conditional_range(self, p: np.ndarray, q: np.ndarray, n: int) -> tuple[float, float]:
        """``[1 − f(τ_{n+1}), 1 − f(T_{n+1})]``, which every value ``1 − f(t_{n+1})`` lies in
        (``f`` decreases): with ``τ_1 = T_1 = 0``, ``τ_{k+1} = τ_k + f(τ_k)`` and
        ``T_{k+1} = T_k + f(τ_k) / (1 − R̄_k)``, ``R̄_k`` the ``k − 1`` largest masses of ``q``,
        induction gives ``τ_k ≤ t_k ≤ T_k``: ``t + f(t)`` does not decrease (``f' ≥ −1``),
        ``f(t_k) ≤ f(τ_k)`` and ``R_k ≤ R̄_k``. The narrower the range, the narrower the
        interval of :meth:`estimate`."""
        tab = self._memo("ratios", p, q, 0, lambda: _Ratios(p, q))
        vocab = q.shape[0]
        count = min(n - 1, vocab)
        heaviest = (
            np.sort(np.partition(q, vocab - count)[vocab - count :])[::-1] if count else q[:0]
        )
        drafted = np.concatenate([[0.0], np.cumsum(heaviest)])  # R̄_1..R̄_{count + 1}
        total = float(q.sum())
        low_t = high_t = 0.0
        for k in range(n):  # t_{k+2} from t_{k+1}
            step = _f_at(low_t, tab.rho, tab.tail_p, tab.tail_q)
            left = total - float(drafted[k]) if k < drafted.shape[0] else 0.0
            high_t = high_t + step / left if left > 0.0 else math.inf
            low_t += step
        low = min(1.0 - _f_at(low_t, tab.rho, tab.tail_p, tab.tail_q), 1.0)
        if not math.isfinite(high_t):  # a draft may leave no mass: no bound below 1
            return low, 1.0
        return low, min(1.0 - _f_at(high_t, tab.rho, tab.tail_p, tab.tail_q), 1.0)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        target, draft = p, q.copy()
        for x in drafts:
            if rng.random() < min(1.0, target[x] / draft[x]):
                return int(x)
            target = residual(target, draft)
            draft[x] = 0.0  # sample the next draft without x
            draft = draft / draft.sum()
        return int(sample_tokens(target, rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials: int
        n: int
        trials, n = drafts.shape
        u = rng.random((trials, n))
        v = rng.random(trials)
        order = np.lexsort(drafts.T[::-1])
        tokens = np.empty(trials, dtype=np.int64)
        tokens[order] = _verify_sorted(
            p, q, np.ascontiguousarray(drafts[order]), u[order], v[order]
        )
        return tokens
