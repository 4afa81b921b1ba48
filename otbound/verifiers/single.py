r"""Single-draft speculative sampling (Leviathan et al. 2023; Chen et al. 2023).

Draft ``x ~ q``; accept it with probability ``min(1, p_x / q_x)``; on rejection sample
``res(p, q) = (p − q)⁺ / Σ (p − q)⁺``. The output is distributed as ``p`` and

.. math::

    α = β(p, q) = \sum_x \min(p_x, q_x) = 1 − TV(p, q).

With ``n > 1`` i.i.d. drafts this verifier looks at the **first draft only** (the baseline a
multi-draft verifier must beat). The acceptance event is still ``Y ∈ x̄``: the residual draw,
which is independent of ``x_2..x_n``, lands on one of them with probability
``1 − (1 − q_y)^{n−1}``, so

.. math::

    α_n = β(p, q) + \sum_y (p_y − q_y)^+ \bigl(1 − (1 − q_y)^{n−1}\bigr).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otbound.problem import Step
from otbound.verifiers.base import BaseVerifier, residual, sample_tokens

__all__ = ["SingleDraft"]


def _acceptances_of_first(
    p: np.ndarray, q: np.ndarray, ns: Sequence[int]
) -> dict[int, float | None]:
    """``β(p, q) + Σ_y (p_y − q_y)⁺ (1 − (1 − q_y)^{n−1})`` for each ``n``."""
    excess = np.maximum(p - q, 0.0)
    beta = 1.0 - excess.sum()
    out: dict[int, float | None] = {}
    log_stay: np.ndarray | None = None  # log(1 − q_y), taken once for every n > 1
    for n in ns:
        if n == 1:
            out[n] = float(beta)
            continue
        if log_stay is None:
            with np.errstate(divide="ignore"):  # q_y = 1: (1 − q_y)^{n−1} = 0
                log_stay = np.log1p(-np.minimum(q, 1.0))
        hit = -np.expm1((n - 1) * log_stay)  # 1 − (1 − q_y)^{n−1}
        out[n] = float(beta + float(np.sum(excess * hit)))
    return out


class SingleDraft(BaseVerifier):
    """Single-draft speculative sampling on the first of ``n`` i.i.d. drafts.

    ``α = β(p, q) + Σ_y (p_y − q_y)⁺ (1 − (1 − q_y)^{n−1})`` (``= 1 − TV(p, q)`` at ``n = 1``).

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> round(get_verifier("single").acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=1), 6)
    0.7
    """

    name = "single"
    default_design = "iid"

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return _acceptances_of_first(p, q, [n])[n]

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """Every ``n`` from one ``(p − q)⁺`` and one ``log(1 − q)``, each value the one
        :meth:`_acceptance` gives."""
        return _acceptances_of_first(step.p, step.q, ns)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        x = int(drafts[0])  # only the first draft is used
        if rng.random() < min(1.0, p[x] / q[x]):
            return x
        return int(sample_tokens(residual(p, q), rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        x = drafts[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(q > 0, np.minimum(1.0, p / q), 0.0)
        u = rng.random(x.size)
        v = rng.random(x.size)
        tokens = sample_tokens(residual(p, q), v)
        accept = u < ratio[x]
        tokens[accept] = x[accept]
        return tokens
