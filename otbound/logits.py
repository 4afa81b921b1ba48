"""From logits to probabilities, the same way for target and draft."""

from __future__ import annotations

import numpy as np


def softmax(logits: object, temperature: float = 1.0) -> np.ndarray:
    r"""Probabilities from logits along the last axis, in float64.

    .. math:: p_x = \exp(\ell_x / T) / \sum_y \exp(\ell_y / T)

    Parameters
    ----------
    logits : array_like, shape (..., V)
        Raw scores in any float dtype (fp16/bf16 are upcast before anything else);
        ``-inf`` masks a token.
    temperature : float, default 1.0
        ``T > 0``; ``T = 0`` means greedy decoding: a one-hot row at the argmax (the lowest
        token id among ties), not a division by zero.

    Returns
    -------
    numpy.ndarray
        Rows that sum to one.

    Examples
    --------
    >>> softmax([0.0, 0.0]).tolist()
    [0.5, 0.5]
    >>> softmax([1.0, 3.0, 3.0], temperature=0).tolist()
    [0.0, 1.0, 0.0]
    """
    try:
        x = np.array(logits, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"logits must be an array of numbers, got {type(logits).__name__}"
        ) from exc
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ValueError(f"logits must have shape (..., V) with V >= 1, got {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        bad = tuple(int(i) for i in np.argwhere(np.isnan(x) | np.isposinf(x))[0])
        raise ValueError(f"logits contain NaN or +inf at index {bad}")
    if np.any(np.all(np.isneginf(x), axis=-1)):
        raise ValueError("logits have a row where every token is masked (-inf)")
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    return softmax_in_place(x, temperature)


def softmax_in_place(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """:func:`softmax` of a float64 array the caller owns and has checked (no NaN or
    ``+inf``, no row all ``-inf``, ``temperature ≥ 0``), overwriting it (except at
    ``temperature = 0``, which returns a new one-hot array): no copy of a batch that may be
    hundreds of MB. The same values as :func:`softmax`, bit for bit."""
    if temperature == 0:
        out = np.zeros_like(x)
        np.put_along_axis(out, np.argmax(x, axis=-1)[..., None], 1.0, axis=-1)
        return out
    if temperature != 1:  # x / 1 is x
        x /= temperature
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x
