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

import numpy as np

from otbound._sequential_mass import sequential_prefix_masses


def _sweep_key(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``p/q`` per token; tokens with ``q = 0`` sort last (they never help to enter ``H``)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = p / q
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
    def check(self, q: np.ndarray, n: int) -> None:
        """Raise ``ValueError`` when ``n`` drafts cannot be drawn from ``q`` (..., V)."""
        if self.fixed_n is not None and n != self.fixed_n:
            raise ValueError(
                f"design {self.name!r} is defined for n={self.fixed_n} only, got n={n}"
            )
        if self.slot_axis and q.shape[-2] != n:
            raise ValueError(
                f"design {self.name!r} needs one draft distribution per slot: q must have shape "
                f"(..., n, V) with n={n}, got {q.shape}"
            )
        vocab = q.shape[-1]
        if n > vocab and (self.distinct or self.name == "topk"):
            raise ValueError(f"n={n} is larger than the vocabulary size V={vocab}")
        if self.distinct:
            support = np.count_nonzero(q > 0, axis=-1)
            short = support < n
            if np.any(short):
                row = tuple(int(i) for i in np.argwhere(np.atleast_1d(short))[0])
                where = f" in row {row}" if q.ndim > 1 else ""
                raise ValueError(
                    f"n={n} is larger than the support of q{where} "
                    f"({int(np.atleast_1d(support)[row] if row else support)} tokens with q > 0); "
                    f"design {self.name!r} draws {n} distinct tokens"
                )

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
        return np.minimum(_prefix_sums(q_sorted), 1.0) ** n


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


def _elementary_symmetric_prefix(q_sorted: np.ndarray, n: int) -> np.ndarray:
    r"""``e_k`` of every prefix, ``k = 0..n``: shape (n + 1, B, V + 1).

    ``e_k(q_{≤i}) = Σ_{x≤i} q_x e_{k−1}(q_{<x})``: a cumulative sum of non-negative terms.
    """
    size = q_sorted.shape[-1]
    e = np.zeros((n + 1, *q_sorted.shape[:-1], size + 1))
    e[0] = 1.0
    for k in range(1, n + 1):
        np.cumsum(q_sorted * e[k - 1][..., :-1], axis=-1, out=e[k][..., 1:])
    return e


class ConditionalPoisson(DraftDesign):
    r"""A set of ``n`` distinct tokens with ``P(S) ∝ Π_{x∈S} q_x`` (conditional Poisson sampling).

    ``Q(H) = e_n(q_H) / e_n(q)``. This is the ratio in Hu et al.'s proof, not what a sequential
    sampler draws (see :class:`WithoutReplacement`). The order inside a tuple is uniform.
    """

    name = "conditional_poisson"
    shared_sweep = True
    distinct = True

    def sample(self, q, n, size, rng):
        e = _elementary_symmetric_prefix(q[None, :], n)[:, 0]  # (n + 1, V + 1)
        limit = np.full(size, q.shape[-1])  # draw among tokens < limit
        out = np.empty((size, n), dtype=np.int64)
        for k in range(n, 0, -1):
            # P(largest chosen token = x | k left, tokens < limit) ∝ q_x e_{k-1}(q_{<x}),
            # whose cumulative sum is e_k of the prefixes.
            u = rng.random(size) * e[k][limit]
            x = np.searchsorted(e[k], u, side="right") - 1
            x = np.minimum(x, limit - 1)
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
        e_n = _elementary_symmetric_prefix(q_sorted, n)[n]
        return np.minimum(e_n / e_n[..., -1:], 1.0)


def _restricted_prefix_mass(q_sorted: np.ndarray, fixed: int) -> np.ndarray:
    """``1[first `fixed` tokens ⊆ H_i] · r(H_i)`` with ``r = q`` renormalised off those tokens."""
    rest = q_sorted[..., fixed:]
    mass = np.zeros((*q_sorted.shape[:-1], q_sorted.shape[-1] + 1))
    mass[..., fixed:] = _prefix_sums(rest) / rest.sum(axis=-1, keepdims=True)
    return np.minimum(mass, 1.0)


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
        return _restricted_prefix_mass(q_sorted, n - 1)


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
        return _restricted_prefix_mass(q_sorted, 1)


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
        return np.prod(np.minimum(_prefix_sums(q_sorted), 1.0), axis=-2)


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
