r"""Importance sampling's exact acceptance at ``n ≤ 2`` in torch, batched over steps.

The formula of :mod:`otbound.verifiers.importance` (Khisti et al.'s scheme with i.i.d. slots,
``a = b = q``, the top ``s = 10`` tokens' weights from the stage LP), step for step:

1. **Ranking.** The tokens by ``p − q²`` descending, ties by token id (the stable sort of
   ``−(p − q q)``, the key's bits those of numpy's).
2. **Rank rule.** In that order, ``p_I(y) = a_y (b_y + Σ_{later} b) + b_y Σ_{later} a``.
3. **The stage LP.** On the top ``s``, with ``base_y = a_y b_y + a_y tail_b + b_y tail_a +
   b_y (Σ_S a − a_y)``, the weights ``W`` (s, s) of the maximum flow of
   :func:`otbound.verifiers.importance.stage_weights` (on the CPU: a flow of ``s²`` pairs a
   step, its optimality certified, the numpy path's own function), and
   ``p_I(y) = base_y + Σ_{j≠y} a_y b_j W_{yj} − Σ_{i≠y} a_i b_y W_{iy}``.
4. ``p_I`` checked in ``[0, 1]`` to ``LP_SLACK`` (on the device; beyond it numpy's
   ``clip_rounding`` raises its :class:`ValueError`: :func:`otbound._torch_checks.
   clip_rounding_torch`), clipped, and normalised by its sum (itself within ``LP_SLACK`` of 1).
5. ``α = Σ min(p, p_I) + P(selected draft rejected, residual ∈ {x_1, x_2})`` with
   ``acc = min(1, p / p_I)``, ``r = res(p, p_I) = (p − p_I)⁺ / Σ (p − p_I)⁺`` (``p`` itself
   where ``p ≤ p_I`` at every token) and, in the
   ranking's order with ``f = 1 − acc``,
   ``Σ_i a_i f_i Σ_{k>i} b_k r_k + Σ_i b_i f_i Σ_{k>i} a_k r_k`` plus the LP block's
   correction ``Σ_{i≠j ≤ s} a_i b_j [(W_{ij} − [j>i]) f_i r_j + ((1 − W_{ij}) − [i>j]) f_j
   r_i]``.

The sums are torch's (suffix sums by ``cumsum``), not numpy's sequential and pairwise ones:
the values agree with numpy's to rounding (1e-9 is tested on CPU torch). ``n = 1`` is
``Σ min(p, q)`` (no stage). Only the verifier's default ``top`` is served
(:meth:`otbound.verifiers.ImportanceSampling.has_default_settings`).
"""

from __future__ import annotations

import numpy as np
import torch

from otbound._torch_checks import clip_rounding_torch
from otbound.bounds import LP_SLACK
from otbound.verifiers._torch_single_draft import single_or_refuse
from otbound.verifiers.importance import DEFAULT_TOP, stage_weights

__all__ = ["importance_acceptance"]


def _after(x: torch.Tensor) -> torch.Tensor:
    """``Σ_{k>i} x_k`` along the last axis (0 at the last entry)."""
    suffix = torch.flip(torch.cumsum(torch.flip(x, dims=[-1]), dim=-1), dims=[-1])
    return torch.cat([suffix[..., 1:], torch.zeros_like(x[..., :1])], dim=-1)


def _stage_keep(lp: torch.Tensor) -> torch.Tensor:
    """The stage LP's weights ``W`` (B, s, s) of the rows ``aS, bS, pS, base`` (B, 4, s):
    :func:`~otbound.verifiers.importance.stage_weights` of each step on the CPU."""
    rows = lp.cpu().numpy()
    size = rows.shape[2]
    keep = np.empty((0, size, size))
    if rows.shape[0]:
        keep = np.stack([stage_weights(np.ascontiguousarray(row)) for row in rows])
    return torch.as_tensor(keep, dtype=lp.dtype, device=lp.device)


def importance_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Importance sampling's exact acceptance (i.i.d. slots, ``top = 10``), ``n ≤ 2``.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
        Validated target and draft rows (float64).
    n : int
        1 or 2 (``n ≥ 3`` enumerates the draft tuples or estimates: numpy).

    Returns
    -------
    torch.Tensor, shape (B,)
        The module docstring's ``α`` (unclipped).

    Raises
    ------
    ValueError
        ``n`` other than 1 or 2; an induced ``p_I`` outside ``[0, 1]``, or a sum of ``p_I``
        off 1, by more than ``LP_SLACK`` (never on valid rows).
    otbound.bounds.LPError
        A stage flow not certified optimal (numpy's error).
    """
    single = single_or_refuse(p, q, n, "importance", "enumerates the draft tuples or estimates")
    if single is not None:
        return single
    vocab = p.shape[-1]
    s = min(DEFAULT_TOP, vocab)
    order = torch.sort(-(p - q * q), dim=-1, stable=True).indices
    a = torch.gather(q, -1, order)  # slot 1 and slot 2 in the ranking's order
    p_sorted = torch.gather(p, -1, order)
    after_a = _after(a)
    induced = a * (a + after_a) + a * after_a  # the rank rule (b = a)
    top_a = a[:, :s]
    tail = a[:, s:].sum(dim=-1, keepdim=True)
    base = ((top_a * top_a + top_a * tail) + top_a * tail) + top_a * (
        top_a.sum(dim=-1, keepdim=True) - top_a
    )
    keep = _stage_keep(torch.stack([top_a, top_a, p_sorted[:, :s], base], dim=1))
    off = 1.0 - torch.eye(s, dtype=p.dtype, device=p.device)
    cell = (top_a[:, :, None] * top_a[:, None, :]) * keep * off  # a_i b_j W_ij, i ≠ j
    induced = torch.cat([base + cell.sum(dim=2) - cell.sum(dim=1), induced[:, s:]], dim=-1)
    what = "importance induced distribution p_I"
    induced = clip_rounding_torch(induced, 0.0, 1.0, what, tol=LP_SLACK)
    total = induced.sum(dim=-1, keepdim=True)
    what = "importance induced distribution's total Σ p_I"
    clip_rounding_torch(total, 1.0, 1.0, what, tol=LP_SLACK)
    induced = induced / total
    positive = induced > 0
    ratio = (p_sorted / torch.where(positive, induced, 1.0)).clamp_max(1.0)
    accept = torch.where(positive, ratio, torch.zeros((), dtype=p.dtype, device=p.device))
    selected = torch.minimum(p_sorted, induced).sum(dim=-1)
    rest = (p_sorted - induced).clamp_min(0.0)
    missing = rest.sum(dim=-1, keepdim=True)
    rest = torch.where(missing > 0, rest / torch.where(missing > 0, missing, 1.0), p_sorted)
    fail = 1.0 - accept
    weighted = _after(a * rest)  # Σ_{k>i} b_k r_k = Σ_{k>i} a_k r_k (b = a)
    ranked = 2.0 * ((a * fail) * weighted).sum(dim=-1)
    later = torch.triu(torch.ones(s, s, dtype=p.dtype, device=p.device), diagonal=1)
    f_top, r_top = fail[:, :s], rest[:, :s]
    pair = (top_a[:, :, None] * top_a[:, None, :]) * off
    kept = ((pair * (keep - later)) * f_top[:, :, None]) * r_top[:, None, :]
    swapped = ((pair * ((1.0 - keep) - later.T)) * f_top[:, None, :]) * r_top[:, :, None]
    return selected + ranked + kept.sum(dim=(1, 2)) + swapped.sum(dim=(1, 2))
