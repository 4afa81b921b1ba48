r"""The torch sweeps of the designs that have one (``torch_sweep = True``): batched ``α* − 1``
on any device, on validated tensors (B, V).

* ``iid`` (``Q(H) = q(H)^n``): one batched sort of the tokens by ``p/q`` ascending (``q = 0``
  tokens last, ``p = 0 < q`` tokens first); ``α* = 1 + min(0, min_i [p(H_i) − q(H_i)^n])``.
* ``topk``: ``α* = p(T)``, ``T`` the ``n`` most likely tokens of ``q``.
* ``greedy`` and ``hub``: ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``, ``r = q`` off ``T``
  renormalised (``T``: the top ``n − 1`` tokens, or the hub ``argmax q``).

Ties among equally likely tokens of ``q`` go to the lower token id, as in
:func:`otbound.drafts.top_tokens`. ``without_replacement`` and ``conditional_poisson`` (a scan
over the sorted tokens) are in :mod:`otbound.drafts._torch_distinct`.
"""

from __future__ import annotations

import torch

__all__ = ["fixed_plus_sampled_gap", "iid_gap", "kept_gap", "top_mask"]


def top_mask(q: torch.Tensor, k: int) -> torch.Tensor:
    """Mask (B, V) of the ``k`` most likely tokens of each row of ``q``, ties to the lower id.

    ``O(V)`` per row: the ``k``-th largest value by ``topk``, then every token above it and
    the first tokens equal to it (by id) until ``k`` are chosen, as
    :func:`otbound.drafts.top_tokens` does.
    """
    if k == 0:
        return torch.zeros(q.shape, dtype=torch.bool, device=q.device)
    kth = torch.topk(q, k, dim=-1, largest=True, sorted=True).values[:, k - 1 : k]
    above = q > kth
    ties = q == kth
    room = k - above.sum(dim=-1, keepdim=True)
    return above | (ties & (torch.cumsum(ties.to(torch.int32), dim=-1) <= room))


def iid_gap(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    """``min(0, min_i [p(H_i) − q(H_i)^n])`` per row over the prefixes of the ``p/q`` order."""
    inf = torch.tensor(float("inf"), dtype=p.dtype, device=p.device)
    key = torch.where(q > 0, p / q, inf)  # q = 0 last; p = 0 < q first (key 0)
    order = torch.argsort(key, dim=-1)
    del key
    p_cum = torch.cumsum(torch.take_along_dim(p, order, dim=-1), dim=-1)
    q_cum = torch.cumsum(torch.take_along_dim(q, order, dim=-1), dim=-1)
    del order
    gap = p_cum.sub_(q_cum.clamp_(max=1.0).pow_(n))
    return gap.amin(dim=-1).clamp(max=0.0)  # H = ∅ gives 0


def kept_gap(p: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """``p(T) − 1`` per row (``topk``: nothing is sampled)."""
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    return torch.where(inside, p, zero).sum(dim=-1) - 1.0


def fixed_plus_sampled_gap(p: torch.Tensor, q: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """``p(T) + Σ_{x∉T} min(p_x, r_x) − 1``, ``r = q`` off ``T`` renormalised (greedy, hub)."""
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    rest = torch.where(inside, zero, q)
    r = rest / rest.sum(dim=-1, keepdim=True)  # the design's check: something is left
    sampled = torch.where(inside, zero, torch.minimum(p, r)).sum(dim=-1)
    kept = torch.where(inside, p, zero).sum(dim=-1)
    return kept + sampled - 1.0
