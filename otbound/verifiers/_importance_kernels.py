"""Compiled loops of the importance-sampling verifier (:mod:`otbound.verifiers.importance`).

:func:`coincidence_values` is the per-trial value of ``ImportanceSampling._conditional`` in
one pass over the trials instead of ``O(n²)`` array passes: the same selection probabilities
(``ImportanceSampling.selection_probabilities``), failure and residual masses, summed in
another order (rounding only). :func:`stage_key`, :func:`stage_sorted` and :func:`stage_scatter`
are the ``O(V)`` passes of ``_solve_stage``, with its arithmetic in its order (bit for bit);
:func:`sort_from_hint` its ranking from a near order; :func:`guide_table` and :func:`sample_cdf`
the inversion of the draft CDF.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = [
    "coincidence_values",
    "guide_table",
    "sample_cdf",
    "sort_from_hint",
    "stage_key",
    "stage_scatter",
    "stage_sorted",
]


@numba.njit(cache=True)
def coincidence_values(drafts, ranks, tops, keep_tops, accept, rest, selected):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``α_sel + Σ_j π_j(x̄) (1 − acc(x_j)) · r(\{x̄\})`` for each draft tuple.

    Parameters
    ----------
    drafts : int64 (trials, n)
    ranks : int64 (n − 1, V)
        Each stage's ``rank`` (:class:`~otbound.verifiers.importance.SelectionStage`).
    tops : int64 (n − 1,)
        Each stage's ``top``.
    keep_tops : float64 (n − 1, s, s)
        Each stage's ``keep_top`` (padded to the largest ``s``).
    accept, rest : float64 (V,)
        ``min(1, p / p_I)`` and ``res(p, p_I)``.
    selected : float
        ``α_sel``.
    """
    trials, n = drafts.shape
    out = np.empty(trials)
    probs = np.empty(n)
    for trial in range(trials):
        row = drafts[trial]
        probs[0] = 1.0
        for k in range(1, n):
            probs[k] = 0.0
            stage = k - 1
            top = tops[stage]
            second = row[k]
            rj = ranks[stage, second]
            for j in range(k):
                first = row[j]
                if first == second:
                    keep = 1.0
                else:
                    ri = ranks[stage, first]
                    if ri < top and rj < top:
                        keep = keep_tops[stage, ri, rj]
                    elif ri < rj:
                        keep = 1.0
                    else:
                        keep = 0.0
                probs[k] += probs[j] * (1.0 - keep)
                probs[j] *= keep
        fail = 0.0
        on_drafts = 0.0
        for j in range(n):
            token = row[j]
            fail += probs[j] * (1.0 - accept[token])
            seen = False
            for i in range(j):
                if row[i] == token:
                    seen = True
                    break
            if not seen:
                on_drafts += rest[token]
        out[trial] = selected + fail * on_drafts
    return out


@numba.njit(cache=True)
def stage_key(p, a, b):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``−(p − a b)``, the key whose stable argsort ranks a stage's tokens."""
    out = np.empty(p.shape[0])
    for i in range(p.shape[0]):
        out[i] = -(p[i] - a[i] * b[i])
    return out


@numba.njit(cache=True)
def stage_sorted(order, p, a, b):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The ranking's ``rank``, ``a``, ``b``, ``p`` in its order, and the rank rule's ``p_I`` in
    that order: ``a_y (b_y + Σ_{later} b) + b_y Σ_{later} a`` with the suffix sums added from
    the last token down (the order of ``np.cumsum`` on the reversed arrays)."""
    vocab = order.shape[0]
    rank = np.empty(vocab, dtype=np.int64)
    a_sorted = np.empty(vocab)
    b_sorted = np.empty(vocab)
    p_sorted = np.empty(vocab)
    for i in range(vocab):
        token = order[i]
        rank[token] = i
        a_sorted[i] = a[token]
        b_sorted[i] = b[token]
        p_sorted[i] = p[token]
    induced = np.empty(vocab)
    after_a = 0.0
    after_b = 0.0
    for i in range(vocab - 1, -1, -1):
        if i == vocab - 2:
            after_a = a_sorted[vocab - 1]
            after_b = b_sorted[vocab - 1]
        elif i < vocab - 2:
            after_a = after_a + a_sorted[i + 1]
            after_b = after_b + b_sorted[i + 1]
        induced[i] = a_sorted[i] * (b_sorted[i] + after_b) + b_sorted[i] * after_a
    return rank, a_sorted, b_sorted, p_sorted, induced


@numba.njit(cache=True)
def stage_scatter(order, induced_sorted, tol):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``p_I`` by token, clipped into ``[0, 1]``; ``False`` (and nothing clipped) where a value
    is NaN or out by more than ``tol`` (the caller raises with the index)."""
    vocab = order.shape[0]
    induced = np.empty(vocab)
    for i in range(vocab):
        v = induced_sorted[i]
        if np.isnan(v) or -v > tol or v - 1.0 > tol:
            return induced, False
        if v < 0.0:
            v = 0.0
        elif v > 1.0:
            v = 1.0
        induced[order[i]] = v
    return induced, True


@numba.njit(cache=True)
def guide_table(cdf):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``guide[j]``: the first index with ``cdf > j · (cdf[-1] / B)``, ``j = 0..B`` (``B = V``),
    for :func:`sample_cdf`."""
    vocab = cdf.shape[0]
    buckets = vocab
    width = cdf[vocab - 1] / buckets
    guide = np.empty(buckets + 1, dtype=np.int64)
    i = 0
    for j in range(buckets + 1):
        edge = j * width
        while i < vocab and cdf[i] <= edge:
            i += 1
        guide[j] = i
    return guide


@numba.njit(cache=True)
def sample_cdf(cdf, guide, last, u, drafts, column):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``drafts[t, column + k] = min(searchsorted(cdf, u[k, t] · cdf[-1], "right"), last)``.

    :func:`otbound.drafts.inverse_cdf` exactly (the first index whose CDF exceeds the target,
    never past the last token of positive mass), in expected ``O(1)`` a draw: the guide table
    (:func:`guide_table`) gives a start at or below the answer and a short scan finds it.
    """
    vocab = cdf.shape[0]
    buckets = guide.shape[0] - 1
    total = cdf[vocab - 1]
    width = total / buckets
    slots, trials = u.shape
    for k in range(slots):
        for t in range(trials):
            x = u[k, t] * total
            j = int(x / width) if width > 0.0 else 0
            if j > buckets:
                j = buckets
            if j < 0:
                j = 0
            while j > 0 and j * width > x:
                j -= 1
            while j < buckets and (j + 1) * width <= x:
                j += 1
            i = guide[j]
            while i < vocab and cdf[i] <= x:
                i += 1
            drafts[t, column + k] = i if i < last else last


@numba.njit(cache=True)
def sort_from_hint(key, hint, budget):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The stable argsort of ``key`` by insertion from the permutation ``hint``: ``O(V + I)``
    for ``I`` inversions of ``hint`` (ties ordered by token id, as the stable sort has them).

    Returns ``(order, True)``, or ``(…, False)`` once more than ``budget`` moves were needed
    (the caller then sorts from scratch).
    """
    vocab = hint.shape[0]
    order = np.empty(vocab, dtype=np.int64)
    values = np.empty(vocab)
    for i in range(vocab):
        order[i] = hint[i]
        values[i] = key[hint[i]]
    moves = 0
    for i in range(1, vocab):
        value = values[i]
        token = order[i]
        j = i - 1
        while j >= 0 and (values[j] > value or (values[j] == value and order[j] > token)):
            values[j + 1] = values[j]
            order[j + 1] = order[j]
            j -= 1
        moves += i - 1 - j
        values[j + 1] = value
        order[j + 1] = token
        if moves > budget:
            return order, False
    return order, True
