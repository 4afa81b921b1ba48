r"""The numba kernel of the ``conditional_poisson`` design: ``e_k`` of every prefix, each with
its own power-of-two scale
(:func:`otbound.drafts.conditional_poisson.elementary_symmetric_prefix` calls it).

A module of its own so that importing the design (and building :data:`otbound.drafts.DESIGNS`)
does not import numba: the design imports it on first use.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["scaled_esp_kernel"]


@numba.njit(cache=True, parallel=True)
def scaled_esp_kernel(q, top, pow2, mant_out, expo_out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``e_k`` of every prefix of every row of ``q`` (B, V), ``k = 1..top``, as
    ``mant · 2^expo`` in ``mant_out``, ``expo_out`` (top, B, V + 1).

    Each ``e_k`` carries its own exponent, so no value under- or overflows. The mantissas
    stay in ``(2^-100, 2^100)`` (0 for ``e_k = 0``) and are renormalised only when they leave
    it. Fast path (``q_i ≥ 2^-100`` and exponents within ``_SPAN``, the table ``pow2`` holding
    ``2^d`` for ``|d| ≤ _SPAN``): the term ``q_i e_{k−1}`` is a product with a table power of
    two, whose underflow can only drop a term below ``2^-900`` of ``e_k``; otherwise ``frexp``
    and ``ldexp`` align it exactly.
    """
    rows, size = q.shape
    low, high, span = 2.0**-100, 2.0**100, (pow2.size - 1) // 2
    for r in numba.prange(rows):
        m = np.zeros(top + 1)
        e = np.zeros(top + 1, dtype=np.int64)
        m[0] = 1.0  # e_0 = 1
        for i in range(size):
            qi = q[r, i]
            if qi != 0.0:
                for k in range(top, 0, -1):  # e_k(≤ i) = e_k(< i) + q_i e_{k−1}(< i)
                    if m[k - 1] == 0.0:
                        continue
                    d = e[k - 1] - e[k]
                    if m[k] != 0.0 and qi >= low and -span <= d <= span:
                        total, scale = m[k] + qi * m[k - 1] * pow2[d + span], e[k]
                    else:
                        a, b = math.frexp(qi)
                        tm, te = a * m[k - 1], b + e[k - 1]
                        if m[k] == 0.0:
                            total, scale = tm, te
                        elif te > e[k]:
                            total, scale = tm + math.ldexp(m[k], e[k] - te), te
                        else:
                            total, scale = m[k] + math.ldexp(tm, te - e[k]), e[k]
                    if low < total < high:
                        m[k], e[k] = total, scale
                    else:
                        f, x = math.frexp(total)
                        m[k], e[k] = f, scale + x
            for k in range(1, top + 1):
                mant_out[k - 1, r, i + 1] = m[k]
                expo_out[k - 1, r, i + 1] = e[k]
