r"""Intervals for ``α*`` when only part of each distribution is known (top-k rows).

A truncated row knows the probabilities of some tokens and the total mass of the rest (the
tail), not how the tail is spread. For i.i.d. drafts the full-vocabulary
``α* = 1 + \min_H [p(H) − q(H)^n]`` still lies in an interval computed from what is known:
:func:`iid_interval`. This module is the mathematics only, on plain arrays; reading,
validating and filtering top-k rows is :mod:`otbound.dumps`' job
(:func:`otbound.analysis.topk_interval` builds the arrays from :class:`otbound.dumps.TopKRows`).
"""

from __future__ import annotations

import numpy as np

from otbound.bounds.sweep import optimal_acceptance
from otbound.drafts import designs_where

__all__ = ["INTERVAL_DESIGNS", "iid_alpha", "iid_interval", "merge_known"]

#: Designs for which :func:`iid_interval` derives a valid interval: those that declare
#: ``topk_interval`` (:class:`otbound.drafts.DraftDesign`).
INTERVAL_DESIGNS: tuple[str, ...] = designs_where("topk_interval")


def merge_known(
    target_ids: np.ndarray,
    p_known: np.ndarray,
    target_complete: np.ndarray,
    draft_ids: np.ndarray,
    q_known: np.ndarray,
    draft_complete: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the union of the stored ids with both models' known probabilities.

    Parameters
    ----------
    target_ids, p_known : numpy.ndarray, shape (steps, K_p)
        The target's stored token ids (distinct within a row) and their probabilities.
    target_complete : numpy.ndarray of bool, shape (steps,)
        Rows whose tail is empty: a token the target did not store has probability zero.
    draft_ids, q_known, draft_complete
        The same for the draft (``K_q`` tokens per row).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``p`` and ``q`` of shape (steps, K_p + K_q) on the union's tokens: each id once,
        repeated slots become padding with ``p = q = 0``; NaN where a probability is unknown.

    Examples
    --------
    >>> import numpy as np
    >>> p, q = merge_known(np.array([[0, 1]]), np.array([[0.5, 0.3]]), np.array([False]),
    ...                    np.array([[1, 2]]), np.array([[0.6, 0.4]]), np.array([True]))
    >>> p.round(2).tolist(), q.round(2).tolist()
    ([[0.5, 0.3, 0.0, nan]], [[0.0, 0.6, 0.0, 0.4]])
    """
    steps, k_p, k_q = p_known.shape[0], p_known.shape[1], q_known.shape[1]
    ids = np.concatenate([target_ids, draft_ids], axis=1)
    nan_q = np.full((steps, k_q), np.nan)
    nan_p = np.full((steps, k_p), np.nan)
    p = np.concatenate([p_known, nan_q], axis=1)
    q = np.concatenate([nan_p, q_known], axis=1)
    order = np.argsort(ids, axis=1, kind="stable")
    ids = np.take_along_axis(ids, order, axis=1)
    p = np.take_along_axis(p, order, axis=1)
    q = np.take_along_axis(q, order, axis=1)
    # ids are distinct within each model, so a repeated id is one target and one draft slot
    first = np.zeros(ids.shape, dtype=bool)
    first[:, :-1] = ids[:, 1:] == ids[:, :-1]
    second = np.zeros(ids.shape, dtype=bool)
    second[:, 1:] = first[:, :-1]
    p_next = np.roll(p, -1, axis=1)
    q_next = np.roll(q, -1, axis=1)
    p = np.where(first, np.fmax(p, p_next), p)
    q = np.where(first, np.fmax(q, q_next), q)
    p[second] = 0.0
    q[second] = 0.0
    # with an empty tail, a token the model did not store has probability zero: known
    p[np.isnan(p) & target_complete[:, None]] = 0.0
    q[np.isnan(q) & draft_complete[:, None]] = 0.0
    return p, q


def iid_alpha(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """``α*`` of i.i.d. drafts per row; zero columns pad the rows to at least ``n`` tokens.

    Tokens with ``p = q = 0`` change nothing, and otbound refuses ``n > V``, so padding a
    short row (a few known tokens and a tail cell) makes every row valid.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (steps, m)
        Distributions, one per row (normalised by :func:`otbound.optimal_acceptance`).
    n : int
        Number of drafts.

    Returns
    -------
    numpy.ndarray of float64, shape (steps,)

    Examples
    --------
    >>> import numpy as np
    >>> iid_alpha(np.array([[0.5, 0.5]]), np.array([[1.0, 0.0]]), 4).tolist()
    [0.5]
    """
    if p.shape[1] < n:
        pad = np.zeros((p.shape[0], n - p.shape[1]))
        p, q = np.concatenate([p, pad], axis=1), np.concatenate([q, pad], axis=1)
    alpha = optimal_acceptance(p, q, n, "iid", normalize=True)
    return np.atleast_1d(np.asarray(alpha, dtype=np.float64))


def iid_interval(
    p: np.ndarray,
    q: np.ndarray,
    n: int,
    *,
    target_complete: np.ndarray,
    draft_complete: np.ndarray,
    target_allowance: np.ndarray,
    draft_allowance: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    r"""An interval ``[lower, upper]`` that contains the full-vocabulary ``α*`` of every row.

    Write ``K_p`` (``K_q``) for the tokens whose target (draft) probability is known (not NaN
    in ``p``, ``q``), and ``r_p``, ``r_q`` for the tail masses. For i.i.d. drafts
    ``α* = 1 + \min_H [p(H) − q(H)^n]``.

    **Upper bound: merge the unknown tokens into one.** Let ``K = K_p ∩ K_q`` and ``R = V ∖ K``.
    The merged pair lives on ``K ∪ {R}`` with ``p̄(R) = 1 − p(K)``, ``q̄(R) = 1 − q(K)``
    (both known). Every set of cells ``H̄`` is the set of tokens ``H = ∪H̄`` with
    ``p(H) = p̄(H̄)`` and ``q(H) = q̄(H̄)``, so the merged minimum runs over a subfamily of the
    sets ``H`` and cannot be smaller: ``α*(p, q) <= α*(p̄, q̄) = upper``, whatever the tails
    hold. (Merging tokens never lowers ``α*`` for i.i.d. drafts because ``Q(H) = q(H)^n``
    depends on ``q(H)`` alone; the tests check it on random partitions. It is not true for
    every design: with ``conditional_poisson`` drafts, ``p = (.12, .08, .01, .44, .35)``,
    ``q = (.03, .31, .22, .21, .23)``, ``n = 2``, merging the last two tokens lowers ``α*``
    from 0.9100 to 0.8836.)

    **Lower bound: the tails as adversarial as possible.** For any ``H``,
    ``p(H) >= p(H ∩ K_p)`` and ``q(H) <= q(H ∩ K_q) + r_q``. Build ``p̃, q̃`` on
    ``K_p ∪ K_q`` plus two new tokens ``t_p`` (``p̃ = r_p``, ``q̃ = 0``) and ``t_q``
    (``p̃ = 0``, ``q̃ = r_q``), with ``p̃ = 0`` where ``p`` is unknown and ``q̃ = 0`` where
    ``q`` is unknown. Then ``H̃ = (H ∩ (K_p ∪ K_q)) ∪ {t_q}`` has ``p̃(H̃) <= p(H)`` and
    ``q̃(H̃) >= q(H)``, so ``p(H) − q(H)^n >= p̃(H̃) − q̃(H̃)^n >= \min_{H̃}[…]`` for every ``H``:
    ``α*(p, q) >= α*(p̃, q̃) = lower``. This is the ``α*`` of the completion that puts the two
    tails on disjoint, never-stored tokens, where no tail token can be accepted.

    Both bounds are exact when both tails are empty, and their gap shrinks with the tails.

    **Rounding is carried, never ignored.** The stored numbers fix each known probability and
    the tail ``1 − Σ p̂`` only up to a float error ``δ`` (``target_allowance``,
    ``draft_allowance``). Together they move by at most ``3δ`` in L1 (``δ`` for the
    probabilities, ``δ`` for the tail, ``δ`` for scaling a sum in ``(1, 1 + δ]`` to one), so
    each pair built above moves by at most ``2δ`` in total variation (the merged cell ``R``
    counts twice). As ``|α*(p, q) − α*(p', q')| <= TV(p, p') + n TV(q, q')`` (``|a^n − b^n| <=
    n|a − b|`` on ``[0, 1]``), both ends are moved outwards by

    .. math:: w = 2\,(δ_p + n\,δ_q)

    and one more float step, then clipped to ``[0, 1]``. So no tail counts as zero for being
    small (a tail of ``1e-13`` widens the interval by about ``1e-13``). Only *complete* rows
    have an empty tail: their ``δ`` is not added, and when both rows are complete the interval
    is a point (``lower == upper``).

    Parameters
    ----------
    p, q : numpy.ndarray, shape (steps, m)
        Known probabilities on a common set of tokens, NaN where unknown (as from
        :func:`merge_known`); the known ones of a row sum to at most one.
    n : int
        Number of drafts (already checked).
    target_complete, draft_complete : numpy.ndarray of bool, shape (steps,)
        Rows whose tail is empty.
    target_allowance, draft_allowance : numpy.ndarray of float64, shape (steps,)
        The rounding ``δ`` of each row's stored probabilities.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``lower`` and ``upper``, float64, shape (steps,).

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.6, np.nan]]); q = np.array([[0.5, 0.3]])
    >>> lower, upper = iid_interval(p, q, 1, target_complete=np.array([False]),
    ...     draft_complete=np.array([False]), target_allowance=np.zeros(1),
    ...     draft_allowance=np.zeros(1))
    >>> round(float(lower[0]), 6), round(float(upper[0]), 6)
    (0.5, 0.9)
    """
    steps = p.shape[0]
    p_unknown, q_unknown = np.isnan(p), np.isnan(q)
    both = ~p_unknown & ~q_unknown
    p_up = np.where(both, p, 0.0)
    q_up = np.where(both, q, 0.0)
    rest_p = np.clip(1.0 - p_up.sum(axis=1, keepdims=True), 0.0, 1.0)
    rest_q = np.clip(1.0 - q_up.sum(axis=1, keepdims=True), 0.0, 1.0)
    upper = iid_alpha(
        np.concatenate([p_up, rest_p], axis=1), np.concatenate([q_up, rest_q], axis=1), n
    )
    p_lo = np.where(p_unknown, 0.0, p)
    q_lo = np.where(q_unknown, 0.0, q)
    t_p = np.clip(1.0 - p_lo.sum(axis=1, keepdims=True), 0.0, 1.0)
    t_q = np.clip(1.0 - q_lo.sum(axis=1, keepdims=True), 0.0, 1.0)
    zero = np.zeros((steps, 1))
    lower = iid_alpha(
        np.concatenate([p_lo, t_p, zero], axis=1), np.concatenate([q_lo, zero, t_q], axis=1), n
    )
    exact = target_complete & draft_complete  # both pairs are then (p, q) up to zero padding
    lower[exact] = upper[exact]
    slack = 2.0 * (
        np.where(target_complete, 0.0, target_allowance)
        + n * np.where(draft_complete, 0.0, draft_allowance)
    )
    lower = np.where(exact, lower, np.clip(np.nextafter(lower - slack, -np.inf), 0.0, 1.0))
    upper = np.where(exact, upper, np.clip(np.nextafter(upper + slack, np.inf), 0.0, 1.0))
    return lower, upper
