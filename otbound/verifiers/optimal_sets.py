"""The optimal verifier for draft sets, under a name of its own for each design.

``get_verifier("optimal", design="without_replacement")`` and
``get_verifier("optimal_without_replacement")`` are the same verifier: the round rule of
:func:`otbound.selection.round_rule` (any vocabulary), or the set LP's plan with
``method="lp"``. The names let tables, ``compute_bounds --verifiers`` and
``simulate_trees --verifiers`` ask for it by one word, as ``rrs_without_replacement`` is asked
for beside ``rrs``.
"""

from __future__ import annotations

from otbound.verifiers.optimal import OptimalTransport

__all__ = ["OptimalConditionalPoisson", "OptimalWithoutReplacement"]


class OptimalWithoutReplacement(OptimalTransport):
    """:class:`OptimalTransport` for drafts sampled without replacement."""

    name = "optimal_without_replacement"
    default_design = "without_replacement"
    designs = ("without_replacement",)


class OptimalConditionalPoisson(OptimalTransport):
    """:class:`OptimalTransport` for conditional Poisson draft sets."""

    name = "optimal_conditional_poisson"
    default_design = "conditional_poisson"
    designs = ("conditional_poisson",)
