r"""Hu et al.'s greedy multi-draft verifier, on the ``greedy`` draft design.

Design: the ``n − 1`` most likely draft tokens ``T`` are always drafted; the last draft ``x`` is
drawn from ``r = q`` restricted to ``V \ T`` and renormalised. With ``m_x = min(p_x, r_x)``
the design's optimal acceptance rate is

.. math::

    α^* = p(T) + \sum_{x ∉ T} \min(p_x, r_x).

The verifier reaches it. Given the last draft ``x``:

1. output ``x`` with probability ``m_x / r_x = min(1, p_x / r_x)``;
2. otherwise (probability ``(r_x − p_x)⁺ / r_x``) output a token of ``T`` with conditional
   probability ``θ = p(T) / (1 − Σ_{y∉T} m_y)``, chosen ``∝ p`` within ``T``;
3. otherwise sample the residual ``∝ (p − r)⁺`` on ``V \ T``.

Losslessness: token ``t ∈ T`` gets ``(1 − Σ m) θ p_t / p(T) = p_t``; ``x ∉ T`` gets
``m_x + (p_x − m_x) = p_x`` because the residual mass ``(1 − Σ m)(1 − θ) = Σ_{y∉T}(p_y − m_y)``.
``θ ≤ 1`` since ``Σ_{y∉T} m_y ≤ p(V \ T)``. A rejected ``x`` has ``p_x < r_x``, so the residual
never returns it: ``P(Y ∈ x̄) = p(T) + Σ m = α*``. At ``n = 1`` (``T = ∅``) this is single-draft
speculative sampling; at ``n = 2`` it is the SpecHub verifier (same sets, same probabilities).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from otbound.drafts import top_tokens
from otbound.problem import Step
from otbound.verifiers.base import BaseVerifier, sample_tokens

__all__ = ["Greedy", "fixed_plus_one_plan"]


def fixed_plus_one_plan(p: np.ndarray, r: np.ndarray, fixed: np.ndarray) -> dict[str, Any]:
    """The verifier's plan for drafts = ``fixed`` tokens plus one draft from ``r`` (off ``fixed``).

    Returns the keep probabilities ``min(1, p/r)`` (V,), ``θ``, ``p`` restricted to ``fixed``
    (normalised), the residual on the other tokens, and ``α* = p(fixed) + Σ min(p, r)``.
    """
    outside, p_fixed, alpha = _fixed_and_matched(p, r, fixed)
    slack = float(np.where(outside, np.maximum(r - p, 0.0), 0.0).sum())  # 1 − Σ m, no cancellation
    theta = min(1.0, p_fixed / slack) if slack > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(outside & (r > 0), np.minimum(1.0, p / r), 0.0)
    inside = np.zeros(p.size)
    inside[fixed] = p[fixed]
    rest = np.where(outside, np.maximum(p - r, 0.0), 0.0)
    return {
        "keep": keep,
        "theta": theta,
        "inside": inside / p_fixed if p_fixed > 0 else inside,
        "rest": rest / rest.sum() if rest.sum() > 0 else np.where(outside, p, 0.0),
        "alpha": alpha,
    }


def _fixed_and_matched(
    p: np.ndarray, r: np.ndarray, fixed: np.ndarray
) -> tuple[np.ndarray, float, float]:
    """The tokens off ``fixed`` (mask), ``p(fixed)`` and
    ``α* = p(fixed) + Σ_{x ∉ fixed} min(p_x, r_x)``."""
    outside = np.ones(p.size, dtype=bool)
    outside[fixed] = False
    matched = np.where(outside, np.minimum(p, r), 0.0)
    p_fixed = float(p[fixed].sum())
    return outside, p_fixed, p_fixed + float(matched.sum())


def _greedy_acceptances(p: np.ndarray, q: np.ndarray, ns: Sequence[int]) -> dict[int, float | None]:
    """``α*`` for each ``n`` from one :func:`~otbound.drafts.top_tokens` call: the ``n − 1``
    most likely tokens are the first ``n − 1`` of the ``max(ns) − 1`` most likely (one order,
    ties to the lower id)."""
    top = top_tokens(q, max(ns) - 1)
    out: dict[int, float | None] = {}
    for n in ns:
        fixed = top[: n - 1]
        out[n] = _fixed_and_matched(p, _restricted(q, fixed), fixed)[2]
    return out


def _restricted(q: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    r = q.copy()
    r[fixed] = 0.0
    out: np.ndarray = r / r.sum()
    return out


def sample_plan(plan: dict[str, Any], last: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Vectorised steps 1-3 for the non-fixed drafts ``last`` (trials,)."""
    trials = last.size
    u = rng.random(trials)
    keep = plan["keep"][last]
    to_fixed = keep + (1.0 - keep) * plan["theta"]
    tokens = np.where(u < keep, last, -1)
    pick = (u >= keep) & (u < to_fixed)
    if plan["theta"] > 0 and np.any(pick):
        tokens[pick] = sample_tokens(plan["inside"], rng.random(int(pick.sum())))
    rest = tokens < 0
    if np.any(rest):
        tokens[rest] = sample_tokens(plan["rest"], rng.random(int(rest.sum())))
    return tokens


class Greedy(BaseVerifier):
    """Hu et al.'s greedy verifier: reaches ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``.

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> round(get_verifier("greedy").acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2), 6)
    0.95
    """

    name = "greedy"
    default_design = "greedy"

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return _greedy_acceptances(p, q, [n])[n]

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """Every ``n`` from one top-tokens call (:func:`_greedy_acceptances`), each value the
        one :meth:`_acceptance` gives."""
        return _greedy_acceptances(step.p, step.q, ns)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        n = len(drafts)
        fixed = top_tokens(q, n - 1)  # T: the n − 1 most likely draft tokens
        if sorted(drafts[:-1].tolist()) != sorted(fixed.tolist()):
            raise ValueError(
                f"greedy drafts must be the top {n - 1} tokens of q followed by one more; "
                f"got {drafts.tolist()}"
            )
        r = _restricted(q, fixed)  # the last draft's distribution
        x = int(drafts[-1])
        # 1. keep the sampled draft x with probability min(1, p_x / r_x)
        if rng.random() < min(1.0, p[x] / r[x]):
            return x
        # 2. otherwise move to T with probability θ = p(T) / (1 − Σ_{y∉T} min(p_y, r_y))
        outside = np.ones(p.size, dtype=bool)
        outside[fixed] = False
        slack = np.where(outside, np.maximum(r - p, 0.0), 0.0).sum()
        if rng.random() < p[fixed].sum() / slack:
            inside = np.zeros(p.size)
            inside[fixed] = p[fixed]
            return int(sample_tokens(inside, rng.random()))
        # 3. otherwise sample (p − r)⁺ off T
        return int(sample_tokens(np.where(outside, np.maximum(p - r, 0.0), 0.0), rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        n = drafts.shape[1]
        fixed = top_tokens(q, n - 1)
        plan = fixed_plus_one_plan(p, _restricted(q, fixed), fixed)
        return sample_plan(plan, drafts[:, -1], rng)
