r"""Draft designs: how ``n`` draft tokens are drawn from the draft distribution ``q``.

A design turns ``q`` into a joint distribution ``Q`` over draft tuples ``x̄ = (x_1..x_n)``.
The optimal acceptance rate depends on ``Q`` only through ``Q(H) = P(all drafts lie in H)``
(see :mod:`otbound.bounds`). Every design here can

* ``sample(q, n, size, rng)``: draw ``size`` tuples at once from a seeded numpy Generator;
* ``tuple_support(q, n)`` / ``set_support(q, n)``: enumerate the ordered tuples, or the sets of
  distinct tokens, with their probabilities (small ``V``: the LPs and the tests use them);
* ``sweep_orders(p, q, n)`` and ``prefix_mass(q_sorted, n)``: ``Q(H_i)`` for the prefixes
  ``H_i`` of a token order, which is all the exact sweep needs.

=======================  ==============================================================
design                   ``Q(H)``
=======================  ==============================================================
``iid``                  ``q(H)^n`` (with replacement)
``without_replacement``  sequential: ``P(x̄) = Π_j q(x_j) / (1 − Σ_{k<j} q(x_k))``; exact
                         ``Q(H)`` by the exponential-clock integral
``conditional_poisson``  a set ``S`` with ``P(S) ∝ Π_{x∈S} q_x``: ``e_n(q_H) / e_n(q)``
``greedy``               top ``n−1`` tokens ``T`` fixed, the last from ``q`` on ``V \ T``
``topk``                 the ``n`` most likely tokens, deterministic: ``1[T ⊆ H]``
``hub``                  SpecHub pairs (``n = 2``): ``Q(i,a) = q_i``,
                         ``Q(a,i) = q_a q_i / (1 − q_a)``, ``a = argmax q``
``per_slot``             slot ``j`` drawn from its own ``q_j``: ``Π_j q_j(H)``
=======================  ==============================================================

``without_replacement`` and ``conditional_poisson`` are different designs: the first is what
samplers draw; the second is the ratio used in Hu et al.'s proof. For ``q = (.5, .3, .2)``,
``n = 2``, ``H = {0, 1}`` they give ``Q(H) = 0.5143`` and ``0.4839``.

Ties among equally likely tokens (top-k sets, the hub) are broken towards the lower token id.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numba
import numpy as np

from otbound._checks import ROUNDING_TOLERANCE, clip_rounding
from otbound._sequential_mass import sequential_prefix_masses, sequential_prefix_minimum

#: The smallest positive normal float64.
_TINY = np.finfo(np.float64).tiny


def _sweep_key(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """A key that sorts the tokens of each row by ``p/q``; ``q = 0`` sorts last (such tokens
    never help to enter ``H``).

    The key is ``p/q`` itself unless the ratio overflows or falls below the normal range in
    some row (``q`` or ``p`` down to 5e-324 spans ratios up to 2e323, beyond the largest
    float, and the order among those tokens decides ``Q(H)`` for the distinct designs); that
    row's key is then ``log p − log q``, the same order without overflow.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        key = p / q
        lost = (q > 0) & (p > 0) & ((key > np.finfo(np.float64).max) | (key < _TINY))
        rows = np.any(lost, axis=-1)
        if np.any(rows):
            key[rows] = np.log(p[rows]) - np.log(q[rows])
    key[q <= 0] = np.inf
    return key


def _top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens of each row, most likely first, ties to the lower id.

    ``O(V)`` per row (a partition, not a sort).
    """
    q2 = np.atleast_2d(q)
    rows = q2.shape[0]
    if k == 0:
        return np.zeros((*q.shape[:-1], 0), dtype=np.int64)
    kth = -np.partition(-q2, k - 1, axis=-1)[:, k - 1 : k]
    above = q2 > kth
    ties = q2 == kth
    room = k - above.sum(axis=-1, keepdims=True)
    chosen = above | (ties & (np.cumsum(ties, axis=-1) <= room))
    idx = np.nonzero(chosen)[1].reshape(rows, k)  # ascending ids
    order = np.argsort(-np.take_along_axis(q2, idx, axis=-1), axis=-1, kind="stable")
    top = np.take_along_axis(idx, order, axis=-1)
    return top.reshape(*q.shape[:-1], k)


def _inverse_cdf(q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Tokens drawn from ``q`` (1-D) by inverting its CDF at uniforms ``u``; never a zero."""
    cdf = np.cumsum(q)
    idx = np.searchsorted(cdf, u * cdf[-1], side="right")
    last_positive = int(np.flatnonzero(q > 0)[-1])
    return np.minimum(idx, last_positive)


def _product_tuples(tokens: np.ndarray, n: int) -> np.ndarray:
    """All ordered ``n``-tuples over ``tokens``, shape (len(tokens)**n, n)."""
    grids = np.meshgrid(*([tokens] * n), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=-1)


def _distinct_rows(tuples: np.ndarray) -> np.ndarray:
    """Mask of the rows whose entries are pairwise distinct."""
    s = np.sort(tuples, axis=1)
    return np.all(s[:, 1:] != s[:, :-1], axis=1)


def tuples_to_sets(
    tuples: np.ndarray, probs: np.ndarray, vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge ordered draft tuples into sets of distinct tokens (membership is all that matters).

    Returns ``sets`` of shape (m, n) (sorted token ids, padded with ``-1``) and their
    probabilities ``(m,)``.
    """
    s = np.sort(tuples, axis=1)
    dup = np.zeros_like(s, dtype=bool)
    dup[:, 1:] = s[:, 1:] == s[:, :-1]
    s = np.where(dup, vocab, s)
    s = np.sort(s, axis=1)
    s[s == vocab] = -1
    sets, inverse = np.unique(s, axis=0, return_inverse=True)
    set_probs = np.bincount(inverse.ravel(), weights=probs, minlength=len(sets))
    return sets, set_probs


#: Reasons of :meth:`DraftDesign.unusable` (besides ``"design defined for n=N only"``).
ABOVE_SUPPORT = "n larger than the support of q"
ABOVE_VOCABULARY = "n larger than the vocabulary"
NEEDS_SLOTS = "design needs one q per draft slot"
UNUSABLE_REASONS = (ABOVE_SUPPORT, ABOVE_VOCABULARY, NEEDS_SLOTS)


class DraftDesign(ABC):
    """A draft design. Subclasses set ``name`` and implement the abstract methods.

    Attributes
    ----------
    name : str
        Registry name.
    distinct : bool
        Whether the drafts are distinct tokens (then ``n`` may not exceed the support of ``q``).
    fixed_n : int or None
        The only ``n`` the design is defined for (``hub``: 2).
    exact_sweep : bool
        Whether the prefix sweep gives the exact ``α*`` (``per_slot``: an upper bound only).
    slot_axis : bool
        Whether ``q`` carries one distribution per slot, shape ``(..., n, V)``.
    shared_sweep : bool
        Whether one sort serves every ``n``: :meth:`sweep_orders` does not depend on ``n`` and
        there is no closed form, so ``α*`` for several ``n`` takes one sort and
        :meth:`prefix_masses` (``without_replacement``, ``conditional_poisson``).
    """

    name: ClassVar[str]
    distinct: ClassVar[bool] = False
    fixed_n: ClassVar[int | None] = None
    exact_sweep: ClassVar[bool] = True
    slot_axis: ClassVar[bool] = False
    shared_sweep: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<draft design {self.name!r}>"

    # -- validation -------------------------------------------------------------------------
    def unusable(self, q: np.ndarray, n: int) -> np.ndarray:
        """Why ``n`` drafts cannot be drawn from each row of ``q`` (..., V), ``""`` where they can.

        The one statement of the design's conditions: :meth:`check` raises on the first row
        with a reason, and :func:`otbound.compare` records the reasons of the cells it skips.

        Returns
        -------
        numpy.ndarray of str (object), shape ``q.shape[:-1]`` (without the slot axis)
            One of :data:`UNUSABLE_REASONS` (``"design defined for n=2 only"`` for ``hub``
            at another ``n``), or ``""``.
        """
        slotted = self.slot_axis and q.ndim >= 2 and q.shape[-2] == n
        reasons = np.full(q.shape[: -2 if slotted else -1], "", dtype=object)
        if self.fixed_n is not None and n != self.fixed_n:
            reasons[...] = f"design defined for n={self.fixed_n} only"
        elif self.slot_axis and not slotted:
            reasons[...] = NEEDS_SLOTS
        elif n > q.shape[-1] and (self.distinct or self.name == "topk"):
            reasons[...] = ABOVE_VOCABULARY
        elif self.distinct:
            reasons[np.count_nonzero(q > 0, axis=-1) < n] = ABOVE_SUPPORT
        return reasons

    def check(self, q: np.ndarray, n: int) -> None:
        """Raise ``ValueError`` when ``n`` drafts cannot be drawn from ``q`` (..., V): the
        first row with a reason of :meth:`unusable`, in words."""
        reasons = self.unusable(q, n)
        bad = np.argwhere(np.atleast_1d(reasons != ""))
        if bad.size == 0:
            return
        row = tuple(int(i) for i in bad[0])
        reason = np.atleast_1d(reasons)[row]
        if reason == NEEDS_SLOTS:
            raise ValueError(
                f"design {self.name!r} needs one draft distribution per slot: q must have shape "
                f"(..., n, V) with n={n}, got {q.shape}"
            )
        if reason == ABOVE_VOCABULARY:
            raise ValueError(f"n={n} is larger than the vocabulary size V={q.shape[-1]}")
        if reason == ABOVE_SUPPORT:
            where = f" in row {row}" if q.ndim > 1 else ""
            support = np.count_nonzero(np.atleast_2d(q)[row if q.ndim > 1 else 0] > 0)
            raise ValueError(
                f"n={n} is larger than the support of q{where} ({support} tokens with q > 0); "
                f"design {self.name!r} draws {n} distinct tokens"
            )
        raise ValueError(f"design {self.name!r} is defined for n={self.fixed_n} only, got n={n}")

    # -- sampling and enumeration ------------------------------------------------------------
    @abstractmethod
    def sample(self, q: np.ndarray, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``size`` draft tuples from one draft distribution ``q`` (V,); shape (size, n)."""

    @abstractmethod
    def tuple_support(self, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Every ordered draft tuple with positive probability: (tuples (m, n), probs (m,))."""

    def set_support(self, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Sets of distinct draft tokens with their probabilities (``-1`` pads short sets)."""
        tuples, probs = self.tuple_support(q, n)
        return tuples_to_sets(tuples, probs, q.shape[-1])

    # -- the prefix sweep --------------------------------------------------------------------
    def sweep_orders(self, p: np.ndarray, q: np.ndarray, n: int) -> list[np.ndarray]:
        """Token orders (B, V) whose prefixes the sweep tries; the default sorts by ``p/q``."""
        return [np.argsort(_sweep_key(p, q), axis=-1)]

    def closed_form(
        self, p: np.ndarray, q: np.ndarray, n: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(α* − 1, H)`` per row (B, V) without sorting, where a closed form exists."""
        return None

    def prefix_minimum(
        self, p_sorted: np.ndarray, q_sorted: np.ndarray, counts: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``min(0, min_i [p(H_i) − Q_n(H_i)])`` and its prefix length ``i`` per ``n`` and row
        (len(counts), B), where the design finds it without ``Q`` at every prefix; ``None``
        (the default): the sweep takes the minimum of :meth:`prefix_masses`."""
        return None

    @abstractmethod
    def prefix_mass(self, q_sorted: np.ndarray, n: int) -> np.ndarray:
        """``Q(H_i)`` for the prefixes of ``q_sorted`` (B, [n,] V): shape (B, V + 1)."""

    def prefix_masses(self, q_sorted: np.ndarray, counts: Sequence[int]) -> np.ndarray:
        """:meth:`prefix_mass` for each ``n`` in ``counts``: shape (len(counts), B, V + 1)."""
        return np.stack([self.prefix_mass(q_sorted, n) for n in counts])


def _prefix_sums(x: np.ndarray) -> np.ndarray:
    """Cumulative sums with a leading zero along the last axis."""
    out = np.zeros((*x.shape[:-1], x.shape[-1] + 1))
    np.cumsum(x, axis=-1, out=out[..., 1:])
    return out


def _prefix_probability(x: np.ndarray, design: str, total: np.ndarray | float = 1.0) -> np.ndarray:
    """``x(H_i) / total`` for every prefix (``x`` sums to ``total`` along the last axis).

    The cumulative sum may pass 1 by rounding, at most ``V`` roundings of ``2^-53`` each:
    that much is clipped (:func:`otbound._checks.clip_rounding`), anything more raises.
    """
    tol = max(ROUNDING_TOLERANCE, x.shape[-1] * np.finfo(np.float64).epsneg)
    what = f"{design} prefix probability q(H_i)"
    return clip_rounding(_prefix_sums(x) / total, 0.0, 1.0, what, tol=tol)


class IID(DraftDesign):
    """i.i.d. drafts (with replacement): ``Q(H) = q(H)^n``."""

    name = "iid"

    def sample(self, q, n, size, rng):
        return _inverse_cdf(q, rng.random((size, n)))

    def tuple_support(self, q, n):
        tokens = np.flatnonzero(q > 0)
        tuples = _product_tuples(tokens, n)
        return tuples, np.prod(q[tuples], axis=1)

    def prefix_mass(self, q_sorted, n):
        return _prefix_probability(q_sorted, self.name) ** n


#: Above this drawn mass a row's next draft is drawn from its own renormalised CDF.
_SHIFT_LIMIT = 0.5


def _draw_excluding_shifted(
    q: np.ndarray, cdf: np.ndarray, taken: np.ndarray, u: np.ndarray
) -> np.ndarray:
    """Next draft of each row by inverting the CDF of ``q`` without the row's ``taken`` tokens.

    The removed tokens' masses are added to the target as the search passes them (in
    ascending id order), so the full CDF serves every row: ``O(j log V)`` per row. Returns −1
    where rounding landed on a taken token (the caller redraws those exactly).
    """
    target = u * (cdf[-1] - q[taken].sum(axis=1))
    idx = np.searchsorted(cdf, target, side="right")
    for d in np.sort(taken, axis=1).T:
        passed = d <= idx
        target = np.where(passed, target + q[d], target)
        idx = np.where(passed, np.searchsorted(cdf, target, side="right"), idx)
    idx = np.minimum(idx, int(np.flatnonzero(q > 0)[-1]))
    clash = np.any(taken == idx[:, None], axis=1) | (q[idx] <= 0)
    return np.where(clash, -1, idx)


def _draw_excluding_exactly(q: np.ndarray, taken: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Next draft by inverting each distinct ``taken`` set's own renormalised CDF (``O(V)`` per
    distinct set): exact however much mass the taken tokens hold."""
    keys, inverse = np.unique(np.sort(taken, axis=1), axis=0, return_inverse=True)
    out = np.empty(u.size, dtype=np.int64)
    for group, removed in enumerate(keys):
        rows = np.flatnonzero(inverse.ravel() == group)
        rest = q.copy()
        rest[removed] = 0.0
        out[rows] = _inverse_cdf(rest, u[rows])
    return out


def _sample_sequentially(q: np.ndarray, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of ``n`` distinct tokens, each from ``q`` renormalised over the tokens
    not drawn yet (the law of Gumbel-top-k and ``multinomial(replacement=False)``).

    Inverse-CDF draws, one uniform per draft: ``O(n² log V)`` per row, with no per-token
    noise. Rows whose drawn tokens hold more than half the mass (where subtracting it from
    the CDF would lose precision) are drawn from their own renormalised CDF instead.
    """
    u = rng.random((size, n))
    cdf = np.cumsum(q)
    drafts = np.empty((size, n), dtype=np.int64)
    drafts[:, 0] = _inverse_cdf(q, u[:, 0])
    for j in range(1, n):
        taken = drafts[:, :j]
        nxt = np.full(size, -1, dtype=np.int64)
        shifted = q[taken].sum(axis=1) <= _SHIFT_LIMIT * cdf[-1]
        nxt[shifted] = _draw_excluding_shifted(q, cdf, taken[shifted], u[shifted, j])
        redo = nxt < 0
        if redo.any():
            nxt[redo] = _draw_excluding_exactly(q, taken[redo], u[redo, j])
        drafts[:, j] = nxt
    return drafts


class WithoutReplacement(DraftDesign):
    """Sequential sampling without replacement (Gumbel-top-k, ``multinomial(replacement=False)``).

    ``P(x̄) = Π_j q(x_j) / (1 − Σ_{k<j} q(x_k))``; ``Q(H)`` is the exponential-clock integral
    computed by :func:`otbound._sequential_mass.sequential_prefix_masses` (error below 1e-12),
    one pass over the tokens per integration node for every ``n`` at once.
    """

    name = "without_replacement"
    distinct = True
    shared_sweep = True

    def sample(self, q, n, size, rng):
        return _sample_sequentially(q, n, size, rng)

    def tuple_support(self, q, n):
        tokens = np.flatnonzero(q > 0)
        tuples = _product_tuples(tokens, n)
        tuples = tuples[_distinct_rows(tuples)]
        mass = q[tuples]
        # Mass left before each draw, summed over the tokens not yet drawn: never 1 − used,
        # which cancels when a token holds nearly all the mass. Blocks bound the memory.
        left = np.empty_like(mass)
        block = max(1, (1 << 22) // max(q.size, 1))
        for start in range(0, len(tuples), block):
            rows = slice(start, start + block)
            remaining = np.tile(q, (len(tuples[rows]), 1))
            index = np.arange(len(tuples[rows]))
            for j in range(n):
                left[rows, j] = remaining.sum(axis=1)
                remaining[index, tuples[rows, j]] = 0.0
        return tuples, np.prod(mass / left, axis=1)

    def prefix_mass(self, q_sorted, n):
        return self.prefix_masses(q_sorted, [n])[0]

    def prefix_masses(self, q_sorted, counts):
        rows = [sequential_prefix_masses(row, counts) for row in q_sorted]
        return np.stack(rows, axis=1)  # one pass per node serves every n

    def prefix_minimum(
        self, p_sorted: np.ndarray, q_sorted: np.ndarray, counts: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``min(0, min_i [p(H_i) − Q_n(H_i)])`` and its prefix length ``i`` per ``n`` and row,
        shapes (len(counts), B), without ``Q`` at every prefix
        (:func:`otbound._sequential_mass.sequential_prefix_minimum`; equal to the minimum of
        :meth:`prefix_masses` within its error)."""
        found = [
            sequential_prefix_minimum(p, q, counts) for p, q in zip(p_sorted, q_sorted, strict=True)
        ]
        gap = np.stack([g for g, _ in found], axis=1)
        return gap, np.stack([i for _, i in found], axis=1)


#: The scaled ``e_k`` kernel renormalises a mantissa once it leaves ``(_LOW, _HIGH)``.
_LOW, _HIGH = 2.0**-100, 2.0**100
#: ``2^d`` for ``|d| ≤ _SPAN``: the fast path multiplies by a table entry instead of ``ldexp``.
_SPAN = 900
_POW2 = np.ldexp(1.0, np.arange(-_SPAN, _SPAN + 1))


@numba.njit(cache=True, parallel=True)
def _scaled_esp_kernel(q, top, pow2, mant_out, expo_out):  # pragma: no cover - compiled
    """``e_k`` of every prefix of every row of ``q`` (B, V), ``k = 1..top``, as
    ``mant · 2^expo`` in ``mant_out``, ``expo_out`` (top, B, V + 1).

    Each ``e_k`` carries its own exponent, so no value under- or overflows. The mantissas
    stay in ``(2^-100, 2^100)`` (0 for ``e_k = 0``) and are renormalised only when they leave
    it. Fast path (``q_i ≥ 2^-100`` and exponents within ``_SPAN``): the term
    ``q_i e_{k−1}`` is a product with a table power of two, whose underflow can only drop a
    term below ``2^-900`` of ``e_k``; otherwise ``frexp`` and ``ldexp`` align it exactly.
    """
    rows, size = q.shape
    low, high, span = 2.0**-100, 2.0**100, (pow2.size - 1) // 2
    for r in numba.prange(rows):
        m = np.zeros(top + 1)
        e = np.zeros(top + 1, dtype=np.int64)
        m[0] = 1.0  # e_0 = 1
        for i in range(size):
            qi = q[r, i]
            if qi != 0.0:
                for k in range(top, 0, -1):  # e_k(≤ i) = e_k(< i) + q_i e_{k−1}(< i)
                    if m[k - 1] == 0.0:
                        continue
                    d = e[k - 1] - e[k]
                    if m[k] != 0.0 and qi >= low and -span <= d <= span:
                        total, scale = m[k] + qi * m[k - 1] * pow2[d + span], e[k]
                    else:
                        a, b = math.frexp(qi)
                        tm, te = a * m[k - 1], b + e[k - 1]
                        if m[k] == 0.0:
                            total, scale = tm, te
                        elif te > e[k]:
                            total, scale = tm + math.ldexp(m[k], e[k] - te), te
                        else:
                            total, scale = m[k] + math.ldexp(tm, te - e[k]), e[k]
                    if low < total < high:
                        m[k], e[k] = total, scale
                    else:
                        f, x = math.frexp(total)
                        m[k], e[k] = f, scale + x
            for k in range(1, top + 1):
                mant_out[k - 1, r, i + 1] = m[k]
                expo_out[k - 1, r, i + 1] = e[k]


def _elementary_symmetric_prefix(q_sorted: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    r"""``e_k`` of every prefix, ``k = 1..top``, as mantissas and exponents of two.

    ``e_k(q_{≤i}) = e_k(q_{<i}) + q_i e_{k−1}(q_{<i})``: sums of non-negative terms, each
    ``e_k`` with its own power-of-two scale, so that ``e_n`` stays exact (to rounding) when
    it falls far below the smallest float (``q`` down to 5e-324, ``n = 8``: ``1e-2600``).

    Returns
    -------
    mant : numpy.ndarray, shape (top, B, V + 1)
        Mantissas in ``(2^-100, 2^100)``, or 0 where ``e_k = 0`` (fewer than ``k`` positive
        masses).
    expo : numpy.ndarray of int64, same shape
        ``e_k = mant · 2^expo``.
    """
    q2 = np.ascontiguousarray(q_sorted, dtype=np.float64).reshape(-1, q_sorted.shape[-1])
    shape = (top, q2.shape[0], q2.shape[1] + 1)
    mant_out = np.zeros(shape)
    expo_out = np.zeros(shape, dtype=np.int64)
    _scaled_esp_kernel(q2, top, _POW2, mant_out, expo_out)
    return mant_out, expo_out


def _conditional_poisson_ratio(q_sorted: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    r"""``e_n(q_{H_i}) / e_n(q)`` for every prefix and each ``n`` in ``counts``:
    shape (len(counts), B, V + 1), unclipped.

    The ratio of mantissas is a normal float and the difference of exponents is exact, so the
    result carries a few roundings only (relative error ~1e-15), down to the subnormals; it
    underflows to 0 only where the true ratio is below 5e-324.
    """
    wanted = np.asarray(list(counts), dtype=np.int64)
    mant, expo = _elementary_symmetric_prefix(q_sorted, int(wanted.max()))
    mant, expo = mant[wanted - 1], expo[wanted - 1]
    whole_m, whole_e = mant[..., -1:], expo[..., -1:]
    shift = np.clip(expo - whole_e, -2400, 300)  # past -2400 the ratio is 0 anyway
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.ldexp(mant / whole_m, shift.astype(np.int32))
    return ratio.reshape(len(wanted), *q_sorted.shape[:-1], q_sorted.shape[-1] + 1)


class ConditionalPoisson(DraftDesign):
    r"""A set of ``n`` distinct tokens with ``P(S) ∝ Π_{x∈S} q_x`` (conditional Poisson sampling).

    ``Q(H) = e_n(q_H) / e_n(q)``. This is the ratio in Hu et al.'s proof, not what a sequential
    sampler draws (see :class:`WithoutReplacement`). The order inside a tuple is uniform.

    The elementary symmetric polynomials of the prefixes are carried with one power-of-two
    scale per ``e_k`` (:func:`_elementary_symmetric_prefix`), so ``Q(H)`` keeps its relative
    precision when ``e_n`` falls below the smallest float (masses down to 5e-324).
    """

    name = "conditional_poisson"
    shared_sweep = True
    distinct = True

    def sample(self, q, n, size, rng):
        mant, expo = _elementary_symmetric_prefix(q[None, :], n)
        mant, shift = np.frexp(mant[:, 0])  # (n, V + 1), mantissas in [0.5, 1)
        expo = expo[:, 0] + shift
        # A float key with the order of e_k along the prefixes: exponent + mantissa offset
        # (each exponent's values lie in [expo, expo + 1)), relative to e_k(q) so that the
        # keys near the top keep every bit; -inf where e_k = 0.
        with np.errstate(divide="ignore"):
            key = np.where(mant > 0, (expo - expo[:, -1:]) + (2.0 * mant - 1.0), -np.inf)
        limit = np.full(size, q.shape[-1])  # draw among tokens < limit
        out = np.empty((size, n), dtype=np.int64)
        for k in range(n, 0, -1):
            # P(largest chosen token = x | k left, tokens < limit) ∝ q_x e_{k-1}(q_{<x}),
            # whose cumulative sum is e_k of the prefixes: invert it at u · e_k(q_{<limit}).
            frac, shift = np.frexp(rng.random(size) * mant[k - 1, limit])
            target = (expo[k - 1, limit] + shift - expo[k - 1, -1]) + (2.0 * frac - 1.0)
            target = np.where(frac > 0, target, -np.inf)
            x = np.searchsorted(key[k - 1], target, side="right") - 1
            rounded = x >= limit  # u e_k(<limit) rounded up onto e_k(<limit)
            if np.any(rounded):
                last = _last_step(key[k - 1])
                x[rounded] = last[limit[rounded]]
            out[:, k - 1] = x
            limit = x
        return rng.permuted(out, axis=1)

    def tuple_support(self, q, n):
        tuples = _product_tuples(np.flatnonzero(q > 0), n)
        tuples = tuples[_distinct_rows(tuples)]
        weight = np.prod(q[tuples], axis=1)
        return tuples, weight / weight.sum()

    def set_support(self, q, n):
        tokens = np.flatnonzero(q > 0)
        sets = np.array(list(itertools.combinations(tokens, n)), dtype=np.int64)
        weight = np.prod(q[sets], axis=1)
        return sets, weight / weight.sum()

    def prefix_mass(self, q_sorted, n):
        return self.prefix_masses(q_sorted, [n])[0]

    def prefix_masses(self, q_sorted, counts):
        ratio = _conditional_poisson_ratio(q_sorted, counts)
        return clip_rounding(ratio, 0.0, 1.0, "conditional_poisson Q(H) = e_n(q_H) / e_n(q)")


def _last_step(key: np.ndarray) -> np.ndarray:
    """``out[j]`` = the last token ``x < j`` whose step ``key[x] < key[x + 1]`` is positive
    (-1 if none): where to land when a target rounds up to ``key[j]``."""
    step = np.flatnonzero(key[1:] > key[:-1])
    marks = np.full(key.size, -1, dtype=np.int64)
    marks[step + 1] = step
    return np.maximum.accumulate(marks)


def _restricted_prefix_mass(q_sorted: np.ndarray, fixed: int, design: str) -> np.ndarray:
    """``1[first `fixed` tokens ⊆ H_i] · r(H_i)`` with ``r = q`` renormalised off those tokens."""
    rest = q_sorted[..., fixed:]
    mass = np.zeros((*q_sorted.shape[:-1], q_sorted.shape[-1] + 1))
    mass[..., fixed:] = _prefix_probability(rest, design, rest.sum(axis=-1, keepdims=True))
    return mass


def _fixed_plus_sampled(
    p: np.ndarray, q: np.ndarray, fixed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""Closed form for ``fixed`` deterministic drafts plus one draft from ``r = q`` off them.

    ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)`` with the certificate ``H = T ∪ {x ∉ T: p_x < r_x}``
    (``1 + p(H) − Q(H)`` with ``Q(H) = r(H)`` for ``H ⊇ T``). With nothing sampled
    (``topk``), ``α* = p(T)`` and ``H = T``.
    """
    rows = np.arange(p.shape[0])[:, None]
    inside = np.zeros(p.shape, dtype=bool)
    inside[rows, fixed] = True
    rest = np.where(inside, 0.0, q)
    r = rest / rest.sum(axis=-1, keepdims=True)  # design.check: something is left to sample
    sampled = np.where(inside, 0.0, np.minimum(p, r)).sum(axis=-1)
    kept = np.where(inside, p, 0.0).sum(axis=-1)
    return kept + sampled - 1.0, inside | (p < r)


def _fixed_first_order(p: np.ndarray, q: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """Sort by ``p/q`` with the ``fixed`` tokens (B, k) first."""
    key = _sweep_key(p, q)
    np.put_along_axis(key, fixed, -np.inf, axis=-1)
    return np.argsort(key, axis=-1)


class Greedy(DraftDesign):
    r"""Hu et al.'s greedy design: the top ``n−1`` tokens ``T`` of ``q``, then one draft from
    ``r = q`` restricted to ``V \ T`` and renormalised. ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``.
    """

    name = "greedy"
    distinct = True

    def sample(self, q, n, size, rng):
        top = _top_tokens(q, n - 1)
        rest = q.copy()
        rest[top] = 0.0
        last = _inverse_cdf(rest, rng.random((size, 1)))
        return np.concatenate([np.broadcast_to(top, (size, n - 1)), last], axis=1)

    def tuple_support(self, q, n):
        top = _top_tokens(q, n - 1)
        rest = q.copy()
        rest[top] = 0.0
        last = np.flatnonzero(rest > 0)
        tuples = np.concatenate([np.broadcast_to(top, (last.size, n - 1)), last[:, None]], axis=1)
        return tuples, rest[last] / rest.sum()

    def sweep_orders(self, p, q, n):
        return [_fixed_first_order(p, q, _top_tokens(q, n - 1))]

    def closed_form(self, p, q, n):
        return _fixed_plus_sampled(p, q, _top_tokens(q, n - 1))

    def prefix_mass(self, q_sorted, n):
        return _restricted_prefix_mass(q_sorted, n - 1, self.name)


class TopK(DraftDesign):
    """Deterministic drafts: the ``n`` most likely tokens ``T`` of ``q``. ``α* = p(T)``."""

    name = "topk"

    def sample(self, q, n, size, rng):
        return np.broadcast_to(_top_tokens(q, n), (size, n)).copy()

    def tuple_support(self, q, n):
        return _top_tokens(q, n)[None, :], np.ones(1)

    def sweep_orders(self, p, q, n):
        return [_fixed_first_order(p, q, _top_tokens(q, n))]

    def closed_form(self, p, q, n):
        fixed = _top_tokens(q, n)
        inside = np.zeros(p.shape, dtype=bool)
        np.put_along_axis(inside, fixed, True, axis=-1)
        return np.where(inside, p, 0.0).sum(axis=-1) - 1.0, inside

    def prefix_mass(self, q_sorted, n):
        mass = np.zeros((*q_sorted.shape[:-1], q_sorted.shape[-1] + 1))
        mass[..., n:] = 1.0
        return mass


class Hub(DraftDesign):
    r"""SpecHub's sparse pairs (``n = 2``): with the hub ``a = argmax q``, the first draft is
    ``x_1 ~ q``; if ``x_1 ≠ a`` the second is ``a``, else it is drawn from ``q`` off ``a``.
    ``Q(i, a) = q_i``, ``Q(a, i) = q_a q_i / (1 − q_a)``;
    ``α* = p_a + Σ_{i≠a} min(p_i, q_i/(1−q_a))``.
    """

    name = "hub"
    distinct = True
    fixed_n = 2

    def sample(self, q, n, size, rng):
        hub = int(_top_tokens(q, 1)[0])
        first = _inverse_cdf(q, rng.random(size))
        rest = q.copy()
        rest[hub] = 0.0
        other = _inverse_cdf(rest, rng.random(size))
        second = np.where(first == hub, other, hub)
        return np.stack([first, second], axis=1)

    def tuple_support(self, q, n):
        hub = int(_top_tokens(q, 1)[0])
        others = np.flatnonzero(q > 0)
        others = others[others != hub]
        rest = q[others].sum()
        tuples = np.concatenate(
            [
                np.stack([others, np.full_like(others, hub)], 1),
                np.stack([np.full_like(others, hub), others], 1),
            ]
        )
        probs = np.concatenate([q[others], q[hub] * q[others] / rest])
        return tuples, probs

    def sweep_orders(self, p, q, n):
        return [_fixed_first_order(p, q, _top_tokens(q, 1))]

    def closed_form(self, p, q, n):
        return _fixed_plus_sampled(p, q, _top_tokens(q, 1))

    def prefix_mass(self, q_sorted, n):
        return _restricted_prefix_mass(q_sorted, 1, self.name)


class PerSlot(DraftDesign):
    r"""A different draft distribution for each slot, drawn independently: ``q`` has shape
    ``(..., n, V)`` and ``Q(H) = Π_j q_j(H)``.

    No single token order is known to be exact for this design: the sweep tries the orders
    by ``p / q_j`` for every slot and by ``p`` over the slots' arithmetic and geometric means,
    and returns the best ``H`` found, a certified **upper bound** on ``α*``. The LPs
    (:func:`otbound.solve_primal`) are exact on small supports.
    """

    name = "per_slot"
    exact_sweep = False
    slot_axis = True

    def sample(self, q, n, size, rng):
        u = rng.random((size, n))
        return np.stack([_inverse_cdf(q[j], u[:, j]) for j in range(n)], axis=1)

    def tuple_support(self, q, n):
        tuples = _product_tuples(np.arange(q.shape[-1]), n)
        probs = np.prod(q[np.arange(n), tuples], axis=1)
        keep = probs > 0
        return tuples[keep], probs[keep]

    def sweep_orders(self, p, q, n):
        candidates = [q[..., j, :] for j in range(n)]
        candidates.append(q.mean(axis=-2))
        with np.errstate(divide="ignore"):
            candidates.append(np.exp(np.log(q).mean(axis=-2)))
        return [np.argsort(_sweep_key(p, c), axis=-1) for c in candidates]

    def prefix_mass(self, q_sorted, n):
        return np.prod(_prefix_probability(q_sorted, self.name), axis=-2)


_REGISTRY: dict[str, DraftDesign] = {
    d.name: d
    for d in (IID(), WithoutReplacement(), ConditionalPoisson(), Greedy(), TopK(), Hub(), PerSlot())
}

#: Names of the draft designs, in the order tables list them.
DESIGNS: tuple[str, ...] = tuple(_REGISTRY)


def get_design(design: str | DraftDesign) -> DraftDesign:
    """Look a design up by name (a :class:`DraftDesign` instance passes through)."""
    if isinstance(design, DraftDesign):
        return design
    try:
        return _REGISTRY[design]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown design {design!r}; valid designs: {', '.join(DESIGNS)}"
        ) from None


def num_tuples(vocab: int, n: int) -> int:
    """Number of ordered tuples ``V^n`` an enumeration would visit (for size guards)."""
    return int(math.pow(vocab, n))
