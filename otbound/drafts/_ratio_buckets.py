r"""Ratio buckets: the sweep order of ``p/q`` without sorting every token.

The prefix sweep of the distinct designs (``without_replacement``, ``conditional_poisson``)
needs the tokens in ascending ``r = p/q``. Quantising ``r`` by the top bits of its IEEE-754
pattern (sign, exponent and ``MANTISSA_BITS`` mantissa bits) keeps the order between buckets,
so a counting sort into buckets costs ``O(V)`` and every bucket boundary is a prefix ``H`` of
the sorted order; ``Q(H)`` depends only on the set, so the order inside a bucket matters only
where a bucket is swept token by token, and only those buckets are sorted.

Inside bucket ``b`` (ratios at least ``r_b``, its lower edge; mass ``m ∈ [0, q_b]`` added to
the prefix ``H_b`` before it) any prefix adds ``p(S) ≥ r_b m``. With an upper bound
``Q(H_b ∪ S) ≤ U(m)`` convex in ``m``, ``f = p(H) − Q(H)`` is at least the concave
``P_b + r_b m − U(m)``, whose minimum over ``[0, q_b]`` is at an end:

.. math::

    f(H_b ∪ S) ≥ \min\bigl(P_b − U(0),\; P_b + r_b q_b − U(q_b)\bigr).

A bucket whose bound lies above a value some prefix is known not to exceed cannot hold the
minimum. The bounds used here:

* sequential draws without replacement (and i.i.d.): ``Q(H) ≤ q(H)^n`` (each further draw
  lands in ``H`` with probability ``(q(H) − s)/(1 − s) ≤ q(H)``, ``s`` the mass drawn);
* the same product from below: ``Q(H) ≥ Π_{j<n} (q(H) − M_j)/(1 − M_j)`` with ``M_j`` the
  mass of the ``j`` largest tokens of ``H`` (:func:`product_lower_bound`).

Rows whose ratios overflow or leave the normal range (``p`` or ``q`` below ~1e-308) are
refused (:func:`bucket_row` returns ``-1``): the callers sort those rows.
"""

from __future__ import annotations

import numba
import numpy as np

from otbound._sorting import sort_positions
from otbound.drafts._sequential_layout import keep_largest

__all__ = [
    "MANTISSA_BITS",
    "bucket_row",
    "bucket_row_kernel",
    "product_lower_bound",
    "product_lower_kernel",
    "sort_buckets",
    "sort_chosen_buckets",
]

#: Mantissa bits kept: buckets are ``2**-6`` (1.6 %) wide in ratio.
MANTISSA_BITS = 6
_SHIFT = 52 - MANTISSA_BITS
#: The smallest normal float: a ratio below it (but positive) is refused.
_TINY = float(np.finfo(np.float64).tiny)
#: A factor of the product lower bound whose denominator ``1 − M_j`` is below this is
#: replaced by 0 (the bound stays a lower bound and no rounding of ``1 − M_j`` is trusted).
_SMALL_REST = 1e-6


@numba.njit(cache=True)
def bucket_row_kernel(p, q, top, order, ratio):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`bucket_row`, callable from compiled code: fills ``order`` and ``ratio`` (V,)
    and returns ``(buckets, starts, edge, sum_p, sum_q, tops)``."""
    vocab = p.shape[0]
    shift = np.uint64(_SHIFT)
    bits = ratio.view(np.uint64)
    low = np.uint64(0xFFFFFFFFFFFFFFFF)
    high = np.uint64(0)
    positive = 0
    for x in range(vocab):  # the ratios and the range of their top bits
        if q[x] > 0.0:
            r = p[x] / q[x]
            if not (r < np.inf) or (p[x] > 0.0 and r < _TINY):
                return _no_buckets(-1, top)
            ratio[x] = r
            positive += 1
            if r > 0.0:
                b = bits[x] >> shift
                low = min(low, b)
                high = max(high, b)
        else:
            ratio[x] = 0.0
    if positive == 0:
        return _no_buckets(0, top)
    # slot 0: ratio 0 (p = 0); slot 1 + (bits − low): the others
    width = 1 + (int(high - low) + 1 if high >= low else 0)
    slot = np.empty(vocab, dtype=np.int32)
    count = np.zeros(width + 1, dtype=np.int64)
    for x in range(vocab):
        if q[x] > 0.0:
            s = 0 if ratio[x] == 0.0 else 1 + int((bits[x] >> shift) - low)
            slot[x] = s
            count[s + 1] += 1
    # scatter by slot (empty slots hold nothing), with each slot's sums and largest mass
    slot_start = np.zeros(width + 1, dtype=np.int64)
    for s in range(width):
        slot_start[s + 1] = slot_start[s] + count[s + 1]
    fill = slot_start[:width].copy()
    slot_p = np.zeros(width)
    slot_q = np.zeros(width)
    slot_top = np.zeros(width)
    for x in range(vocab):  # in token order: the sums add each slot's masses by id
        if q[x] > 0.0:
            s = slot[x]
            order[fill[s]] = x
            fill[s] += 1
            slot_p[s] += p[x]
            slot_q[s] += q[x]
            slot_top[s] = max(slot_top[s], q[x])
    # the occupied slots are the buckets (the outputs sized by their number)
    buckets = 0
    for s in range(width):
        buckets += count[s + 1] > 0
    starts = np.zeros(buckets + 1, dtype=np.int64)
    edge_bits = np.zeros(buckets, dtype=np.uint64)  # bucket 0's edge: 0, or the bits below
    sum_p = np.empty(buckets)
    sum_q = np.empty(buckets)
    tops = np.empty((buckets, top))
    largest = np.zeros(top)  # the largest masses of the prefix through the bucket
    b = 0
    for s in range(width):
        if count[s + 1] == 0:
            continue
        starts[b + 1] = slot_start[s + 1]
        if s > 0:
            edge_bits[b] = (low + np.uint64(s - 1)) << shift
        sum_p[b] = slot_p[s]
        sum_q[b] = slot_q[s]
        # only a bucket whose largest mass beats the list's last entry is looked into (few
        # are, once the list is full)
        if top > 0 and slot_top[s] > largest[top - 1]:
            for i in range(slot_start[s], slot_start[s + 1]):
                keep_largest(largest, q[order[i]])
        for k in range(top):
            tops[b, k] = largest[k]
        b += 1
    return buckets, starts, edge_bits.view(np.float64), sum_p, sum_q, tops


@numba.njit(cache=True)
def _no_buckets(status, top):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`bucket_row_kernel`'s answer without buckets (``status`` 0 or −1)."""
    empty = np.empty(0)
    return status, np.zeros(1, dtype=np.int64), empty, empty, empty, np.empty((0, top))


def bucket_row(
    p: np.ndarray, q: np.ndarray, top: int
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Counting sort of one row's tokens (``q > 0``) into ratio buckets.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Target and draft probabilities (float64).
    top : int
        How many of the largest masses of each prefix of buckets to keep (for
        :func:`product_lower_bound`).

    Returns
    -------
    buckets : int
        Number of non-empty buckets ``K``; ``-1`` when a ratio is not a normal float (the
        caller sorts that row instead).
    order : numpy.ndarray of int64, shape (V,)
        Token ids grouped by bucket, buckets in ascending ratio (the first ``starts[K]``
        entries; unordered inside a bucket).
    ratio : numpy.ndarray, shape (V,)
        ``p/q`` (unset where ``q = 0``).
    starts : numpy.ndarray of int64, shape (K + 1,)
        ``order[starts[b]:starts[b+1]]`` are bucket ``b``'s tokens.
    edge : numpy.ndarray, shape (K,)
        Lower edge ``r_b`` of each bucket: every ratio inside is ``≥ r_b``.
    sum_p, sum_q : numpy.ndarray, shape (K,)
        ``p`` and ``q`` of each bucket.
    tops : numpy.ndarray, shape (K, top)
        Row ``b``: the ``top`` largest masses of the buckets ``0..b`` together, descending (0
        where they hold fewer).
    """
    vocab = p.shape[0]
    order = np.empty(vocab, dtype=np.int64)
    ratio = np.empty(vocab)
    k, starts, edge, sum_p, sum_q, tops = bucket_row_kernel(p, q, top, order, ratio)
    return int(k), order, ratio, starts, edge, sum_p, sum_q, tops


@numba.njit(cache=True)
def product_lower_kernel(cum_q, tops, n, out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    buckets = tops.shape[0]
    out[0] = 0.0 if n > 0 else 1.0
    for b in range(buckets):
        c = cum_q[b + 1]
        bound = 1.0
        drawn = 0.0
        for k in range(n):
            rest = 1.0 - drawn
            if rest < _SMALL_REST or c - drawn <= 0.0:
                bound = 0.0
                break
            bound *= min((c - drawn) / rest, 1.0)
            drawn += tops[b, k]
        out[b + 1] = bound


def product_lower_bound(cum_q: np.ndarray, tops: np.ndarray, n: int) -> np.ndarray:
    r"""``Q_n(H_b) ≥ Π_{j<n} (q(H_b) − M_j)/(1 − M_j)`` at every bucket boundary ``b``.

    ``M_j`` is the mass of the ``j`` largest tokens of ``H_b`` (the draws made so far hold at
    most that, and ``(c − s)/(1 − s)`` decreases in ``s``); a factor whose ``1 − M_j`` is
    below 1e-6 counts as 0 (still a lower bound).

    Parameters
    ----------
    cum_q : numpy.ndarray, shape (K + 1,)
        ``q(H_b)``.
    tops : numpy.ndarray, shape (K, >= n)
        The largest masses of ``H_{b+1}`` (the buckets ``0..b``), descending
        (:func:`bucket_row`).
    n : int

    Returns
    -------
    numpy.ndarray, shape (K + 1,)
    """
    if tops.shape[1] < n:
        raise ValueError(f"product_lower_bound: tops has {tops.shape[1]} columns, n={n} needs n")
    out = np.empty(cum_q.shape[0])
    product_lower_kernel(cum_q, np.ascontiguousarray(tops[:, :n]), n, out)
    return out


@numba.njit(cache=True)
def sort_chosen_buckets(order, ratio, starts, chosen):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`sort_buckets` without its check of ``chosen`` (strictly increasing), callable
    from compiled code.

    Each bucket on its own (its tokens, their keys and the sort's work arrays stay in the
    cache): the keys are the ratios' IEEE-754 bits (a ratio is ``≥ 0``, ``-0.0`` made
    ``+0.0``, so the bits order as the values do), sorted stably by
    :func:`~otbound._sorting.sort_positions` as :func:`~otbound._sorting.bucket_argsort`
    sorts its buckets. Ties keep their order in ``order``, so the result is the stable sort
    of all the chosen tokens together (one sort of them all before: its scatter over every
    chosen token missed the cache, 15 % slower at V = 151,936)."""
    largest = 0
    for b in chosen:
        largest = max(largest, starts[b + 1] - starts[b])
    tokens = np.empty(largest, dtype=np.int64)
    values = np.empty(largest)
    keys = values.view(np.uint64)  # the bits of `values`
    rank = np.empty(largest, dtype=np.int64)
    block = np.empty(largest, dtype=np.int64)
    counts = np.empty(largest + 1, dtype=np.int64)
    pending = np.empty((largest, 2), dtype=np.int64)
    for b in chosen:
        lo, size = starts[b], starts[b + 1] - starts[b]
        for k in range(size):
            tokens[k] = order[lo + k]
            values[k] = ratio[tokens[k]] + 0.0  # + 0.0 turns -0.0 into 0.0
            rank[k] = k
        sort_positions(rank, keys, size, block, counts, pending)
        for k in range(size):
            order[lo + k] = tokens[rank[k]]


def sort_buckets(
    order: np.ndarray, ratio: np.ndarray, starts: np.ndarray, chosen: np.ndarray
) -> None:
    """Sort the tokens of the buckets ``chosen`` (ascending) by ratio, in place in ``order``
    (stable: ties keep their order).

    One sort of all their tokens together: the buckets' ratio ranges do not overlap, so it puts
    each bucket's tokens back in its own places, as a sort of each bucket would (one call
    instead of one per bucket, each with its allocations)."""
    chosen = np.asarray(chosen, dtype=np.int64)
    if np.any(np.diff(chosen) <= 0):
        raise ValueError("sort_buckets: chosen must be strictly increasing bucket indices")
    sort_chosen_buckets(order, ratio, starts, chosen)
