r"""The exact sweeps in torch: batched, on any device (CPU or GPU).

The same optimal acceptance rate as :func:`otbound.optimal_acceptance`, for every design with
one draft distribution (``iid``, ``without_replacement``, ``conditional_poisson``, ``greedy``,
``topk``, ``hub``), computed with torch on whole batches of steps at once, so that the rates of
a logged run can be computed where its logits already lie.

.. math::

    α^* = 1 + \min_{H ⊆ V} \bigl[p(H) − Q(H)\bigr]

* ``iid`` (``Q(H) = q(H)^n``): one batched sort of the tokens by ``p/q`` ascending (``q = 0``
  tokens last, ``p = 0 < q`` tokens first); with ``H_i`` the first ``i`` tokens,
  ``α* = 1 + min(0, min_i [p(H_i) − q(H_i)^n])``.
* ``topk``: ``α* = p(T)``, ``T`` the ``n`` most likely tokens of ``q``.
* ``greedy``: ``T`` the top ``n − 1`` tokens of ``q`` and ``r = q`` restricted to ``V \ T``,
  renormalised: ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``.
* ``hub`` (``n = 2``, ``a = argmax q``): ``α* = p_a + Σ_{i≠a} min(p_i, q_i / (1 − q_a))``.
* ``conditional_poisson``: ``Q(H) = e_n(q_H) / e_n(q)``, the elementary symmetric sums of every
  prefix by a blocked scan of the products ``Π (1 + q_x z) mod z^{n+1}`` (per-coefficient
  powers of two where ``e_n(q) < 2^-800``); ``without_replacement``: the exponential-clock
  integral on the numpy log-time grid, one scan of ``Π (e^{−q_x t} + (1 − e^{−q_x t}) z)
  mod z^n`` per node, all nodes at once (error below 1e-12). See
  :mod:`otbound.drafts._torch_distinct`.

Ties among equally likely tokens of ``q`` go to the lower token id, as in
:mod:`otbound.drafts`, so the two paths agree to rounding (1e-9 in float64 is tested).

Each design's torch kernel is its :meth:`~otbound.drafts.DraftDesign.torch_gap`
(:mod:`otbound.drafts._torch_closed_forms`); the designs computed here are those whose
``torch_sweep`` is true (:data:`TORCH_DESIGNS`). The input checks are the numpy path's
(:func:`otbound._checks.check_rows`, :meth:`~otbound.drafts.DraftDesign.check_rows`), and
so are the refusals of a ``Q(H)`` or an ``α*`` outside ``[0, 1]`` by more than rounding
(:func:`otbound._torch_checks.clip_rounding_torch`: tested on the device, raised by
:func:`otbound._checks.clip_rounding` with :mod:`otbound.bounds.sweep`'s words), never clamped.
:data:`TORCH_SWEEP` is the sweep as a :class:`otbound.bounds.solvers.Solver` for
:func:`otbound.compare`'s ``bound``.
"""

from __future__ import annotations

import torch

from otbound._checks import as_num_drafts, batch_shape
from otbound._torch_checks import (
    as_distribution_pair_torch,
    check_chunk_elements,
    clip_rounding_torch,
    support_sizes,
)
from otbound.bounds.solvers import Solver
from otbound.bounds.sweep import alpha_what, refuse_nan
from otbound.drafts import DESIGNS, DraftDesign, designs_where, get_design

#: Designs this module computes (those whose ``torch_sweep`` is true), in registry order.
TORCH_DESIGNS: tuple[str, ...] = designs_where("torch_sweep")

#: Rows are swept (and :mod:`otbound.verifiers.torch_acceptance` takes its rows) in chunks of
#: about this many entries, so that the temporaries of the sort (a few float64/int64 copies of
#: the chunk) stay within a few hundred MB.
TORCH_CHUNK_ELEMENTS = 1 << 22


def _design(design: object) -> DraftDesign:
    """The registered design, or a ``ValueError`` naming the designs computed here."""
    name = getattr(design, "name", design)
    if isinstance(name, str) and name in TORCH_DESIGNS:
        return get_design(name)
    if isinstance(name, str) and name in DESIGNS:
        raise ValueError(
            f"design {name!r} has no torch sweep; valid designs here: "
            f"{', '.join(TORCH_DESIGNS)} (otbound.optimal_acceptance computes all of "
            f"{', '.join(DESIGNS)})"
        )
    raise ValueError(f"unknown design {design!r}; valid designs: {', '.join(TORCH_DESIGNS)}")


def optimal_acceptance_torch(
    p: object,
    q: object,
    n: int = 2,
    design: str | DraftDesign = "iid",
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
    normalize: bool = False,
    chunk_elements: int = TORCH_CHUNK_ELEMENTS,
) -> torch.Tensor:
    r"""Optimal acceptance rate ``α*`` of ``n``-draft speculative decoding, batched in torch.

    .. math::

        α^* = 1 + \min_{H ⊆ V} \bigl[p(H) − Q(H)\bigr]

    computed per design as the module says (a sort by ``p/q`` for ``iid``, closed forms for
    ``topk``, ``greedy`` and ``hub``, scans of the elementary symmetric sums and of the clock
    integral for the distinct designs). The values equal :func:`otbound.optimal_acceptance`'s
    to rounding (1e-9 in float64).

    Parameters
    ----------
    p : torch.Tensor or array_like, shape (..., V)
        Target distributions (rows sum to one). numpy arrays and nested lists are accepted.
    q : torch.Tensor or array_like, shape (..., V)
        Draft distributions; batch axes broadcast against ``p``'s.
    n : int, default 2
        Number of drafts.
    design : {"iid", "without_replacement", "conditional_poisson", "greedy", "topk", "hub"}
        The draft design (see :mod:`otbound.drafts`), by name or instance (default ``"iid"``);
        ``per_slot`` is computed by :func:`otbound.optimal_acceptance` only.
    device : torch.device or str, optional
        Where to compute (``"cuda"``, ``"cpu"``...). Default: ``p``'s device when ``p`` is a
        tensor, else the CPU. Both inputs are moved there.
    dtype : torch.dtype, default torch.float64
        Working precision. ``torch.float32`` is faster on GPUs; expect errors near 1e-6 then.
    normalize : bool, default False
        Rescale rows that do not sum to one instead of raising (rows within 1e-6 of one are
        always rescaled, as in the numpy path).
    chunk_elements : int, default 4194304
        Rows are processed in chunks of about this many entries, to bound the temporaries of
        the sort (a few copies of one chunk in ``dtype`` and int64).

    Returns
    -------
    torch.Tensor
        ``α*`` of ``dtype`` on ``device``, with the broadcast batch shape (0-dimensional for
        1-D inputs).

    Raises
    ------
    ValueError
        What the numpy sweep refuses, in its words: non-numeric, NaN, infinite or negative
        entries; rows that do not sum to one within 1e-6 (unless ``normalize``); shapes that
        do not broadcast; an ``n`` the design cannot draw; an unknown design; a NaN in some
        ``p(H) − Q(H)``, or a ``Q(H)`` or ``α*`` outside ``[0, 1]`` by more than rounding
        (:func:`otbound._torch_checks.rounding_tolerance` of ``dtype``, 1e-12 in float64).

    Notes
    -----
    Cost per row: one sort, ``O(V log V)``, for ``iid``; ``O(V)`` for the closed forms; a
    sort and ``O(nV)`` in about ``3 L + (n + 2) log2(V/L)`` tensor operations a chunk for
    ``conditional_poisson`` (``L = 64``); for ``without_replacement`` at ``n ≥ 3`` the block
    sweep of :mod:`otbound.drafts._torch_block_sweep`. A ``chunk_elements`` above the
    default (``2^25`` on a GPU) takes more rows per chunk, so fewer kernel launches a row.

    Examples
    --------
    >>> import torch
    >>> from otbound.bounds.torch_sweep import optimal_acceptance_torch
    >>> round(float(optimal_acceptance_torch([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=1)), 12)
    0.7
    >>> p = torch.tensor([[0.3, 0.4, 0.3], [0.5, 0.5, 0.0]], dtype=torch.float64)
    >>> q = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]], dtype=torch.float64)
    >>> optimal_acceptance_torch(p, q, n=2, design="greedy")
    tensor([0.9500, 1.0000], dtype=torch.float64)
    """
    spec = _design(design)
    n = as_num_drafts(n)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    check_chunk_elements(chunk_elements)
    p_t, q_t = as_distribution_pair_torch(p, q, dtype, device, normalize=normalize)
    spec.check_rows(tuple(q_t.shape), n, lambda: support_sizes(q_t))
    batch = batch_shape(tuple(p_t.shape[:-1]), tuple(q_t.shape[:-1]))
    vocab = p_t.shape[-1]
    p2 = p_t.expand(*batch, vocab).reshape(-1, vocab)
    q2 = q_t.expand(*batch, vocab).reshape(-1, vocab)
    rows = p2.shape[0]
    gap = torch.empty(rows, dtype=dtype, device=p_t.device)
    step = max(1, int(chunk_elements) // vocab)
    for start in range(0, rows, step):
        part = slice(start, start + step)
        gap[part] = spec.torch_gap(p2[part].contiguous(), q2[part].contiguous(), n)
    if bool(torch.isnan(gap).any()):  # as the numpy sweep: a NaN is never returned as a rate
        refuse_nan(gap.cpu().numpy(), spec, n, "torch sweep", 0)
    alpha = clip_rounding_torch(1.0 + gap, 0.0, 1.0, alpha_what(spec.name, [n]))
    return alpha.reshape(batch)


#: The torch sweep as a bound for :func:`otbound.compare`: it serves :data:`TORCH_DESIGNS`,
#: and ``compare`` computes the other designs with the numpy sweep.
TORCH_SWEEP = Solver("torch", optimal_acceptance_torch, TORCH_DESIGNS)
