r"""The level rule's set-up in torch: batched over steps, on any device.

For each row, the part of :func:`otbound.selection.level_rule` that fixes its acceptance: the
tokens in decreasing ``p / q`` (one batched sort), the slots ``[a_k, b_k]`` (a reversed
cumulative sum), their values ``v_k = Σ_{i<n} b_k^{n−1−i} a_k^i`` (Horner's rule, every
term positive) and the vertex masses ``q_k v_k``. The rule's selection marginal is
``r = c_j p`` on the blocks of the convex minorant of ``(p(B_k), f(B_k))``, so

.. math::

    Σ_y \min(p_y, r_y) = \sum_{c_j ≤ 1} Δf_j + \sum_{c_j > 1} Δp_j
    = p(\{q > 0\}) + \min_k \bigl[f(B_k) − p(B_k)\bigr],

the minimum taken where the minorant crosses slope 1, which is a point of the curve. The
swaps that realise ``r`` (needed only to sample a selection) are built by the numpy rule.
"""

from __future__ import annotations

import torch

__all__ = ["level_rule_acceptance_torch"]


def level_rule_acceptance_torch(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    """``Σ min(p, r)`` of the level rule of each row (validated rows (B, V), float64).

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.3, 0.4, 0.3]], dtype=torch.float64)
    >>> q = torch.tensor([[0.6, 0.3, 0.1]], dtype=torch.float64)
    >>> round(float(level_rule_acceptance_torch(p, q, 2)[0]), 6)
    0.89
    """
    live = q > 0
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    key = torch.where(live, p / torch.where(live, q, 1.0), -torch.inf)
    order = torch.argsort(key, dim=-1, descending=True, stable=True)  # q = 0 last
    del key
    q_sorted = torch.take_along_dim(q, order, dim=-1)
    p_sorted = torch.take_along_dim(torch.where(live, p, zero), order, dim=-1)
    del order
    top = torch.flip(torch.cumsum(torch.flip(q_sorted, [-1]), dim=-1), [-1])  # b_k
    below = top - q_sorted  # a_k
    values = torch.zeros_like(top)
    power = torch.ones_like(top)
    for _ in range(n):  # ((1·b + a)·b + a²)·b + … = Σ_i b^{n−1−i} a^i
        values = values * top + power
        power = power * below
    curve = torch.cumsum(q_sorted * values - p_sorted, dim=-1)  # f(B_k) − p(B_k), k ≥ 1
    lowest = torch.clamp(curve.amin(dim=-1), max=0.0)  # k = 0 gives 0
    return p_sorted.sum(dim=-1) + lowest
