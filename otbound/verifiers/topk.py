r"""Deterministic top-k drafts (EAGLE-style static trees): the target sampled step by step.

Design: the drafts are the ``n`` most likely draft tokens ``T`` (ties to the lower id), always
the same. A lossless verifier cannot do better than output ``Y ~ p`` and accept when
``Y ∈ T``:

.. math::

    α = p(T) = α^*_{topk}.

Step by step, as engines do it: accept ``x_k`` with probability
``p(x_k) / (1 − p(x_1..x_{k−1}))`` (``p`` restricted to the drafts not yet rejected), and after
``n`` rejections sample ``p`` restricted to ``V \ T``. This is recursive rejection sampling with
one-hot drafts, and its output is ``p`` exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from otbound.drafts import top_tokens
from otbound.problem import Step
from otbound.verifiers.base import BaseVerifier, sample_tokens

__all__ = ["TopK"]


def _kept_masses(p: np.ndarray, q: np.ndarray, ns: Sequence[int]) -> dict[int, float | None]:
    """``p(T_n)`` for each ``n`` from one :func:`~otbound.drafts.top_tokens` call: the ``n``
    most likely tokens are the first ``n`` of the ``max(ns)`` most likely (one order, ties to
    the lower id), summed in that order."""
    top = top_tokens(q, max(ns))
    return {n: float(p[top[:n]].sum()) for n in ns}


class TopK(BaseVerifier):
    """Verifier for deterministic top-``n`` drafts: ``α = p(T)``.

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> round(get_verifier("topk").acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2), 6)
    0.7
    """

    name = "topk"
    default_design = "topk"

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return _kept_masses(p, q, [n])[n]

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """Every ``n`` from one top-tokens call (:func:`_kept_masses`), each value the one
        :meth:`_acceptance` gives."""
        return _kept_masses(step.p, step.q, ns)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        if drafts.tolist() != top_tokens(q, len(drafts)).tolist():
            raise ValueError(
                f"topk drafts must be the {len(drafts)} most likely tokens of q in order; "
                f"got {drafts.tolist()}"
            )
        target = p.copy()
        for x in drafts:
            left = target.sum()
            if left > 0 and rng.random() < target[x] / left:
                return int(x)
            target[x] = 0.0  # rejected: p restricted to the remaining tokens
        return int(sample_tokens(target, rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        # Accepting x_k with probability p(x_k) / (1 − p(x_1..x_{k−1})) and then sampling p off
        # T is the inverse CDF of p with the drafts listed first: one uniform per trial.
        order = np.concatenate((drafts[0], np.setdiff1d(np.arange(p.size), drafts[0])))
        tokens: np.ndarray = order[sample_tokens(p[order], rng.random(drafts.shape[0]))]
        return tokens
