"""The validated step: target and draft distributions, checked once at the public edge.

The public functions (:func:`otbound.optimal_acceptance`, :func:`otbound.compare`, the
verifiers' ``acceptance`` ...) turn their array arguments into a :class:`Step` with
:meth:`Step.validate`; everything inward takes the ``Step`` and trusts it, so that a batch of
rows is validated once however many bounds and verifiers read it (the pattern of scipy's
``_clean_inputs`` → ``_LPProblem``). The dataclass constructor itself is the trusted path: it
checks nothing, and is for arrays that are already valid (slices of a validated ``Step``).
A ``Step``'s arrays never change after it is made: what is derived from them (:attr:`Step.flat`,
:attr:`Step.support`, :attr:`Step.ratio_order`) is computed once and kept on the object.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from otbound._checks import as_distribution_pair, broadcast_batch

__all__ = ["Step"]


#: The arrays :meth:`Step.freeze` made read-only, by id (weak: an entry goes with its array).
_FROZEN: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()


def frozen(a: np.ndarray) -> bool:
    """Whether ``a``'s values are fixed for as long as ``a`` lives: ``a`` is, or views through
    read-only views only, an array that :meth:`Step.freeze` made read-only and that is
    read-only still.

    Only otbound's own new arrays are frozen (the rows :func:`otbound.compare` validated, the
    analysis' rows), before any view of them is taken, so no array can write their values. A
    caller's read-only array is not frozen: a writable view of it taken earlier could still
    change it.

    Examples
    --------
    >>> step = Step.validate([[0.5, 0.5]], [[0.25, 0.75]])
    >>> frozen(step.p[0])
    False
    >>> frozen(step.freeze().p[0])
    True
    """
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        if a.base is None:
            return _FROZEN.get(id(a)) is a
        a = a.base
    return False


@dataclass(frozen=True, eq=False)
class Step:
    """Target ``p`` and draft ``q`` of one or more decoding steps, validated.

    Construct with :meth:`validate`; the constructor trusts its arguments.

    Attributes
    ----------
    p : numpy.ndarray of float64, shape (..., V)
        Target distributions, rows summing to one.
    q : numpy.ndarray of float64, shape (..., V), or (..., n, V) with ``slot_axis``
        Draft distributions, rows summing to one; batch axes broadcast against ``p``'s.
    slot_axis : bool
        Whether ``q`` carries one distribution per draft slot (the ``per_slot`` design).

    Examples
    --------
    >>> from otbound.problem import Step
    >>> step = Step.validate([[0.3, 0.4, 0.3]], [0.6, 0.3, 0.1])
    >>> step.batch, step.vocab
    ((1,), 3)
    """

    p: np.ndarray
    q: np.ndarray
    slot_axis: bool = False

    @classmethod
    def validate(
        cls, p: object, q: object, *, normalize: bool = False, slot_axis: bool = False
    ) -> Step:
        """Check ``p`` and ``q`` (values, vocabulary) and return them as a ``Step``.

        Parameters
        ----------
        p, q : array_like
            As :func:`otbound.optimal_acceptance` takes them (a ``Step`` passes through).
        normalize : bool, default False
            Rescale rows that do not sum to one instead of raising.
        slot_axis : bool, default False
            ``q`` has one distribution per slot, shape ``(..., n, V)``.

        Raises
        ------
        ValueError
            As :func:`otbound._checks.as_distribution_pair`. Batch shapes that do not
            broadcast raise when :attr:`flat` is first read.
        """
        if isinstance(p, Step):
            return p
        p_arr, q_arr = as_distribution_pair(
            p, q, normalize=normalize, q_min_ndim=2 if slot_axis else 1
        )
        return cls(p_arr, q_arr, slot_axis)

    def freeze(self) -> Step:
        """Make :attr:`p` and :attr:`q` read-only, in place, and return this step.

        Only for a step whose arrays are new and seen by nothing else yet (those
        :meth:`validate` made, not a caller's): an array that owns its memory is then
        :func:`frozen`, and the verifiers' caches know its rows by the objects."""
        for a in (self.p, self.q):
            a.flags.writeable = False
            if a.base is None:
                _FROZEN[id(a)] = a
        return self

    @property
    def vocab(self) -> int:
        """The vocabulary size ``V``."""
        return int(self.p.shape[-1])

    @cached_property
    def flat(self) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """``p`` (B, V) and ``q`` (B, [n,] V) with the batch axes broadcast and flattened,
        and the batch shape (:func:`otbound._checks.broadcast_batch`)."""
        return broadcast_batch(self.p, self.q, 1 if self.slot_axis else 0)

    @cached_property
    def support(self) -> np.ndarray:
        """The number of tokens with ``q > 0`` in each row of ``q``, shape ``q.shape[:-1]``
        (counted once per ``Step``: every verifier and ``n`` that checks a design's limits on
        this step reads it)."""
        counts: np.ndarray = np.count_nonzero(self.q > 0, axis=-1)
        return counts

    @cached_property
    def ratio_order(self) -> np.ndarray:
        """The tokens with ``q > 0`` of a one-step ``Step`` by increasing ``p / q``, ties by
        token id (int64: :func:`otbound._sorting.ratio_argsort`), sorted once per ``Step`` for
        every verifier and ``n`` that reads it, and kept in the verifiers' cache of sort
        orders (:func:`otbound.verifiers._step_cache.ratio_order`), so that a verifier that
        sees only ``p`` and ``q`` (an estimate's ``_conditional``) does not sort them again."""
        from otbound.verifiers._step_cache import ratio_order

        if self.p.ndim != 1 or self.q.ndim != 1:
            raise ValueError(
                f"ratio_order is defined for one step (p and q of shape (V,)), got "
                f"{self.p.shape} and {self.q.shape}"
            )
        return ratio_order(self.p, self.q)

    @property
    def batch(self) -> tuple[int, ...]:
        """The broadcast batch shape."""
        return self.flat[2]

    @property
    def rows(self) -> int:
        """The number of steps ``B`` (the product of the batch shape)."""
        return int(self.flat[0].shape[0])

    def row(self, index: int) -> Step:
        """Step ``index`` of the flattened batch, as a one-step ``Step`` (trusted)."""
        p2, q2, _ = self.flat
        return Step(p2[index], q2[index], self.slot_axis)

    def take(self, rows: np.ndarray | slice) -> Step:
        """The flattened steps selected by a mask, indices or a slice (trusted, contiguous).

        A mask that selects every step gives views of the flattened arrays (no copy: a batch
        of 256 steps at V = 32,000 is 130 MB)."""
        p2, q2, _ = self.flat
        if isinstance(rows, np.ndarray) and rows.dtype == bool and rows.shape == p2.shape[:1]:
            if rows.all():
                rows = slice(None)
        return Step(np.ascontiguousarray(p2[rows]), np.ascontiguousarray(q2[rows]), self.slot_axis)
