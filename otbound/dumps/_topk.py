r"""Truncated (top-k) rows: exact processing where possible, and an interval for ``α*``.

A top-k row knows the probabilities of its ``K`` stored tokens and the total mass of the
rest (the tail), not how the tail is spread. Two things follow.

*Processing.* Temperature 1 changes nothing and temperature 0 (greedy) is exact: the argmax
is stored. Any other temperature reshapes the tail in a way that depends on the unknown tail
logits, so it is refused. Top-k filtering with ``k <= K`` is exact (the tail is dropped), and
so is top-p filtering when the stored tokens already hold at least ``top_p`` of the mass (no
tail token survives); otherwise it is refused, naming the steps. Ties between a stored token
and unseen tail tokens at a cut-off are resolved in favour of the stored token.

*The bound* (:func:`otbound.analysis.topk_interval`) needs the stored probabilities and the
tail masses as they are here (:func:`known_and_tail`): a sum off beyond float rounding is
refused, never rescaled.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from otbound.dumps._format import DumpError, TopKRows
from otbound.dumps._processing import (
    as_step_ids,
    check_filters,
    describe_steps,
    top_p_mask,
)


def complete_rows(rows: TopKRows) -> np.ndarray:
    """``rows.complete``: ``TopKRows`` always sets it to a bool array (``None`` is an input)."""
    return cast(np.ndarray, rows.complete)


def _mass_error(rows: TopKRows) -> np.ndarray:
    """``Σ exp(ℓ − lse) − 1`` where it is impossible beyond rounding, else 0 (NaN: unknown).

    Impossible: above ``δ`` (:meth:`TopKRows.rounding_allowance`) for any row, and below
    ``−δ`` too for complete rows, whose stored tokens hold all the mass.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        error = rows.probabilities().sum(axis=1) - 1.0
        allowed = rows.rounding_allowance()
        fine = (error <= allowed) & (~complete_rows(rows) | (error >= -allowed))
    return np.where(fine, 0.0, error)


def describe_mass_errors(rows: TopKRows, step_ids: object = None) -> str:
    """``"step 8: stored probabilities sum to 1 + 1.0e-04"`` for the first rows (at most three)
    whose stored mass is impossible (see :func:`find_bad_topk_steps`); ``""`` when none is."""
    ids = as_step_ids(step_ids, rows.num_steps)
    error = _mass_error(rows)
    wrong = np.flatnonzero((error != 0) & np.isfinite(error))
    parts = [
        f"step {ids[i]}: stored probabilities sum to 1 {'+' if error[i] > 0 else '-'} "
        f"{abs(error[i]):.1e}"
        for i in wrong[:3]
    ]
    more = f" and {wrong.size - 3} more" if wrong.size > 3 else ""
    return "; ".join(parts) + more


def find_bad_topk_steps(rows: TopKRows) -> np.ndarray:
    """Top-k rows that are invalid: NaN or ``+inf`` logits, a non-finite logsumexp, ids out of
    ``[0, V)`` or repeated, or stored probabilities whose sum is impossible beyond float
    rounding: above ``1 + δ``, or, for complete rows (empty tail), below ``1 − δ`` (``δ`` from
    :meth:`TopKRows.rounding_allowance`). Such a sum means the logsumexp does not belong to the
    logits; the row is refused, never rescaled.

    Returns
    -------
    numpy.ndarray of bool, shape (steps,)
    """
    logits = np.asarray(rows.logits, dtype=np.float64)
    bad: np.ndarray = np.any(np.isnan(logits) | np.isposinf(logits), axis=1)
    bad |= ~np.isfinite(rows.logsumexp)
    bad |= np.any((rows.ids < 0) | (rows.ids >= rows.vocab_size), axis=1)
    if rows.k > 1:
        ordered = np.sort(rows.ids, axis=1)
        bad |= np.any(ordered[:, 1:] == ordered[:, :-1], axis=1)
    bad |= _mass_error(rows) != 0
    return bad


def known_and_tail(
    rows: TopKRows, name: str = "rows", step_ids: object = None
) -> tuple[np.ndarray, np.ndarray]:
    """Stored probabilities and tail masses, as the interval uses them.

    A sum within rounding above one (``<= 1 + δ``) leaves no tail and is scaled to one, as is
    the sum of a complete row; the interval is widened for the rounding (see
    :func:`otbound.analysis.topk_interval`). A sum beyond rounding is a :class:`DumpError`
    naming the steps.
    """
    problems = describe_mass_errors(rows, step_ids)
    if problems:
        raise DumpError(
            f"{name}: {problems}, more than float rounding allows: the logsumexp is not that of "
            "the row's logits (compute it in float64 over the full row)"
        )
    probs = rows.probabilities()
    total = probs.sum(axis=1)
    scale = rows.complete | (total > 1.0)
    probs[scale] /= total[scale, None]
    return probs, np.where(scale, 0.0, rows.tail_mass())


def process_topk(
    rows: TopKRows,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    step_ids: object = None,
    name: str = "rows",
) -> TopKRows:
    """Apply temperature, top-k and top-p to top-k rows where that is exact; refuse otherwise.

    Parameters
    ----------
    rows : TopKRows
        Valid rows (see :func:`find_bad_topk_steps`).
    temperature : {1.0, 0.0}
        Other values are refused: the tail's shape is unknown.
    top_k : int, optional
        Must be ``<= K`` (or ``>= V``, a no-op) unless every tail is empty.
    top_p : float, optional
        Rows whose stored mass is below ``top_p`` (and whose tail is not empty) are refused.
    step_ids : array_like of int, optional
        Global step ids, for messages.
    name : str
        What the rows are (``"target"``), for messages.

    Returns
    -------
    TopKRows
        ``rows`` themselves at temperature 1 without filtering. Otherwise rows with
        ``logsumexp = 0``, ``logits = log p`` (``-inf`` for dropped tokens) and every row
        ``complete``: filtering and temperature 0 empty the tail.

    Raises
    ------
    ValueError
        A temperature other than 0 or 1, or a ``top_k`` above ``K`` with a tail that is not
        known to be empty.
    DumpError
        Steps where the filtering would need unseen tokens, or whose stored mass is impossible
        (see :func:`find_bad_topk_steps`), named.
    """
    check_filters(temperature, top_k, top_p)
    ids = as_step_ids(step_ids, rows.num_steps)
    if temperature not in (0.0, 1.0):
        raise ValueError(
            f"temperature {temperature:g} cannot be applied exactly to top-{rows.k} rows: the "
            "tail's shape is unknown, so its tempered mass is too. Use temperature 1 or 0, or "
            "dump full logits"
        )
    probs, _ = known_and_tail(rows, name, ids)
    logits = np.asarray(rows.logits, dtype=np.float64)
    zeros = np.zeros(rows.num_steps)
    done = np.ones(rows.num_steps, dtype=bool)
    open_tail = ~complete_rows(rows)  # a tail that is not known to be empty, however small
    if temperature == 0:
        peak = logits.max(axis=1, keepdims=True)
        tied = logits == peak
        unsure = np.all(tied, axis=1) & open_tail
        if np.any(unsure):
            raise DumpError(
                f"{name}: temperature 0 is ambiguous at {describe_steps(ids[unsure])}: every "
                "stored token ties for the maximum, and unseen tokens may tie too"
            )
        pick = np.argmin(np.where(tied, rows.ids, np.iinfo(np.int64).max), axis=1)
        out = np.full(logits.shape, -np.inf)
        out[np.arange(rows.num_steps), pick] = 0.0
        return TopKRows(rows.ids, out, zeros, rows.vocab_size, done)
    filtered = False
    if top_k is not None and top_k < rows.vocab_size:
        if top_k < rows.k:
            kth = -np.partition(-logits, top_k - 1, axis=1)[:, top_k - 1 : top_k]
            probs[logits < kth] = 0.0
        elif top_k > rows.k and np.any(open_tail):
            raise ValueError(
                f"top_k={top_k} needs more tokens than the {rows.k} stored per row: the "
                "filtered rows would include unseen tail tokens"
            )
        probs /= probs.sum(axis=1, keepdims=True)
        open_tail, filtered = ~done, True
    if top_p is not None and top_p < 1.0:
        short = (probs.sum(axis=1) < top_p) & open_tail
        if np.any(short):
            raise DumpError(
                f"{name}: top_p={top_p:g} needs tokens beyond the {rows.k} stored per row at "
                f"{describe_steps(ids[short])}: the stored mass there is below top_p; "
                "store more tokens per row or full logits"
            )
        probs[~top_p_mask(probs, float(top_p))] = 0.0
        probs /= probs.sum(axis=1, keepdims=True)
        filtered = True
    if not filtered:  # the rows as stored: their rounding allowance stays theirs
        return rows
    with np.errstate(divide="ignore"):
        out = np.log(probs)
    return TopKRows(rows.ids, out, zeros, rows.vocab_size, done)
