r"""Designs with deterministic drafts: ``greedy`` (top ``n − 1`` tokens, then one sampled),
``topk`` (the ``n`` most likely tokens) and ``hub`` (SpecHub's pairs around ``argmax q``).

Their optimal acceptance rates have closed forms (``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``), in
numpy here and in torch in :mod:`otbound.drafts._torch_closed_forms`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from otbound.drafts.base import DraftDesign
from otbound.drafts.tokens import inverse_cdf, prefix_probability, sweep_key, top_tokens

if TYPE_CHECKING:
    import torch

__all__ = ["Greedy", "Hub", "TopK"]


def _restricted_prefix_mass(q_sorted: np.ndarray, fixed: int, design: str) -> np.ndarray:
    """``1[first `fixed` tokens ⊆ H_i] · r(H_i)`` with ``r = q`` renormalised off those tokens."""
    rest = q_sorted[..., fixed:]
    mass = np.zeros((*q_sorted.shape[:-1], q_sorted.shape[-1] + 1))
    mass[..., fixed:] = prefix_probability(rest, design, rest.sum(axis=-1, keepdims=True))
    return mass


def _fixed_plus_sampled(
    p: np.ndarray, q: np.ndarray, fixed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""Closed form for ``fixed`` deterministic drafts plus one draft from ``r = q`` off them.

    ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)`` with the certificate ``H = T ∪ {x ∉ T: p_x < r_x}``
    (``1 + p(H) − Q(H)`` with ``Q(H) = r(H)`` for ``H ⊇ T``). With nothing sampled
    (``topk``), ``α* = p(T)`` and ``H = T``.
    """
    from otbound.drafts._fixed_kernels import fixed_plus_sampled_rows  # numba

    # one compiled pass a row, numpy's arithmetic in its order (design.check: something is
    # left to sample, so r's total is positive)
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)
    fixed = np.ascontiguousarray(fixed, dtype=np.int64)
    if fixed.shape[:-1] != p.shape[:-1] or (
        fixed.size and (fixed.min() < 0 or fixed.max() >= p.shape[-1])
    ):  # the compiled pass indexes without bounds checks
        raise ValueError(f"fixed must be token ids in [0, {p.shape[-1]}), one row a step")
    return fixed_plus_sampled_rows(p, q, fixed)


def _fixed_first_order(p: np.ndarray, q: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """Sort by ``p/q`` with the ``fixed`` tokens (B, k) first."""
    key = sweep_key(p, q)
    np.put_along_axis(key, fixed, -np.inf, axis=-1)
    return np.argsort(key, axis=-1)


class _FixedPlusSampled(DraftDesign):
    r"""Designs whose drafts are the top :meth:`fixed_tokens` tokens ``T`` of ``q`` plus one
    draft from ``r = q`` off ``T``: ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)`` in closed form, and
    ``Q(H) = 1[T ⊆ H] · r(H)`` along any order that puts ``T`` first."""

    def sweep_orders(self, p, q, n):
        return [_fixed_first_order(p, q, top_tokens(q, self.fixed_tokens(n)))]

    def closed_form(self, p, q, n):
        return _fixed_plus_sampled(p, q, top_tokens(q, self.fixed_tokens(n)))

    def prefix_mass(self, q_sorted, n):
        return _restricted_prefix_mass(q_sorted, self.fixed_tokens(n), self.name)

    def torch_gap(self, p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
        from otbound.drafts._torch_closed_forms import fixed_plus_sampled_gap, top_mask

        return fixed_plus_sampled_gap(p, q, top_mask(q, self.fixed_tokens(n)))


class Greedy(_FixedPlusSampled):
    r"""Hu et al.'s greedy design: the top ``n−1`` tokens ``T`` of ``q``, then one draft from
    ``r = q`` restricted to ``V \ T`` and renormalised. ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``.
    """

    name = "greedy"
    title = "greedy (top n−1, then one sampled)"
    distinct = True
    torch_sweep = True

    def fixed_tokens(self, n: int) -> int:
        return n - 1

    def sample(self, q, n, size, rng):
        top = top_tokens(q, self.fixed_tokens(n))
        rest = q.copy()
        rest[top] = 0.0
        last = inverse_cdf(rest, rng.random((size, 1)))
        return np.concatenate([np.broadcast_to(top, (size, n - 1)), last], axis=1)

    def tuple_support(self, q, n):
        top = top_tokens(q, self.fixed_tokens(n))
        rest = q.copy()
        rest[top] = 0.0
        last = np.flatnonzero(rest > 0)
        tuples = np.concatenate([np.broadcast_to(top, (last.size, n - 1)), last[:, None]], axis=1)
        return tuples, rest[last] / rest.sum()


class TopK(DraftDesign):
    """Deterministic drafts: the ``n`` most likely tokens ``T`` of ``q``. ``α* = p(T)``."""

    name = "topk"
    title = "top-n, deterministic"
    within_vocabulary = True
    torch_sweep = True

    def fixed_tokens(self, n: int) -> int:
        return n

    def sample(self, q, n, size, rng):
        return np.broadcast_to(top_tokens(q, self.fixed_tokens(n)), (size, n)).copy()

    def tuple_support(self, q, n):
        return top_tokens(q, self.fixed_tokens(n))[None, :], np.ones(1)

    def sweep_orders(self, p, q, n):
        return [_fixed_first_order(p, q, top_tokens(q, self.fixed_tokens(n)))]

    def closed_form(self, p, q, n):
        fixed = top_tokens(q, self.fixed_tokens(n))
        inside = np.zeros(p.shape, dtype=bool)
        np.put_along_axis(inside, fixed, True, axis=-1)
        return np.where(inside, p, 0.0).sum(axis=-1) - 1.0, inside

    def prefix_mass(self, q_sorted, n):
        mass = np.zeros((*q_sorted.shape[:-1], q_sorted.shape[-1] + 1))
        mass[..., self.fixed_tokens(n) :] = 1.0
        return mass

    def torch_gap(self, p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
        from otbound.drafts._torch_closed_forms import kept_gap, top_mask

        return kept_gap(p, top_mask(q, self.fixed_tokens(n)))


class Hub(_FixedPlusSampled):
    r"""SpecHub's sparse pairs (``n = 2``): with the hub ``a = argmax q``, the first draft is
    ``x_1 ~ q``; if ``x_1 ≠ a`` the second is ``a``, else it is drawn from ``q`` off ``a``.
    ``Q(i, a) = q_i``, ``Q(a, i) = q_a q_i / (1 − q_a)``;
    ``α* = p_a + Σ_{i≠a} min(p_i, q_i/(1−q_a))``.
    """

    name = "hub"
    title = "hub pairs (SpecHub)"
    distinct = True
    fixed_n = 2
    torch_sweep = True

    def fixed_tokens(self, n: int) -> int:
        return 1  # the hub, argmax q

    def sample(self, q, n, size, rng):
        hub = int(top_tokens(q, 1)[0])
        first = inverse_cdf(q, rng.random(size))
        rest = q.copy()
        rest[hub] = 0.0
        other = inverse_cdf(rest, rng.random(size))
        second = np.where(first == hub, other, hub)
        return np.stack([first, second], axis=1)

    def tuple_support(self, q, n):
        hub = int(top_tokens(q, 1)[0])
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
