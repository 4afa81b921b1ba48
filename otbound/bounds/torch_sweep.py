r"""The exact sweeps in torch: batched, on any device (CPU or GPU).

The same optimal acceptance rate as :func:`otbound.optimal_acceptance`, for the designs whose
sweep is one sort or a closed form (``iid``, ``greedy``, ``topk``, ``hub``), computed with
torch on whole batches of steps at once, so that the rates of a logged run can be computed
where its logits already lie.

.. math::

    α^* = 1 + \min_{H ⊆ V} \bigl[p(H) − Q(H)\bigr]

* ``iid`` (``Q(H) = q(H)^n``): one batched sort of the tokens by ``p/q`` ascending (``q = 0``
  tokens last, ``p = 0 < q`` tokens first); with ``H_i`` the first ``i`` tokens,
  ``α* = 1 + min(0, min_i [p(H_i) − q(H_i)^n])``.
* ``topk``: ``α* = p(T)``, ``T`` the ``n`` most likely tokens of ``q``.
* ``greedy``: ``T`` the top ``n − 1`` tokens of ``q`` and ``r = q`` restricted to ``V \ T``,
  renormalised: ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``.
* ``hub`` (``n = 2``, ``a = argmax q``): ``α* = p_a + Σ_{i≠a} min(p_i, q_i / (1 − q_a))``.

Ties among equally likely tokens of ``q`` go to the lower token id, as in
:mod:`otbound.drafts`, so the two paths agree to rounding (1e-9 in float64 is tested).
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from otbound._checks import SUM_TOLERANCE, as_num_drafts
from otbound.drafts import DESIGNS, DraftDesign

#: Designs this module computes, in the order error messages list them.
TORCH_DESIGNS: tuple[str, ...] = ("iid", "greedy", "topk", "hub")

#: Rows are swept in chunks of about this many entries, so that the temporaries of the sort
#: (a few float64/int64 copies of the chunk) stay within a few hundred MB.
_CHUNK_ELEMENTS = 1 << 22


def _where(index: tuple[int, ...]) -> str:
    return f" in row {index}" if index else ""


def _first_index(mask: torch.Tensor) -> tuple[int, ...]:
    """The index of the first ``True`` entry of ``mask`` (row-major), as ints."""
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


def _as_tensor(
    x: object, name: str, dtype: torch.dtype, device: torch.device | str | None
) -> torch.Tensor:
    """``x`` (tensor, numpy array, nested lists) as a new ``dtype`` tensor on ``device``."""
    try:
        if isinstance(x, torch.Tensor):
            t = x.detach()
            if t.is_complex():
                raise TypeError("complex")
            return t.to(device=device if device is not None else t.device, dtype=dtype, copy=True)
        arr = np.asarray(x)
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
        ):
            raise TypeError(arr.dtype)
        if np.iscomplexobj(arr):
            raise TypeError("complex")
        return torch.as_tensor(np.array(arr, dtype=np.float64), device=device).to(dtype)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(
            f"{name} must be an array of probabilities, got {type(x).__name__}"
        ) from exc


def _check_distribution(t: torch.Tensor, name: str, *, normalize: bool) -> torch.Tensor:
    """Validate rows of probabilities along the last axis; returns them divided by their sums.

    The checks and messages are those of :func:`otbound._checks.as_distribution`.
    """
    if t.ndim < 1:
        raise ValueError(
            f"{name} must have at least 1 axis(es) (..., V), got shape {tuple(t.shape)}"
        )
    if t.shape[-1] == 0:
        raise ValueError(f"{name} has an empty vocabulary (last axis of length 0)")
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        bad = _first_index(~finite)
        kind = "NaN" if bool(torch.isnan(t[bad])) else "an infinite value"
        raise ValueError(f"{name} contains {kind} at index {bad}")
    sums = t.sum(dim=-1)
    negative = t < 0
    if bool(negative.any()):
        bad = _first_index(negative)
        hint = ""
        if bool(((sums - 1.0).abs() > SUM_TOLERANCE).all()):
            hint = (
                "; it looks like logits rather than probabilities: convert with "
                "scipy.special.softmax(logits, axis=-1) or otbound.softmax"
            )
        raise ValueError(f"{name} has a negative entry {float(t[bad]):.6g} at index {bad}{hint}")
    zero = sums <= 0
    if bool(zero.any()):
        bad = _first_index(zero.reshape(sums.shape)) if sums.ndim else ()
        raise ValueError(f"{name} has a row of zeros{_where(bad)}")
    if not normalize:
        off = (sums - 1.0).abs() > SUM_TOLERANCE
        if bool(off.any()):
            bad = _first_index(off) if sums.ndim else ()
            total = float(sums[bad]) if bad else float(sums)
            hint = ""
            if bool((t > 1.0).any()):
                hint = " (entries above 1: it looks like logits rather than probabilities)"
            raise ValueError(
                f"rows of {name} must sum to 1 within {SUM_TOLERANCE:g}; "
                f"the row{_where(bad) or ''} sums to {total:.9g}{hint}; "
                "pass normalize=True to rescale"
            )
    return t / sums.unsqueeze(-1)


def _design_name(design: object) -> str:
    """The design's registry name, or a ``ValueError`` naming the designs computed here."""
    name = getattr(design, "name", design)
    if isinstance(name, str) and name in TORCH_DESIGNS:
        return name
    if isinstance(name, str) and name in DESIGNS:
        raise ValueError(
            f"design {name!r} has no torch sweep; valid designs here: "
            f"{', '.join(TORCH_DESIGNS)} (otbound.optimal_acceptance computes all of "
            f"{', '.join(DESIGNS)})"
        )
    raise ValueError(f"unknown design {design!r}; valid designs: {', '.join(TORCH_DESIGNS)}")


def _check_design(q: torch.Tensor, n: int, design: str) -> None:
    """The checks of :meth:`otbound.drafts.DraftDesign.check` for the torch designs."""
    if design == "hub" and n != 2:
        raise ValueError(f"design 'hub' is defined for n=2 only, got n={n}")
    vocab = q.shape[-1]
    if design in ("greedy", "hub", "topk") and n > vocab:
        raise ValueError(f"n={n} is larger than the vocabulary size V={vocab}")
    if design in ("greedy", "hub"):
        support = torch.count_nonzero(q > 0, dim=-1)
        short = support < n
        if bool(short.any()):
            row = _first_index(short) if support.ndim else ()
            raise ValueError(
                f"n={n} is larger than the support of q{_where(row)} "
                f"({int(support[row] if row else support)} tokens with q > 0); "
                f"design {design!r} draws {n} distinct tokens"
            )


def _top_mask(q: torch.Tensor, k: int) -> torch.Tensor:
    """Mask (B, V) of the ``k`` most likely tokens of each row of ``q``, ties to the lower id.

    ``O(V)`` per row: the ``k``-th largest value by ``topk``, then every token above it and
    the first tokens equal to it (by id) until ``k`` are chosen, as :func:`otbound.drafts.
    _top_tokens` does.
    """
    if k == 0:
        return torch.zeros(q.shape, dtype=torch.bool, device=q.device)
    kth = torch.topk(q, k, dim=-1, largest=True, sorted=True).values[:, k - 1 : k]
    above = q > kth
    ties = q == kth
    room = k - above.sum(dim=-1, keepdim=True)
    return above | (ties & (torch.cumsum(ties.to(torch.int32), dim=-1) <= room))


def _iid_gap(p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
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


def _fixed_plus_sampled_gap(p: torch.Tensor, q: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """``p(T) + Σ_{x∉T} min(p_x, r_x) − 1``, ``r = q`` off ``T`` renormalised (greedy, hub)."""
    zero = torch.zeros((), dtype=p.dtype, device=p.device)
    rest = torch.where(inside, zero, q)
    r = rest / rest.sum(dim=-1, keepdim=True)  # _check_design: something is left to sample
    sampled = torch.where(inside, zero, torch.minimum(p, r)).sum(dim=-1)
    kept = torch.where(inside, p, zero).sum(dim=-1)
    return kept + sampled - 1.0


def _gap(p: torch.Tensor, q: torch.Tensor, n: int, design: str) -> torch.Tensor:
    """``α* − 1`` per row of ``p``, ``q`` (B, V)."""
    if design == "iid":
        return _iid_gap(p, q, n)
    if design == "topk":
        inside = _top_mask(q, n)
        zero = torch.zeros((), dtype=p.dtype, device=p.device)
        return torch.where(inside, p, zero).sum(dim=-1) - 1.0
    fixed = n - 1 if design == "greedy" else 1
    return _fixed_plus_sampled_gap(p, q, _top_mask(q, fixed))


def optimal_acceptance_torch(
    p: object,
    q: object,
    n: int = 2,
    design: str | DraftDesign = "iid",
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float64,
    normalize: bool = False,
    chunk_elements: int = _CHUNK_ELEMENTS,
) -> torch.Tensor:
    r"""Optimal acceptance rate ``α*`` of ``n``-draft speculative decoding, batched in torch.

    .. math::

        α^* = 1 + \min_{H ⊆ V} \bigl[p(H) − Q(H)\bigr]

    ``iid`` (``Q(H) = q(H)^n``): sort the tokens of each row by ``p/q`` ascending (tokens
    with ``q = 0`` last, tokens with ``p = 0 < q`` first) and, with ``H_i`` the first ``i``,
    ``α* = 1 + min(0, min_i [p(H_i) − q(H_i)^n])``. Closed forms, with ``T_k`` the ``k`` most
    likely tokens of ``q`` (ties to the lower token id):

    * ``topk``: ``α* = p(T_n)``;
    * ``greedy``: ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``, ``T = T_{n−1}``,
      ``r = q 1[x∉T] / q(V \ T)``;
    * ``hub`` (``n = 2``, ``a = argmax q``): ``α* = p_a + Σ_{i≠a} min(p_i, q_i/(1−q_a))``.

    The values equal :func:`otbound.optimal_acceptance`'s to rounding (1e-9 in float64).

    Parameters
    ----------
    p : torch.Tensor or array_like, shape (..., V)
        Target distributions (rows sum to one). numpy arrays and nested lists are accepted.
    q : torch.Tensor or array_like, shape (..., V)
        Draft distributions; batch axes broadcast against ``p``'s.
    n : int, default 2
        Number of drafts.
    design : {"iid", "greedy", "topk", "hub"} or DraftDesign, default "iid"
        The draft design (see :mod:`otbound.drafts`), by name or instance; the other designs of
        :data:`otbound.DESIGNS` are computed by :func:`otbound.optimal_acceptance` only.
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
        Non-numeric input; NaN, infinite or negative entries; rows that do not sum to one
        within 1e-6 (unless ``normalize``); rows of zeros; different vocabulary sizes or
        batch shapes that do not broadcast; ``n < 1``; ``n > V`` for ``greedy``/``topk``/
        ``hub``; ``n`` larger than the support of ``q`` for ``greedy``/``hub`` (distinct
        drafts); ``n != 2`` for ``hub``; an unknown design (the message names the valid ones).

    Notes
    -----
    Cost per row: one sort, ``O(V log V)``, for ``iid``; ``O(V)`` (a ``topk`` of ``n``
    values) for the closed forms. Validation reads a few scalars back to the host.

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
    name = _design_name(design)
    n = as_num_drafts(n)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    if isinstance(chunk_elements, bool) or not isinstance(chunk_elements, numbers.Integral):
        raise ValueError(f"chunk_elements must be a positive integer, got {chunk_elements!r}")
    if chunk_elements < 1:
        raise ValueError(f"chunk_elements must be a positive integer, got {chunk_elements}")
    if device is None and isinstance(p, torch.Tensor):
        device = p.device
    p_t = _check_distribution(_as_tensor(p, "p", dtype, device), "p", normalize=normalize)
    q_t = _check_distribution(_as_tensor(q, "q", dtype, p_t.device), "q", normalize=normalize)
    if p_t.shape[-1] != q_t.shape[-1]:
        raise ValueError(
            "p and q must have the same vocabulary size (last axis), got "
            f"{p_t.shape[-1]} and {q_t.shape[-1]}"
        )
    _check_design(q_t, n, name)
    p_batch, q_batch = tuple(p_t.shape[:-1]), tuple(q_t.shape[:-1])
    try:
        batch = tuple(torch.broadcast_shapes(p_batch, q_batch))
    except RuntimeError as exc:
        raise ValueError(
            f"the batch shapes of p {p_batch} and q {q_batch} do not broadcast"
        ) from exc
    vocab = p_t.shape[-1]
    p2 = p_t.expand(*batch, vocab).reshape(-1, vocab)
    q2 = q_t.expand(*batch, vocab).reshape(-1, vocab)
    rows = p2.shape[0]
    gap = torch.empty(rows, dtype=dtype, device=p_t.device)
    step = max(1, int(chunk_elements) // vocab)
    for start in range(0, rows, step):
        part = slice(start, start + step)
        gap[part] = _gap(p2[part].contiguous(), q2[part].contiguous(), n, name)
    return (1.0 + gap).clamp_(0.0, 1.0).reshape(batch)
