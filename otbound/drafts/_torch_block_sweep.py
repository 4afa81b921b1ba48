r"""The without-replacement gap in torch by a block sweep: ``Q`` at the ends of blocks of
tokens first, then inside the blocks that can hold the minimum.

:func:`otbound.drafts._torch_distinct.without_replacement_gap` takes ``Q(H_i)`` of every prefix
by the exponential-clock integral, each node's count distribution scanned over every token:
``nodes × V × n`` coefficients a row, written and read several times (at ``V = 32,000``,
``n = 8``, some 400 MB a row a pass, so a GPU's memory bandwidth alone caps it at a few thousand
rows a second). Here, as on the CPU (:mod:`otbound.drafts._sequential_sweep`), the tokens in
sweep order are cut into blocks of ``L = SWEEP_BLOCK`` (256) and, for ``n ≥ 3``:

1. **Block products.** At node ``t`` block ``k`` multiplies the count distribution by
   ``G_k = Π_{x∈k} (e^{−q_x t} + (1 − e^{−q_x t}) z) mod z^n``. Where the block's largest rate
   is small (``u = t max_k q ≤ SMALL_RATE``) this is the power series of
   :func:`otbound.drafts._sequential_mass._fold` from the block's power sums
   ``σ_r = Σ_x (q_x / max_k q)^r``, which do not depend on the node: ``G_k = e^{−A}
   exp(Σ_{m<n} c_m z^m)`` with ``A = u σ_1`` and ``c_m = Σ_{r ≤ R} β[m, r] u^r σ_r``
   (``R = MOST_TERMS``, a truncation below ``SERIES_TOLERANCE``). Elsewhere the block's tokens
   are multiplied together (a product tree), unless ``n`` tokens before the block's end have
   ``q t > 50`` (then ``P[N < n] < n e^{−50}`` at every later prefix, as in the dense path:
   ``G_k = 0``).
2. **Block ends.** A doubling scan of the ``G_k`` along the blocks
   (:func:`~otbound.drafts._torch_distinct.products_before`) gives the distribution at every
   block start; ``Q`` at every block end follows from the trapezoid sum over the nodes, and with
   it the least ``p(H_e) − Q(H_e)`` over the block ends, ``g``.
3. **Candidates.** ``Q`` is convex in the mass along the sweep (``docs/mathematics.md``, "The
   chord of Q"), so inside a block ``[s, e)`` every prefix has
   ``p(H_i) − Q(H_i) ≥ p(H_i) − [Q(H_s) + (Q(H_e) − Q(H_s)) m_i / M]``
   (``m_i = q(H_i) − q(H_s)``, ``M = q(H_e) − q(H_s)``, rounded as
   :func:`otbound.drafts._sequential_level._inside_lower` rounds them). A block whose bound
   is not below ``g + CANDIDATE_SLACK`` cannot hold the minimum.
4. **Inside the candidates.** From the stored distribution at the block's start, the block's
   tokens at every node where that distribution is not zero, ``Q`` at every prefix inside.

Every ``Q`` computed (block ends, candidates' prefixes) is checked in ``[0, 1]`` to rounding
(:func:`~otbound.drafts._torch_distinct.checked_mass`: the numpy sweep's refusal beyond it).

The rows go in groups of rows with about as many nodes (:func:`_node_groups`), within a
memory budget, so that a row whose grid reaches far does not set every row's nodes.

The values are those of the dense path to the integral's error (below 1e-12): the same grid,
weights and truncations, the power series exact to ``SERIES_TOLERANCE``. The work a row is
``O(V R)`` for the power sums, ``O((V/L) nodes n R)`` for the block products, plus one pass over
the tokens of the blocks whose largest rate is not small and that are still alive, and of the
candidates: what the nodes see of the ``V × nodes`` grid is mostly these few blocks.
"""

from __future__ import annotations

import math

import torch

from otbound.drafts._sequential_mass import (
    MOST_TERMS,
    SERIES_TOLERANCE,
    SMALL_RATE,
    left_time,
    log_time_step,
    series_table,
)
from otbound.drafts._sequential_sweep import CANDIDATE_SLACK
from otbound.drafts._torch_distinct import (
    CERTAIN_FIRING,
    WITHOUT_REPLACEMENT,
    NodeGrid,
    checked_mass,
    decay,
    full_product,
    least_gap,
    left_weight,
    node_grid,
    node_weights,
    poly_mul,
    prefix_layout,
    prefix_values,
    products_before,
    sweep_sorted,
    with_empty,
)
from otbound.drafts._torch_distinct import without_replacement_gap as dense_gap

__all__ = ["without_replacement_block_gap", "without_replacement_gap"]

#: Tokens per block: fewer, longer blocks mean fewer block products and a shorter scan along
#: the blocks, but longer sweeps of the blocks that are not folded and of the candidates
#: (``V = 32,000``, ``n = 8`` on CPU torch: 120, 65 and 51 ms a row with 64, 128 and 256).
SWEEP_BLOCK = 256
#: The block products and the candidates' sweeps are taken in pieces of about this many
#: float64 entries: on the CPU, pieces that stay near the caches; on a GPU, eight times more
#: (fewer, larger kernels).
CPU_PIECE = 1 << 22
DEVICE_PIECE = 1 << 25


#: The rows swept together hold at most about this many (row, node, block, coefficient)
#: entries in each of their block arrays (CPU; a GPU: the second).
CPU_GROUP = 1 << 24
DEVICE_GROUP = 1 << 27


def _piece(device: torch.device) -> int:
    return CPU_PIECE if device.type == "cpu" else DEVICE_PIECE


def _group_budget(device: torch.device) -> int:
    return CPU_GROUP if device.type == "cpu" else DEVICE_GROUP


def _block_power_sums(rates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's largest rate ``max_k q`` (B, K) and ``σ_r = Σ_x (q_x / max_k q)^r`` for
    ``r = 1..MOST_TERMS`` (B, K, R), of the rates in blocks (B, K, L)."""
    largest = rates.amax(dim=-1)
    ratio = rates / torch.where(largest > 0, largest, 1.0)[..., None]
    powers = ratio[..., None].expand(*ratio.shape, MOST_TERMS).cumprod(dim=-1)
    return largest, powers.sum(dim=-2)


def _series_products(
    u: torch.Tensor, sums: torch.Tensor, beta: torch.Tensor, degree: int
) -> torch.Tensor:
    r"""``e^{−A} exp(Σ_{1≤m≤d} c_m z^m) mod z^{d+1}`` (..., d + 1) with ``A = u σ_1`` and
    ``c_m = Σ_r β[m, r] u^r σ_r``: :func:`otbound.drafts._sequential_mass._fold`'s generating
    function, ``u`` (...) and the power sums ``σ`` (..., R)."""
    upow = u[..., None].expand(*u.shape, MOST_TERMS).cumprod(dim=-1)
    coef = (upow * sums) @ beta  # (..., d): c_1..c_d
    gen = torch.zeros(*u.shape, degree + 1, dtype=u.dtype, device=u.device)
    gen[..., 0] = 1.0
    weighted = coef * torch.arange(1, degree + 1, dtype=u.dtype, device=u.device)
    for k in range(1, degree + 1):  # k g_k = Σ_j j c_j g_{k−j}
        gen[..., k] = (weighted[..., :k] * gen[..., :k].flip(-1)).sum(dim=-1) / k
    return gen * torch.exp(-u * sums[..., 0])[..., None]


def _token_products(rates: torch.Tensor, t: torch.Tensor, degree: int) -> torch.Tensor:
    """``Π_x (e^{−q_x t} + (1 − e^{−q_x t}) z) mod z^{d+1}`` of each row of ``rates`` (P, L) at
    its node ``t`` (P,): (P, d + 1) (:func:`~otbound.drafts._torch_distinct.full_product`)."""
    return full_product(*decay(rates * t[:, None]), degree)


def _block_products(
    blocks: torch.Tensor, t: torch.Tensor, n: int, certain_before: torch.Tensor
) -> torch.Tensor:
    """``G_k`` of every row, node and block (B, J, K, n) (the module docstring, step 1):
    ``blocks`` the rates (B, K, L), ``t`` the nodes (B, J) (0 off a row's grid: ``G = 1``),
    ``certain_before`` the tokens with ``q t > 50`` up to each block's end (B, J, K)."""
    degree = n - 1
    beta = torch.tensor(
        series_table(n, MOST_TERMS)[1:, 1:].T, dtype=blocks.dtype, device=blocks.device
    )
    largest, sums = _block_power_sums(blocks)
    u = largest[:, None, :] * t[:, :, None]  # (B, J, K)
    mass = u * sums[:, None, :, 0]
    mu = degree * u
    tail = mass * mu**MOST_TERMS / math.factorial(MOST_TERMS + 1)
    # every log-coefficient c_m (m ≤ d) needs the terms r ≥ m: so d ≤ R, as the CPU's fold
    folded = (u <= SMALL_RATE) & (tail <= SERIES_TOLERANCE) & (degree <= MOST_TERMS)
    products = torch.empty(*u.shape, n, dtype=blocks.dtype, device=blocks.device)
    rows, nodes, count = u.shape
    per_node = max(1, _piece(blocks.device) // max(1, rows * count * MOST_TERMS))
    for start in range(0, nodes, per_node):
        part = slice(start, start + per_node)
        products[:, part] = _series_products(
            torch.where(folded[:, part], u[:, part], 0.0), sums[:, None], beta, degree
        )
    dead = certain_before >= n
    products[dead] = 0.0
    direct = (~folded & ~dead).nonzero()  # (P, 3): row, node, block
    per_piece = max(1, _piece(blocks.device) // max(1, blocks.shape[-1]))
    for start in range(0, direct.shape[0], per_piece):
        r, j, k = direct[start : start + per_piece].unbind(-1)
        products[r, j, k] = _token_products(blocks[r, k], t[r, j], degree)
    return products


def _certain_through(blocks: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The tokens with ``q t > 50`` up to the end of every block, per node (B, J, K): each
    block's rates sorted once, then one search per node (``t = 0`` off the grid: none)."""
    rows, count, size = blocks.shape
    ascending = blocks.sort(dim=-1).values.reshape(rows * count, size)
    limit = (CERTAIN_FIRING / t)[:, None, :].expand(rows, count, -1).reshape(rows * count, -1)
    at_most = torch.searchsorted(ascending, limit.contiguous(), right=True)
    return (size - at_most).reshape(rows, count, -1).transpose(1, 2).cumsum(dim=-1)


def _chord_lower(
    cum_p: torch.Tensor, suffix: torch.Tensor, mass: torch.Tensor, size: int
) -> torch.Tensor:
    r"""Per block ``[s, e)`` (B, K): the least ``p(H_i) − \bar Q_i`` over the prefixes strictly
    inside, ``\bar Q_i = Q(H_s) + (Q(H_e) − Q(H_s)) m_i / M`` where ``0 < m_i < M`` (rounded
    up and down as :func:`otbound.drafts._sequential_level._inside_lower` rounds them, by the
    dtype's half ulp, and by ``2 ⌈log2(V + 1)⌉`` more for a device's parallel scan), else
    ``Q(H_e)``; ``+inf`` for a block with nothing inside, ``−inf``
    where a value is NaN. ``mass`` holds ``Q`` at the block boundaries ``0, L, 2L, …, V``
    (B, K + 1)."""
    rows, length = cum_p.shape
    count = mass.shape[1] - 1
    half = torch.finfo(cum_p.dtype).eps / 2
    # the suffix sums' rounding, whatever order a device's scan adds them in: (i − s) half
    # ulps of suffix[s] as a sequential sum, plus 2 ⌈log2(V + 1)⌉ for a parallel one
    tree = 2 * max(1, math.ceil(math.log2(length)))
    i = torch.arange(length, device=cum_p.device)
    block = (i // size).clamp(max=count - 1)
    start = block * size
    end = torch.clamp(start + size, max=length - 1)
    low, top = mass[:, block], mass[:, block + 1]
    base = suffix[:, start]
    added = (base - suffix) * (1.0 + 4 * half) + (i - start + tree) * half * base
    span = (base - suffix[:, end]) * (1.0 - 4 * half) - (end - start + tree) * half * base
    use = (span > 0) & (added < span)
    chord = low + (top - low).clamp(min=0.0) * (added / torch.where(use, span, 1.0))
    value = cum_p - torch.where(use & (chord < top), chord, top)
    value = torch.where(torch.isnan(value), -math.inf, value)
    value = torch.where((i > start) & (i < end), value, math.inf)
    lowest = torch.full((rows, count), math.inf, dtype=value.dtype, device=value.device)
    return lowest.scatter_reduce(1, block.expand(rows, -1), value, reduce="amin")


def without_replacement_block_gap(
    p_sorted: torch.Tensor, q_sorted: torch.Tensor, n: int, h: float | None = None
) -> torch.Tensor:
    """``min(0, min_i [p(H_i) − Q(H_i)])`` per row (B,) for ``n ≥ 3`` sequential draws without
    replacement, the rows in sweep order (the module docstring's block sweep)."""
    h = log_time_step([n]) if h is None else h
    rows, vocab = q_sorted.shape
    suffix, live, exact = prefix_layout(q_sorted, n)
    cum_p = with_empty(torch.cumsum(p_sorted, dim=-1))
    gap = torch.zeros(rows, dtype=q_sorted.dtype, device=q_sorted.device)
    integrate = live.any(dim=-1)
    if not bool(integrate.all()):  # no live prefix: Q is 0 or 1 at every one
        gap[~integrate] = least_gap(cum_p[~integrate], exact[~integrate])
    if not bool(integrate.any()):
        return gap
    part = integrate.nonzero().squeeze(-1)
    grid = node_grid(q_sorted[part], suffix[part], live[part], n, h)
    per_row = _block_shape(vocab)[1] * n
    for group in _node_groups(grid.nodes, per_row, _group_budget(q_sorted.device)):
        at = part[group]
        gap[at] = _block_sweep_gap(
            cum_p[at], suffix[at], live[at], exact[at], grid.of_rows(group), n, h
        )
    return gap


def _block_shape(vocab: int) -> tuple[int, int]:
    """The block length and the number of blocks of a row of ``vocab`` tokens."""
    size = min(SWEEP_BLOCK, vocab)
    return size, -(-vocab // size)


def _node_groups(nodes: torch.Tensor, per_row: int, budget: int) -> list[torch.Tensor]:
    """The rows (indices into ``nodes``) in groups of rows with about as many nodes: sorted by
    their number of nodes, then cut where a group's rows times its largest number of nodes
    times ``per_row`` (blocks times ``n``) would pass ``budget`` (a group holds one row at
    least). A row whose grid reaches far (a mass near 1e-300 outside a prefix: thousands of
    nodes) then costs only its own group that many nodes, and the (rows, nodes, blocks, n)
    arrays stay within the budget."""
    order = torch.argsort(nodes, stable=True)
    counts = nodes[order].tolist()
    groups = []
    start = 0
    for end in range(1, len(counts) + 1):
        if end == len(counts) or (end + 1 - start) * counts[end] * per_row > budget:
            groups.append(order[start:end])
            start = end
    return groups


def _block_sweep_gap(
    cum_p: torch.Tensor,
    suffix: torch.Tensor,
    live: torch.Tensor,
    exact: torch.Tensor,
    grid: NodeGrid,
    n: int,
    h: float,
) -> torch.Tensor:
    """:func:`without_replacement_block_gap` of rows with some live prefix, on their grid."""
    q = grid.rates
    rows, vocab = q.shape
    index = torch.arange(grid.total, dtype=q.dtype, device=q.device)
    on = index[None, :] < grid.nodes[:, None]  # (B, J)
    t = torch.where(on, torch.exp(grid.log_t0[:, None] + index[None, :] * h), 0.0)
    size, count = _block_shape(vocab)
    blocks = torch.nn.functional.pad(grid.rates, (0, count * size - vocab)).reshape(
        rows, count, size
    )
    certain = _certain_through(blocks, t)
    products = _block_products(blocks, t, n, certain)
    before = products_before(products)  # (B, J, K, n): the distribution at each block start
    below_end = poly_mul(before, products).sum(dim=-1)  # P[N < n] at each block end
    ends = torch.clamp(torch.arange(1, count + 1, device=q.device) * size, max=vocab)
    t_lo = left_time(n, h)
    left_end = left_weight(suffix[:, ends], t_lo, h)
    weights = node_weights(grid.lam[:, ends][:, None, :] * t[:, :, None], on[:, :, None], h)
    remaining = (weights * below_end).sum(dim=1)
    mass_end = torch.where(live[:, ends], 1.0 - (remaining + left_end), exact[:, ends])
    mass_end = checked_mass(mass_end, WITHOUT_REPLACEMENT, n)
    boundary = torch.cat([exact[:, :1], mass_end], dim=-1)
    gap = least_gap(cum_p[:, ends], mass_end)
    lower = _chord_lower(cum_p, suffix, boundary, size)
    # the slack: the integral's error, or (float32) the rounding of the values
    slack = max(CANDIDATE_SLACK, 64 * torch.finfo(q.dtype).eps)
    candidates = (~(lower >= gap[:, None] + slack)).nonzero()  # NaN keeps a block
    prefixes = torch.arange(1, size + 1, device=q.device)
    per_piece = max(1, _piece(q.device) // max(1, grid.total * size * n))
    for start in range(0, candidates.shape[0], per_piece):
        r, k = candidates[start : start + per_piece].unbind(-1)
        at = (k * size)[:, None] + prefixes  # the prefixes the block's tokens end
        real = at <= vocab
        at = at.clamp(max=vocab)
        rows_at = r[:, None]
        inside = _inside_values(
            blocks[r, k], t[r], on[r], before[r, :, k], grid.lam[rows_at, at], h,
        )  # fmt: skip
        left = left_weight(suffix[rows_at, at], t_lo, h)
        mass = torch.where(live[rows_at, at], 1.0 - (inside + left), exact[rows_at, at])
        mass = checked_mass(mass, WITHOUT_REPLACEMENT, n)
        value = torch.where(real, cum_p[rows_at, at] - mass, math.inf)
        gap = gap.scatter_reduce(0, r, value.amin(dim=-1), reduce="amin")
    return gap


def _inside_values(
    rates: torch.Tensor,
    t: torch.Tensor,
    on: torch.Tensor,
    state: torch.Tensor,
    lam: torch.Tensor,
    h: float,
) -> torch.Tensor:
    """The trapezoid sums ``Σ_j w_j P[N < n]`` at the prefixes of candidate blocks (C, L):
    each block's rates (C, L), its row's nodes ``t`` and ``on`` (C, J), the distribution at
    the block's start (C, J, n) and ``λ`` of the prefixes its tokens end (C, L). Only the
    (block, node) pairs on the grid whose start distribution is not zero are swept (past the
    ``n``-th certain token a node adds nothing: on a row whose grid reaches far, most nodes)."""
    count, size = rates.shape
    alive = on & (state.sum(dim=-1) > 0)
    block, node = alive.nonzero().unbind(-1)
    t_pair = t[block, node][:, None]
    below = prefix_values(
        *decay(rates[block] * t_pair), state.shape[-1] - 1, cumulative=True,
        start=state[block, node],
    )  # fmt: skip
    weights = node_weights(lam[block] * t_pair, torch.ones((), dtype=torch.bool), h)
    sums = torch.zeros(count, size, dtype=rates.dtype, device=rates.device)
    return sums.index_add_(0, block, weights * below)


def without_replacement_gap(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    """``min(0, min_i [p(H_i) − Q(H_i)])`` per row of validated ``p``, ``q`` (B, V) for ``n``
    sequential draws without replacement: the closed forms of every prefix for ``n ≤ 2`` (the
    dense path, :func:`otbound.drafts._torch_distinct.without_replacement_gap`), the block
    sweep for ``n ≥ 3`` (:func:`without_replacement_block_gap`)."""
    if n <= 2:
        return dense_gap(p, q, n)
    return without_replacement_block_gap(*sweep_sorted(p, q), n)
