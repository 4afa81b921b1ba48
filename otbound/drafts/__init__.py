r"""Draft designs: how ``n`` draft tokens are drawn from the draft distribution ``q``.

A design turns ``q`` into a joint distribution ``Q`` over draft tuples ``x̄ = (x_1..x_n)``.
The optimal acceptance rate depends on ``Q`` only through ``Q(H) = P(all drafts lie in H)``
(see :mod:`otbound.bounds`). Every design here can

* ``sample(q, n, size, rng)``: draw ``size`` tuples at once from a seeded numpy Generator;
* ``tuple_support(q, n)`` / ``set_support(q, n)``: enumerate the ordered tuples, or the sets of
  distinct tokens, with their probabilities (small ``V``: the LPs and the tests use them);
* ``sweep_orders(p, q, n)`` and ``prefix_mass(q_sorted, n)``: ``Q(H_i)`` for the prefixes
  ``H_i`` of a token order, which is all the exact sweep needs.

=======================  ==============================================================
design                   ``Q(H)``
=======================  ==============================================================
``iid``                  ``q(H)^n`` (with replacement)
``without_replacement``  sequential: ``P(x̄) = Π_j q(x_j) / (1 − Σ_{k<j} q(x_k))``; exact
                         ``Q(H)`` by the exponential-clock integral
``conditional_poisson``  a set ``S`` with ``P(S) ∝ Π_{x∈S} q_x``: ``e_n(q_H) / e_n(q)``
``greedy``               top ``n−1`` tokens ``T`` fixed, the last from ``q`` on ``V \ T``
``topk``                 the ``n`` most likely tokens, deterministic: ``1[T ⊆ H]``
``hub``                  SpecHub pairs (``n = 2``): ``Q(i,a) = q_i``,
                         ``Q(a,i) = q_a q_i / (1 − q_a)``, ``a = argmax q``
``per_slot``             slot ``j`` drawn from its own ``q_j``: ``Π_j q_j(H)``
=======================  ==============================================================

``without_replacement`` and ``conditional_poisson`` are different designs: the first is what
samplers draw; the second is the ratio used in Hu et al.'s proof. For ``q = (.5, .3, .2)``,
``n = 2``, ``H = {0, 1}`` they give ``Q(H) = 0.5143`` and ``0.4839``.

Ties among equally likely tokens (top-k sets, the hub) are broken towards the lower token id.

One module per design (or per family: :mod:`otbound.drafts.fixed`), the base class in
:mod:`otbound.drafts.base`, the registry in :mod:`otbound.drafts.registry`, and the token
token orders, draws and tuples the designs share with the rest of otbound in
:mod:`otbound.drafts.tokens`.
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.drafts.base import (
        ABOVE_SUPPORT,
        ABOVE_VOCABULARY,
        NEEDS_SLOTS,
        UNUSABLE_REASONS,
        DraftDesign,
    )
    from otbound.drafts.conditional_poisson import ConditionalPoisson
    from otbound.drafts.fixed import Greedy, Hub, TopK
    from otbound.drafts.iid import IID
    from otbound.drafts.per_slot import PerSlot
    from otbound.drafts.registry import DESIGNS, designs_where, get_design
    from otbound.drafts.tokens import (
        inverse_cdf,
        num_tuples,
        prefix_sums,
        sweep_key,
        top_tokens,
        tuples_to_sets,
    )
    from otbound.drafts.without_replacement import WithoutReplacement
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.drafts.base": (
                "ABOVE_SUPPORT",
                "ABOVE_VOCABULARY",
                "NEEDS_SLOTS",
                "UNUSABLE_REASONS",
                "DraftDesign",
            ),
            "otbound.drafts.conditional_poisson": ("ConditionalPoisson",),
            "otbound.drafts.fixed": ("Greedy", "Hub", "TopK"),
            "otbound.drafts.tokens": (
                "inverse_cdf",
                "num_tuples",
                "prefix_sums",
                "sweep_key",
                "top_tokens",
                "tuples_to_sets",
            ),
            "otbound.drafts.iid": ("IID",),
            "otbound.drafts.per_slot": ("PerSlot",),
            "otbound.drafts.registry": ("DESIGNS", "designs_where", "get_design"),
            "otbound.drafts.without_replacement": ("WithoutReplacement",),
        },
    )

__all__ = [
    "ABOVE_SUPPORT",
    "ABOVE_VOCABULARY",
    "DESIGNS",
    "IID",
    "NEEDS_SLOTS",
    "UNUSABLE_REASONS",
    "ConditionalPoisson",
    "DraftDesign",
    "Greedy",
    "Hub",
    "PerSlot",
    "TopK",
    "WithoutReplacement",
    "designs_where",
    "get_design",
    "inverse_cdf",
    "num_tuples",
    "prefix_sums",
    "sweep_key",
    "top_tokens",
    "tuples_to_sets",
]
