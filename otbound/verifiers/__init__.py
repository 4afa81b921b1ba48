"""Multi-draft verifiers: exact acceptance where known, vectorised simulation, one-trial verify.

Where the exact value is out of reach (``rrs_without_replacement`` and ``importance`` at
``n ≥ 3`` on large vocabularies), :meth:`BaseVerifier.estimate` gives a Rao-Blackwellised
estimate with its standard error.

=============================  ======================  =========================================
name                           design                  exact acceptance ``P(Y ∈ x̄)``
=============================  ======================  =========================================
``single``                     ``iid``                 ``β(p, q)`` (first draft only for n > 1)
``rrs``                        ``iid``                 ``1 − Π_k (1 − β(p_k, q))``
``rrs_without_replacement``    ``without_replacement`` closed form n ≤ 2; rejection paths n ≥ 3
``kseq``                       ``iid``                 ``1 − (1 − β(ρ*))^n``
``spechub``                    ``hub`` (n = 2)         ``α*_hub``
``greedy``                     ``greedy``              ``α*_greedy``
``topk``                       ``topk``                ``p(T) = α*_topk``
``importance``                 ``iid`` / ``per_slot``  closed form n ≤ 2; enumeration n ≥ 3
``gls``                        ``iid``                 closed form n = 1; 1-D integral n ≥ 2
``optimal``                    any (small V)           ``α*`` from the LP plan
=============================  ======================  =========================================

The closed forms of ``single``, ``rrs``, ``rrs_without_replacement`` (n ≤ 2), ``kseq``,
``spechub``, ``greedy``, ``topk`` and ``gls`` also exist batched over steps in torch
(:mod:`otbound.verifiers.torch_acceptance`, imported on demand), which :func:`otbound.compare`
uses through its ``acceptance`` (a :class:`BatchAcceptance`).
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.verifiers.base import BaseVerifier, SimulationResult, Verifier
    from otbound.verifiers.batched import BatchAcceptance
    from otbound.verifiers.registry import VERIFIERS, get_verifier
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.verifiers.base": ("BaseVerifier", "SimulationResult", "Verifier"),
            "otbound.verifiers.batched": ("BatchAcceptance",),
            "otbound.verifiers.registry": ("VERIFIERS", "get_verifier"),
        },
    )

__all__ = [
    "VERIFIERS",
    "BaseVerifier",
    "BatchAcceptance",
    "SimulationResult",
    "Verifier",
    "get_verifier",
]
