r"""Token verification on chains and trees: one draft token at a time, top-down.

The baseline every sequence verifier is measured against (Leviathan et al. 2023 on a chain;
SpecInfer's recursive rejection sampling on a tree, Miao et al. 2024). At an accepted node of
depth ``d − 1`` the children ``x^{(1)}, x^{(2)}, …`` (drawn from ``q_d`` without replacement)
are tried in order against the current target ``r`` and draft ``s`` (initially ``p_d``,
``q_d``): child ``x`` is accepted with probability ``min(1, r(x)/s(x))``; on rejection

.. math::

    r ← \frac{(r − s)^+}{\sum (r − s)^+},\qquad s ← s \text{ without } x, \text{ renormalised}.

Acceptance moves to the child; when every child is rejected the correction is drawn from
``r``; at a leaf the bonus is drawn from ``p_{d+1}``. On a chain with context-independent
models, with ``α_d = 1 − TV(p_d, q_d)``,

.. math::

    E[τ] = \sum_{k=1}^{γ} \prod_{d=1}^{k} α_d \qquad (= α + α^2 + … + α^γ).
"""

from __future__ import annotations

import numpy as np

from otbound.sequence._choices import Chooser
from otbound.sequence._models import SequenceModel
from otbound.sequence._protocol import Drafts, Emitted, SequenceVerifier
from otbound.verifiers.base import residual

__all__ = ["TokenVerifier"]


class TokenVerifier(SequenceVerifier):
    """Token-by-token verification (recursive rejection sampling without replacement on trees).

    Examples
    --------
    >>> v = TokenVerifier()
    >>> round(v.acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2) * 9, 9)  # Sun et al.'s example: 10/9
    10.0
    """

    name = "token"

    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        node: tuple[int, ...] = ()
        emitted: list[int] = []
        while True:
            target = model.target_row(node).copy()
            draft = model.draft_row(node).copy() if model.children[node] else None
            for child in model.children[node]:
                assert draft is not None  # a node with children is above the last depth
                x = drafts[model.index[child]]
                if chooser.bernoulli(min(1.0, target[x] / draft[x])):
                    emitted.append(x)
                    node = child
                    break
                target, draft = self._reject(target, draft, x)
            else:
                emitted.append(chooser.categorical(target))
                return tuple(emitted)

    @staticmethod
    def _reject(target: np.ndarray, draft: np.ndarray, x: int) -> tuple[np.ndarray, np.ndarray]:
        """The residual target and the draft without the rejected sibling ``x``."""
        new_target = residual(target, draft)
        new_draft = draft.copy()
        new_draft[x] = 0.0
        total = new_draft.sum()
        return new_target, (new_draft / total if total > 0 else new_draft)
