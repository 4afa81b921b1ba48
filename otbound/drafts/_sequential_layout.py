r"""The ``O(V)`` passes of the without-replacement prefix sweep, compiled.

:func:`otbound.drafts._sequential_sweep.sequential_prefix_minimum` starts every row with a few
passes over the tokens in sweep order: the prefix and suffix sums, the count of positive
masses, the closed forms of ``n ≤ 2`` and the largest masses of the growth bound. As numpy
expressions they are a dozen passes and temporaries; here they are a few loops. Each sum is
taken in numpy's order (``np.cumsum`` is sequential), so every value is the numpy one's bit
for bit; where a value needs numpy's checks (a mass outside ``[0, 1]`` beyond rounding, a
NaN, an overflow of the odds) the kernels report it and the caller takes the numpy path,
which raises or integrates as before.
"""

from __future__ import annotations

import numba
import numpy as np

from otbound._checks import ROUNDING_TOLERANCE

__all__ = [
    "CLOSED_CHECK",
    "CLOSED_FOUND",
    "CLOSED_INTEGRATE",
    "bucket_columns",
    "closed_minimum",
    "keep_largest",
    "largest_masses",
    "prefix_sums",
]

#: :func:`closed_minimum` found the minimum.
CLOSED_FOUND = 0
#: Some odds overflowed: the caller integrates ``n = 2`` instead.
CLOSED_INTEGRATE = 1
#: A mass left ``[0, 1]`` by more than rounding, or a NaN: the caller's numpy path raises.
CLOSED_CHECK = 2


@numba.njit(cache=True)
def prefix_sums(p, q):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``(cum_p, suffix, positives)``, each of shape (V + 1,), for ``p``, ``q`` in sweep order.

    ``cum_p[i] = Σ_{j<i} p_j`` and ``suffix[i] = Σ_{j≥i} q_j`` (summed from the end, as
    ``np.cumsum(q[::-1])[::-1]``), ``positives[i] = #{j < i: q_j > 0}``.
    """
    size = q.shape[0]
    cum_p = np.empty(size + 1)
    suffix = np.empty(size + 1)
    positives = np.empty(size + 1, dtype=np.int64)
    cum_p[0] = 0.0
    suffix[size] = 0.0
    positives[0] = 0
    back = 0.0  # the suffix sum, from the end
    front = 0.0  # the prefix sum
    count = 0
    for k in range(size):  # the two sums' chains of additions side by side, not one after
        i = size - 1 - k
        back += q[i]
        suffix[i] = back
        front += p[k]
        cum_p[k + 1] = front
        count += q[k] > 0.0
        positives[k + 1] = count
    return cum_p, suffix, positives


@numba.njit(cache=True)
def bucket_columns(starts, picked):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The prefix lengths of a row in bucket order that are prefixes of the ``p/q`` order,
    ascending: every bucket boundary ``starts[b]`` and every length inside the buckets
    ``picked`` (ascending; their tokens sorted)."""
    buckets = starts.shape[0] - 1
    total = buckets + 1
    for b in picked:
        total += max(starts[b + 1] - starts[b] - 1, 0)
    columns = np.empty(total, dtype=np.int64)
    at = 0
    k = 0
    for b in range(buckets):
        columns[at] = starts[b]
        at += 1
        if k < picked.shape[0] and picked[k] == b:
            for i in range(starts[b] + 1, starts[b + 1]):
                columns[at] = i
                at += 1
            k += 1
    columns[at] = starts[buckets]
    return columns


@numba.njit(cache=True, error_model="numpy")  # q / 0 is inf, as in numpy
def closed_minimum(q, suffix, positives, cum_p, columns, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``min(0, min_i [p(H_i) − Q_n(H_i)])`` over the prefix lengths ``columns`` (ascending),
    for ``n`` in ``{1, 2}``.

    ``Q_n`` is :func:`~otbound.drafts._sequential_sweep._closed_form_mass`: ``q(H)`` for
    ``n = 1`` (the sums in ``np.cumsum``'s order), ``1 − λ (1 + Σ_{x∈H} q_x / (1 − q_x))``
    for ``n = 2`` (``1 − q_x`` a prefix plus a suffix sum); 0 where the prefix holds fewer
    than ``n`` positive masses and 1 where nothing is left outside it, clipped into
    ``[0, 1]`` where out by rounding.

    Returns
    -------
    status : int
        :data:`CLOSED_FOUND`, :data:`CLOSED_INTEGRATE` (some mass is not finite, as numpy's
        ``np.all(np.isfinite(...))`` test before its checks) or :data:`CLOSED_CHECK` (out of
        ``[0, 1]`` beyond rounding, or a NaN in ``p(H) − Q(H)``).
    gap : float
    index : int
        The first prefix length attaining ``gap`` (0 when ``gap = 0``).
    """
    size = q.shape[0]
    mass = np.empty(size + 1)
    before = 0.0
    odds = 0.0
    mass[0] = 0.0 if n == 1 else 1.0 - suffix[0] * (1.0 + odds)
    for i in range(size):
        if n == 1:
            before += q[i]
            mass[i + 1] = before
            continue
        rest = before + suffix[i + 1]
        odds += q[i] / rest if q[i] > 0.0 else 0.0
        before += q[i]
        mass[i + 1] = 1.0 - suffix[i + 1] * (1.0 + odds)
    gap = 0.0
    index = 0
    best = np.inf
    where = 0
    found = False
    failed = False  # a check failed: numpy raises, unless a mass is not finite (integrate)
    for k in range(columns.shape[0]):
        i = columns[k]
        value = mass[i]
        if positives[i] < n:
            value = 0.0
        elif not suffix[i] > 0.0:
            value = 1.0
        if not np.isfinite(value):
            return CLOSED_INTEGRATE, 0.0, 0
        if max(0.0 - value, value - 1.0) > ROUNDING_TOLERANCE:
            failed = True  # clip_rounding's test, which raises
        value = min(max(value, 0.0), 1.0)
        difference = cum_p[i] - value
        if difference != difference:
            failed = True
        if not found or difference < best:
            best, where, found = difference, i, True
    if failed:
        return CLOSED_CHECK, 0.0, 0
    if found and best < gap:
        gap, index = best, where
    return CLOSED_FOUND, gap, index


@numba.njit(cache=True)
def largest_masses(q, most):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The ``most`` largest entries of ``q``, descending (``most <= q.size``): what
    ``np.sort(np.partition(q, q.size - most)[q.size - most:])[::-1]`` gives, in one pass."""
    top = np.full(most, -np.inf)
    for i in range(q.shape[0]):
        keep_largest(top, q[i])
    return top


@numba.njit(cache=True, inline="always")
def keep_largest(top, value):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Put ``value`` into ``top`` (descending) if it beats the last entry, which drops out;
    an equal entry stays ahead of it."""
    last = top.shape[0] - 1
    if last >= 0 and value > top[last]:
        k = last
        while k > 0 and top[k - 1] < value:
            top[k] = top[k - 1]
            k -= 1
        top[k] = value
