r"""Truncated (top-k) rows: exact processing where possible, and an interval for ``α*``.

A top-k row knows the probabilities of its ``K`` stored tokens and the total mass of the
rest (the tail), not how the tail is spread. Two things follow.

*Processing.* Temperature 1 changes nothing and temperature 0 (greedy) is exact: the argmax
is stored. Any other temperature reshapes the tail in a way that depends on the unknown tail
logits, so it is refused. Top-k filtering with ``k <= K`` is exact (the tail is dropped), and
so is top-p filtering when the stored tokens already hold at least ``top_p`` of the mass (no
tail token survives); otherwise it is refused, naming the steps. Ties between a stored token
and unseen tail tokens at a cut-off are resolved in favour of the stored token.

*The bound.* For the ``iid`` design the full-vocabulary ``α*`` lies in ``[lower, upper]``,
see :func:`topk_interval`; the mathematics lives with the bounds, in
:mod:`otbound.bounds.intervals`. Other designs are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from otbound._checks import as_num_drafts
from otbound.bounds import optimal_acceptance
from otbound.bounds.intervals import INTERVAL_DESIGNS, iid_interval, merge_known
from otbound.dumps._format import DumpError, TopKRows
from otbound.dumps._processing import (
    as_step_ids,
    check_filters,
    describe_steps,
    prepare_distributions,
    top_p_mask,
)


def _complete(rows: TopKRows) -> np.ndarray:
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
        fine = (error <= allowed) & (~_complete(rows) | (error >= -allowed))
    return np.where(fine, 0.0, error)


def _describe_mass_errors(rows: TopKRows, step_ids: object = None) -> str:
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


def _known_and_tail(
    rows: TopKRows, name: str = "rows", step_ids: object = None
) -> tuple[np.ndarray, np.ndarray]:
    """Stored probabilities and tail masses, as the interval uses them.

    A sum within rounding above one (``<= 1 + δ``) leaves no tail and is scaled to one, as is
    the sum of a complete row; the interval is widened for the rounding (see
    :func:`topk_interval`). A sum beyond rounding is a :class:`DumpError` naming the steps.
    """
    problems = _describe_mass_errors(rows, step_ids)
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
    probs, _ = _known_and_tail(rows, name, ids)
    logits = np.asarray(rows.logits, dtype=np.float64)
    zeros = np.zeros(rows.num_steps)
    done = np.ones(rows.num_steps, dtype=bool)
    open_tail = ~_complete(rows)  # a tail that is not known to be empty, however small
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


def _check_design(design: str) -> None:
    if design not in INTERVAL_DESIGNS:
        raise DumpError(
            f"no valid interval for the full-vocabulary α* is derived for design {design!r} "
            f"on top-k rows (only for {', '.join(INTERVAL_DESIGNS)}), and it is not "
            "approximated; dump full logits for this design"
        )


def topk_interval(
    target: TopKRows,
    draft: TopKRows,
    n: int,
    design: str = "iid",
    *,
    step_ids: object = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""An interval ``[lower, upper]`` that contains the full-vocabulary ``α*`` of every step.

    The known probabilities are the stored ones, or every token's when that model's tail is
    empty. The mathematics, on plain arrays, is :func:`otbound.bounds.intervals.iid_interval`
    (proof there, in ``otbound/bounds/intervals.py``): merging the unknown tokens into one
    gives the upper bound, putting the two tails on disjoint, never-stored tokens the lower
    bound; both ends are widened by the float rounding ``δ`` of
    :meth:`TopKRows.rounding_allowance`, ``w = 2 (δ_p + n δ_q)`` plus one float step. So no
    tail counts as zero for being small, and a row whose stored probabilities sum to more
    than ``1 + δ`` is refused, naming the step and the excess, never rescaled. Only
    *complete* rows (every token stored, or the tail emptied by filtering or temperature 0,
    see :class:`TopKRows`) have an empty tail: their sum is scaled to one, as a full row's
    is, their ``δ`` is not added, and when both rows are complete the interval is a point
    (``lower == upper``, labelled exact), as exact as the ``α*`` of full rows.

    Parameters
    ----------
    target, draft : TopKRows
        Valid rows of the two models at the same steps, over one vocabulary (after
        :func:`process_topk`, or raw at temperature 1).
    n : int
        Number of drafts.
    design : str, default "iid"
        Only ``"iid"`` (``n = 1``: single-draft speculative sampling) has a derived interval.
    step_ids : array_like of int, optional
        Global step ids of the rows, for messages (default ``0 .. steps − 1``).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``lower`` and ``upper``, float64, shape (steps,).

    Raises
    ------
    DumpError
        Another design, different step counts or vocabularies, or stored probabilities that
        sum to more than one beyond rounding (the steps and the excess named).
    """
    n = as_num_drafts(n)
    _check_design(design)
    if target.num_steps != draft.num_steps:
        raise DumpError(
            f"target and draft hold different numbers of steps: {target.num_steps} and "
            f"{draft.num_steps}"
        )
    if target.vocab_size != draft.vocab_size:
        raise DumpError(
            f"target and draft vocabularies differ ({target.vocab_size} and "
            f"{draft.vocab_size} tokens); truncating top-k rows is not exact (the cut tokens' "
            "share of the tail is unknown), so it is not supported: dump full logits"
        )
    steps = target.num_steps
    if steps == 0:
        return np.zeros(0), np.zeros(0)
    ids = as_step_ids(step_ids, steps)
    p_known, _ = _known_and_tail(target, "target", ids)
    q_known, _ = _known_and_tail(draft, "draft", ids)
    p, q = merge_known(target.ids, p_known, _complete(target), draft.ids, q_known, _complete(draft))
    return iid_interval(
        p,
        q,
        n,
        target_complete=_complete(target),
        draft_complete=_complete(draft),
        target_allowance=target.rounding_allowance(),
        draft_allowance=draft.rounding_allowance(),
    )


@dataclass(frozen=True)
class AcceptanceInterval:
    """``α*`` per step as an interval (``lower == upper`` where it is exact).

    Attributes
    ----------
    lower, upper : numpy.ndarray of float64, shape (m,)
        Bounds on the full-vocabulary ``α*`` of each kept step.
    step : numpy.ndarray of int64, shape (m,)
        Global step ids of the kept steps.
    kept : numpy.ndarray of bool, shape (steps,)
    skipped : numpy.ndarray of int64
        Global ids of bad steps dropped (``skip_bad_steps=True``).
    n : int
    design : str
    """

    lower: np.ndarray
    upper: np.ndarray
    step: np.ndarray
    kept: np.ndarray
    skipped: np.ndarray
    n: int
    design: str

    @property
    def exact(self) -> np.ndarray:
        """Steps where the interval is a point (full rows, or empty tails)."""
        point: np.ndarray = self.lower == self.upper
        return point


def acceptance_interval(
    target: np.ndarray | TopKRows,
    draft: np.ndarray | TopKRows,
    n: int,
    design: str = "iid",
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    values: str | tuple[str, str] = "logits",
    step_ids: object = None,
    skip_bad_steps: bool = False,
    truncate_vocab: bool = False,
) -> AcceptanceInterval:
    """``α*`` of every step, for full rows (a point) or top-k rows (an interval).

    Full rows go through :func:`~otbound.dumps.prepare_distributions` and
    :func:`otbound.optimal_acceptance` (any design). Top-k rows go through
    :func:`process_topk` and :func:`topk_interval` (``iid`` only; temperature 0 or 1;
    ``truncate_vocab`` is refused).

    Parameters
    ----------
    target, draft : numpy.ndarray, shape (steps, V), or TopKRows
    n : int
    design : str, default "iid"
    temperature, top_k, top_p, values, step_ids, skip_bad_steps, truncate_vocab
        As in :func:`~otbound.dumps.prepare_distributions`.

    Returns
    -------
    AcceptanceInterval
    """
    n = as_num_drafts(n)
    topk = isinstance(target, TopKRows), isinstance(draft, TopKRows)
    if not any(topk):
        dist = prepare_distributions(
            target,
            draft,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            values=values,
            step_ids=step_ids,
            skip_bad_steps=skip_bad_steps,
            truncate_vocab=truncate_vocab,
        )
        alpha = (
            np.atleast_1d(np.asarray(optimal_acceptance(dist.target, dist.draft, n, design)))
            if dist.step.size
            else np.zeros(0)
        )
        return AcceptanceInterval(
            alpha, alpha.copy(), dist.step, dist.kept, dist.skipped, n, design
        )
    if not all(topk):
        raise DumpError("target and draft must both be full rows or both be top-k rows")
    assert isinstance(target, TopKRows) and isinstance(draft, TopKRows)
    _check_design(design)
    if truncate_vocab and target.vocab_size != draft.vocab_size:
        raise DumpError(
            "truncate_vocab is not supported for top-k rows: the cut tokens' share of the "
            "unknown tail cannot be recovered; dump full logits"
        )
    if target.num_steps != draft.num_steps:
        raise DumpError(
            f"target and draft hold different numbers of steps: {target.num_steps} and "
            f"{draft.num_steps}"
        )
    ids = as_step_ids(step_ids, target.num_steps)
    bad_t, bad_d = find_bad_topk_steps(target), find_bad_topk_steps(draft)
    bad = bad_t | bad_d
    if np.any(bad) and not skip_bad_steps:
        which = [f"target at {describe_steps(ids[bad_t])}"] if np.any(bad_t) else []
        which += [f"draft at {describe_steps(ids[bad_d])}"] if np.any(bad_d) else []
        masses = [_describe_mass_errors(rows, ids) for rows in (target, draft)]
        which += [
            f"{side} {text}" for side, text in zip(("target", "draft"), masses, strict=True) if text
        ]
        raise DumpError(
            "invalid top-k rows (NaN or +inf logits, a non-finite logsumexp, bad or repeated "
            "ids, or stored probabilities whose sum is off beyond float rounding): "
            + "; ".join(which)
            + " (global step ids); pass skip_bad_steps=True to drop them"
        )
    kept = ~bad
    t_rows, d_rows = target.take(kept), draft.take(kept)
    common = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "step_ids": ids[kept]}
    t_rows = process_topk(t_rows, name="target", **common)
    d_rows = process_topk(d_rows, name="draft", **common)
    lower, upper = topk_interval(t_rows, d_rows, n, design, step_ids=ids[kept])
    return AcceptanceInterval(lower, upper, ids[kept], kept, ids[bad], n, design)
