r"""The numpy path's input checks and rounding check on torch tensors.

The torch paths (:mod:`otbound.bounds.torch_sweep`, :mod:`otbound.verifiers.torch_acceptance`)
take their inputs as the numpy path does: :func:`as_probability_tensor` turns an array-like into
a tensor or names the argument, :func:`check_distribution_rows` runs
:func:`otbound._checks.check_rows` (same checks, same words) on the device, and
:func:`check_chunk_elements` checks the chunk size.

A value the mathematics keeps in ``[low, high]`` (a mass ``Q(H)``, ``α*``, an acceptance rate)
may leave it by rounding; more than that is a bug upstream, which a ``clamp`` would hide. The
torch paths test

.. math::

    \max(\text{low} − x,\ x − \text{high}) \le \text{tol} \quad\text{and}\quad x \ne \text{NaN}

on the device (one read back of a single boolean per call, not per row), and where it fails
they hand the values to :func:`~otbound._checks.clip_rounding`, which raises with its own words
(the value, its index and ``what``). Only then do the values go to the host.

This module imports torch; the package does not import it (the torch paths do).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

from otbound._checks import ROUNDING_TOLERANCE, check_rows, check_same_vocabulary, clip_rounding

__all__ = [
    "as_distribution_pair_torch",
    "as_probability_tensor",
    "check_chunk_elements",
    "check_distribution_rows",
    "clip_rounding_torch",
    "rounding_tolerance",
    "support_sizes",
]


class _TorchOps:
    """:class:`otbound._checks.RowOps` for torch tensors: the numpy path's checks and words."""

    def isfinite(self, x: Any) -> Any:
        return torch.isfinite(x)

    def first(self, mask: Any) -> tuple[int, ...]:
        return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


_TORCH_OPS = _TorchOps()


def as_probability_tensor(
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


def check_chunk_elements(chunk_elements: object) -> None:
    """Raise ``ValueError`` unless ``chunk_elements`` is a positive integer (not a bool)."""
    if isinstance(chunk_elements, bool) or not isinstance(chunk_elements, numbers.Integral):
        raise ValueError(f"chunk_elements must be a positive integer, got {chunk_elements!r}")
    if chunk_elements < 1:
        raise ValueError(f"chunk_elements must be a positive integer, got {chunk_elements}")


def check_distribution_rows(t: torch.Tensor, name: str, *, normalize: bool) -> torch.Tensor:
    """Validate rows of probabilities along the last axis; returns them divided by their sums
    (the checks and words of :func:`otbound._checks.as_distribution`, by
    :func:`otbound._checks.check_rows`)."""
    sums: torch.Tensor = check_rows(t, name, normalize=normalize, min_ndim=1, ops=_TORCH_OPS)
    return t / sums.unsqueeze(-1)


def as_distribution_pair_torch(
    p: object,
    q: object,
    dtype: torch.dtype,
    device: torch.device | str | None,
    *,
    normalize: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``p`` and ``q`` as checked ``dtype`` rows of probabilities over one vocabulary, on
    ``device`` (default: ``p``'s where it is a tensor): the torch twin of
    :func:`otbound._checks.as_distribution_pair`."""
    if device is None and isinstance(p, torch.Tensor):
        device = p.device
    p_t = check_distribution_rows(
        as_probability_tensor(p, "p", dtype, device), "p", normalize=normalize
    )
    q_t = check_distribution_rows(
        as_probability_tensor(q, "q", dtype, p_t.device), "q", normalize=normalize
    )
    check_same_vocabulary(tuple(p_t.shape), tuple(q_t.shape))
    return p_t, q_t


def support_sizes(q: torch.Tensor) -> np.ndarray:
    """The number of tokens with ``q > 0`` per row, counted on ``q``'s device."""
    counts: np.ndarray = torch.count_nonzero(q > 0, dim=-1).cpu().numpy()
    return counts


def rounding_tolerance(dtype: torch.dtype) -> float:
    """:data:`~otbound._checks.ROUNDING_TOLERANCE` (1e-12) in float64; in another floating
    dtype as many of its units in the last place (``1e-12 · eps(dtype) / eps(float64)``:
    float32 5.4e-4, where ``Q(H)`` of a 32,000-token row is off by up to 3e-5)."""
    if dtype == torch.float64:
        return ROUNDING_TOLERANCE
    return ROUNDING_TOLERANCE * torch.finfo(dtype).eps / torch.finfo(torch.float64).eps


def clip_rounding_torch(
    values: torch.Tensor, low: float, high: float, what: str, *, tol: float | None = None
) -> torch.Tensor:
    """:func:`otbound._checks.clip_rounding` for a tensor, on its device.

    Parameters
    ----------
    values : torch.Tensor
        Values that lie in ``[low, high]`` exactly.
    low, high : float
        The bounds.
    what : str
        What ``values`` are, for the error message.
    tol : float, optional
        The largest excess clipped silently; default :func:`rounding_tolerance` of
        ``values.dtype`` (``ROUNDING_TOLERANCE`` in float64, the numpy path's).

    Returns
    -------
    torch.Tensor
        ``values.clamp(low, high)`` (a new tensor, same dtype and device).

    Raises
    ------
    ValueError
        A NaN, or an excess above ``tol``: :func:`~otbound._checks.clip_rounding`'s error.
    """
    limit = rounding_tolerance(values.dtype) if tol is None else tol
    excess = torch.maximum(low - values, values - high)
    if bool((torch.isnan(values) | (excess > limit)).any()):
        clip_rounding(values.detach().double().cpu().numpy(), low, high, what, tol=limit)
    return values.clamp(low, high)
