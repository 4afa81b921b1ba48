"""What the bucketed designs' batches of rows share.

A design's compiled row (``bucketed_row`` of :mod:`otbound.drafts._sequential_bucketed`,
``poisson_row`` of :mod:`otbound.drafts._poisson_bucketed`) answers one row; its batch gives
whole rows to numba's threads, row ``r`` to thread ``r mod threads``, in one parallel region.
Here: the rows' statuses, the batch's outputs and one row's store (compiled), and the Python
side, :func:`rows_on_threads`, that calls the batch or one row at a time and reads the
statuses back (``None`` for a declined row, the values, or the row redone alone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np

__all__ = [
    "ROW_DECLINED",
    "ROW_DONE",
    "UNFINISHED",
    "Found",
    "batch_outputs",
    "rows_on_threads",
    "store_row",
]

#: A row's values are final.
ROW_DONE = 0
#: The design's kernel does not apply to the row (the caller sorts it).
ROW_DECLINED = -1
#: A row no thread finished (redone on its own).
UNFINISHED = -2

#: One row's answer: ``(gap, index, order)`` (``order`` ``None`` where not asked for), or
#: ``None`` for a declined row.
Found = tuple[np.ndarray, np.ndarray, np.ndarray | None] | None


@numba.njit(cache=True)
def batch_outputs(rows, vocab, count, orders):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """A batch's outputs: ``status`` (B,) at :data:`UNFINISHED`, ``gap`` and ``index``
    (count, B), ``kept_orders`` (B, V) with ``orders`` (else (0, V)) and ``lengths`` (B,)."""
    status = np.full(rows, UNFINISHED, dtype=np.int64)
    gap = np.zeros((count, rows))
    index = np.zeros((count, rows), dtype=np.int64)
    kept_orders = np.empty((rows if orders else 0, vocab), dtype=np.int64)
    lengths = np.zeros(rows, dtype=np.int64)
    return status, gap, index, kept_orders, lengths


@numba.njit(cache=True)
def store_row(  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    r, row_status, row_gap, row_index, row_order, status, gap, index, kept_orders, lengths,
    orders,
):  # fmt: skip
    """Row ``r``'s answer into :func:`batch_outputs`'s arrays (its order with ``orders``)."""
    gap[:, r] = row_gap
    index[:, r] = row_index
    lengths[r] = row_order.shape[0]
    if orders:
        kept_orders[r, : lengths[r]] = row_order
    status[r] = row_status


def _orderless(found: Found, orders: bool) -> Found:
    return found if found is None or orders else (found[0], found[1], None)


def rows_on_threads(
    p: np.ndarray,
    q: np.ndarray,
    counts: Sequence[int],
    orders: bool,
    single: Callable[[np.ndarray, np.ndarray, Sequence[int]], Found],
    batch: Callable[[int], tuple[np.ndarray, ...]],
) -> list[Found]:
    """The answer of every row of ``p``, ``q`` (B, V): ``batch(threads)`` where there are
    two rows and two numba threads at least, else ``single`` on one row after another (with
    the threads inside the row's own kernels).

    ``batch`` returns ``(distinct, status, gap, index, kept_orders, lengths)``
    (:func:`batch_outputs`, ``distinct`` the ascending ``n`` of the rows of ``gap``). A row
    :data:`ROW_DECLINED` gives ``None``, :data:`ROW_DONE` its values, any other status the
    row redone by ``single`` (whose checks raise where the batch's row reported them).
    """
    rows = p.shape[0]
    threads = min(numba.get_num_threads(), rows)
    if threads < 2:
        return [_orderless(single(p[r], q[r], counts), orders) for r in range(rows)]
    distinct, status, gap, index, kept_orders, lengths = batch(threads)
    at = np.searchsorted(distinct, np.asarray([int(n) for n in counts], dtype=np.int64))
    out: list[Found] = []
    for r in range(rows):
        if status[r] == ROW_DECLINED:
            out.append(None)
        elif status[r] != ROW_DONE:  # unfinished, or its checks failed: redone alone
            out.append(_orderless(single(p[r], q[r], counts), orders))
        else:
            order = kept_orders[r, : lengths[r]] if orders else None
            out.append((gap[at, r], index[at, r], order))
    return out
