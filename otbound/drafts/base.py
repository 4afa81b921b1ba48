"""The draft-design base class: everything the sweeps, the torch path, the figures and the
tests need to know about a design is a method or an attribute here.

A new design subclasses :class:`DraftDesign` in a module of its own and is listed in
:mod:`otbound.drafts.registry`; ``docs/extending.md`` walks through an example.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from otbound.drafts.tokens import sweep_key, tuples_to_sets

if TYPE_CHECKING:
    import torch

__all__ = [
    "ABOVE_SUPPORT",
    "ABOVE_VOCABULARY",
    "NEEDS_SLOTS",
    "UNUSABLE_REASONS",
    "DraftDesign",
]

#: Reasons of :meth:`DraftDesign.unusable` (besides ``"design defined for n=N only"``).
ABOVE_SUPPORT = "n larger than the support of q"
ABOVE_VOCABULARY = "n larger than the vocabulary"
NEEDS_SLOTS = "design needs one q per draft slot"
UNUSABLE_REASONS = (ABOVE_SUPPORT, ABOVE_VOCABULARY, NEEDS_SLOTS)


class DraftDesign(ABC):
    """A draft design. Subclasses set ``name`` and implement the abstract methods.

    Attributes
    ----------
    name : str
        Registry name.
    title : str
        How the figures title the design (default: the name).
    distinct : bool
        Whether the drafts are distinct tokens (then ``n`` may not exceed the support of ``q``).
    within_vocabulary : bool
        Whether ``n`` may not exceed the vocabulary (every distinct design, and ``topk``).
    fixed_n : int or None
        The only ``n`` the design is defined for (``hub``: 2).
    exact_sweep : bool
        Whether the prefix sweep gives the exact ``α*`` (``per_slot``: an upper bound only).
    slot_axis : bool
        Whether ``q`` carries one distribution per slot, shape ``(..., n, V)``.
    shared_sweep : bool
        Whether one sort serves every ``n``: :meth:`sweep_orders` does not depend on ``n`` and
        there is no closed form, so ``α*`` for several ``n`` takes one sort and
        :meth:`prefix_masses` (``without_replacement``, ``conditional_poisson``).
    direct_sweep_name : str
        What :meth:`direct_sweep` computes, for error messages.
    torch_sweep : bool
        Whether :meth:`torch_gap` computes ``α* − 1`` in torch
        (:func:`otbound.bounds.torch_sweep.optimal_acceptance_torch`).
    topk_interval : bool
        Whether ``α*`` has a certified interval on top-k (truncated) dump rows.
    """

    name: ClassVar[str]
    title: ClassVar[str] = ""
    distinct: ClassVar[bool] = False
    within_vocabulary: ClassVar[bool] = False
    fixed_n: ClassVar[int | None] = None
    exact_sweep: ClassVar[bool] = True
    slot_axis: ClassVar[bool] = False
    shared_sweep: ClassVar[bool] = False
    direct_sweep_name: ClassVar[str] = "closed form"
    torch_sweep: ClassVar[bool] = False
    topk_interval: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<draft design {self.name!r}>"

    def fixed_tokens(self, n: int) -> int:
        """How many of the ``n`` drafts are deterministic: the most likely tokens of ``q``,
        drawn first (``greedy``: ``n − 1``; ``topk``: ``n``; ``hub``: 1; sampled designs: 0).

        A token order along which :meth:`prefix_mass` is valid puts these tokens first.
        """
        return 0

    @property
    def figure_title(self) -> str:
        """:attr:`title`, or the name where the design has none."""
        return self.title or self.name

    # -- validation -------------------------------------------------------------------------
    def unusable(self, q: np.ndarray, n: int) -> np.ndarray:
        """Why ``n`` drafts cannot be drawn from each row of ``q`` (..., V), ``""`` where they can.

        The one statement of the design's conditions: :meth:`check` raises on the first row
        with a reason, and :func:`otbound.compare` records the reasons of the cells it skips.

        Returns
        -------
        numpy.ndarray of str (object), shape ``q.shape[:-1]`` (without the slot axis)
            One of :data:`UNUSABLE_REASONS` (``"design defined for n=2 only"`` for ``hub``
            at another ``n``), or ``""``.
        """
        return self.unusable_rows(q.shape, n, lambda: np.count_nonzero(q > 0, axis=-1))

    def unusable_rows(
        self, shape: tuple[int, ...], n: int, support: Callable[[], Any]
    ) -> np.ndarray:
        """:meth:`unusable` from the shape of ``q`` and its support sizes alone.

        Parameters
        ----------
        shape : tuple of int
            The shape of ``q``, (..., V) or (..., n, V).
        n : int
        support : callable
            Returns the number of tokens with ``q > 0`` per row, an array of shape
            ``shape[:-1]`` (numpy, or anything ``numpy.asarray`` reads: the torch path
            counts on its device); called only for designs with distinct drafts.
        """
        reasons = np.full(shape[: -2 if self._slotted(shape, n) else -1], "", dtype=object)
        reason = self._shape_reason(shape, n)
        if reason:
            reasons[...] = reason
        elif self.distinct:
            reasons[np.asarray(support()) < n] = ABOVE_SUPPORT
        return reasons

    def _slotted(self, shape: tuple[int, ...], n: int) -> bool:
        """Whether ``q`` of this shape has the slot axis of ``n`` draft distributions."""
        return bool(self.slot_axis and len(shape) >= 2 and shape[-2] == n)

    def _shape_reason(self, shape: tuple[int, ...], n: int) -> str:
        """The reason of :meth:`unusable_rows` that the shape of ``q`` and ``n`` alone give
        every row (``""``: none; the support sizes may still give one)."""
        if self.fixed_n is not None and n != self.fixed_n:
            return f"design defined for n={self.fixed_n} only"
        if self.slot_axis and not self._slotted(shape, n):
            return NEEDS_SLOTS
        if n > shape[-1] and (self.distinct or self.within_vocabulary):
            return ABOVE_VOCABULARY
        return ""

    def check(self, q: np.ndarray, n: int) -> None:
        """Raise ``ValueError`` when ``n`` drafts cannot be drawn from ``q`` (..., V): the
        first row with a reason of :meth:`unusable`, in words."""
        self.check_rows(q.shape, n, lambda: np.count_nonzero(q > 0, axis=-1))

    def check_rows(self, shape: tuple[int, ...], n: int, support: Callable[[], Any]) -> None:
        """:meth:`check` from the shape of ``q`` and its support sizes (as
        :meth:`unusable_rows`); the numpy and torch paths raise the same words."""
        counts: list[np.ndarray] = []

        def counted() -> np.ndarray:  # the support sizes, counted once
            if not counts:
                counts.append(np.asarray(support()))
            return counts[0]

        if self._usable_everywhere(shape, n, counted):
            return
        reasons = self.unusable_rows(shape, n, counted)
        bad = np.argwhere(np.atleast_1d(reasons != ""))
        if bad.size == 0:
            return
        row = tuple(int(i) for i in bad[0])
        reason = np.atleast_1d(reasons)[row]
        if reason == NEEDS_SLOTS:
            raise ValueError(
                f"design {self.name!r} needs one draft distribution per slot: q must have shape "
                f"(..., n, V) with n={n}, got {tuple(shape)}"
            )
        if reason == ABOVE_VOCABULARY:
            raise ValueError(f"n={n} is larger than the vocabulary size V={shape[-1]}")
        if reason == ABOVE_SUPPORT:
            many = len(shape) > 1
            where = f" in row {row}" if many else ""
            size = int(np.atleast_1d(counts[0])[row if many else 0])
            raise ValueError(
                f"n={n} is larger than the support of q{where} ({size} tokens with q > 0); "
                f"design {self.name!r} draws {n} distinct tokens"
            )
        raise ValueError(f"design {self.name!r} is defined for n={self.fixed_n} only, got n={n}")

    def _usable_everywhere(
        self, shape: tuple[int, ...], n: int, support: Callable[[], Any]
    ) -> bool:
        """Whether :meth:`unusable_rows` would give no reason for any row, without building
        its table of reasons (the common case of :meth:`check_rows`, asked once per step and
        verifier by :func:`otbound.compare`); ``False`` sends :meth:`check_rows` to the table
        for the first reason in words."""
        if self._shape_reason(shape, n):
            return False
        if not self.distinct:
            return True
        counts = support()
        if isinstance(counts, int | np.integer):  # one step's count (no array to reduce)
            return int(counts) >= n
        return bool(np.all(np.asarray(counts) >= n))

    # -- sampling and enumeration ------------------------------------------------------------
    @abstractmethod
    def sample(self, q: np.ndarray, n: int, size: int, rng: np.random.Generator) -> np.ndarray:
        """Draw ``size`` draft tuples from one draft distribution ``q`` (V,); shape (size, n)."""

    @abstractmethod
    def tuple_support(self, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Every ordered draft tuple with positive probability: (tuples (m, n), probs (m,))."""

    def set_support(self, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Sets of distinct draft tokens with their probabilities (``-1`` pads short sets)."""
        tuples, probs = self.tuple_support(q, n)
        return tuples_to_sets(tuples, probs, q.shape[-1])

    # -- the prefix sweep --------------------------------------------------------------------
    def sweep_orders(self, p: np.ndarray, q: np.ndarray, n: int) -> list[np.ndarray]:
        """Token orders (B, V) whose prefixes the sweep tries; the default sorts by ``p/q``."""
        return [np.argsort(sweep_key(p, q), axis=-1)]

    def closed_form(
        self, p: np.ndarray, q: np.ndarray, n: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(α* − 1, H)`` per row (B, V) without sorting, where a closed form exists."""
        return None

    def direct_sweep(
        self, p: np.ndarray, q: np.ndarray, n: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(α* − 1, H)`` per row (B, V) by the design's own method (a closed form, or a
        kernel of its own such as ``iid``'s bucketed sweep), or ``None``: the generic sorted
        sweep. The default is :meth:`closed_form`."""
        return self.closed_form(p, q, n)

    def prefix_minimum(
        self, p_sorted: np.ndarray, q_sorted: np.ndarray, counts: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``min(0, min_i [p(H_i) − Q_n(H_i)])`` and its prefix length ``i`` per ``n`` and row
        (len(counts), B), where the design finds it without ``Q`` at every prefix; ``None``
        (the default): the sweep takes the minimum of :meth:`prefix_masses`."""
        return None

    @abstractmethod
    def prefix_mass(self, q_sorted: np.ndarray, n: int) -> np.ndarray:
        """``Q(H_i)`` for the prefixes of ``q_sorted`` (B, [n,] V): shape (B, V + 1)."""

    def prefix_masses(self, q_sorted: np.ndarray, counts: Sequence[int]) -> np.ndarray:
        """:meth:`prefix_mass` for each ``n`` in ``counts``: shape (len(counts), B, V + 1)."""
        return np.stack([self.prefix_mass(q_sorted, n) for n in counts])

    # -- torch --------------------------------------------------------------------------------
    def torch_gap(self, p: torch.Tensor, q: torch.Tensor, n: int) -> torch.Tensor:
        """``α* − 1`` per row of validated tensors ``p``, ``q`` (B, V), in torch; designs with
        :attr:`torch_sweep` implement it (see :mod:`otbound.drafts._torch_closed_forms`)."""
        raise NotImplementedError(f"design {self.name!r} has no torch sweep")
