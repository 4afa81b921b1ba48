r"""The numpy path's rounding check on torch tensors: one reduction on the device, and the
error raised by :func:`otbound._checks.clip_rounding` itself.

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

import torch

from otbound._checks import ROUNDING_TOLERANCE, clip_rounding

__all__ = ["clip_rounding_torch", "rounding_tolerance"]


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
