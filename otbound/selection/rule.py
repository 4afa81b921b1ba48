r"""A selection rule and the single-draft test after it: the optimal verifier's two stages.

A rule picks one draft ``Z`` of the draft set ``S``; its *selection marginal* is
``r(z) = P(Z = z) = Σ_S Q(S) π(z | S)``. Testing ``Z`` against ``p`` as single-draft
speculative sampling does with ``r`` as the draft (accept with probability
``min(1, p(Z) / r(Z))``, else draw from ``(p − r)⁺ / ‖(p − r)⁺‖₁``) outputs

.. math::

    \min(p, r) + (p − r)^+ = p

whatever the rule, as long as ``r`` is its true marginal: the verifier is lossless by
construction, and accepts a draft with probability at least ``Σ min(p, r)``.

:class:`SelectionRule` is the *level rule*: every draft draws a level on ``[0, 1]``
independently from its token's level law, and the draft with the highest level is selected.
The line is cut into one slot per token with ``q > 0``, in decreasing ``p / q`` from the top,
slot ``k`` of length ``q_k``; a token's law is uniform on pieces of slots (its own, and pieces
of other tokens' slots it took in a swap), and each slot's length is used once in all, so one
i.i.d. draft's level is uniform on ``[0, 1]`` and a draft at level ``s`` beats ``n − 1`` others
with probability ``s^{n−1}``. :mod:`otbound.selection.levels` builds the laws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otbound.verifiers.base import residual

__all__ = ["SelectionRule", "residual_cdf", "single_draft_test"]


def residual_cdf(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The cumulative sums of ``(p − r)⁺ / ‖(p − r)⁺‖₁`` (of ``p`` where ``r ≥ p`` everywhere),
    ending at one: the residual that :func:`single_draft_test` draws from."""
    rest = residual(p, r)
    cdf: np.ndarray = np.cumsum(rest)
    cdf /= cdf[-1]
    return cdf


def single_draft_test(
    selected: np.ndarray,
    p: np.ndarray,
    r: np.ndarray,
    rng: np.random.Generator,
    rest_cdf: np.ndarray | None = None,
) -> np.ndarray:
    r"""Single-draft speculative sampling of the selected drafts against ``p``, with ``r`` as
    the draft distribution.

    Parameters
    ----------
    selected : numpy.ndarray of int64, shape (trials,)
        The selected token of each trial, drawn with marginal ``r``.
    p, r : numpy.ndarray, shape (V,)
        The target and the rule's selection marginal.
    rng : numpy.random.Generator
    rest_cdf : numpy.ndarray, optional
        :func:`residual_cdf` of ``p`` and ``r``, when the caller keeps it.

    Returns
    -------
    numpy.ndarray of int64, shape (trials,)
        ``selected`` where ``u < p / r`` (``u`` uniform), else a draw from
        ``(p − r)⁺ / ‖(p − r)⁺‖₁``: distributed as ``p`` exactly.
    """
    cdf = residual_cdf(p, r) if rest_cdf is None else rest_cdf
    keep = rng.random(selected.size) * r[selected] < p[selected]
    drawn = np.searchsorted(cdf, rng.random(selected.size), side="right")
    out: np.ndarray = np.where(keep, selected, np.minimum(drawn, cdf.size - 1))
    return out.astype(np.int64)


@dataclass(frozen=True)
class SelectionRule:
    r"""The level rule of one step: every draft's level law and the exact selection marginal.

    Attributes
    ----------
    design : str
        The draft design whose marginal ``selection`` is.
    n : int
        The number of drafts.
    order : numpy.ndarray of int64, shape (m,)
        The tokens with ``q > 0`` in slot order (decreasing ``p / q``; position 0 is the top).
    position : numpy.ndarray of int64, shape (V,)
        Each token's slot position, ``-1`` where ``q = 0``.
    start, slot, cumulative : numpy.ndarray
        The pieces of the level laws (CSR): the owner at position ``k`` holds the pieces
        ``start[k]:start[k + 1]``, each of slot position ``slot[j]`` with cumulative share
        ``cumulative[j]`` of its measure.
    selection : numpy.ndarray, shape (V,)
        ``r(z) = P(Z = z)`` under the design, exact to rounding.
    target : numpy.ndarray, shape (V,)
        ``p``.
    rest_cdf : numpy.ndarray, shape (V,)
        :func:`residual_cdf` of ``p`` and ``r``.
    """

    design: str
    n: int
    order: np.ndarray
    position: np.ndarray
    start: np.ndarray
    slot: np.ndarray
    cumulative: np.ndarray
    selection: np.ndarray
    target: np.ndarray
    rest_cdf: np.ndarray

    def residual(self) -> np.ndarray:
        """``(p − r)⁺ / ‖(p − r)⁺‖₁``: where a rejected selection's replacement is drawn."""
        return residual(self.target, self.selection)

    def acceptance(self) -> float:
        """``Σ min(p, r)``: the chance the selected draft passes its test."""
        return float(np.minimum(self.target, self.selection).sum())

    def select(self, drafts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected token of each row of ``drafts`` (trials, n): the highest level wins."""
        from otbound.selection._kernels import select_levels  # numba

        positions = self.position[drafts]
        if np.any(positions < 0):
            raise ValueError("drafts contain a token with q = 0, which the design never draws")
        if drafts.shape[1] == 1:  # one draft: it is selected (no randomness spent on it)
            only: np.ndarray = drafts[:, 0].copy()
            return only
        piece_u = rng.random(drafts.shape)
        level_u = rng.random(drafts.shape)
        index = select_levels(positions, self.start, self.slot, self.cumulative, piece_u, level_u)
        chosen: np.ndarray = drafts[np.arange(drafts.shape[0]), index]
        return chosen

    def verify(self, drafts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The output token of each row of ``drafts``: a selection, then its single-draft test."""
        selected = self.select(drafts, rng)
        return single_draft_test(selected, self.target, self.selection, rng, self.rest_cdf)
