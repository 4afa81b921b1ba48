"""Compiled passes of the deterministic-draft designs (:mod:`otbound.drafts.fixed`).

:func:`top_tokens_rows`: the ``k`` most likely tokens of each row in one pass. A row's
tokens are read in id order against a buffer of the ``k`` best so far, sorted by
``(−q, id)``: a token enters only when its mass exceeds the ``k``-th best (an equal mass has
a higher id, so it ranks below), and it goes in after every kept mass at least its own. The
buffer is then the first ``k`` tokens of the stable descending order, the result of
:func:`otbound.drafts.tokens.top_tokens` (``tests/test_drafts.py`` checks it against the
partition-and-sort it replaced). A token that does not enter costs one comparison, one that
does up to ``k`` moves: for the small ``k`` of the designs (the number of drafts) a row
costs about one pass, instead of a partition, a tie count and a sort.

:func:`fixed_plus_sampled_rows`: the closed form of the designs with fixed drafts plus one
sampled, numpy's arithmetic in numpy's order (its pairwise sums,
:func:`otbound._pairwise.pairwise_sum`), one pass a row instead of six ``(B, V)`` arrays.
"""

from __future__ import annotations

import numba
import numpy as np

from otbound._pairwise import pairwise_sum

__all__ = ["fixed_plus_sampled_rows", "top_tokens_rows"]


@numba.njit(cache=True)
def top_tokens_rows(q, k, out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Fill ``out`` (rows, k) with each row of ``q`` (rows, V)'s ``k`` most likely token ids,
    most likely first, ties to the lower id (``1 <= k <= V``). Returns False, leaving ``out``
    partly written, at the first NaN."""
    rows, vocab = q.shape
    best = np.empty(k)
    for r in range(rows):
        filled = 0
        for token in range(vocab):
            value = q[r, token]
            if value != value:
                return False
            if filled < k:
                slot = filled
                filled += 1
            elif value > best[k - 1]:
                slot = k - 1  # the k-th best drops out
            else:
                continue
            while slot > 0 and best[slot - 1] < value:
                best[slot] = best[slot - 1]
                out[r, slot] = out[r, slot - 1]
                slot -= 1
            best[slot] = value
            out[r, slot] = token
    return True


@numba.njit(cache=True)
def fixed_plus_sampled_rows(p, q, fixed):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``(gap, chosen)`` of :func:`otbound.drafts.fixed._fixed_plus_sampled` for rows ``p``,
    ``q`` (B, V) and fixed tokens (B, k): ``p(T) + Σ_{x∉T} min(p_x, r_x) − 1`` with
    ``r = q`` off ``T`` renormalised, and ``T ∪ {p < r}``, bit for bit."""
    rows, vocab = p.shape
    gap = np.empty(rows)
    chosen = np.empty((rows, vocab), dtype=np.bool_)
    inside = np.zeros(vocab, dtype=np.bool_)
    rest = np.empty(vocab)
    matched = np.empty(vocab)
    kept = np.empty(vocab)
    for b in range(rows):
        for j in range(fixed.shape[1]):
            inside[fixed[b, j]] = True
        for i in range(vocab):
            rest[i] = 0.0 if inside[i] else q[b, i]
        total = pairwise_sum(rest, 0, vocab)
        for i in range(vocab):
            r = rest[i] / total
            if inside[i]:
                matched[i] = 0.0
                kept[i] = p[b, i]
            else:
                value = p[b, i]
                if value != value or r != r:  # np.minimum keeps a NaN
                    matched[i] = value + r
                else:
                    matched[i] = value if value <= r else r
                kept[i] = 0.0
            chosen[b, i] = inside[i] or p[b, i] < r
        gap[b] = pairwise_sum(kept, 0, vocab) + pairwise_sum(matched, 0, vocab) - 1.0
        for j in range(fixed.shape[1]):
            inside[fixed[b, j]] = False
    return gap, chosen
