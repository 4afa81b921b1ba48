r"""``α*`` per step of dumped rows: a point for full rows, an interval for top-k rows.

Full rows are processed (:func:`otbound.dumps.prepare_distributions`) and swept
(:func:`otbound.optimal_acceptance`, any design). Top-k rows know the probabilities of their
stored tokens and the tail's total mass, not how the tail is spread: they are processed where
that is exact (:func:`otbound.dumps.process_topk`), and for the ``iid`` design the
full-vocabulary ``α*`` lies in ``[lower, upper]`` (:func:`topk_interval`; the mathematics,
on plain arrays, is :mod:`otbound.bounds.intervals`). Other designs are refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otbound._checks import as_num_drafts
from otbound.bounds import optimal_acceptance
from otbound.bounds.intervals import INTERVAL_DESIGNS, iid_interval, merge_known
from otbound.dumps import DumpError, TopKRows, describe_steps, prepare_distributions
from otbound.dumps._processing import as_step_ids
from otbound.dumps._topk import (
    complete_rows,
    describe_mass_errors,
    find_bad_topk_steps,
    known_and_tail,
    process_topk,
)

__all__ = ["INTERVAL_DESIGNS", "AcceptanceInterval", "acceptance_interval", "topk_interval"]


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
    :meth:`~otbound.dumps.TopKRows.rounding_allowance`, ``w = 2 (δ_p + n δ_q)`` plus one
    float step. So no tail counts as zero for being small, and a row whose stored
    probabilities sum to more than ``1 + δ`` is refused, naming the step and the excess, never
    rescaled. Only *complete* rows (every token stored, or the tail emptied by filtering or
    temperature 0, see :class:`~otbound.dumps.TopKRows`) have an empty tail: their sum is
    scaled to one, as a full row's is, their ``δ`` is not added, and when both rows are
    complete the interval is a point (``lower == upper``, labelled exact), as exact as the
    ``α*`` of full rows.

    Parameters
    ----------
    target, draft : TopKRows
        Valid rows of the two models at the same steps, over one vocabulary (after
        :func:`~otbound.dumps.process_topk`, or raw at temperature 1).
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
    p_known, _ = known_and_tail(target, "target", ids)
    q_known, _ = known_and_tail(draft, "draft", ids)
    p, q = merge_known(
        target.ids, p_known, complete_rows(target), draft.ids, q_known, complete_rows(draft)
    )
    return iid_interval(
        p,
        q,
        n,
        target_complete=complete_rows(target),
        draft_complete=complete_rows(draft),
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
    :func:`~otbound.dumps.process_topk` and :func:`topk_interval` (``iid`` only; temperature 0 or 1;
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
        masses = [describe_mass_errors(rows, ids) for rows in (target, draft)]
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
