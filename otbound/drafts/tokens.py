"""Tokens: sort keys, top tokens, draws and draft tuples, shared by the draft designs, the
sweeps, the verifiers and the readers.

* :func:`sweep_key`: the key that sorts tokens by ``p/q`` (``q = 0`` last);
* :func:`top_tokens`: the ``k`` most likely tokens, ties to the lower id;
* :func:`inverse_cdf`: tokens drawn from an unnormalised distribution at given uniforms;
* :func:`prefix_sums`, :func:`prefix_probability`: cumulative masses along a token order;
* :func:`product_tuples`, :func:`distinct_rows`, :func:`tuples_to_sets`, :func:`num_tuples`:
  enumeration of draft tuples (small ``V``).
"""

from __future__ import annotations

import math

import numpy as np

from otbound._checks import ROUNDING_TOLERANCE, clip_rounding

__all__ = [
    "distinct_rows",
    "inverse_cdf",
    "num_tuples",
    "prefix_probability",
    "prefix_sums",
    "product_tuples",
    "sweep_key",
    "top_tokens",
    "tuples_to_sets",
]

#: The largest ``k`` :func:`top_tokens` finds with its buffer of the ``k`` best; beyond, a
#: stable sort.
BUFFERED_TOP = 64

#: The smallest positive normal float64.
_TINY = np.finfo(np.float64).tiny


def sweep_key(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """A key that sorts the tokens of each row by ``p/q``; ``q = 0`` sorts last (such tokens
    never help to enter ``H``).

    The key is ``p/q`` itself unless the ratio overflows or falls below the normal range in
    some row (``q`` or ``p`` down to 5e-324 spans ratios up to 2e323, beyond the largest
    float, and the order among those tokens decides ``Q(H)`` for the distinct designs); that
    row's key is then ``log p − log q``, the same order without overflow.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        key: np.ndarray = p / q
        lost = (q > 0) & (p > 0) & ((key > np.finfo(np.float64).max) | (key < _TINY))
        rows = np.any(lost, axis=-1)
        if np.any(rows):
            key[rows] = np.log(p[rows]) - np.log(q[rows])
    key[q <= 0] = np.inf
    return key


def top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens of each row, most likely first, ties to the lower id.

    For ``k ≤`` :data:`BUFFERED_TOP` one compiled pass a row against a buffer of the ``k``
    best (:mod:`otbound.drafts._fixed_kernels`: ``O(V)`` plus ``O(k)`` for each token that
    enters the buffer); for a larger ``k`` the stable sort of ``−q`` (``O(V log V)``), the
    same order.

    Parameters
    ----------
    q : numpy.ndarray, shape (..., V)
    k : int
        At most ``V``.

    Returns
    -------
    numpy.ndarray of int64, shape (..., k)

    Raises
    ------
    ValueError
        ``k`` outside ``[0, V]``, or a NaN in ``q``.

    Examples
    --------
    >>> top_tokens(np.array([0.2, 0.5, 0.1, 0.2]), 3).tolist()
    [1, 0, 3]
    """
    q = np.asarray(q)
    vocab = q.shape[-1]
    if not 0 <= k <= vocab:
        raise ValueError(f"k must be in [0, {vocab}] (the vocabulary), got {k}")
    if k == 0:
        return np.zeros((*q.shape[:-1], 0), dtype=np.int64)
    rows = np.ascontiguousarray(q.reshape(-1, vocab), dtype=np.float64)
    if k > BUFFERED_TOP:  # a buffer of k would cost O(k) for each token that enters it
        if np.isnan(rows).any():
            raise ValueError("q contains NaN: its most likely tokens are not defined")
        ranked = np.argsort(-rows, axis=-1, kind="stable")[:, :k]  # ties: the lower id first
        return np.ascontiguousarray(ranked, dtype=np.int64).reshape(*q.shape[:-1], k)
    from otbound.drafts._fixed_kernels import top_tokens_rows  # numba

    top = np.empty((rows.shape[0], k), dtype=np.int64)
    if not top_tokens_rows(rows, k, top):
        raise ValueError("q contains NaN: its most likely tokens are not defined")
    return top.reshape(*q.shape[:-1], k)


def inverse_cdf(dist: np.ndarray, u: np.ndarray | float) -> np.ndarray:
    """Tokens drawn from ``dist`` (V,) by inverting its CDF at uniforms ``u``; never a zero.

    ``dist`` need not be normalised.
    """
    cdf = np.cumsum(dist)
    idx = np.searchsorted(cdf, np.asarray(u) * cdf[-1], side="right")
    last_positive = int(np.flatnonzero(dist > 0)[-1])
    tokens: np.ndarray = np.minimum(idx, last_positive)
    return tokens


def product_tuples(tokens: np.ndarray, n: int) -> np.ndarray:
    """All ordered ``n``-tuples over ``tokens``, shape (len(tokens)**n, n)."""
    grids = np.meshgrid(*([tokens] * n), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=-1)


def distinct_rows(tuples: np.ndarray) -> np.ndarray:
    """Mask of the rows whose entries are pairwise distinct."""
    s = np.sort(tuples, axis=1)
    mask: np.ndarray = np.all(s[:, 1:] != s[:, :-1], axis=1)
    return mask


def tuples_to_sets(
    tuples: np.ndarray, probs: np.ndarray, vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """Merge ordered draft tuples into sets of distinct tokens (membership is all that matters).

    Returns ``sets`` of shape (m, n) (sorted token ids, padded with ``-1``) and their
    probabilities ``(m,)``.
    """
    s = np.sort(tuples, axis=1)
    dup = np.zeros_like(s, dtype=bool)
    dup[:, 1:] = s[:, 1:] == s[:, :-1]
    s = np.where(dup, vocab, s)
    s = np.sort(s, axis=1)
    s[s == vocab] = -1
    sets, inverse = np.unique(s, axis=0, return_inverse=True)
    set_probs = np.bincount(inverse.ravel(), weights=probs, minlength=len(sets))
    return sets, set_probs


def num_tuples(vocab: int, n: int) -> int:
    """Number of ordered tuples ``V^n`` an enumeration would visit (for size guards)."""
    return int(math.pow(vocab, n))


def prefix_sums(x: np.ndarray) -> np.ndarray:
    """Cumulative sums with a leading zero along the last axis."""
    out = np.zeros((*x.shape[:-1], x.shape[-1] + 1))
    np.cumsum(x, axis=-1, out=out[..., 1:])
    return out


def prefix_probability(x: np.ndarray, design: str, total: np.ndarray | float = 1.0) -> np.ndarray:
    """``x(H_i) / total`` for every prefix (``x`` sums to ``total`` along the last axis).

    The cumulative sum may pass 1 by rounding, at most ``V`` roundings of ``2^-53`` each:
    that much is clipped (:func:`otbound._checks.clip_rounding`), anything more raises.
    """
    tol = max(ROUNDING_TOLERANCE, x.shape[-1] * np.finfo(np.float64).epsneg)
    what = f"{design} prefix probability q(H_i)"
    return clip_rounding(prefix_sums(x) / total, 0.0, 1.0, what, tol=tol)
