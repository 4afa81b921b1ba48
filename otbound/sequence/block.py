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

from collections.abc import Callable, Sequence

import numpy as np

from otbound.sequence._choices import Chooser
from otbound.sequence._models import SequenceModel
from otbound.sequence._protocol import Drafts, Emitted, SequenceVerifier, positive_part

__all__ = ["BlockVerifier", "block_verify", "sub_block_acceptance"]


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
        chain = [(0,) * i for i in range(len(drafts) + 1)]
        rows = [
            (model.target_row(u), model.draft_row(u) if i < len(drafts) else None)
            for i, u in enumerate(chain)
        ]
        return block_verify(
            drafts, rows, chooser, lambda w, i: self._sub_block_acceptance(w, i, model)
        )

    def _sub_block_acceptance(self, weight: float, i: int, model: SequenceModel) -> float:
        """``h_i = ρ_i / (ρ_i + 1 − w_i)`` below the full block (``i < γ``)."""
        u = (0,) * i
        return sub_block_acceptance(weight, model.target_row(u), model.draft_row(u))


def sub_block_acceptance(weight: float, target: np.ndarray, draft: np.ndarray) -> float:
    """``h = ρ / (ρ + 1 − w)``, ``ρ = Σ_x (w p(x) − q(x))^+`` (a ``0/0`` read as 1)."""
    mass = float(positive_part(weight, target, draft).sum())
    denominator = mass + 1.0 - weight
    return 1.0 if denominator <= 0.0 else mass / denominator


def block_verify(
    drafts: Drafts,
    rows: Sequence[tuple[np.ndarray, np.ndarray | None]],
    chooser: Chooser,
    sub_block: Callable[[float, int], float] | None = None,
) -> Emitted:
    """Block verification of one drafted chain from its on-path rows (the module docstring).

    Parameters
    ----------
    drafts : tuple of int
        ``x_1 .. x_γ``.
    rows : sequence of (target, draft)
        ``rows[i] = (p_{i+1}, q_{i+1})``, the laws after ``x_{1:i}`` (draft None at
        ``i = γ``). Any draft law of the chain will do: multi-path verification passes the law
        of its selected path (:mod:`otbound.sequence.multipath`).
    chooser : Chooser
    sub_block : callable, optional
        ``h_i`` from ``(w_i, i)`` for ``i < γ`` (default :func:`sub_block_acceptance` of
        ``rows[i]``).

    Returns
    -------
    tuple of int
        ``x_{1:τ}`` and the bonus or correction token.
    """
    gamma = len(drafts)
    weights = np.ones(gamma + 1)
    for i, x in enumerate(drafts, start=1):
        target, draft = rows[i - 1]
        assert draft is not None
        weights[i] = min(1.0, weights[i - 1] * target[x] / draft[x])
    tau = 0
    for i in range(gamma, 0, -1):
        if i == gamma:
            h = float(weights[i])
        elif sub_block is not None:
            h = sub_block(float(weights[i]), i)
        else:
            target, draft = rows[i]
            assert draft is not None
            h = sub_block_acceptance(float(weights[i]), target, draft)
        if chooser.bernoulli(h):
            tau = i
            break
    target, draft = rows[tau]
    if tau == gamma:
        return (*drafts, chooser.categorical(target))
    assert draft is not None
    return (*drafts[:tau], chooser.categorical(positive_part(weights[tau], target, draft)))
