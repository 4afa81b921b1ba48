r"""Block verification (Sun et al., *Block Verification Accelerates Speculative Decoding*,
ICLR 2025, arXiv 2403.10444) on a chain of ``γ`` drafts.

With ``x_{1:γ}`` the drafts and ``p_i = p(· | x_{<i})``, ``q_i = q(· | x_{<i})`` the
conditionals on the draft path (``p_{γ+1}`` the bonus law), the weights

.. math::

    w_0 = 1,\qquad w_i = \min\Bigl(1,\ w_{i−1}\,\frac{p_i(x_i)}{q_i(x_i)}\Bigr),

the residual masses ``ρ_i = Σ_x (w_i p_{i+1}(x) − q_{i+1}(x))^+`` and the acceptance
probabilities of the sub-blocks

.. math::

    h_γ = w_γ,\qquad h_i = \frac{ρ_i}{ρ_i + 1 − w_i}\quad (0 ≤ i < γ)

(``h_0 = 1``; a ``0/0`` is read as 1, a case reached with probability zero). Going down from
``i = γ``, sub-block ``x_{1:i}`` is accepted with probability ``h_i``; ``τ`` is the first
accepted ``i``. The iteration emits ``x_{1:τ}`` and then the bonus ``~ p_{γ+1}`` if ``τ = γ``,
else a correction ``~ (w_τ p_{τ+1} − q_{τ+1})^+`` (normalised).

Sun et al. prove it lossless and optimal in expected accepted tokens among verifiers that see
the on-path conditionals only, hence never below token verification; Thomas and Pal (arXiv
2602.16961) show it optimal even against verifiers that see off-path probabilities. Both
are tested here against :func:`otbound.sequence.optimal_verification_acceptance`.
"""

from __future__ import annotations

import numpy as np

from otbound.sequence._base import Drafts, Emitted, SequenceVerifier, positive_part
from otbound.sequence._choices import Chooser
from otbound.sequence._models import SequenceModel

__all__ = ["BlockVerifier"]


class BlockVerifier(SequenceVerifier):
    """Block verification on a chain (Sun et al. 2025).

    Examples
    --------
    >>> v = BlockVerifier()
    >>> round(v.acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2) * 9, 9)  # Sun et al.'s example: 11/9
    11.0
    """

    name = "block"
    chains_only = True

    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        gamma = len(drafts)
        weights = np.ones(gamma + 1)
        for i, x in enumerate(drafts, start=1):
            weights[i] = min(1.0, weights[i - 1] * model.p[i - 1, x] / model.q[i - 1, x])
        tau = 0
        for i in range(gamma, 0, -1):
            if chooser.bernoulli(self._sub_block_acceptance(weights[i], i, model)):
                tau = i
                break
        if tau == gamma:
            return (*drafts, chooser.categorical(model.p[gamma]))
        return (*drafts[:tau], chooser.categorical(self._correction(weights[tau], tau, model)))

    def _sub_block_acceptance(self, weight: float, i: int, model: SequenceModel) -> float:
        """``h_i``: ``w_γ`` at the full block, ``ρ_i / (ρ_i + 1 − w_i)`` below it."""
        if i == model.depth:
            return float(weight)
        mass = float(positive_part(weight, model.p[i], model.q[i]).sum())
        denominator = mass + 1.0 - weight
        return 1.0 if denominator <= 0.0 else mass / denominator

    def _correction(self, weight: float, tau: int, model: SequenceModel) -> np.ndarray:
        """Unnormalised law of the correction after ``τ < γ`` accepted tokens."""
        return positive_part(weight, model.p[tau], model.q[tau])
