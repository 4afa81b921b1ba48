"""Compiled helpers of :meth:`otbound.verifiers.base.BaseVerifier.estimate`.

:func:`finite_mean_stderr` is numpy's mean and standard error (``np.std(ddof=1) / √m``) and
the finiteness check of a sample of Rao-Blackwellised values in one call, with numpy's
arithmetic in numpy's order (the pairwise summation of ``np.mean`` and ``np.std``,
:func:`otbound._pairwise.pairwise_sum`), so its values are the numpy ones bit for bit. The numpy
calls took 14 µs a sample, a fifth of a whole pilot sample of 64 trials on ``data/sample``.
"""

from __future__ import annotations

import numba
import numpy as np

from otbound._pairwise import pairwise_sum

__all__ = ["finite_mean_stderr"]


@numba.njit(cache=True)
def finite_mean_stderr(values):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``(finite, mean, stderr)`` of a contiguous float64 array of ``m ≥ 1`` values.

    ``finite``: every value is finite (else nothing more is computed: ``mean`` and ``stderr``
    are 0). ``mean = Σ v / m`` (``np.mean``); ``stderr = s / \sqrt{m}`` with
    ``s = \sqrt{Σ (v − mean)² / (m − 1)}`` (``np.std(values, ddof=1)``), infinite for
    ``m < 2``; both sums pairwise, as numpy adds them.
    """
    m = values.shape[0]
    for i in range(m):
        if not np.isfinite(values[i]):
            return False, 0.0, 0.0
    mean = pairwise_sum(values, 0, m) / m
    if m < 2:
        return True, mean, np.inf
    squares = np.empty(m)
    for i in range(m):
        dev = values[i] - mean
        squares[i] = dev * dev
    spread = np.sqrt(pairwise_sum(squares, 0, m) / (m - 1))
    return True, mean, spread / np.sqrt(float(m))
