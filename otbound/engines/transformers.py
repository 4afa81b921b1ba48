r"""Hugging Face transformers: assisted generation's speculative sampling, with the ``q`` each
candidate generator hands it.

``_speculative_sampling`` (``src/transformers/generation/utils.py``, read at commit
``000034a44ef887621d9b36001a5eb7c46e64cb3f``) takes ``q = softmax(candidate_logits)`` and
``p = softmax(new_logits)``, the target's logits after the request's logits processors
(temperature, top-k, top-p warpers), and runs Leviathan et al.'s test: keep the draft ``x``
w.p. ``min(1, p_x / q_x)``, else draw from ``(p − q)⁺`` normalised. It is lossless iff ``q``
is the law the candidate was drawn from. Three rules follow from what the generator returns:

* ``hf_assisted``: ``AssistedCandidateGenerator._generate_candidates``
  (``src/transformers/generation/candidate_generator.py``, read at commit
  ``00a11b6a0745b442473aef0221e098d022b8158c``) returns ``assistant_output.scores``, the
  assistant's *processed* scores, from which it sampled: lossless.
* ``hf_raw_q``: the DFlash and MTP candidate generators sample from the processor-applied
  logits but return the *raw* logits as ``q``. Read in the report
  https://github.com/huggingface/transformers/issues/47932 (its links point into
  ``candidate_generator.py`` and ``modeling_layers.py`` at commit
  ``d1123114da1ab4395198146f4f84dae7fe8b693e``, a version not in the stored index) and the
  fix proposed in https://github.com/huggingface/transformers/pull/47961. ``p_x / q_x`` is
  inflated by ``1 / Z`` (``Z`` the raw mass the filters keep) and the residual
  ``(p − q)⁺`` subtracts mass the drafter never proposes.
* ``hf_argmax_raw_q``: the single-position multi-token generator of the same report drafts
  the raw argmax (no processors, whatever ``do_sample``) and returns the raw logits: a
  deterministic draft tested as if drawn from ``q``. The proposed fix returns one-hot logits,
  which is :class:`~otbound.engines.vllm.VllmOneHot`'s rule.
"""

from __future__ import annotations

import numpy as np

from otbound.engines._base import Sides, SingleTest

__all__ = ["HFArgmaxRawQ", "HFAssisted", "HFRawQ"]


class HFAssisted(SingleTest):
    r"""``hf_assisted``: the draft from the processed ``q``, tested against the processed
    ``q``. Lossless: ``min(P, Q') + (P − Q')⁺ = P``; ``α = Σ min(P, Q')``."""

    name = "hf_assisted"
    engine = "transformers"


class HFRawQ(SingleTest):
    r"""``hf_raw_q``: the draft from the processed ``Q'``, tested against the raw ``q``.

    .. math::

        L(y) = Q'_y \min\Bigl(1, \frac{P_y}{q_y}\Bigr) + R\,\frac{(P − q)^+_y}{\sum (P − q)^+},
        \qquad R = 1 − \sum_x Q'_x \min\Bigl(1, \frac{P_x}{q_x}\Bigr).

    With top-k or top-p at temperature 1, ``q = Z Q'`` on the kept set: the ratio is
    ``P_x / (Z Q'_x)``, too large by ``1 / Z``. Lossless only when processing is the identity.
    """

    name = "hf_raw_q"
    engine = "transformers"
    lossless_by_design = False

    @property
    def lossless(self) -> bool | None:
        return self.processing.is_identity

    def _pair(self, sides: Sides) -> np.ndarray:
        return sides.q


class HFArgmaxRawQ(SingleTest):
    r"""``hf_argmax_raw_q``: the raw argmax ``a`` drafted (design ``topk``, ``n = 1``) and
    tested against the raw ``q``:

    .. math::

        L(y) = 1[y = a] \min\Bigl(1, \frac{P_a}{q_a}\Bigr)
             + \Bigl(1 − \min\Bigl(1, \frac{P_a}{q_a}\Bigr)\Bigr)
               \frac{(P − q)^+_y}{\sum (P − q)^+}.
    """

    name = "hf_argmax_raw_q"
    engine = "transformers"
    default_design = "topk"
    lossless_by_design = False

    def _pair(self, sides: Sides) -> np.ndarray:
        return sides.q
