"""The rejection rates of RRS with replacement, compiled: one pass a draft, bit for bit.

:func:`otbound.verifiers.rrs.residual_chain` builds every residual target with three numpy
passes and a new array a draft; :func:`rejection_rates` keeps one array of excesses and gets
each level's from the previous one in a single pass, with numpy's arithmetic in numpy's
order: ``max(p_k − q, 0)`` with ``p_k = excess_{k−1} / miss_{k−1}``, and the pairwise
summation of ``np.sum`` for each miss (:func:`otbound._pairwise.pairwise_sum`),
so the rates are ``residual_chain``'s bit for bit (``tests/test_verifier_kernels.py``).
"""

from __future__ import annotations

import numba
import numpy as np

from otbound._pairwise import pairwise_sum

__all__ = ["rejection_rates"]


@numba.njit(cache=True)
def rejection_rates(p, q, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``1 − β(p_k, q)`` for ``k = 1..n``: ``residual_chain(p, q, n)[1]``.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated target and draft distributions (contiguous float64).
    n : int
        Number of drafts.

    Returns
    -------
    numpy.ndarray, shape (n,)
    """
    vocab = p.shape[0]
    miss = np.empty(n)
    excess = np.empty(vocab)
    for i in range(vocab):
        excess[i] = max(p[i] - q[i], 0.0)
    for k in range(n):
        miss[k] = pairwise_sum(excess, 0, vocab)
        if k + 1 == n:
            break
        if miss[k] > 0.0:  # p_{k+1} = excess / miss, else p_{k+1} = p_k and so the excess
            scale = miss[k]
            for i in range(vocab):
                excess[i] = max(excess[i] / scale - q[i], 0.0)
    return miss
