r"""vLLM: the rejection sampler's probabilistic and greedy paths, the one-hot ``q`` of drafters
that give no probabilities, and the typical-acceptance sampler.

Read:

* ``vllm/v1/sample/rejection_sampler.py`` at commits ``0097a7bbf1d91c71f03e35dc6c6fe978b88181f5``
  and ``7f6fc1c5ce8d02f473b1b923debbfef3fa0b7a6a``: the target's probabilities get the
  request's temperature, top-k and top-p (``compute_probs``, later
  ``apply_sampling_constraints``); a draft ``x`` is kept when ``p(x) / q(x) >= u``; a
  rejected position's token is ``argmax((p − q)⁺ / E)`` with ``E`` exponential (a draw from
  ``(p − q)⁺`` normalised); with no draft probabilities (``IS_NGRAM``) ``q(x) = 1`` and the
  recovered token is ``argmax(p' / E)``, ``p'`` the target with the draft token zeroed; a
  request at temperature 0 takes the greedy kernel: the draft is kept iff it is the target's
  argmax, and the argmax is output either way.
* ``vllm/v1/spec_decode/eagle.py`` at commit ``f7eef1b6987f4780fe8636077682936fe075aa2f``: the
  EAGLE proposer drafts ``logits.argmax`` and passes no draft probabilities; its (then unused)
  sampling helper notes that the draft takes the request's temperature only, "it does not
  affect the distribution of the generated tokens after rejection sampling".
* ``vllm/model_executor/layers/typical_acceptance_sampler.py`` at commit
  ``60b5eb0cd23f43e347d2bf933470e465fe8cff9f``: Medusa's typical acceptance, a draft kept iff
  ``p(x) > min(ε, δ exp(−H(p)))`` (``H`` computed with ``log(p + 1e-5)``), the target's argmax
  output at the first rejection.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from otbound.engines._base import (
    EngineRule,
    Processing,
    Sides,
    SingleTest,
    TargetDraw,
    argmax_token,
    in_unit_interval,
)
from otbound.verifiers.base import sample_tokens

__all__ = ["VllmOneHot", "VllmRejection", "VllmStrictMatch", "VllmTypical"]


class VllmRejection(SingleTest):
    r"""``vllm_rejection``: the probabilistic path with a drafter that hands its probabilities.

    The target ``P`` gets temperature, top-k and top-p; the draft only the temperature (its
    law ``D``), and the test uses ``D``, what it sampled from: top-k and top-p on the target
    side only, and lossless: ``L = min(P, D) + (P − D)⁺ = P``, ``α = Σ min(P, D)``.
    """

    name = "vllm_rejection"
    engine = "vllm"

    def drafts_from(self, sides: Sides) -> np.ndarray:
        return sides.tempered_draft

    def _pair(self, sides: Sides) -> np.ndarray:
        return sides.tempered_draft


class VllmOneHot(TargetDraw):
    r"""``vllm_one_hot``: no draft probabilities, so ``q`` is one-hot at the draft (EAGLE's
    argmax drafts, n-gram drafts): keep ``x`` w.p. ``P_x``, else draw from ``P`` without ``x``.

    Given any draft ``x`` the output is ``P_x`` at ``x`` and ``(1 − P_x) P_y / (1 − P_x) = P_y``
    elsewhere: ``Y ~ P`` whatever the drafter does, greedy or sampled (design ``topk`` by
    default, ``iid`` too). ``α = Σ_x d_x P_x`` (``P`` of the argmax for a greedy drafter).
    """

    name = "vllm_one_hot"
    engine = "vllm"

    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        target = sides.target
        x = drafts[:, 0]
        tokens: np.ndarray = x.copy()
        reject = rng.random(x.size) >= target[x]
        for token in np.unique(x[reject]):  # the residual depends on the rejected draft
            rows = reject & (x == token)
            others = target.copy()
            others[token] = 0.0
            tokens[rows] = sample_tokens(others, rng.random(int(rows.sum())))
        return tokens


class VllmStrictMatch(EngineRule):
    r"""``vllm_strict_match``: the greedy kernel (keep the draft iff it is ``argmax P``; output
    ``argmax P`` either way). vLLM runs it at temperature 0, where ``P`` is one-hot and the
    rule lossless; against a sampling target it outputs a constant: ``TV = 1 − max P``,
    ``α = d(argmax P)``.
    """

    name = "vllm_strict_match"
    engine = "vllm"
    default_design = "topk"
    designs = ("topk", "iid")
    lossless_by_design = False

    @property
    def lossless(self) -> bool | None:
        return self.processing.temperature == 0.0

    def _law(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        best = argmax_token(sides.target)
        law = np.zeros_like(sides.target)
        law[best] = 1.0
        return law, float(self.single_draft_law(sides)[best])

    def _conditional(self, drafts: np.ndarray, sides: Sides) -> np.ndarray:
        return self._law(sides, 1)[0]

    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        return np.full(drafts.shape[0], argmax_token(sides.target), dtype=np.int64)


class VllmTypical(EngineRule):
    r"""``vllm_typical``: typical acceptance (Medusa, Cai et al. 2024, section 3.3.1).

    Keep ``x`` iff ``P_x > τ``, ``τ = min(ε, δ e^{−H})``, ``H = −Σ P log(P + 10⁻⁵)``; else output
    ``a = argmax P``:

    .. math:: L = d \cdot 1[P > τ] + \Bigl(\sum_x d_x 1[P_x ≤ τ]\Bigr) e_a.

    Parameters
    ----------
    processing : Processing, optional
    design : str, optional
    posterior_threshold : float, default 0.09
        ``ε`` (Medusa's reference value).
    posterior_alpha : float, default 0.3
        ``δ`` (likewise).
    """

    name = "vllm_typical"
    engine = "vllm"
    designs = ("iid", "topk")
    lossless_by_design = False
    settings: ClassVar[tuple[str, ...]] = ("posterior_threshold", "posterior_alpha")

    def __init__(
        self,
        processing: Processing | None = None,
        *,
        design: str | None = None,
        posterior_threshold: float = 0.09,
        posterior_alpha: float = 0.3,
    ) -> None:
        super().__init__(processing, design=design)
        in_unit_interval(posterior_threshold=posterior_threshold, posterior_alpha=posterior_alpha)
        self.posterior_threshold = float(posterior_threshold)
        self.posterior_alpha = float(posterior_alpha)

    def threshold(self, target: np.ndarray) -> float:
        """``τ = min(ε, δ exp(−H))``."""
        entropy = -float(np.dot(target, np.log(target + 1e-5)))
        return min(self.posterior_threshold, self.posterior_alpha * float(np.exp(-entropy)))

    def _law(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        target, draft = sides.target, self.single_draft_law(sides)
        keep = target > self.threshold(target)
        best = argmax_token(target)
        law = np.where(keep, draft, 0.0)
        fallback = float(draft[~keep].sum())
        law[best] += fallback
        return law, float(draft[keep].sum() + (draft[best] if not keep[best] else 0.0))

    def _conditional(self, drafts: np.ndarray, sides: Sides) -> np.ndarray:
        target = sides.target
        x = int(drafts[0])
        out = np.zeros_like(target)
        out[x if target[x] > self.threshold(target) else argmax_token(target)] = 1.0
        return out

    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        target = sides.target
        x = drafts[:, 0]
        out: np.ndarray = np.where(target[x] > self.threshold(target), x, argmax_token(target))
        return out
