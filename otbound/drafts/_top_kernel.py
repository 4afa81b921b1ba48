"""The ``k`` most likely tokens of each row in one compiled pass (:func:`top_tokens_rows`).

A row's tokens are read in id order against a buffer of the ``k`` best so far, sorted by
``(−q, id)``: a token enters only when its mass exceeds the ``k``-th best (an equal mass has
a higher id, so it ranks below), and it goes in after every kept mass at least its own. The
buffer is then the first ``k`` tokens of the stable descending order, the result of
:func:`otbound.drafts.helpers.top_tokens` (``tests/test_drafts.py`` checks it against the
partition-and-sort it replaced). Each row costs one comparison a token once the buffer is
full, instead of a partition, a tie count and a sort.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["top_tokens_rows"]


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
