r"""Verification rules that serving engines ship, as otbound verifiers.

Each rule follows one engine's source (the module docstrings cite the file and the commit
read), with the processing each side gets (temperature, top-k, top-p), and states what it
claims (:attr:`EngineRule.lossless`); :func:`otbound.audit` measures it. Rules take the two
models' distributions before processing (:mod:`otbound.engines._base`).

=========================  ==========  ===========  =========================================
rule                       engine      design       lossless
=========================  ==========  ===========  =========================================
``hf_assisted``            transformers  iid        yes: the draft tested against its own law
``hf_raw_q``               transformers  iid        no with top-k/top-p: raw ``q`` in the test
``hf_argmax_raw_q``        transformers  topk       no: an argmax draft tested against raw ``q``
``vllm_rejection``         vllm        iid          yes: filters on the target side only
``vllm_one_hot``           vllm        topk         yes, for any drafter: ``q`` one-hot
``vllm_strict_match``      vllm        topk         only at temperature 0
``vllm_typical``           vllm        iid          no: typical acceptance
``filters_draft_only``     any         iid          no with filters: the test's target unfiltered
``llamacpp_sample_match``  llama.cpp   topk         yes: the target's own sample
``llamacpp_example``       llama.cpp   topk         no: argmax draft, residual paired by position
``sglang_target_only``     sglang      topk         yes (thresholds 1): ``α = P(T)``
``sglang_relaxed``         sglang      topk         no: ``threshold_acc`` 0.5
=========================  ==========  ===========  =========================================

Block rules on drafted chains (:data:`CHAIN_RULES`, sequence verifiers,
:mod:`otbound.engines.blocks`): ``vllm_block`` (vLLM's block verification, lossless) and
``ascend_block`` (a port before its fix, lossy).
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.engines._base import EngineRule, Processing, Sides
    from otbound.engines.blocks import ChainRule
    from otbound.engines.registry import (
        CHAIN_RULES,
        ENGINE_RULES,
        get_chain_rule,
        get_engine_rule,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.engines._base": ("EngineRule", "Processing", "Sides"),
            "otbound.engines.blocks": ("ChainRule",),
            "otbound.engines.registry": (
                "CHAIN_RULES",
                "ENGINE_RULES",
                "get_chain_rule",
                "get_engine_rule",
            ),
        },
    )

__all__ = [
    "CHAIN_RULES",
    "ENGINE_RULES",
    "ChainRule",
    "EngineRule",
    "Processing",
    "Sides",
    "get_chain_rule",
    "get_engine_rule",
]
