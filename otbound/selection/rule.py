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
from functools import cached_property

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
    r"""The level rule of one step: every draft's level law, built on demand.

    The set-up (:func:`otbound.selection.level_rule`) keeps the slots in order, their values
    and each block's line of transfers (:func:`~otbound.selection._kernels.transfer_ledger`);
    a selection finds the drafted tokens' level laws by bisection on it, so a verification
    costs ``O(n log V)`` and no step builds every token's law unless asked
    (:attr:`tables`, :attr:`selection`).

    Attributes
    ----------
    design : str
        The draft design whose marginal :attr:`selection` is.
    n : int
        The number of drafts.
    target : numpy.ndarray, shape (V,)
        ``p``.
    order : numpy.ndarray of int64, shape (m,)
        The tokens with ``q > 0`` in slot order (decreasing ``p / q``; position 0 is the top).
    q_sorted, values : numpy.ndarray, shape (m,)
        ``q`` in slot order and the slots' values ``v_k``.
    ledger : tuple of numpy.ndarray
        The blocks' transfers (:func:`~otbound.selection._kernels.transfer_ledger`).
    """

    design: str
    n: int
    target: np.ndarray
    order: np.ndarray
    q_sorted: np.ndarray
    values: np.ndarray
    ledger: tuple[np.ndarray, ...]

    @cached_property
    def position(self) -> np.ndarray:
        """Each token's slot position, ``-1`` where ``q = 0`` (shape (V,))."""
        out = np.full(self.target.size, -1, dtype=np.int64)
        out[self.order] = np.arange(self.order.size)
        return out

    @cached_property
    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(start, slot, cumulative, selected)``: every owner's pieces (CSR, its own slot
        first; cumulative shares of its measure) and every slot's selection mass
        (:func:`~otbound.selection._kernels.level_tables`)."""
        from otbound.selection._kernels import level_tables  # numba

        tables: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = level_tables(
            self.q_sorted, self.values, self.ledger
        )
        return tables

    @cached_property
    def selection(self) -> np.ndarray:
        """``r(z) = P(Z = z)`` under the design, exact to rounding (shape (V,))."""
        out = np.zeros(self.target.size)
        out[self.order] = self.tables[3]
        return out

    @cached_property
    def rest_cdf(self) -> np.ndarray:
        """:func:`residual_cdf` of ``p`` and the blocks' targets ``c_j p`` (``r`` to rounding)."""
        excess = self.ledger[0]
        aimed = np.zeros(self.target.size)
        aimed[self.order] = self.q_sorted * self.values - excess
        return residual_cdf(self.target, aimed)

    def pieces(self, token: int) -> tuple[np.ndarray, np.ndarray]:
        """A drafted token's level law: the slot positions of its pieces (its own first) and
        the measure it holds of each (summing to its ``q``, to rounding)."""
        from otbound.selection._kernels import own_pieces  # numba

        k = int(self.position[token])
        if k < 0:
            raise ValueError(f"token {token} has q = 0: the design never draws it")
        room = self.order.size + 1
        slots, measures = np.empty(room, dtype=np.int64), np.empty(room)
        count, _, _ = own_pieces(k, self.q_sorted, self.values, self.ledger, slots, measures)
        return slots[:count].copy(), measures[:count].copy()

    def residual(self) -> np.ndarray:
        """``(p − r)⁺ / ‖(p − r)⁺‖₁``: where a rejected selection's replacement is drawn."""
        return np.diff(self.rest_cdf, prepend=0.0)

    def acceptance(self) -> float:
        """``Σ min(p, r)``: the chance the selected draft passes its test."""
        return float(np.minimum(self.target, self.selection).sum())

    def select(self, drafts: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The selected token of each row of ``drafts`` (trials, n), the highest level winning,
        and its selection mass ``r``."""
        from otbound.selection._kernels import select_levels  # numba

        positions = self.position[drafts]
        if np.any(positions < 0):
            raise ValueError("drafts contain a token with q = 0, which the design never draws")
        if drafts.shape[1] == 1:  # one draft: it is selected (no randomness spent on it)
            only: np.ndarray = drafts[:, 0].copy()
            return only, self.q_sorted[positions[:, 0]].copy()  # r = q
        piece_u = rng.random(drafts.shape)
        level_u = rng.random(drafts.shape)
        index, mass = select_levels(
            positions, self.q_sorted, self.values, self.ledger, piece_u, level_u
        )
        chosen: np.ndarray = drafts[np.arange(drafts.shape[0]), index]
        return chosen, mass

    def verify(self, drafts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The output token of each row of ``drafts``: a selection, then its single-draft test."""
        selected, mass = self.select(drafts, rng)
        r = np.zeros(self.target.size)
        r[selected] = mass  # r at the selected tokens: all the test reads of it
        return single_draft_test(selected, self.target, r, rng, self.rest_cdf)
