"""Input cleaning: the one place that turns user arrays into valid distributions or raises.

Every public entry point passes its probability arguments through :func:`as_distribution`
(and its pairs through :func:`as_distribution_pair`, or :meth:`otbound.problem.Step.validate`),
so that a bad input fails with a ``ValueError`` that names the argument and the problem, never
deep inside numpy or HiGHS. The checks themselves (:func:`check_rows`) serve numpy arrays and
torch tensors alike (:mod:`otbound.bounds.torch_sweep`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Protocol

import numpy as np

#: Rows must sum to one within this absolute tolerance unless ``normalize=True``.
SUM_TOLERANCE = 1e-6


def _where(index: tuple[int, ...]) -> str:
    """Human-readable location of a row (empty for a 1-D input)."""
    return f" in row {index}" if index else ""


class RowOps(Protocol):
    """What :func:`check_rows` needs of an array library beyond the operators that numpy
    arrays and torch tensors share (``<``, ``abs``, ``.sum(-1)``, ``.any()``, indexing)."""

    def isfinite(self, x: Any) -> Any:
        """Elementwise finiteness."""
        ...

    def first(self, mask: Any) -> tuple[int, ...]:
        """The index of the first ``True`` entry of ``mask`` (row-major)."""
        ...


class _NumpyOps:
    """:class:`RowOps` for numpy arrays."""

    def isfinite(self, x: Any) -> Any:
        return np.isfinite(x)

    def first(self, mask: Any) -> tuple[int, ...]:
        return tuple(int(i) for i in np.argwhere(mask)[0])


#: :class:`RowOps` for numpy arrays.
NUMPY_OPS = _NumpyOps()


def check_rows(x: Any, name: str, *, normalize: bool, min_ndim: int, ops: RowOps) -> Any:
    """The checks of :func:`as_distribution` on an array of any library (numpy, torch).

    Parameters
    ----------
    x : numpy.ndarray or torch.Tensor, shape (..., V)
        Floating-point probabilities.
    name : str
        The argument's name, for the messages.
    normalize : bool
        Whether rows may sum to anything positive (else within :data:`SUM_TOLERANCE` of one).
    min_ndim : int
        Minimum number of axes.
    ops : RowOps
        :data:`NUMPY_OPS`, or the torch path's.

    Returns
    -------
    array of the same library, shape ``x.shape[:-1]``
        The row sums (every one positive).

    Raises
    ------
    ValueError
        As :func:`as_distribution`.
    """
    if x.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} axis(es) (..., V), got shape {tuple(x.shape)}"
        )
    if x.shape[-1] == 0:
        raise ValueError(f"{name} has an empty vocabulary (last axis of length 0)")
    # Two reductions settle the usual case: the least entry is >= 0 (a NaN fails the test)
    # and the largest finite. Only an input that fails them pays for the passes that find
    # where and what is wrong.
    usual = math.prod(x.shape) > 0 and bool(x.min() >= 0) and bool(x.max() < math.inf)
    if not usual:
        finite = ops.isfinite(x)
        if not bool(finite.all()):
            bad = ops.first(~finite)
            kind = "NaN" if bool(x[bad] != x[bad]) else "an infinite value"
            raise ValueError(f"{name} contains {kind} at index {bad}")
    sums = x.sum(-1)
    if not usual:
        negative = x < 0
        if bool(negative.any()):
            bad = ops.first(negative)
            hint = ""
            if bool((abs(sums - 1.0) > SUM_TOLERANCE).all()):
                hint = (
                    "; it looks like logits rather than probabilities: convert with "
                    "scipy.special.softmax(logits, axis=-1) or otbound.softmax"
                )
            raise ValueError(
                f"{name} has a negative entry {float(x[bad]):.6g} at index {bad}{hint}"
            )
    zero = sums <= 0
    if bool(zero.any()):
        bad = ops.first(zero) if sums.ndim else ()
        raise ValueError(f"{name} has a row of zeros{_where(bad)}")
    if not normalize:
        off = abs(sums - 1.0) > SUM_TOLERANCE
        if bool(off.any()):
            bad = ops.first(off) if sums.ndim else ()
            total = float(sums[bad]) if bad else float(sums)
            hint = ""
            if bool((x > 1.0).any()):
                hint = " (entries above 1: it looks like logits rather than probabilities)"
            raise ValueError(
                f"rows of {name} must sum to 1 within {SUM_TOLERANCE:g}; "
                f"the row{_where(bad) or ''} sums to {total:.9g}{hint}; "
                "pass normalize=True to rescale"
            )
    return sums


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
        arr = np.asarray(x, dtype=np.float64)  # a float64 array as it is: no copy to check it
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be an array of probabilities, got {type(x).__name__}"
        ) from exc
    sums = check_rows(arr, name, normalize=normalize, min_ndim=min_ndim, ops=NUMPY_OPS)
    out = np.empty(arr.shape, dtype=np.float64)  # the new array, written once
    np.divide(arr, sums[..., None], out=out)
    return out


def check_same_vocabulary(p_shape: tuple[int, ...], q_shape: tuple[int, ...]) -> None:
    """Raise ``ValueError`` unless ``p`` and ``q`` have the same last axis."""
    if p_shape[-1] != q_shape[-1]:
        raise ValueError(
            "p and q must have the same vocabulary size (last axis), got "
            f"{p_shape[-1]} and {q_shape[-1]}"
        )


def batch_shape(p_batch: tuple[int, ...], q_batch: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast batch shape of ``p`` and ``q``, or a ``ValueError`` naming both."""
    try:
        return tuple(np.broadcast_shapes(p_batch, q_batch))
    except ValueError as exc:
        raise ValueError(
            f"the batch shapes of p {p_batch} and q {q_batch} do not broadcast"
        ) from exc


def as_distribution_pair(
    p: object, q: object, *, normalize: bool = False, q_min_ndim: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Validate a target ``p`` and draft ``q`` over the same vocabulary.

    Returns both as float64 arrays; their batch shapes must broadcast (``q`` may carry an
    extra slot axis, ``(..., n, V)``, for the ``per_slot`` design). The public entry points
    reach it through :meth:`otbound.problem.Step.validate`.
    """
    p_arr = as_distribution(p, "p", normalize=normalize)
    q_arr = as_distribution(q, "q", normalize=normalize, min_ndim=q_min_ndim)
    check_same_vocabulary(p_arr.shape, q_arr.shape)
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

    Returns ``p2`` of shape (B, V), ``q2`` of shape (B, [n,] V) and the batch shape, both
    read-only (views of the broadcast, or copies where the flattening needs one).
    """
    batch = batch_shape(p.shape[:-1], q.shape[: q.ndim - 1 - q_extra_axes])
    vocab = p.shape[-1]
    p2 = np.broadcast_to(p, (*batch, vocab)).reshape(-1, vocab)
    q_tail = q.shape[q.ndim - 1 - q_extra_axes :]
    q2 = np.broadcast_to(q, (*batch, *q_tail)).reshape(-1, *q_tail)
    p2.flags.writeable = q2.flags.writeable = False  # a copy too: one row for every reader
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
        ``clip(x, low, high)`` as float64 (a ``numpy.float64`` for a scalar, as ``np.clip``
        gives for a 0-d array).

    Raises
    ------
    ValueError
        A NaN, or an excess above ``tol``: the message names ``what``, the index and the value.
    """
    if isinstance(x, float) and low < x < high:  # one number well inside: nothing to clip
        return np.float64(x)  # type: ignore[no-any-return]  # as np.clip of a 0-d array
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
