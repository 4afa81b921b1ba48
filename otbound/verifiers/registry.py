"""The verifier registry: names in :data:`VERIFIERS`, instances from :func:`get_verifier`."""

from __future__ import annotations

from typing import Any

from otbound.verifiers.base import BaseVerifier
from otbound.verifiers.gls import GumbelListCoupling
from otbound.verifiers.greedy import Greedy
from otbound.verifiers.importance import ImportanceSampling
from otbound.verifiers.kseq import KSequential
from otbound.verifiers.optimal import OptimalTransport
from otbound.verifiers.optimal_sets import OptimalConditionalPoisson, OptimalWithoutReplacement
from otbound.verifiers.rrs import RecursiveRejection
from otbound.verifiers.rrs_without_replacement import RecursiveRejectionWithoutReplacement
from otbound.verifiers.single import SingleDraft
from otbound.verifiers.spechub import SpecHub
from otbound.verifiers.topk import TopK

__all__ = ["VERIFIERS", "VERIFIER_CLASSES", "get_verifier"]

VERIFIER_CLASSES: dict[str, type[BaseVerifier]] = {
    cls.name: cls
    for cls in (
        SingleDraft,
        RecursiveRejection,
        RecursiveRejectionWithoutReplacement,
        KSequential,
        SpecHub,
        Greedy,
        TopK,
        ImportanceSampling,
        GumbelListCoupling,
        OptimalTransport,
        OptimalWithoutReplacement,
        OptimalConditionalPoisson,
    )
}

#: Names of the shipped verifiers, in the order tables list them.
VERIFIERS: tuple[str, ...] = tuple(VERIFIER_CLASSES)


def get_verifier(name: object, **options: object) -> object:
    """A verifier by name; an object that is already a verifier passes through.

    Parameters
    ----------
    name : str or verifier object
        One of :data:`VERIFIERS`.
    **options
        Passed to the verifier's constructor: ``design=`` for ``optimal`` (any design) and
        ``importance`` (``"iid"`` or ``"per_slot"``); ``top=`` for ``importance``.

    Returns
    -------
    BaseVerifier

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> v = get_verifier("rrs")
    >>> v.design
    'iid'
    """
    if not isinstance(name, str):
        if options:
            raise ValueError("options apply only when the verifier is given by name")
        return name
    try:
        cls = VERIFIER_CLASSES[name]
    except KeyError:
        raise ValueError(
            f"unknown verifier {name!r}; valid verifiers: {', '.join(VERIFIERS)}"
        ) from None
    try:
        kwargs: dict[str, Any] = options  # each class checks its own options
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"invalid options for verifier {name!r}: {exc}") from None
