r"""Recursive rejection sampling with replacement (SpecInfer's multi-round verifier).

Drafts ``x_1..x_n`` are i.i.d. from ``q``. Starting from ``p_1 = p``, draft ``x_k`` is accepted
with probability ``min(1, p_k(x_k) / q(x_k))``; on rejection the target becomes
``p_{k+1} = res(p_k, q) = (p_k − q)⁺ / Σ (p_k − q)⁺``. After ``n`` rejections ``Y ~ p_{n+1}``.
Each round is single-draft speculative sampling of ``p_k`` against a fresh draft from ``q``,
so the output is ``p`` exactly, and

.. math::

    α = 1 − \prod_{k=1}^{n} \bigl(1 − β(p_k, q)\bigr),\qquad β(a, b) = \sum_x \min(a_x, b_x).

A rejected draft has ``p_k(x) < q(x)``, so ``p_{k+1}(x) = 0`` and no later residual returns it:
the acceptance event "a draft passed its test" is exactly ``Y ∈ x̄``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otbound.problem import Step
from otbound.verifiers.base import BaseVerifier, residual, sample_tokens

__all__ = ["RecursiveRejection"]


def residual_chain(p: np.ndarray, q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Targets ``p_1..p_{n+1}`` (n + 1, V) and rejection rates ``1 − β(p_k, q)`` (n,)."""
    targets = np.empty((n + 1, p.size))
    miss = np.empty(n)
    targets[0] = p
    for k in range(n):
        excess = np.maximum(targets[k] - q, 0.0)
        miss[k] = excess.sum()  # 1 − β(p_k, q), summed without cancellation
        targets[k + 1] = excess / miss[k] if miss[k] > 0 else targets[k]
    return targets, miss


def _acceptances_from_rates(
    p: np.ndarray, q: np.ndarray, ns: Sequence[int]
) -> dict[int, float | None]:
    """``1 − Π_{k ≤ n} miss_k`` for each ``n`` from the compiled rates of ``max(ns)`` drafts
    (those of :func:`residual_chain`, bit for bit); each product is taken over a fresh array
    of the ``n`` rates, as over the rates of ``n`` drafts alone."""
    from otbound.verifiers._rejection_kernels import rejection_rates  # numba

    miss = rejection_rates(np.ascontiguousarray(p), np.ascontiguousarray(q), max(ns))
    return {n: 1.0 - float(np.prod(miss[:n].copy())) for n in ns}


class RecursiveRejection(BaseVerifier):
    """RRS with replacement (SpecInfer): ``α = 1 − Π_{k=1..n} (1 − β(p_k, q))``.

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> round(get_verifier("rrs").acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2), 6)
    0.82
    """

    name = "rrs"
    default_design = "iid"

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return _acceptances_from_rates(p, q, [n])[n]

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """Every ``n`` from one chain of rejection rates: the rates of ``n`` drafts are the
        first ``n`` of ``max(ns)`` (each level depends on the earlier ones only), so each
        value is the one :meth:`_acceptance` gives."""
        return _acceptances_from_rates(step.p, step.q, ns)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        target = p
        for x in drafts:
            if rng.random() < min(1.0, target[x] / q[x]):
                return int(x)
            target = residual(target, q)
        return int(sample_tokens(target, rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials, n = drafts.shape
        targets, _ = residual_chain(p, q, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(q > 0, np.minimum(1.0, targets[:n] / q), 0.0)  # (n, V)
        u = rng.random((n, trials))
        v = rng.random(trials)
        tokens = sample_tokens(targets[n], v)  # used where every draft is rejected
        done = np.zeros(trials, dtype=bool)
        for k in range(n):
            x = drafts[:, k]
            accept = ~done & (u[k] < ratios[k][x])
            tokens[accept] = x[accept]
            done |= accept
        return tokens
