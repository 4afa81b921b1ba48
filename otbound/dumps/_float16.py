"""float16 logits to float32 in one compiled pass: numpy's conversion, bit for bit.

Every float16 is a float32 exactly, so the conversion is a rewrite of the bit pattern: the
sign moves from bit 15 to bit 31, a normal number's exponent is rebased from bias 15 to 127
and its 10 mantissa bits move up by 13; a subnormal (exponent 0) is ``mantissa · 2^-24``,
exact in float32; infinities and NaNs (exponent 31) keep their mantissa bits, as numpy's
``astype(np.float32)`` does. ``tests/test_dumps.py`` checks all 65,536 patterns against
numpy's conversion; ``benchmarks/bench_kernels.py`` times both (2-2.6x).
:func:`otbound.dumps._format.from_storage` takes this path where numba
is loaded already (every analysis loads it) or the array is very large; elsewhere numpy's
conversion costs less than loading numba.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["float16_to_float32"]


@numba.njit(cache=True)
def _convert(half, bits):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``bits[i]``: the float32 bit pattern of the float16 pattern ``half[i]``."""
    for i in range(half.shape[0]):
        h = np.uint32(half[i])
        sign = (h & np.uint32(0x8000)) << np.uint32(16)
        exponent = (h >> np.uint32(10)) & np.uint32(0x1F)
        mantissa = h & np.uint32(0x3FF)
        if exponent == 31:  # infinities and NaNs keep their mantissa bits
            bits[i] = sign | np.uint32(0x7F800000) | (mantissa << np.uint32(13))
        elif exponent > 0:  # normal: rebase the exponent (127 − 15 = 112)
            bits[i] = (
                sign | ((exponent + np.uint32(112)) << np.uint32(23)) | (mantissa << np.uint32(13))
            )
        elif mantissa == 0:  # signed zero
            bits[i] = sign
        else:  # subnormal mantissa · 2^-24: normalise (2^-14 has float32 exponent 113)
            rebased = np.uint32(113)
            while mantissa & np.uint32(0x400) == 0:
                mantissa <<= np.uint32(1)
                rebased -= np.uint32(1)
            bits[i] = (
                sign | (rebased << np.uint32(23)) | ((mantissa & np.uint32(0x3FF)) << np.uint32(13))
            )


def float16_to_float32(values: np.ndarray) -> np.ndarray:
    """``np.asarray(values, dtype=np.float32)`` for a float16 array, from a compiled pass.

    Examples
    --------
    >>> float16_to_float32(np.array([1.5, -0.0, np.inf], dtype=np.float16)).tolist()
    [1.5, -0.0, inf]
    """
    half = np.ascontiguousarray(values, dtype=np.float16)
    out = np.empty(half.shape, dtype=np.float32)
    _convert(half.reshape(-1).view(np.uint16), out.reshape(-1).view(np.uint32))
    return out
