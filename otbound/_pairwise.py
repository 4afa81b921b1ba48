"""numpy's pairwise summation in compiled code, bit for bit (:func:`pairwise_sum`).

``np.sum`` of a contiguous float64 array adds blocks of at most 128 values with eight
accumulators and splits longer runs in two halves at a multiple of 8; compiled passes that
must give numpy's values (the importance stages, the RRS rejection rates, GLS's preparation,
the closed forms of the deterministic-draft designs) sum with the same tree.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["pairwise_sum"]


@numba.njit(cache=True)
def _block_sum(a, lo, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """numpy's pairwise summation of ``a[lo : lo + n]`` for ``n ≤ 128`` (one block)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    stop = n - n % 8
    while i < stop:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@numba.njit(cache=True)
def pairwise_sum(a, lo, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``np.sum(a[lo : lo + n])`` of a contiguous float64 array, bit for bit: numpy's pairwise
    summation (blocks of at most 128 summed by eight accumulators, longer runs split in two
    halves at a multiple of 8 and the halves' sums added), its recursion unrolled on a stack
    (numba's cache cannot hold a recursive function called from another)."""
    if n <= 128:
        return _block_sum(a, lo, n)
    depth = 64  # halves shrink n by 2 at least: 64 levels cover any array
    starts = np.empty(depth, dtype=np.int64)
    sizes = np.empty(depth, dtype=np.int64)
    states = np.empty(depth, dtype=np.int64)  # 0: fresh, 1: left half pushed, 2: both pushed
    values = np.empty(depth + 1)
    top = 1
    starts[0], sizes[0], states[0] = lo, n, 0
    count = 0
    while top > 0:
        frame = top - 1
        m = sizes[frame]
        if m <= 128:
            values[count] = _block_sum(a, starts[frame], m)
            count += 1
            top -= 1
            continue
        half = m // 2
        half -= half % 8
        if states[frame] == 0:
            states[frame] = 1
            starts[top], sizes[top], states[top] = starts[frame], half, 0
            top += 1
        elif states[frame] == 1:
            states[frame] = 2
            starts[top], sizes[top], states[top] = starts[frame] + half, m - half, 0
            top += 1
        else:
            values[count - 2] = values[count - 2] + values[count - 1]
            count -= 1
            top -= 1
    return values[0]
