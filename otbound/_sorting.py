r"""The stable argsort of a float key, several times faster than numpy's ``kind="stable"``.

A most-significant-digit bucket sort on the key's IEEE-754 bits:

1. Each key (``-0.0`` taken as ``0.0``) becomes the unsigned integer ``u`` with the same
   order: the sign bit set for a non-negative key, every bit flipped for a negative one.
2. ``(u − min u) >> s`` puts the keys into about ``V / 2`` buckets (the shift ``s`` is the
   smallest that fits the range), a counting sort in token order; between buckets the order
   is the key order.
3. Inside each bucket the tokens are sorted by ``u``, stably: an insertion sort for small
   buckets (keys spread evenly over their bits), and for a large one (keys that crowd a few
   exponents, a range stretched by far outliers) the same counting sort on the bucket's own
   range of bits, down to small buckets; a bucket already in order (one tied key: logits
   rounded to float16 give runs of equal ratios) is left as it is. Each round splits a
   bucket's range of bits into at least ``2^4`` parts, so no input takes more than 16 passes.

Equal keys (``u`` equal) keep their token order at every step, so the result is
``np.argsort(key, kind="stable")`` element for element. ``benchmarks/bench_argsort.py``
measures it on the ratios ``p / q`` of language-model rows, which spread over their
exponents and so fill the buckets evenly.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "INSERTION_LIMIT",
    "bucket_argsort",
    "insertion_sort",
    "ratio_argsort",
    "sort_positions",
    "stable_argsort",
]

#: Buckets up to this size are sorted by insertion; larger ones by their own counting sort.
INSERTION_LIMIT = 24


@numba.njit(cache=True)
def _ordered_bits(key):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Unsigned integers in the order of the float ``key`` (``-0.0`` equal to ``0.0``)."""
    raw = (key + 0.0).view(np.uint64)  # + 0.0 turns -0.0 into 0.0
    sign = np.uint64(1) << np.uint64(63)
    bits = np.empty(raw.shape[0], dtype=np.uint64)
    for i in range(raw.shape[0]):
        u = raw[i]
        bits[i] = ~u if u & sign else u | sign
    return bits


@numba.njit(cache=True)
def insertion_sort(order, key, start, stop):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Sort ``order[start:stop]`` in place by ``key[order[i]]``, stably (for a few tokens)."""
    for i in range(start + 1, stop):
        token = order[i]
        value = key[token]
        j = i - 1
        while j >= start and key[order[j]] > value:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = token


@numba.njit(cache=True)
def _sort_bucket(order, bits, start, stop, block, starts, pending):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Sort ``order[start:stop]`` by ``bits`` in place, stably: insertion for a few tokens,
    else the bucket's own counting sort on its range of bits (about ``size / 2`` buckets, in
    token order) and the same for each of its buckets, until each is small or in order.

    ``block`` (``V``), ``starts`` (``V + 1``) and ``pending`` (``(V, 2)``) are scratch space,
    shared by every bucket of one sort."""
    pending[0, 0], pending[0, 1] = start, stop
    waiting = 1
    while waiting:
        waiting -= 1
        lo, hi = pending[waiting, 0], pending[waiting, 1]
        if hi - lo <= INSERTION_LIMIT:
            insertion_sort(order, bits, lo, hi)
            continue
        low = bits[order[lo]]
        high = low
        ordered = True
        for i in range(lo + 1, hi):
            value = bits[order[i]]
            ordered = ordered and value >= bits[order[i - 1]]
            low = min(low, value)
            high = max(high, value)
        if ordered:  # one tied key (logits rounded to float16 give runs of equal ratios)
            continue
        size = hi - lo
        slots = 1
        while 2 * slots < size:
            slots *= 2
        shift = np.uint64(0)
        while ((high - low) >> shift) >= np.uint64(slots):  # the least: the ends part
            shift += np.uint64(1)
        for b in range(slots + 1):
            starts[b] = 0
        for k in range(size):
            block[k] = order[lo + k]
            starts[int((bits[block[k]] - low) >> shift) + 1] += 1
        for b in range(slots):
            starts[b + 1] += starts[b]
        for k in range(size):  # in token order: stable
            b = int((bits[block[k]] - low) >> shift)
            order[lo + starts[b]] = block[k]
            starts[b] += 1  # now the end of bucket b
        first = lo
        for b in range(slots):
            end = lo + starts[b]
            if end - first > 1:
                pending[waiting, 0], pending[waiting, 1] = first, end
                waiting += 1
            first = end


@numba.njit(cache=True)
def sort_positions(order, bits, size, block, counts, pending):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Sort ``order[:size]`` in place by ``bits[order[i]]``, stably: insertion for a few
    entries, else :func:`_sort_bucket` (``block``, ``counts`` and ``pending`` its scratch, of
    at least ``size``, ``size + 1`` and ``(size, 2)``)."""
    if size > INSERTION_LIMIT:
        _sort_bucket(order, bits, 0, size, block, counts, pending)
    elif size > 1:
        insertion_sort(order, bits, 0, size)


@numba.njit(cache=True)
def bucket_argsort(key):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`stable_argsort` of a contiguous float64 ``key``, callable from compiled code."""
    size = key.shape[0]
    order = np.empty(size, dtype=np.int64)
    if size == 0:
        return order
    bits = _ordered_bits(key)
    low = bits.min()
    span = bits.max() - low
    slots = 1
    while 2 * slots < size:
        slots *= 2
    shift = np.uint64(0)
    while (span >> shift) >= np.uint64(slots):
        shift += np.uint64(1)
    starts = np.zeros(slots + 1, dtype=np.int64)
    for i in range(size):
        starts[int((bits[i] - low) >> shift) + 1] += 1
    for b in range(slots):
        starts[b + 1] += starts[b]
    fill = starts[:slots].copy()
    for i in range(size):  # in token order: stable
        b = int((bits[i] - low) >> shift)
        order[fill[b]] = i
        fill[b] += 1
    block = np.empty(0, dtype=np.int64)  # scratch of the large buckets, made on the first
    counts = np.empty(0, dtype=np.int64)
    pending = np.empty((0, 2), dtype=np.int64)
    for b in range(slots):
        if starts[b + 1] - starts[b] > INSERTION_LIMIT:
            if block.shape[0] == 0:
                block = np.empty(size, dtype=np.int64)
                counts = np.empty(size + 1, dtype=np.int64)
                pending = np.empty((size, 2), dtype=np.int64)
            _sort_bucket(order, bits, starts[b], starts[b + 1], block, counts, pending)
        elif starts[b + 1] - starts[b] > 1:
            insertion_sort(order, bits, starts[b], starts[b + 1])
    return order


def stable_argsort(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for a 1-d float key without NaN (int64 indices).

    Examples
    --------
    >>> stable_argsort(np.array([0.5, 0.1, 0.5, 0.1])).tolist()
    [1, 3, 0, 2]
    """
    order: np.ndarray = bucket_argsort(np.ascontiguousarray(key, dtype=np.float64))
    return order


def ratio_argsort(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The tokens with ``q > 0`` by increasing ``p / q``, ties by token id (int64):
    ``live[np.argsort(p[live] / q[live], kind="stable")]`` with ``live = flatnonzero(q > 0)``.

    Examples
    --------
    >>> ratio_argsort(np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.0, 0.6])).tolist()
    [0, 2]
    """
    live = np.flatnonzero(q > 0)
    with np.errstate(over="ignore"):  # p / q of a subnormal q is +inf: last, as it should be
        ratio = p[live] / q[live]
    order: np.ndarray = live[stable_argsort(ratio)]
    return order
