r"""SpecHub (Sun et al. 2024): the optimal verifier for the hub draft design (``n = 2``).

Design: the hub ``a = argmax q``; ``x_1 ~ q``; if ``x_1 ≠ a`` then ``x_2 = a``, else ``x_2`` is
drawn from ``q`` off ``a``. As a set, the drafts are ``{a, i}`` with probability
``r_i = q_i / (1 − q_a)`` for every ``i ≠ a``, so the design's optimal acceptance rate is

.. math::

    α^* = p_a + \sum_{i ≠ a} \min\Bigl(p_i, \frac{q_i}{1 − q_a}\Bigr).

Derivation of the verifier from the compact LP: transport only within each pair ``{a, i}``:
move ``m_i = min(p_i, r_i)`` to ``i``, and spread the hub's ``p_a`` over the pairs in
proportion to their slack ``(r_i − p_i)⁺`` (the slack totals ``1 − Σ m ≥ p_a``). The leftover
``(1 − α*)`` of the pairs goes to the residual ``(p_i − r_i)⁺``, which is zero on every pair
that has leftover. So given the non-hub draft ``i``:

1. output ``i`` with probability ``min(1, p_i / r_i)``;
2. otherwise output ``a`` with conditional probability ``θ = p_a / (1 − Σ_{j≠a} m_j)``;
3. otherwise sample ``∝ (p − r)⁺`` off ``a``.

This is the greedy verifier at ``n = 2`` (same sets and probabilities; only the order of the two
drafts differs). ``P(Y ∈ x̄) = α*`` exactly; :meth:`SpecHub.positional` splits it between the
two draft slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otbound.verifiers.base import BaseVerifier, sample_tokens
from otbound.verifiers.greedy import fixed_plus_one_plan, sample_plan

__all__ = ["SpecHub"]


def _hub_plan(p: np.ndarray, q: np.ndarray) -> tuple[int, dict[str, Any]]:
    hub = int(np.argmax(q))  # first maximum: ties go to the lower token id, as the design does
    r = q.copy()
    r[hub] = 0.0
    r = r / r.sum()  # r_i = q_i / (1 − q_a)
    return hub, fixed_plus_one_plan(p, r, np.array([hub]))


class SpecHub(BaseVerifier):
    """SpecHub on the hub design: ``α = p_a + Σ_{i≠a} min(p_i, q_i / (1 − q_a)) = α*_hub``.

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> round(get_verifier("spechub").acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2), 6)
    0.95
    """

    name = "spechub"
    default_design = "hub"
    fixed_n = 2

    def positional(self, p: object, q: object, n: int = 2) -> np.ndarray:
        r"""Exact ``(a_0, a_1)``: the probabilities that the output is the first or second draft.

        With ``M = Σ_{i≠a} min(p_i, q_i / (1 − q_a))`` (so ``α* = p_a + M``): the first draft is
        the hub with probability ``q_a``, and then (``x_2 = i ~ r``) the verifier outputs ``i``
        with total probability ``Σ_i r_i min(1, p_i/r_i) = M`` and the hub with
        ``θ Σ_i (r_i − p_i)⁺ = p_a``; otherwise (``x_1 = i`` with probability
        ``q_i = (1 − q_a) r_i``, ``x_2 = a``) the same two totals fall on the other slots:

        .. math::

            a_0 = q_a\, p_a + (1 − q_a) M, \qquad a_1 = q_a M + (1 − q_a)\, p_a.

        The residual never returns a draft that can be rejected. ``O(V)``.

        Parameters
        ----------
        p, q : array_like, shape (V,)
            Target and draft distributions.
        n : int, default 2
            Number of drafts (2 only).

        Returns
        -------
        numpy.ndarray, shape (2,)

        Examples
        --------
        >>> from otbound.verifiers import get_verifier
        >>> a = get_verifier("spechub").positional([0.3, 0.4, 0.3], [0.6, 0.3, 0.1])
        >>> [round(float(x), 4) for x in a]  # α* = 0.3 + 0.65
        [0.44, 0.51]
        """
        p, q, n = self._validate(p, q, n)
        hub, plan = _hub_plan(p, q)
        on_hub, q_hub = float(p[hub]), float(q[hub])
        matched = max(plan["alpha"] - on_hub, 0.0)  # M
        return np.array(
            [q_hub * on_hub + (1.0 - q_hub) * matched, q_hub * matched + (1.0 - q_hub) * on_hub]
        )

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return float(_hub_plan(p, q)[1]["alpha"])

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        hub = int(np.argmax(q))
        if hub not in drafts.tolist() or drafts[0] == drafts[1]:
            raise ValueError(
                f"hub drafts must be two distinct tokens, one of them the hub {hub}; "
                f"got {drafts.tolist()}"
            )
        i = int(drafts[1] if drafts[0] == hub else drafts[0])  # the non-hub draft
        r = q.copy()
        r[hub] = 0.0
        r = r / r.sum()  # the set {a, i} has probability r_i = q_i / (1 − q_a)
        # 1. output i with probability min(1, p_i / r_i)
        if rng.random() < min(1.0, p[i] / r[i]):
            return i
        # 2. otherwise output the hub with probability θ = p_a / (1 − Σ_{j≠a} min(p_j, r_j))
        off_hub = np.arange(p.size) != hub
        slack = np.where(off_hub, np.maximum(r - p, 0.0), 0.0).sum()
        if rng.random() < p[hub] / slack:
            return hub
        # 3. otherwise sample (p − r)⁺ off the hub
        return int(sample_tokens(np.where(off_hub, np.maximum(p - r, 0.0), 0.0), rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        hub, plan = _hub_plan(p, q)
        other = np.where(drafts[:, 0] == hub, drafts[:, 1], drafts[:, 0])
        return sample_plan(plan, other, rng)
