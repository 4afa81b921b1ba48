r"""Selection rules: the optimal verifier as a selection among the drafts and one single-draft test.

Any rule that selects one draft ``Z`` with an exactly known marginal ``r(z) = P(Z = z)``,
followed by single-draft speculative sampling of ``Z`` against ``p`` with ``r`` as the draft,
is lossless, and accepts with probability ``Σ min(p, r)`` when it is optimal; the best ``r`` gives
``α*``. :func:`level_rule` builds a rule that attains ``α*`` for i.i.d. drafts at any ``n``, in
``O(V log V)``, at any vocabulary; :func:`round_rule` one for draft sets (conditional Poisson,
without replacement) whose marginal is exact and whose fit reaches ``α*`` to ~1e-12 on the rows
measured (:attr:`RoundRule.gap` says what it leaves).

>>> import numpy as np
>>> from otbound.selection import level_rule
>>> p, q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])
>>> round(level_rule(p, q, 2).acceptance(), 6)
0.89
"""

from otbound.selection.levels import (
    LEVEL_RULE_DESIGNS,
    has_level_rule,
    level_rule,
    level_rule_acceptance,
)
from otbound.selection.rounds import ROUND_RULE_DESIGNS, RoundRule, has_round_rule, round_rule
from otbound.selection.rule import SelectionRule, single_draft_test

__all__ = [
    "LEVEL_RULE_DESIGNS",
    "ROUND_RULE_DESIGNS",
    "RoundRule",
    "SelectionRule",
    "has_level_rule",
    "has_round_rule",
    "level_rule",
    "level_rule_acceptance",
    "round_rule",
    "single_draft_test",
]
