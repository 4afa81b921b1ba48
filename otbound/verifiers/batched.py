"""Which verifiers a batched backend computes, as an explicit object (no torch needed here).

A :class:`BatchAcceptance` pairs a function ``compute(verifier, p, q, n) → acceptance per row``
with the ``(verifier, n)`` it serves. :func:`otbound.compare` takes one as its ``acceptance``:
for a shipped verifier it serves, the exact acceptance of every step comes from one call on
the whole batch (the rows are the same as the numpy path's, ``exact=True``); every other
verifier, and every verifier object that is not one of the shipped classes, goes through its
own ``acceptance`` step by step. :func:`otbound.verifiers.torch_acceptance.torch_acceptance_on`
builds the torch one (the counterpart, for verifiers, of the ``bound``
:class:`otbound.bounds.solvers.Solver`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BatchAcceptance", "shipped_name"]


def shipped_name(verifier: object) -> str | None:
    """The registry name of a verifier object whose class is exactly a shipped verifier class
    (not a subclass, which may change the formula) on that class's own design, with its
    default settings (:meth:`~otbound.verifiers.BaseVerifier.has_default_settings`:
    importance sampling's ``top``); ``None`` for anything else (a user-defined verifier, a
    name string, ``optimal`` on another design, ``ImportanceSampling(top=5)``).
    """
    from otbound.verifiers.registry import VERIFIER_CLASSES

    name = getattr(type(verifier), "name", None)
    cls = VERIFIER_CLASSES.get(name) if isinstance(name, str) else None
    if cls is None or cls is not type(verifier):
        return None
    if getattr(verifier, "design", None) != cls.default_design:
        return None
    if not verifier.has_default_settings():
        return None
    return cls.name


@dataclass(frozen=True)
class BatchAcceptance:
    """A function computing a verifier's exact acceptance for a batch of steps, and what it
    serves.

    Attributes
    ----------
    name : str
        For messages and reports.
    compute : callable
        ``compute(verifier, p, q, n)`` → acceptance per row (B,) of ``p`` (B, V), ``q``
        (B, V), validated numpy arrays; ``verifier`` is the registry name. Values are
        clipped into ``[0, 1]`` by the caller where they are out by rounding only.
    covers : callable
        ``covers(verifier, n)`` → whether ``compute`` serves the verifier (a registry name)
        at ``n``.

    Examples
    --------
    >>> import numpy as np
    >>> from otbound.verifiers import get_verifier
    >>> from otbound.verifiers.batched import BatchAcceptance
    >>> def beta(name, p, q, n):
    ...     return np.minimum(p, q).sum(axis=-1)
    >>> single = BatchAcceptance("overlap", beta, lambda name, n: name == "single" and n == 1)
    >>> single.serves(get_verifier("single"), 1), single.serves(get_verifier("rrs"), 1)
    (True, False)
    """

    name: str
    compute: Callable[[str, object, object, int], object]
    covers: Callable[[str, int], bool]

    def serves(self, verifier: object, n: int) -> bool:
        """Whether the batch computes ``verifier`` (an object) at ``n``: only a shipped
        verifier class (:func:`shipped_name`) that ``covers`` names."""
        name = shipped_name(verifier)
        return name is not None and bool(self.covers(name, n))
