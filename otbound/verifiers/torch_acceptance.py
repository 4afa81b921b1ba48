r"""The exact verifier acceptance formulas in torch: batched over steps, on any device.

Each function takes validated rows ``p``, ``q`` (B, V) (float64 tensors on one device, each
row a distribution) and returns the exact acceptance rate ``P(Y ∈ x̄)`` of one shipped
verifier per row, (B,) float64, following the numpy verifier's ``acceptance``
(:mod:`otbound.verifiers`) step for step, edge cases included (support smaller than ``n``
where the design allows it, ties, zeros); the values agree with numpy's to rounding (1e-9 is
tested on CPU torch). Values are not clipped: :func:`verifier_acceptance_torch` clips those
out of ``[0, 1]`` by rounding only and refuses the others, as
:meth:`otbound.verifiers.BaseVerifier.acceptance` does, with its words
(:func:`otbound._torch_checks.clip_rounding_torch`: one test on the device, the values read
back only to raise).

=============================  ===============================================================
verifier                       torch formula
=============================  ===============================================================
``single``                     :func:`single_acceptance`, every ``n``
``rrs``                        :func:`rrs_acceptance`, every ``n``
``rrs_without_replacement``    :func:`rrs_without_replacement_acceptance`, ``n ≤ 2``
``kseq``                       :func:`kseq_acceptance` (batched bisection), every ``n``
``spechub``                    :func:`spechub_acceptance`, ``n = 2``
``greedy``                     :func:`greedy_acceptance`, every ``n``
``topk``                       :func:`topk_acceptance`, every ``n``
``gls``                        :func:`gls_acceptance`: closed form ``n = 1``, quadrature ``n ≥ 2``
``importance``                 :func:`~otbound.verifiers._torch_importance.importance_acceptance`,
                               ``n ≤ 2``, its default ``top`` (the stage LP's flow on the CPU)
``optimal``                    :func:`~otbound.selection.torch_levels.level_rule_acceptance_torch`
                               (its level rule), every ``n``
=============================  ===============================================================

Not here: ``rrs_without_replacement`` and ``importance`` at ``n ≥ 3`` (a sum over ``V^{n−1}``
rejected prefixes or ``V^n`` draft tuples, or a Rao-Blackwellised estimate), ``importance``
with another ``top``, and ``optimal`` on another design or method (the round rule of draft
sets, whose fit is sequential, or an LP per step): :func:`otbound.compare` computes them with
numpy.

This module imports torch; the package does not import it (``compute_bounds --device`` and
:func:`torch_acceptance_on` do, when asked for).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from otbound._checks import as_num_drafts, batch_shape
from otbound._spellings import method_keyword
from otbound._torch_checks import (
    as_distribution_pair_torch,
    check_chunk_elements,
    clip_rounding_torch,
    support_sizes,
)
from otbound.bounds.torch_sweep import TORCH_CHUNK_ELEMENTS
from otbound.drafts import get_design
from otbound.drafts._torch_closed_forms import top_mask
from otbound.selection.torch_levels import level_rule_acceptance_torch
from otbound.verifiers._torch_importance import importance_acceptance
from otbound.verifiers._torch_single_draft import single_or_refuse
from otbound.verifiers.base import acceptance_what
from otbound.verifiers.batched import BatchAcceptance

__all__ = [
    "TORCH_VERIFIERS",
    "gls_acceptance",
    "greedy_acceptance",
    "kseq_acceptance",
    "rrs_acceptance",
    "rrs_without_replacement_acceptance",
    "serves",
    "single_acceptance",
    "spechub_acceptance",
    "topk_acceptance",
    "torch_acceptance_on",
    "verifier_acceptance_torch",
]

#: Step of the trapezoid rule in ``ln t`` (:data:`otbound.verifiers.gls.QUADRATURE_STEP`).
_GLS_STEP = 0.3


def _zero(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=x.dtype, device=x.device)


# -- the formulas ---------------------------------------------------------------------------


def single_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Single-draft speculative sampling on the first of ``n`` i.i.d. drafts.

    .. math::

        α_n = β(p, q) + \sum_y (p_y − q_y)^+ \bigl(1 − (1 − q_y)^{n−1}\bigr),
        \qquad β(p, q) = 1 − \sum_y (p_y − q_y)^+,

    with ``1 − (1 − q_y)^{n−1} = −expm1((n − 1) log1p(−q_y))`` (``= 1`` where ``q_y = 1``),
    as :class:`otbound.verifiers.single.SingleDraft`.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
        Validated target and draft distributions (float64, one device).
    n : int
        Number of drafts.

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    excess = torch.clamp(p - q, min=0.0)
    beta = 1.0 - excess.sum(dim=-1)
    if n == 1:
        return beta
    hit = -torch.expm1((n - 1) * torch.log1p(-torch.clamp(q, max=1.0)))
    return beta + (excess * hit).sum(dim=-1)


def rrs_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Recursive rejection sampling with replacement (SpecInfer).

    .. math::

        α = 1 − \prod_{k=1}^{n} m_k,\qquad m_k = \sum_x (p_k(x) − q_x)^+,\qquad
        p_{k+1} = (p_k − q)^+ / m_k,

    ``p_1 = p``; where ``m_k = 0`` the target stays ``p_k`` (as
    :func:`otbound.verifiers.rrs.residual_chain`).

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    target = p
    prod = torch.ones(p.shape[0], dtype=p.dtype, device=p.device)
    for k in range(n):
        excess = torch.clamp(target - q, min=0.0)
        miss = excess.sum(dim=-1, keepdim=True)
        prod = prod * miss[:, 0]
        if k < n - 1:
            safe = torch.where(miss > 0, miss, torch.ones_like(miss))
            target = torch.where(miss > 0, excess / safe, target)
    return 1.0 - prod


def _kseq_sign(
    ratio: torch.Tensor,
    cum_p: torch.Tensor,
    cum_q: torch.Tensor,
    tail_q: torch.Tensor,
    rho: torch.Tensor,
    n: int,
) -> torch.Tensor:
    """The sign function of :func:`otbound.verifiers.kseq._sign` for every row at its ``ρ``."""
    lo = torch.searchsorted(ratio, rho.unsqueeze(-1), right=False)  # number with ratio < ρ
    cp = torch.gather(cum_p, -1, lo)[:, 0]
    beta = cp / rho + torch.gather(tail_q, -1, lo)[:, 0]
    miss = torch.clamp(torch.gather(cum_q, -1, lo)[:, 0] - cp / rho, min=0.0)
    c = torch.zeros_like(rho)
    term = torch.ones_like(rho)
    for _ in range(n):
        c = c + term
        term = term * miss
    return torch.where(beta <= 0.0, torch.zeros_like(rho), rho - c)


def kseq_rho(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""K-SEQ's slack ``ρ* = min{ρ ∈ [1, n] : ρβ(ρ) ≥ 1 − (1 − β(ρ))^n}`` per row.

    The bisection of :func:`otbound.verifiers.kseq.kseq_rho`, on every row at once: tokens
    sorted by ``p/q`` (those with ``q = 0`` last, adding nothing), prefix sums of ``p`` and
    ``q`` and suffix sums of ``q``; ``ρ = 1`` where it is feasible, else bisection of
    ``[1, n]`` keeping the feasible end, each row until its interval has no float left
    between its ends (at most 200 halvings).

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    inf = torch.tensor(float("inf"), dtype=p.dtype, device=p.device)
    live = q > 0
    key = torch.where(live, p / torch.where(live, q, torch.ones_like(q)), inf)
    order = torch.argsort(key, dim=-1)
    ratio = torch.take_along_dim(key, order, dim=-1).contiguous()
    ps = torch.where(live, p, _zero(p)).take_along_dim(order, dim=-1)
    qs = torch.take_along_dim(q, order, dim=-1)
    pad = torch.zeros((p.shape[0], 1), dtype=p.dtype, device=p.device)
    cum_p = torch.cat((pad, torch.cumsum(ps, dim=-1)), dim=-1)
    cum_q = torch.cat((pad, torch.cumsum(qs, dim=-1)), dim=-1)
    tail_q = torch.cat((torch.cumsum(qs.flip(-1), dim=-1).flip(-1), pad), dim=-1)
    sums = (ratio, cum_p, cum_q, tail_q)
    rows = p.shape[0]
    lo = torch.ones(rows, dtype=p.dtype, device=p.device)
    hi = torch.full((rows,), float(n), dtype=p.dtype, device=p.device)
    at_one = _kseq_sign(*sums, lo, n) >= 0.0
    at_n_bad = _kseq_sign(*sums, hi, n) < 0.0  # only by rounding: f(n) >= 0
    active = ~at_one & ~at_n_bad
    hi = torch.where(at_one, lo, hi)
    for _ in range(200):
        if not bool(active.any()):
            break
        mid = 0.5 * (lo + hi)
        active = active & (mid > lo) & (mid < hi)
        feasible = _kseq_sign(*sums, torch.where(active, mid, hi), n) >= 0.0
        hi = torch.where(active & feasible, mid, hi)
        lo = torch.where(active & ~feasible, mid, lo)
    return hi


def kseq_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""SpecTr's K-SEQ with ``ρ*`` by bisection (:func:`kseq_rho`).

    .. math::

        α = 1 − \Bigl(\sum_x \bigl(q_x − p_x / ρ^*\bigr)^+\Bigr)^n,

    as :class:`otbound.verifiers.kseq.KSequential`.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    rho = kseq_rho(p, q, n)
    miss = torch.clamp(q - p / rho.unsqueeze(-1), min=0.0).sum(dim=-1)
    return 1.0 - miss**n


def _fixed_plus_one(p: torch.Tensor, q: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """``p(T) + Σ_{x∉T} min(p_x, r_x)`` with ``r = q`` off ``T`` renormalised
    (:func:`otbound.verifiers.greedy.fixed_plus_one_plan`'s ``alpha``)."""
    zero = _zero(p)
    rest = torch.where(inside, zero, q)
    r = rest / rest.sum(dim=-1, keepdim=True)
    matched = torch.where(inside, zero, torch.minimum(p, r)).sum(dim=-1)
    return torch.where(inside, p, zero).sum(dim=-1) + matched


def spechub_acceptance(p: torch.Tensor, q: torch.Tensor, n: int = 2) -> torch.Tensor:
    r"""SpecHub on the hub design (``n = 2``), the design's optimum.

    .. math::

        α = p_a + \sum_{i ≠ a} \min\Bigl(p_i, \frac{q_i}{1 − q_a}\Bigr),
        \qquad a = \arg\max q \ \text{(the first maximum)},

    with ``1 − q_a`` summed from the other tokens, as
    :class:`otbound.verifiers.spechub.SpecHub`.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int, default 2
        Must be 2.

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    if n != 2:
        raise ValueError(f"verifier 'spechub' is defined for n=2 only, got n={n}")
    hub = torch.argmax(q, dim=-1, keepdim=True)  # the first maximum, as numpy's argmax
    inside = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, hub, True)
    return _fixed_plus_one(p, q, inside)


def greedy_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Hu et al.'s greedy verifier on the greedy design, the design's optimum.

    .. math::

        α = p(T) + \sum_{x ∉ T} \min(p_x, r_x),\qquad r = q\,1[x ∉ T] / q(V \setminus T),

    ``T`` the ``n − 1`` most likely tokens of ``q`` (ties to the lower id), as
    :class:`otbound.verifiers.greedy.Greedy`.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    return _fixed_plus_one(p, q, top_mask(q, n - 1))


def topk_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Deterministic top-``n`` drafts: ``α = p(T)``, ``T`` the ``n`` most likely tokens of
    ``q`` (ties to the lower id), as :class:`otbound.verifiers.topk.TopK`.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    return torch.where(top_mask(q, n), p, _zero(p)).sum(dim=-1)


def rrs_without_replacement_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Recursive rejection sampling without replacement, ``n ≤ 2`` (closed forms).

    ``n = 1``: ``β(p, q) = Σ min(p, q)``. ``n = 2``, with ``m = Σ (p − q)⁺``,
    ``p_2 = (p − q)⁺ / m`` and ``g(s) = Σ_y min(p_2(y), s q_y)``:

    .. math::

        α = 1 − m + \sum_x (q_x − p_x)^+ \, g\Bigl(\frac{1}{1 − q_x}\Bigr),

    ``g`` from one sort of ``p_2 / q`` over the tokens with ``p > q`` (``∞`` where
    ``q = 0``): those with ratio ``≤ s`` give ``p_2``, the others ``s q``; ``1 − q_x`` is
    ``Σ q − q_x`` where ``q_x ≤ 1/2`` and the sum of the other tokens' ``q`` otherwise (no
    cancellation); ``α = 1`` where ``m = 0``. As
    :mod:`otbound.verifiers.rrs_without_replacement` (``_acceptance_two``).

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int
        1 or 2 (``n ≥ 3`` has no closed form: numpy enumerates or estimates it).

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    single = single_or_refuse(
        p, q, n, "rrs_without_replacement", "enumerates rejected prefixes or estimates them"
    )
    if single is not None:
        return single
    zero = _zero(p)
    d = p - q
    up = d > 0
    miss = torch.where(up, d, zero).sum(dim=-1, keepdim=True)  # 1 − β, no cancellation
    safe = torch.where(miss > 0, miss, torch.ones_like(miss))
    mass = torch.where(up, d / safe, zero)
    inf = torch.tensor(float("inf"), dtype=p.dtype, device=p.device)
    ratio = torch.where(up & (q > 0), mass / torch.where(q > 0, q, torch.ones_like(q)), inf)
    order = torch.argsort(ratio, dim=-1)
    sorted_ratio = torch.take_along_dim(ratio, order, dim=-1).contiguous()
    pad = torch.zeros_like(miss)
    cum_p = torch.cat((pad, torch.cumsum(mass.take_along_dim(order, dim=-1), dim=-1)), dim=-1)
    draft = torch.where(up, q, zero).take_along_dim(order, dim=-1)
    tail_q = torch.cat((torch.cumsum(draft.flip(-1), dim=-1).flip(-1), pad), dim=-1)
    big = q > 0.5  # at most one token a row
    rest = torch.where(
        big, torch.where(big, zero, q).sum(dim=-1, keepdim=True), q.sum(dim=-1, keepdim=True) - q
    )
    reject = torch.clamp(q - p, min=0.0)
    scale = 1.0 / torch.where(reject > 0, rest, torch.ones_like(rest))
    lo = torch.searchsorted(sorted_ratio, scale.contiguous(), right=True)  # ratio <= scale
    g = torch.gather(cum_p, -1, lo) + scale * torch.gather(tail_q, -1, lo)
    alpha = (1.0 - miss[:, 0]) + torch.where(reject > 0, reject * g, zero).sum(dim=-1)
    return torch.where(miss[:, 0] <= 0.0, torch.ones_like(alpha), alpha)


def _gls_match(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``n = 1``: ``Σ_j p_j / Σ_i max(p_i, p_j q_i / q_j)`` over ``p_j, q_j > 0``
    (:func:`otbound.verifiers.gls.gls_match_probability`)."""
    inf = torch.tensor(float("inf"), dtype=p.dtype, device=p.device)
    both = (p > 0) & (q > 0)
    ratio = torch.where(q > 0, p / torch.where(q > 0, q, torch.ones_like(q)), inf)
    order = torch.argsort(ratio, dim=-1, stable=True)
    r_sorted = torch.take_along_dim(ratio, order, dim=-1).contiguous()
    pad = torch.zeros((p.shape[0], 1), dtype=p.dtype, device=p.device)
    cum_q = torch.cat((pad, torch.cumsum(q.take_along_dim(order, dim=-1), dim=-1)), dim=-1)
    ps = p.take_along_dim(order, dim=-1)
    tail_p = torch.cat((torch.cumsum(ps.flip(-1), dim=-1).flip(-1), pad), dim=-1)
    rho = torch.where(both, ratio, torch.zeros_like(ratio))
    j = torch.searchsorted(r_sorted, rho.contiguous(), right=False)
    sums = torch.gather(tail_p, -1, j) + rho * torch.gather(cum_q, -1, j)
    safe = torch.where(both, sums, torch.ones_like(sums))
    return torch.where(both, p / safe, _zero(p)).sum(dim=-1)


def gls_acceptance(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    r"""Gumbel list coupling, as :class:`otbound.verifiers.gls.GumbelListCoupling`.

    ``n = 1``: ``α = Σ_j p_j / Σ_i max(p_i, p_j q_i / q_j)`` (tokens with ``p_j, q_j > 0``).
    ``n ≥ 2``: with the tokens of ``q > 0`` sorted by ``ρ = p/q`` (stable), ``G(u) =
    Σ_i (u q_i − p_i)⁺`` (its values ``g_i = G(ρ_i)`` and slopes ``s_i = Σ_{k ≤ i} q_k``),
    ``a_j(t) = e^{−t g_j}`` and ``b_j(t) = q_j Σ_{i ≥ j} t ∫_{ρ_i}^{ρ_{i+1}} e^{−t G}``,

    .. math::

        1 − α = p(q = 0) + \sum_{k = k_0}^{k_1} h\, n\, t_k e^{−n t_k}
        \sum_j p_j \bigl(1 − a_j(t_k)\bigr)\bigl(1 − \min(b_j(t_k), 1)\bigr)^{n−1},

    the trapezoid rule on the lattice ``t_k = e^{k h}``, ``h = 0.3``, from
    ``k_0 = ⌊ln t_0 / h⌋`` (``t_0 = min(sqrt(2·10^{−16} / (n K)), 10^{−3}/n)``,
    ``K = Σ_j p_j g_j``) to ``k_1 = ⌈ln(45/n) / h⌉``; at each node the tokens with
    ``t g_j > 60`` count ``p_j`` and leave ``b`` (as :func:`otbound.verifiers.gls.
    gls_acceptances`); ``α = 1 − p(q = 0)`` where ``K = 0``. All rows share the lattice,
    each weighting only its own nodes: ``O(V)`` per node and row, about 60-140 nodes.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V)
    n : int

    Returns
    -------
    torch.Tensor, shape (B,)
    """
    if n == 1:
        return _gls_match(p, q)
    step = _GLS_STEP
    zero = _zero(p)
    inf = torch.tensor(float("inf"), dtype=p.dtype, device=p.device)
    keep = q > 0
    never = torch.where(keep, zero, p).sum(dim=-1)
    rho_all = torch.where(keep, p / torch.where(keep, q, torch.ones_like(q)), inf)
    order = torch.argsort(rho_all, dim=-1, stable=True)
    # then the tokens with q = 0 last, the others still in stable order of ρ (a prefix)
    order = order.take_along_dim(
        torch.argsort((~keep).take_along_dim(order, dim=-1).to(torch.int8), dim=-1, stable=True),
        dim=-1,
    )
    live = torch.take_along_dim(keep, order, dim=-1)
    rho = torch.take_along_dim(rho_all, order, dim=-1)
    qs = torch.where(live, torch.take_along_dim(q, order, dim=-1), zero)
    ps = torch.where(live, torch.take_along_dim(p, order, dim=-1), zero)
    slope = torch.cumsum(qs, dim=-1)
    nxt = torch.cat((live[:, 1:], torch.zeros_like(live[:, :1])), dim=-1)  # a live token follows
    rho_next = torch.cat((rho[:, 1:], rho[:, -1:]), dim=-1)
    gap = torch.where(nxt, slope * (torch.where(nxt, rho_next, rho) - rho), zero)
    g = torch.cat((torch.zeros_like(gap[:, :1]), torch.cumsum(gap[:, :-1], dim=-1)), dim=-1)
    g = torch.where(live, g, inf)  # the tokens with q = 0 never enter
    spread = torch.where(live, ps * g, zero).sum(dim=-1)
    lastlive = live & ~nxt
    inv_slope = 1.0 / torch.where(live, slope, torch.ones_like(slope))
    tail_all = torch.cat(
        (torch.cumsum(ps.flip(-1), dim=-1).flip(-1), torch.zeros_like(ps[:, :1])), dim=-1
    )
    run = spread > 0.0
    safe_spread = torch.where(run, spread, torch.ones_like(spread))
    start = torch.minimum(
        torch.log(torch.sqrt(2e-16 / (n * safe_spread))),
        torch.full_like(spread, math.log(1e-3 / n)),
    )
    first = torch.floor(start / step)
    last = math.ceil(math.log(45.0 / n) / step)
    k_lo = int(torch.where(run, first, torch.full_like(first, float(last))).min().item())
    total = torch.zeros_like(spread)
    for k in range(k_lo, last + 1):
        active = run & (first <= k)
        t = math.exp(k * step)
        weight = step * n * t * math.exp(-n * t)
        inside = (t * g) <= 60.0  # a prefix of the live tokens: g increases
        cut = inside.sum(dim=-1, keepdim=True)
        lost = -torch.expm1(-t * torch.where(inside, g, zero))  # 1 − a_j
        decay = 1.0 - lost
        piece = decay * torch.where(lastlive, torch.ones_like(gap), -torch.expm1(-t * gap))
        piece = torch.where(inside, piece * inv_slope, zero)
        tail = torch.cumsum(piece.flip(-1), dim=-1).flip(-1)  # t ∫_{ρ_i}^∞ e^{−t G} du
        stay = 1.0 - torch.clamp(qs * tail, max=1.0)
        term = torch.where(inside, ps * lost * stay ** (n - 1), zero).sum(dim=-1)
        miss = torch.gather(tail_all, -1, cut)[:, 0] + term
        total = total + torch.where(active, weight * miss, zero)
    return torch.where(run, 1.0 - never - total, 1.0 - never)


# -- dispatch -------------------------------------------------------------------------------

_FORMULAS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "single": single_acceptance,
    "rrs": rrs_acceptance,
    "rrs_without_replacement": rrs_without_replacement_acceptance,
    "kseq": kseq_acceptance,
    "spechub": spechub_acceptance,
    "greedy": greedy_acceptance,
    "topk": topk_acceptance,
    "importance": importance_acceptance,
    "gls": gls_acceptance,
    "optimal": level_rule_acceptance_torch,
}

#: The verifiers with a torch formula here, in registry order.
TORCH_VERIFIERS: tuple[str, ...] = tuple(_FORMULAS)


def serves(verifier: str, n: int) -> bool:
    """Whether :func:`verifier_acceptance_torch` computes ``verifier`` (a registry name) at
    ``n``: every :data:`TORCH_VERIFIERS` name, but ``rrs_without_replacement`` and
    ``importance`` at ``n ≤ 2`` only and ``spechub`` at ``n = 2`` only."""
    if verifier not in _FORMULAS:
        return False
    if verifier in ("rrs_without_replacement", "importance"):
        return n <= 2
    if verifier == "spechub":
        return n == 2
    return True


@method_keyword("verifier")
def verifier_acceptance_torch(
    p: object,
    q: object,
    n: int = 2,
    *,
    verifier: str,
    device: torch.device | str | None = None,
    chunk_elements: int = TORCH_CHUNK_ELEMENTS,
) -> torch.Tensor:
    r"""Exact acceptance rate of a shipped verifier, for a batch of steps, in torch (float64).

    Parameters
    ----------
    p, q : torch.Tensor or array_like, shape (..., V)
        Target and draft distributions (batch axes broadcast), as
        :func:`otbound.bounds.torch_sweep.optimal_acceptance_torch` takes them.
    n : int, default 2
    verifier : str
        A name in :data:`TORCH_VERIFIERS` (:func:`serves` tells which ``n``). (The old order,
        ``verifier_acceptance_torch(verifier, p, q, n)``, warns and still works.)
    device : torch.device or str, optional
        Where to compute; default ``p``'s device when it is a tensor, else the CPU.
    chunk_elements : int, default 4194304
        Rows are processed in chunks of about this many entries.

    Returns
    -------
    torch.Tensor
        The acceptance rate, float64, with the broadcast batch shape, clipped into ``[0, 1]``
        where it is out by rounding only.

    Raises
    ------
    ValueError
        Invalid distributions, an ``n`` the verifier's design cannot draw (the numpy path's
        words), a verifier or ``n`` without a torch formula, or a value outside ``[0, 1]`` by
        more than rounding.

    Examples
    --------
    >>> from otbound.verifiers.torch_acceptance import verifier_acceptance_torch
    >>> a = verifier_acceptance_torch([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2, verifier="rrs")
    >>> round(float(a), 6)
    0.82
    """
    if not isinstance(verifier, str) or verifier not in _FORMULAS:
        raise ValueError(
            f"no torch formula for verifier {verifier!r}; those with one: "
            f"{', '.join(TORCH_VERIFIERS)}"
        )
    n = as_num_drafts(n)
    if not serves(verifier, n):
        raise ValueError(f"no torch formula for verifier {verifier!r} at n={n}")
    check_chunk_elements(chunk_elements)
    dtype = torch.float64
    p_t, q_t = as_distribution_pair_torch(p, q, dtype, device, normalize=False)
    from otbound.verifiers.registry import VERIFIER_CLASSES

    get_design(VERIFIER_CLASSES[verifier].default_design).check_rows(
        tuple(q_t.shape), n, lambda: support_sizes(q_t)
    )
    batch = batch_shape(tuple(p_t.shape[:-1]), tuple(q_t.shape[:-1]))
    vocab = p_t.shape[-1]
    p2 = p_t.expand(*batch, vocab).reshape(-1, vocab)
    q2 = q_t.expand(*batch, vocab).reshape(-1, vocab)
    out = _rows(verifier, p2, q2, n, int(chunk_elements))
    return clip_rounding_torch(out, 0.0, 1.0, acceptance_what(verifier, n)).reshape(batch)


def _rows(verifier: str, p: torch.Tensor, q: torch.Tensor, n: int, chunk: int) -> torch.Tensor:
    """The formula on validated rows (B, V), in chunks of about ``chunk`` entries."""
    formula = _FORMULAS[verifier]
    rows, vocab = p.shape
    out = torch.empty(rows, dtype=p.dtype, device=p.device)
    size = max(1, chunk // max(vocab, 1))
    for start in range(0, rows, size):
        part = slice(start, start + size)
        out[part] = formula(p[part].contiguous(), q[part].contiguous(), n)
    return out


def torch_acceptance_on(device: torch.device | str) -> BatchAcceptance:
    """The torch formulas on ``device`` as :func:`otbound.compare` takes them (its
    ``acceptance``): serving :data:`TORCH_VERIFIERS` where :func:`serves` says so, on rows
    that ``compare`` has validated, returning numpy float64 (unclipped: ``compare`` clips
    what is out by rounding, as the numpy path does).

    Examples
    --------
    >>> from otbound.evaluate import compare
    >>> from otbound.verifiers.torch_acceptance import torch_acceptance_on
    >>> df = compare([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2, verifiers=["rrs"],
    ...              acceptance=torch_acceptance_on("cpu"))
    >>> round(float(df.acceptance[0]), 6)
    0.82
    """
    where = torch.device(device)

    def compute(verifier: str, p: object, q: object, n: int) -> np.ndarray:
        # one copy onto the device (the validated rows are read-only: torch would warn on a
        # tensor sharing their memory)
        p_t = torch.tensor(np.asarray(p, dtype=np.float64), device=where)
        q_t = torch.tensor(np.asarray(q, dtype=np.float64), device=where)
        values: np.ndarray = _rows(verifier, p_t, q_t, n, TORCH_CHUNK_ELEMENTS).cpu().numpy()
        return values

    return BatchAcceptance(f"torch on {where}", compute, serves)
