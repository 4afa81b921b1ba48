"""Compiled loops of the importance-sampling verifier (:mod:`otbound.verifiers.importance`).

:func:`coincidence_values` is the per-trial value of ``ImportanceSampling._conditional`` in
one pass over the trials instead of ``O(n²)`` array passes: the same selection probabilities
(``ImportanceSampling.selection_probabilities``), failure and residual masses, summed in
another order (rounding only). :func:`stage_key`, :func:`stage_sorted` and :func:`stage_scatter`
are the ``O(V)`` passes of ``_solve_stage``, with its arithmetic in its order (bit for bit);
:func:`sort_from_hint` its ranking from a near order; :func:`guide_table` and :func:`sample_cdf`
the inversion of the draft CDF.

The fused passes (:func:`stage_order`, :func:`stage_top`, :func:`stage_finish`,
:func:`stage_prepare`, :func:`accept_rest`, :func:`coincidence_two`, :func:`cdf_table`) do a
whole step of the verifier's numpy code in one call each, with numpy's arithmetic in numpy's
order: its sequential ``cumsum`` and the pairwise summation of ``np.sum``
(:func:`otbound._pairwise.pairwise_sum`), so their values are the numpy code's bit for bit
(``tests/test_importance_speed.py`` checks it).
"""

from __future__ import annotations

import numba
import numpy as np

from otbound._pairwise import pairwise_sum

__all__ = [
    "accept_rest",
    "cdf_table",
    "coincidence_two",
    "coincidence_values",
    "guide_table",
    "sample_cdf",
    "sort_from_hint",
    "stage_finish",
    "stage_key",
    "stage_order",
    "stage_prepare",
    "stage_scatter",
    "stage_sorted",
    "stage_top",
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


@numba.njit(cache=True, inline="always")
def _unit_clipped(v, tol):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``v`` clipped into ``[0, 1]`` and ``True``; ``(v, False)`` where ``v`` is NaN or out of
    ``[0, 1]`` by more than ``tol`` (more than rounding: the caller raises)."""
    if np.isnan(v) or -v > tol or v - 1.0 > tol:
        return v, False
    if v < 0.0:
        v = 0.0
    elif v > 1.0:
        v = 1.0
    return v, True


@numba.njit(cache=True)
def stage_scatter(order, induced_sorted, tol):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``p_I`` by token, clipped into ``[0, 1]``; ``False`` (and nothing clipped) where a value
    is NaN or out by more than ``tol`` (the caller raises with the index)."""
    vocab = order.shape[0]
    induced = np.empty(vocab)
    for i in range(vocab):
        v, ok = _unit_clipped(induced_sorted[i], tol)
        if not ok:
            return induced, False
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


@numba.njit(cache=True)
def stage_order(p, a, b, hint, budget):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`stage_key` and :func:`sort_from_hint` in one call: ``(order, done, key)``."""
    key = stage_key(p, a, b)
    order, done = sort_from_hint(key, hint, budget)
    return order, done, key


@numba.njit(cache=True)
def stage_top(order, p, a, b, s):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`stage_sorted` and the inputs of a stage's top-``s`` LP in one call.

    Returns ``rank``, the rank rule's ``p_I`` in the ranking's order, and a (4, s) array of
    rows ``aS``, ``bS``, ``pS`` and ``base = aS bS + aS tail_b + bS tail_a + bS (Σ aS − aS)``
    (``tail_*`` the sums past ``s``, as ``np.sum`` adds them).
    """
    rank, a_sorted, b_sorted, p_sorted, induced = stage_sorted(order, p, a, b)
    vocab = order.shape[0]
    tail_a = pairwise_sum(a_sorted, s, vocab - s)
    tail_b = pairwise_sum(b_sorted, s, vocab - s)
    total_a = pairwise_sum(a_sorted, 0, s)
    lp = np.empty((4, s))
    for i in range(s):
        ai = a_sorted[i]
        bi = b_sorted[i]
        lp[0, i] = ai
        lp[1, i] = bi
        lp[2, i] = p_sorted[i]
        lp[3, i] = ((ai * bi + ai * tail_b) + bi * tail_a) + bi * (total_a - ai)
    return rank, induced, lp


@numba.njit(cache=True)
def stage_finish(order, induced_sorted, lp, keep, tol):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The rest of a stage after its LP: ``p_I`` on the top ``s`` (``base + gain − loss``,
    written into ``induced_sorted``), scattered by token and clipped (:func:`stage_scatter`),
    and normalised by its ``np.sum``.

    Returns ``(p_I / total, within, total)``; ``within`` is ``False`` (nothing else done)
    where :func:`stage_scatter` refuses a value.
    """
    s = lp.shape[1]
    weights = np.empty(s)
    loss = np.zeros(s)
    for i in range(s):
        ai = lp[0, i]
        for j in range(s):
            cell = (ai * lp[1, j]) * keep[i, j]
            cell = cell * (0.0 if i == j else 1.0)
            weights[j] = cell
            loss[j] = cell if i == 0 else loss[j] + cell
        gain = pairwise_sum(weights, 0, s)
        induced_sorted[i] = lp[3, i] + gain
    for i in range(s):
        induced_sorted[i] = induced_sorted[i] - loss[i]
    induced, within = stage_scatter(order, induced_sorted, tol)
    if not within:
        return induced, False, 0.0
    total = pairwise_sum(induced, 0, induced.shape[0])
    for i in range(induced.shape[0]):
        induced[i] = induced[i] / total
    return induced, True, total


@numba.njit(cache=True)
def accept_rest(p, induced):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``min(1, p / p_I)`` (0 where ``p_I = 0``), ``res(p, p_I)`` (``p`` where ``p ≤ p_I``) and
    ``Σ min(p, p_I)``, as :func:`otbound.verifiers.base.residual` and ``np.sum`` give them."""
    vocab = p.shape[0]
    accept = np.empty(vocab)
    rest = np.empty(vocab)
    low = np.empty(vocab)
    for i in range(vocab):
        pi = p[i]
        qi = induced[i]
        accept[i] = min(1.0, pi / qi) if qi > 0.0 else 0.0
        low[i] = min(pi, qi)
        d = pi - qi
        rest[i] = d if d > 0.0 else 0.0
    total = pairwise_sum(rest, 0, vocab)
    if total <= 0.0:
        for i in range(vocab):
            rest[i] = p[i]
    else:
        for i in range(vocab):
            rest[i] = rest[i] / total
    return accept, rest, pairwise_sum(low, 0, vocab)


@numba.njit(cache=True)
def coincidence_two(rank, keep, a, b, accept, rest):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r"""``P(selected draft rejected, residual ∈ {x_1, x_2})`` for two slots: the rank rule's
    suffix sums and the LP block's correction, in the numpy order of
    ``importance._coincidence_two`` (``keep`` is the stage's (s, s) ``keep_top``)."""
    vocab = rank.shape[0]
    order = np.empty(vocab, dtype=np.int64)
    for token in range(vocab):
        order[rank[token]] = token
    a_s = np.empty(vocab)
    b_s = np.empty(vocab)
    f_s = np.empty(vocab)
    r_s = np.empty(vocab)
    for i in range(vocab):
        token = order[i]
        a_s[i] = a[token]
        b_s[i] = b[token]
        f_s[i] = 1.0 - accept[token]
        r_s[i] = rest[token]
    first = np.empty(vocab)
    second = np.empty(vocab)
    after_br = 0.0
    after_ar = 0.0
    for i in range(vocab - 1, -1, -1):
        if i == vocab - 2:
            after_br = b_s[vocab - 1] * r_s[vocab - 1]
            after_ar = a_s[vocab - 1] * r_s[vocab - 1]
        elif i < vocab - 2:
            after_br = after_br + b_s[i + 1] * r_s[i + 1]
            after_ar = after_ar + a_s[i + 1] * r_s[i + 1]
        first[i] = (a_s[i] * f_s[i]) * after_br
        second[i] = (b_s[i] * f_s[i]) * after_ar
    total = pairwise_sum(first, 0, vocab) + pairwise_sum(second, 0, vocab)
    s = keep.shape[0]
    kept = np.empty(s * s)
    swapped = np.empty(s * s)
    for i in range(s):
        for j in range(s):
            pair = (a_s[i] * b_s[j]) * (0.0 if i == j else 1.0)
            ranked = 1.0 if j > i else 0.0
            ranked_t = 1.0 if i > j else 0.0
            kept[i * s + j] = ((pair * (keep[i, j] - ranked)) * f_s[i]) * r_s[j]
            swapped[i * s + j] = ((pair * ((1.0 - keep[i, j]) - ranked_t)) * f_s[j]) * r_s[i]
    total += pairwise_sum(kept, 0, s * s)
    total += pairwise_sum(swapped, 0, s * s)
    return total


@numba.njit(cache=True)
def cdf_table(d):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``np.cumsum(d)``, its :func:`guide_table` and the last token of positive mass (−1 if
    none)."""
    vocab = d.shape[0]
    cdf = np.empty(vocab)
    acc = 0.0
    last = -1
    for i in range(vocab):
        acc = d[i] if i == 0 else acc + d[i]
        cdf[i] = acc
        if d[i] > 0.0:
            last = i
    return cdf, guide_table(cdf), last


@numba.njit(cache=True)
def stage_prepare(p, a, b, hint, budget, s):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`stage_order` then :func:`stage_top` in one call.

    Returns ``(done, order, key, rank, induced_sorted, lp)``; where the sort from ``hint``
    gave up (``done`` false) only ``key`` is meaningful (the caller sorts it and calls
    :func:`stage_top`).
    """
    key = stage_key(p, a, b)
    order, done = sort_from_hint(key, hint, budget)
    if not done:
        return False, order, key, np.empty(0, dtype=np.int64), np.empty(0), np.empty((4, s))
    rank, induced, lp = stage_top(order, p, a, b, s)
    return True, order, key, rank, induced, lp
