"""The closed forms of the rejection verifiers (single draft, RRS), compiled.

:func:`single_acceptance` is :class:`otbound.verifiers.single.SingleDraft`'s formula without
its temporaries: the ``log1p`` and ``expm1`` only where ``p > q`` (elsewhere the product is
``0.0`` whatever they give), the sums pairwise in numpy's order. Its ``log1p`` and ``expm1``
are the C library's, which differ from numpy's vectorised ones by an ulp on rare inputs: on
the sample, 12 of 2,304 values moved by 1.1e-16.

:func:`otbound.verifiers.rrs.residual_chain` builds every residual target with three numpy
passes and a new array a draft; :func:`rejection_rates` keeps one array of excesses and gets
each level's from the previous one in a single pass, with numpy's arithmetic in numpy's
order: ``max(p_k − q, 0)`` with ``p_k = excess_{k−1} / miss_{k−1}``, and the pairwise
summation of ``np.sum`` for each miss (:func:`otbound.verifiers._importance_kernels.pairwise_sum`),
so the rates are ``residual_chain``'s bit for bit (``tests/test_verifier_kernels.py``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from otbound.verifiers._importance_kernels import pairwise_sum

__all__ = ["rejection_rates", "single_acceptance"]


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


@numba.njit(cache=True)
def single_acceptance(p, q, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``β + Σ_y (p_y − q_y)⁺ (1 − (1 − q_y)^{n−1})`` with ``β = 1 − Σ_y (p_y − q_y)⁺``, for
    ``n >= 2`` (the same expressions as ``SingleDraft._acceptance``)."""
    vocab = p.shape[0]
    excess = np.empty(vocab)
    weighted = np.empty(vocab)
    for i in range(vocab):
        e = max(p[i] - q[i], 0.0)
        excess[i] = e
        if e > 0.0:  # 1 − (1 − q)^{n−1} = −expm1((n − 1) log1p(−q))
            weighted[i] = e * -math.expm1((n - 1) * math.log1p(-min(q[i], 1.0)))
        else:
            weighted[i] = 0.0
    beta = 1.0 - pairwise_sum(excess, 0, vocab)
    return beta + pairwise_sum(weighted, 0, vocab)
