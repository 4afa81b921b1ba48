r"""Torch sweeps of the two designs with distinct drafts whose ``Q(H)`` is a recursion over the
tokens: ``without_replacement`` and ``conditional_poisson``. Batched ``α* − 1`` on any device,
in float64, on validated tensors (B, V); the numpy reference is
:mod:`otbound.drafts._sequential_mass` and :mod:`otbound.drafts.conditional_poisson`.

Both sort the tokens of each row by ``p/q`` ascending (the numpy key,
:func:`otbound.drafts.tokens.sweep_key`: ``q = 0`` last, ``log p − log q`` in rows where the
ratio leaves the normal range) and take ``α* = 1 + min(0, min_i [p(H_i) − Q(H_i)])`` over the
prefixes ``H_i``. Every ``Q(H_i)`` enters that minimum through :func:`checked_mass`: clipped
into ``[0, 1]`` where it is out by rounding, else refused with the numpy sweep's error.

**The count recursion as a scan.** Along the sweep, ``Q(H_i)`` is read off a product of
degree-one polynomials truncated at degree ``d``,

.. math::

    F_i(z) = \prod_{x \le i} (a_x + b_x z) \bmod z^{d+1},

which is associative, so it is computed as a blocked scan, parallel over rows, nodes and blocks:
the tokens are cut into blocks of ``L = SCAN_BLOCK`` (64); inside every block at once the
partial products are built in ``L`` steps (``O(d)`` each); the products of the blocks before each
block come from a doubling (Hillis–Steele) scan of the block products in ``⌈log2(V/L)⌉`` steps
(a truncated product, ``O(d²)``, each); the value at a prefix is ``Σ_j C_j G_{d−j}`` with ``C``
the product of the blocks before and ``G`` the partial product inside its block. Work
``O(V d + (V/L) d² log(V/L))`` per row (per node), depth ``O(L + log V)``: about
``3 L + (d + 2) ⌈log2(V/L)⌉`` tensor operations for a whole batch of rows and nodes, each one
kernel launch on a GPU (chaining the blocks one after another, as this module first did, took
``V/L`` truncated products of ``d + 1`` operations each: 227,000 operations for one batch of
sixteen rows at ``V = 32,000``, ``n = 8``, against 28,000 now).

* ``conditional_poisson``: ``a_x = 1``, ``b_x = q_x``, ``d = n``: ``F_i = Σ_k e_k(q_{H_i}) z^k``
  and ``Q(H_i) = e_n(q_{H_i}) / e_n(q)``. Every term is non-negative, so the relative rounding
  error of ``e_n`` is at most ``m u`` (``u = 2^-53``, to first order) where nothing underflows,
  with ``m = 2 V + (n + 1) ⌈V/L⌉ + 2 n + 2``: the error of a product of non-negative factors is
  the sum of the factors' errors and of the roundings of every product that builds it (two a
  token inside a block, ``n + 1`` a product of blocks, whatever the order the scan takes them
  in, and the final sum); an underflowed partial product drops less than ``2^-1074`` per
  operation, so rows with ``e_n(q) ≥ 2^-800`` are exact to ``2 m u`` in linear float64. Other
  rows (masses down to 5e-324: ``e_8(q)`` can be ``1e-2400``) are recomputed with one
  power-of-two exponent per coefficient (mantissa in ``[1/2, 1)``, exponent a float64
  integer), as the numpy kernel does.
* ``without_replacement``: the exponential-clock integral of
  :mod:`otbound.drafts._sequential_mass`, on the same log-time trapezoid grid (same step, same
  truncations, so the same error bound: below 1e-12),

  .. math::

      1 − Q(H_i) = \sum_j h\,λ_i t_j e^{−λ_i t_j}\,P[N_{H_i}(t_j) < n] + \text{left}(λ_i),

  with ``a_x = e^{−q_x t_j}``, ``b_x = 1 − e^{−q_x t_j}``, ``d = n − 1`` and
  ``P[N < n] = F_i(1)``: one scan per node, all nodes at once. A node stops at the prefix that
  holds ``n`` tokens with ``q_x t_j > 50`` (then ``P[N < n] ≤ n e^{−50} < 2e-21``); ``n ≤ 2``
  use the numpy path's closed forms. Cost ``O(V · n · nodes)`` per row: this dense path is the
  reference; for ``n ≥ 3`` the default is the block sweep of
  :mod:`otbound.drafts._torch_block_sweep`, which evaluates ``Q`` at block ends and inside the
  few blocks that can hold the minimum.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from otbound._torch_checks import clip_rounding_torch
from otbound.bounds.sweep import prefix_mass_what
from otbound.drafts._sequential_mass import (
    LARGEST_TIME,
    RIGHT_TAIL,
    left_time,
    log_time_step,
)

__all__ = [
    "CERTAIN_FIRING",
    "checked_mass",
    "conditional_poisson_gap",
    "conditional_poisson_prefix_ratio",
    "left_weight",
    "poly_mul",
    "prefix_values",
    "products_before",
    "sweep_sorted",
    "with_empty",
    "without_replacement_gap",
    "without_replacement_prefix_mass",
]

#: The design the exponential-clock sweeps compute (its name in the refusals' words).
WITHOUT_REPLACEMENT = "without_replacement"
#: A token with ``q t`` above this has fired with probability ``1 − e^{−50}`` (``< 2e-22`` off).
CERTAIN_FIRING = 50.0
#: Rows with ``e_n(q)`` below this are recomputed with per-coefficient exponents (float64;
#: other dtypes: :func:`_linear_floor`).
_LINEAR_FLOOR = 2.0**-800


def _linear_floor(dtype: torch.dtype) -> float:
    """The least ``e_n(q)`` computed in linear arithmetic: ``2^-800`` in float64, 274 binades
    above the smallest subnormal (an underflowed partial product drops less than it per
    operation); in a narrower dtype as far above its smallest normal, ``2^40`` times it."""
    if dtype == torch.float64:
        return _LINEAR_FLOOR
    return float(torch.finfo(dtype).tiny) * 2.0**40


def _largest_time(dtype: torch.dtype) -> float:
    """The largest node ``t`` of a grid: ``LARGEST_TIME`` (1e300) in float64; in a narrower
    dtype ``2^-40`` of its largest finite value (float32: about 3e26), so that ``t`` and the
    products ``λ t`` stay finite."""
    return min(LARGEST_TIME, float(torch.finfo(dtype).max) * 2.0**-40)


#: The exponent of a zero in the scaled form: far below any real one, finite (no NaN).
_NEG = -(2.0**62)
#: The node chunks of the integral hold about this many float64 entries.
_NODE_CHUNK = 1 << 24


# -- the sweep order and the prefix sums ---------------------------------------------------------
def sweep_sorted(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``p`` and ``q`` (B, V) with each row's tokens sorted by the numpy sweep key.

    ``p/q`` ascending, ``q = 0`` last; a row where some ratio of positive masses overflows or
    falls below the normal range sorts by ``log p − log q`` instead (the same order). Ties keep
    the token order (a stable sort).
    """
    tiny = torch.finfo(p.dtype).tiny
    positive = q > 0
    key = p / torch.where(positive, q, torch.ones((), dtype=q.dtype, device=q.device))
    lost = positive & (p > 0) & (torch.isinf(key) | (key < tiny))
    if bool(lost.any()):
        rows = lost.any(dim=-1, keepdim=True)
        logs = torch.log(p) - torch.log(torch.where(positive, q, 1.0))
        key = torch.where(rows, logs, key)
    key = torch.where(positive, key, torch.full((), math.inf, dtype=key.dtype, device=key.device))
    order = torch.argsort(key, dim=-1, stable=True)
    return torch.take_along_dim(p, order, dim=-1), torch.take_along_dim(q, order, dim=-1)


def with_empty(x: torch.Tensor, first: float = 0.0) -> torch.Tensor:
    """``x`` (B, V) with a column ``first`` prepended: values of the prefixes ``H_0..H_V``."""
    return torch.nn.functional.pad(x, (1, 0), value=first)


def checked_mass(mass: torch.Tensor, design: str, n: int) -> torch.Tensor:
    """``Q(H_i)`` clipped into ``[0, 1]`` where it is out by rounding only, else the numpy
    sweep's refusal (:func:`otbound.bounds.sweep.prefix_mass_what`'s words, through
    :func:`otbound._torch_checks.clip_rounding_torch`): a design whose ``Q`` returns
    ``1 + 1e-9`` has a bug that a clamp would hide. One test on the device per call."""
    return clip_rounding_torch(mass, 0.0, 1.0, prefix_mass_what(design, [n]))


def least_gap(cum_p: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    """``min(0, min_i [p(H_i) − Q(H_i)])`` per row from ``p`` and ``Q`` of the same prefixes
    (B, ...); ``Q`` in ``[0, 1]`` (exact, or :func:`checked_mass`)."""
    return (cum_p - mass).amin(dim=-1).clamp(max=0.0)


def _gap(p_sorted: torch.Tensor, mass: torch.Tensor, design: str, n: int) -> torch.Tensor:
    """:func:`least_gap` from ``Q`` of every prefix (B, V + 1), checked (:func:`checked_mass`)."""
    cum_p = with_empty(torch.cumsum(p_sorted, dim=-1))
    return least_gap(cum_p, checked_mass(mass, design, n))


# -- the blocked scan of degree-one factors -------------------------------------------------------
#: Tokens per block of the scan: the partial products inside a block take this many steps (three
#: tensor operations each), the chain of the blocks ``⌈log2(V / SCAN_BLOCK)⌉`` doubling steps.
SCAN_BLOCK = 64


def poly_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Truncated product ``c_k = Σ_{j ≤ k} a_j b_{k−j}`` of coefficient vectors (..., d + 1)."""
    out = a[..., :1] * b
    for j in range(1, a.shape[-1]):
        out[..., j:].addcmul_(a[..., j : j + 1], b[..., : b.shape[-1] - j])
    return out


def add_token(state: torch.Tensor, const: torch.Tensor, lin: torch.Tensor) -> torch.Tensor:
    """``state · (const + lin z) mod z^{d+1}``: one token's factor into the polynomials
    ``state`` (..., d + 1), ``const`` and ``lin`` of shape (...)."""
    new = state * const[..., None]
    new[..., 1:].addcmul_(state[..., :-1], lin[..., None])
    return new


def products_before(blocks: torch.Tensor) -> torch.Tensor:
    """``C_k = Π_{m < k} F_m`` (``C_0 = 1``) of the block products ``F_m`` along axis −2
    (..., K, d + 1): a Hillis–Steele scan, ``⌈log2 K⌉`` doubling steps of one truncated product
    each (the products commute, every coefficient is ``≥ 0``: no cancellation)."""
    inclusive = blocks
    count = blocks.shape[-2]
    shift = 1
    while shift < count:
        step = inclusive.clone()
        step[..., shift:, :] = poly_mul(inclusive[..., :-shift, :], inclusive[..., shift:, :])
        inclusive = step
        shift *= 2
    before = torch.empty_like(blocks)
    before[..., :1, :] = 0.0
    before[..., 0, 0] = 1.0
    before[..., 1:, :] = inclusive[..., :-1, :]
    return before


def _block_partials(
    const: torch.Tensor, lin: torch.Tensor, degree: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The factors ``const_x + lin_x z`` (..., V) in blocks of :data:`SCAN_BLOCK` (the last
    padded with ones): the partial products inside every block (..., K, L, d + 1) and the
    blocks' products (..., K, d + 1), one step a token of a block (three operations each)."""
    *lead, vocab = const.shape
    block = min(SCAN_BLOCK, max(vocab, 1))
    blocks = -(-vocab // block)
    pad = blocks * block - vocab
    if pad:  # identity factors
        const = torch.nn.functional.pad(const, (0, pad), value=1.0)
        lin = torch.nn.functional.pad(lin, (0, pad), value=0.0)
    a = const.reshape(*lead, blocks, block)
    b = lin.reshape(*lead, blocks, block)
    state = torch.zeros(*lead, blocks, degree + 1, dtype=const.dtype, device=const.device)
    state[..., 0] = 1.0
    within = torch.empty(*lead, blocks, block, degree + 1, dtype=const.dtype, device=const.device)
    for i in range(block):
        state = add_token(state, a[..., i], b[..., i])
        within[..., i, :] = state
    return within, state


def full_product(const: torch.Tensor, lin: torch.Tensor, degree: int) -> torch.Tensor:
    """``Π_x (const_x + lin_x z) mod z^{d+1}`` over the last axis (..., V) → (..., d + 1): a
    product tree, the factors multiplied in pairs in ``⌈log2 V⌉`` rounds (one truncated
    product each, at most ``d + 1`` operations), their coefficients growing to ``d + 1``."""
    poly = torch.stack([const, lin], dim=-1)[..., : degree + 1]  # (..., V, 2)
    while poly.shape[-2] > 1:
        if poly.shape[-2] % 2:  # an identity factor evens the count
            one = torch.zeros_like(poly[..., :1, :])
            one[..., 0] = 1.0
            poly = torch.cat([poly, one], dim=-2)
        a, b = poly[..., 0::2, :], poly[..., 1::2, :]
        width = min(2 * poly.shape[-1] - 1, degree + 1)
        out = torch.zeros(*a.shape[:-1], width, dtype=poly.dtype, device=poly.device)
        for j in range(min(a.shape[-1], width)):
            top = min(width, j + b.shape[-1])
            out[..., j:top].addcmul_(a[..., j : j + 1], b[..., : top - j])
        poly = out
    return torch.nn.functional.pad(poly[..., 0, :], (0, degree + 1 - poly.shape[-1]))


def prefix_values(
    const: torch.Tensor,
    lin: torch.Tensor,
    degree: int,
    *,
    cumulative: bool,
    start: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""``[F_i]_d`` (or ``F_i(1) = Σ_{k ≤ d} [F_i]_k`` when ``cumulative``) for every prefix
    ``i = 1..V`` of ``F_i = S Π_{x ≤ i} (const_x + lin_x z) mod z^{d+1}``; shape (..., V).
    ``S`` is ``start`` (..., d + 1), or 1.

    The blocked scan of the module docstring: blocks of :data:`SCAN_BLOCK` tokens, the partial
    products in every block at once (one step a token of the block), the products of the blocks
    before each block by a doubling scan (:func:`products_before`), ``Σ_j C_j G_{d−j}`` at each
    prefix: some ``3 L + (d + 2) ⌈log2(V / L)⌉`` tensor operations whatever the batch and the
    nodes (each a kernel launch on a GPU).
    """
    vocab = const.shape[-1]
    within, blocks = _block_partials(const, lin, degree)
    carry = products_before(blocks)
    if start is not None:
        carry = poly_mul(start.unsqueeze(-2), carry)
    inner = within.cumsum(dim=-1) if cumulative else within
    values = (carry.unsqueeze(-2) * inner.flip(-1)).sum(dim=-1)
    return values.flatten(-2)[..., :vocab]


# -- conditional Poisson --------------------------------------------------------------------------
def _normal(m: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``m 2^x`` with the mantissa in ``[1/2, 1)`` (zeros get the exponent ``_NEG``)."""
    f, e = torch.frexp(m)
    return f, torch.where(f == 0, _NEG, x + e.to(x.dtype))


def _scaled_add(
    a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    top = torch.maximum(a[1], b[1])
    return _normal(a[0] * torch.exp2(a[1] - top) + b[0] * torch.exp2(b[1] - top), top)


def _scaled_mul(
    a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    return _normal(a[0] * b[0], a[1] + b[1])


def _scaled_sum(a: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The sum along the last axis."""
    top = a[1].amax(dim=-1, keepdim=True)
    return _normal((a[0] * torch.exp2(a[1] - top)).sum(dim=-1), top.squeeze(-1))


def _block_size(vocab: int) -> int:
    """``⌈√V⌉``-sized blocks for :func:`_scaled_esp`'s scan (both of its loops step one at a
    time: within the blocks and along them)."""
    return max(1, math.isqrt(max(vocab - 1, 0)) + 1)


def _scaled_esp(q: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``e_n`` of every prefix ``i = 1..V`` as ``m 2^x`` (two (B, V) tensors): the blocked scan of
    :func:`prefix_values` with one power-of-two exponent per coefficient, so that nothing
    under- or overflows (each operation rounds the mantissa once: relative error
    ``≤ 3 (V + n) u``)."""
    rows, vocab = q.shape
    block = _block_size(vocab)
    blocks = -(-vocab // block)
    padded = torch.nn.functional.pad(q, (0, blocks * block - vocab))
    qm, qx = _normal(padded, torch.zeros_like(padded))
    qm, qx = qm.reshape(rows, blocks, block), qx.reshape(rows, blocks, block)
    m = torch.zeros(rows, blocks, n + 1, dtype=q.dtype, device=q.device)
    m[..., 0] = 0.5
    x = torch.full_like(m, _NEG)
    x[..., 0] = 1.0
    wm = torch.empty(rows, blocks, block, n + 1, dtype=q.dtype, device=q.device)
    wx = torch.empty_like(wm)
    for i in range(block):
        term = _scaled_mul((qm[..., i, None], qx[..., i, None]), (m[..., :-1], x[..., :-1]))
        high = _scaled_add((m[..., 1:], x[..., 1:]), term)
        m = torch.cat([m[..., :1], high[0]], dim=-1)
        x = torch.cat([x[..., :1], high[1]], dim=-1)
        wm[..., i, :], wx[..., i, :] = m, x
    cm, cx = torch.empty_like(m), torch.empty_like(x)
    cur_m, cur_x = torch.zeros_like(m[:, 0]), torch.full_like(x[:, 0], _NEG)
    cur_m[:, 0], cur_x[:, 0] = 0.5, 1.0
    degree = torch.arange(n + 1, device=q.device)
    anti = degree[:, None] + degree[None, :]  # j + l of a_j b_l
    for k in range(blocks):
        cm[:, k], cx[:, k] = cur_m, cur_x
        if k + 1 < blocks:
            pm, px = _scaled_mul(
                (cur_m[:, :, None], cur_x[:, :, None]), (m[:, k, None, :], x[:, k, None, :])
            )
            parts = [
                _scaled_sum(
                    (
                        torch.where(anti == d, pm, 0.0).flatten(1),
                        torch.where(anti == d, px, _NEG).flatten(1),
                    )
                )
                for d in range(n + 1)
            ]
            cur_m = torch.stack([part[0] for part in parts], dim=-1)
            cur_x = torch.stack([part[1] for part in parts], dim=-1)
    prod = _scaled_mul((cm.unsqueeze(-2), cx.unsqueeze(-2)), (wm.flip(-1), wx.flip(-1)))
    em, ex = _scaled_sum(prod)
    return em.reshape(rows, -1)[:, :vocab], ex.reshape(rows, -1)[:, :vocab]


def conditional_poisson_prefix_ratio(q_sorted: torch.Tensor, n: int) -> torch.Tensor:
    r"""``Q(H_i) = e_n(q_{H_i}) / e_n(q)`` of every prefix ``i = 0..V`` (B, V + 1).

    Linear float64 (relative error ``≤ 2 m u``, ``m`` of the module docstring) for rows with
    ``e_n(q) ≥ 2^-800``; the other rows with one exponent per coefficient
    (:func:`_scaled_esp`), so that masses down to 5e-324 keep their relative precision.
    """
    ones = torch.ones_like(q_sorted)
    esp = prefix_values(ones, q_sorted, n, cumulative=False)
    whole = esp[:, -1:]
    ratio = esp / torch.where(whole > 0, whole, 1.0)
    small = (whole < _linear_floor(q_sorted.dtype)).squeeze(-1)
    if bool(small.any()):
        m, x = _scaled_esp(q_sorted[small], n)
        shift = (x - x[:, -1:]).clamp(-2400.0, 300.0)
        scaled = m / torch.where(m[:, -1:] > 0, m[:, -1:], 1.0) * torch.exp2(shift)
        ratio[small] = scaled
    return with_empty(ratio)


def conditional_poisson_gap(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    """``min(0, min_i [p(H_i) − e_n(q_{H_i}) / e_n(q)])`` per row of validated ``p``, ``q``
    (B, V)."""
    p_sorted, q_sorted = sweep_sorted(p, q)
    return _gap(p_sorted, conditional_poisson_prefix_ratio(q_sorted, n), "conditional_poisson", n)


# -- sequential sampling without replacement ------------------------------------------------------
def left_weight(lam: torch.Tensor, t_lo: float, h: float) -> torch.Tensor:
    r"""``Σ_{j≥1} h λ t_j e^{−λ t_j}`` over the nodes ``t_j = t_lo e^{−jh}`` left of the grid:
    ``h Σ_m (−1)^m (λ t_lo)^{m+1} / (m! (e^{h(m+1)} − 1))``, sixty terms (``λ t_lo ≤ 1``)."""
    x = lam * t_lo
    total = torch.zeros_like(x)
    term = x.clone()
    for m in range(60):
        total += (-1) ** m * term / math.expm1(h * (m + 1))
        term = term * x / (m + 1)
    return h * total


def _closed_form_mass(q: torch.Tensor, suffix: torch.Tensor, n: int) -> torch.Tensor:
    """``Q`` of every prefix for ``n ≤ 2`` (:func:`otbound.drafts._sequential_mass.
    _closed_form_mass`): ``q(H)``, or ``1 − λ (1 + Σ_{x∈H} q_x / (1 − q_x))`` with ``1 − q_x``
    the sum of the other masses."""
    before = with_empty(torch.cumsum(q, dim=-1))
    if n == 1:
        return before
    rest = before[:, :-1] + suffix[:, 1:]
    odds = torch.where(q > 0, q / torch.where(rest > 0, rest, 1.0), 0.0)
    odds = torch.where((q > 0) & (rest <= 0), math.inf, odds)
    return 1.0 - suffix * (1.0 + with_empty(torch.cumsum(odds, dim=-1)))


class NodeGrid(NamedTuple):
    """The log-time grid of each row (:func:`node_grid`)."""

    #: ``q`` times each row's power of two (B, V).
    rates: torch.Tensor
    #: ``λ`` of every prefix ``i = 0..V`` times the same power of two (B, V + 1).
    lam: torch.Tensor
    #: ``log t_0`` of each row on the scaled clock (B,).
    log_t0: torch.Tensor
    #: The number of nodes of each row (B,), float.
    nodes: torch.Tensor
    #: The largest number of nodes over the rows.
    total: int

    def of_rows(self, rows: torch.Tensor) -> NodeGrid:
        """The grid of the rows ``rows`` (indices), ``total`` theirs."""
        nodes = self.nodes[rows]
        return NodeGrid(
            self.rates[rows], self.lam[rows], self.log_t0[rows], nodes, int(nodes.max())
        )


def node_grid(
    q: torch.Tensor, suffix: torch.Tensor, live: torch.Tensor, n: int, h: float
) -> NodeGrid:
    """Each row's numpy grid: ``t_j = t_lo e^{jh}`` up to ``t_hi = RIGHT_TAIL / λ_min``
    (``λ_min`` the smallest mass outside a live prefix), the rates scaled up by a power of two
    where ``t_hi`` would pass the dtype's largest node (:func:`_largest_time`; the products
    ``q t`` are unchanged)."""
    t_lo = left_time(n, h)
    lam_min = torch.where(live, suffix, math.inf).amin(dim=-1)
    log_t_hi = math.log(RIGHT_TAIL) - torch.log(lam_min)
    nodes = (torch.ceil((log_t_hi - math.log(t_lo)) / h) + 1).clamp(min=1)
    largest = _largest_time(q.dtype)
    power = torch.ceil((log_t_hi - math.log(largest)) / math.log(2.0)).clamp(min=0.0)
    scale = torch.exp2(power)[:, None]
    log_t0 = math.log(t_lo) - power * math.log(2.0)
    return NodeGrid(q * scale, suffix * scale, log_t0, nodes, int(nodes.max()))


def node_weights(lam_t: torch.Tensor, on: torch.Tensor, h: float) -> torch.Tensor:
    """The trapezoid weights ``h λ t e^{−λ t}`` of the nodes ``on`` the grid, 0 elsewhere and
    where ``λ t`` is 0 or at least 745 (the weight underflows; ``t`` may even be infinite)."""
    weight = h * lam_t * torch.exp(-lam_t)
    return torch.where((lam_t > 0) & (lam_t < 745.0) & on, weight, 0.0)


def _integral_remaining(
    q: torch.Tensor, suffix: torch.Tensor, live: torch.Tensor, n: int, h: float
) -> torch.Tensor:
    r"""``Σ_j h λ_i t_j e^{−λ_i t_j} P[N_{H_i}(t_j) < n]`` for the prefixes ``i = 1..V`` (B, V),
    on each row's grid (:func:`node_grid`)."""
    rows, vocab = q.shape
    grid = node_grid(q, suffix, live, n, h)
    qs, nodes, log_t0, total = grid.rates, grid.nodes, grid.log_t0, grid.total
    lam = grid.lam[:, 1:]  # λ after each token joins
    remaining = torch.zeros(rows, vocab, dtype=q.dtype, device=q.device)
    step = max(1, _NODE_CHUNK // max(1, rows * vocab * n))
    index = torch.arange(total, dtype=q.dtype, device=q.device)
    for start in range(0, total, step):
        j = index[start : start + step]
        t = torch.exp(log_t0[:, None] + j[None, :] * h)  # (B, J)
        on = j[None, :] < nodes[:, None]
        rate = qs[:, None, :] * t[:, :, None]  # (B, J, V)
        # a node stops once n tokens with q t > 50 are in: P[N < n] < n e^{-50} beyond
        certain = torch.cumsum((rate[:, 0] > CERTAIN_FIRING).to(torch.int32), dim=-1)
        stop = int(torch.count_nonzero(certain < n, dim=-1).max()) + 1
        stop = min(stop, vocab)
        rate = rate[..., :stop]
        below = prefix_values(*decay(rate), n - 1, cumulative=True)  # P[N_{H_i}(t_j) < n]
        weight = node_weights(lam[:, None, :stop] * t[:, :, None], on[:, :, None], h)
        remaining[:, :stop] += (weight * below).sum(dim=1)
    return remaining


def prefix_layout(
    q_sorted: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What both without-replacement sweeps know of every prefix ``i = 0..V`` (B, V + 1)
    before any integral: the mass outside it (``suffix``), whether it is *live* (``n``
    positive masses and something outside) and the exact ``Q`` of the others (1 where it
    holds ``n`` positive masses, else 0: ``exact``)."""
    zero = torch.zeros(q_sorted.shape[0], 1, dtype=q_sorted.dtype, device=q_sorted.device)
    suffix = torch.cat([q_sorted.flip(-1).cumsum(-1).flip(-1), zero], dim=-1)
    enough = with_empty(torch.cumsum((q_sorted > 0).to(torch.int64), dim=-1)) >= n
    exact = torch.where(enough, 1.0, 0.0).to(q_sorted.dtype)
    return suffix, enough & (suffix > 0), exact


def decay(rate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(e^{−q t}, 1 − e^{−q t})`` of the rates ``q t``: a token's factor, each to full
    precision."""
    return torch.exp(-rate), -torch.expm1(-rate)


def without_replacement_prefix_mass(
    q_sorted: torch.Tensor, n: int, h: float | None = None
) -> torch.Tensor:
    r"""``Q(H_i)`` of every prefix ``i = 0..V`` (B, V + 1) for ``n`` sequential draws without
    replacement: ``q(H)`` for ``n = 1``, the closed form for ``n = 2`` (rows where it is not
    finite are integrated), else ``1 − Q = Σ_j w_j P[N < n] + left`` (error below 1e-12)."""
    h = log_time_step([n]) if h is None else h
    rows = q_sorted.shape[0]
    suffix, live, exact = prefix_layout(q_sorted, n)
    integrate = torch.ones(rows, dtype=torch.bool, device=q_sorted.device)
    mass = exact.clone()
    if n <= 2:
        closed = _closed_form_mass(q_sorted, suffix, n)
        closed = torch.where(live, closed, exact)
        integrate = ~torch.isfinite(closed).all(dim=-1)
        mass = torch.where(integrate[:, None], mass, closed)
    integrate &= live.any(dim=-1)
    if bool(integrate.any()):
        part = integrate.nonzero().squeeze(-1)
        q_p, suffix_p, live_p = q_sorted[part], suffix[part], live[part]
        remaining = with_empty(_integral_remaining(q_p, suffix_p, live_p, n, h))
        left = left_weight(suffix_p, left_time(n, h), h)
        mass[part] = torch.where(live_p, 1.0 - (remaining + left), exact[part])
    return mass


def without_replacement_gap(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
    """``min(0, min_i [p(H_i) − Q(H_i)])`` per row of validated ``p``, ``q`` (B, V), ``Q`` of
    sequential sampling without replacement at every prefix (the dense path: for ``n ≥ 3``
    the default is :func:`otbound.drafts._torch_block_sweep.without_replacement_gap`)."""
    p_sorted, q_sorted = sweep_sorted(p, q)
    return _gap(p_sorted, without_replacement_prefix_mass(q_sorted, n), WITHOUT_REPLACEMENT, n)
