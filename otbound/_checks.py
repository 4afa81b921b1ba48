"""Input cleaning: the one place that turns user arrays into valid distributions or raises.

Every public entry point passes its probability arguments through :func:`as_distribution`
(and its pairs through :func:`as_distribution_pair`), so that a bad input fails with a
``ValueError`` that names the argument and the problem, never deep inside numpy or HiGHS.
"""

from __future__ import annotations

import numbers

import numpy as np

#: Rows must sum to one within this absolute tolerance unless ``normalize=True``.
SUM_TOLERANCE = 1e-6


def _where(index: tuple[int, ...]) -> str:
    """Human-readable location of a row (empty for a 1-D input)."""
    return f" in row {index}" if index else ""


def as_distribution(
    x: object, name: str, *, normalize: bool = False, min_ndim: int = 1
) -> np.ndarray:
    """Validate probability vectors along the last axis and return them as float64.

    Parameters
    ----------
    x : array_like, shape (..., V)
        Probabilities; leading axes are batch axes.
    name : str
        The argument's name, used in error messages.
    normalize : bool, default False
        Rescale every row to sum to one. Without it a row whose sum is off by more than
        ``SUM_TOLERANCE`` is an error; rows within the tolerance are rescaled silently so
        that downstream identities (``p(H) + p(V \\ H) = 1``) hold to rounding.
    min_ndim : int, default 1
        Minimum number of axes (``per_slot`` draft distributions need 2).

    Returns
    -------
    numpy.ndarray
        A new C-contiguous float64 array of the same shape whose rows sum to one.

    Raises
    ------
    ValueError
        Non-numeric input, wrong number of axes, empty vocabulary, NaN or infinite entries,
        negative entries (with a hint when the row looks like logits), or rows that do not
        sum to one.
    """
    try:
        arr = np.array(x, dtype=np.float64, copy=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be an array of probabilities, got {type(x).__name__}"
        ) from exc
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} axis(es) (..., V), got shape {arr.shape}"
        )
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} has an empty vocabulary (last axis of length 0)")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        kind = "NaN" if np.isnan(arr[tuple(bad)]) else "an infinite value"
        raise ValueError(f"{name} contains {kind} at index {tuple(int(i) for i in bad)}")
    if np.any(arr < 0):
        bad = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        hint = ""
        if np.all(np.abs(arr.sum(axis=-1) - 1.0) > SUM_TOLERANCE):
            hint = (
                "; it looks like logits rather than probabilities: convert with "
                "scipy.special.softmax(logits, axis=-1) or otbound.softmax"
            )
        raise ValueError(f"{name} has a negative entry {arr[bad]:.6g} at index {bad}{hint}")
    sums = arr.sum(axis=-1)
    if np.any(sums <= 0):
        bad = tuple(int(i) for i in np.argwhere(np.atleast_1d(sums <= 0))[0])
        raise ValueError(f"{name} has a row of zeros{_where(bad[: sums.ndim])}")
    if not normalize:
        off = np.abs(sums - 1.0) > SUM_TOLERANCE
        if np.any(off):
            bad = tuple(int(i) for i in np.argwhere(np.atleast_1d(off))[0])[: sums.ndim]
            total = float(np.atleast_1d(sums)[bad] if bad else sums)
            hint = ""
            if np.any(arr > 1.0):
                hint = " (entries above 1: it looks like logits rather than probabilities)"
            raise ValueError(
                f"rows of {name} must sum to 1 within {SUM_TOLERANCE:g}; "
                f"the row{_where(bad) or ''} sums to {total:.9g}{hint}; "
                "pass normalize=True to rescale"
            )
    arr /= sums[..., None]
    return arr


def as_distribution_pair(
    p: object, q: object, *, normalize: bool = False, q_min_ndim: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Validate a target ``p`` and draft ``q`` over the same vocabulary.

    Returns both as float64 arrays; their batch shapes must broadcast (``q`` may carry an
    extra slot axis, ``(..., n, V)``, for the ``per_slot`` design).
    """
    p_arr = as_distribution(p, "p", normalize=normalize)
    q_arr = as_distribution(q, "q", normalize=normalize, min_ndim=q_min_ndim)
    if p_arr.shape[-1] != q_arr.shape[-1]:
        raise ValueError(
            "p and q must have the same vocabulary size (last axis), got "
            f"{p_arr.shape[-1]} and {q_arr.shape[-1]}"
        )
    return p_arr, q_arr


def as_num_drafts(n: object) -> int:
    """Validate the number of drafts: an integer >= 1."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n}")
    return int(n)


def broadcast_batch(
    p: np.ndarray, q: np.ndarray, q_extra_axes: int = 0
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Broadcast the batch axes of ``p`` (..., V) and ``q`` (..., [n,] V) and flatten them.

    Returns ``p2`` of shape (B, V), ``q2`` of shape (B, [n,] V) and the batch shape.
    """
    p_batch = p.shape[:-1]
    q_batch = q.shape[: q.ndim - 1 - q_extra_axes]
    try:
        batch = np.broadcast_shapes(p_batch, q_batch)
    except ValueError as exc:
        raise ValueError(
            f"the batch shapes of p {p_batch} and q {q_batch} do not broadcast"
        ) from exc
    vocab = p.shape[-1]
    p2 = np.broadcast_to(p, (*batch, vocab)).reshape(-1, vocab)
    q_tail = q.shape[q.ndim - 1 - q_extra_axes :]
    q2 = np.broadcast_to(q, (*batch, *q_tail)).reshape(-1, *q_tail)
    return p2, q2, batch


#: The largest excess :func:`clip_rounding` treats as rounding.
ROUNDING_TOLERANCE = 1e-12


def clip_rounding(
    x: object, low: float, high: float, what: str, *, tol: float = ROUNDING_TOLERANCE
) -> np.ndarray:
    """Clip ``x`` into ``[low, high]`` where it is out by rounding only, and raise otherwise.

    A value that the mathematics keeps in ``[low, high]`` (a probability, a mass ``Q(H)``,
    ``α*``) may leave it by rounding; clipping more than that would hide a bug.

    Parameters
    ----------
    x : array_like
        Values that lie in ``[low, high]`` exactly.
    low, high : float
        The bounds.
    what : str
        What ``x`` is (the step that computed it), for the error message.
    tol : float, default :data:`ROUNDING_TOLERANCE`
        The largest excess ``max(low − x, x − high)`` clipped silently.

    Returns
    -------
    numpy.ndarray
        ``clip(x, low, high)`` as float64 (a 0-d array for a scalar).

    Raises
    ------
    ValueError
        A NaN, or an excess above ``tol``: the message names ``what``, the index and the value.
    """
    arr = np.asarray(x, dtype=np.float64)
    excess = np.maximum(low - arr, arr - high)
    bad = np.isnan(arr) | (excess > tol)
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        value = float(arr[index])
        where = f" at index {index[0] if len(index) == 1 else index}" if index else ""
        raise ValueError(
            f"{what}{where} is {value!r}, outside [{low:g}, {high:g}] by more than "
            f"rounding ({tol:g}): a bug upstream, not clipped"
        )
    return np.clip(arr, low, high)
