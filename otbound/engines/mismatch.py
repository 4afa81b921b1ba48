r"""Processing on one side only: the filters applied where the sampling happens but not in
the acceptance test.

Top-k and top-p change the law a request samples from. Applied to the *target* side only,
with the test using the law the draft was drawn from, they cost acceptance and nothing else
(:class:`~otbound.engines.vllm.VllmRejection`: vLLM's drafter takes the temperature only).
Applied to the *draft* side only, with the test's target probabilities left unfiltered, the
rule is exact speculative sampling of the unfiltered target: it outputs the wrong law,
whatever the drafter. vLLM's rejection sampler documented this limitation for its
non-bonus tokens ("spec decode does not support these sampling strategies",
``RejectionSampler``'s docstring in ``vllm/v1/sample/rejection_sampler.py`` at commit
``0097a7bbf1d91c71f03e35dc6c6fe978b88181f5``), while the ``compute_probs`` of the same file
filters the target: the rule here is the configuration that docstring describes, not one
engine's current code.
"""

from __future__ import annotations

import numpy as np

from otbound.engines._base import Sides, SingleTest

__all__ = ["DraftFiltersOnly"]


class DraftFiltersOnly(SingleTest):
    r"""``filters_draft_only``: drafts from the filtered ``D``, tested against the target at
    the request's temperature but unfiltered (``P_T``):

    .. math:: L = \min(P_T, D) + (P_T − D)^+ = P_T,\qquad TV(L, P) = TV(P_T, P),

    the mass the request's filters remove from the target. Lossless only without filters.
    """

    name = "filters_draft_only"
    engine = "any"
    lossless_by_design = False

    @property
    def lossless(self) -> bool | None:
        return self.processing.top_k is None and self.processing.top_p in (None, 1.0)

    def _test_target(self, sides: Sides) -> np.ndarray:
        return sides.tempered_target
