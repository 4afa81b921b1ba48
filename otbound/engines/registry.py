"""The engine rules by name: :data:`ENGINE_RULES` and :func:`get_engine_rule`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otbound.engines._base import EngineRule, Processing
from otbound.engines.blocks import AscendBlock, ChainRule, VllmBlock
from otbound.engines.llamacpp import LlamaExample, LlamaSampleMatch
from otbound.engines.mismatch import DraftFiltersOnly
from otbound.engines.sglang import SglangTargetOnly
from otbound.engines.transformers import HFArgmaxRawQ, HFAssisted, HFRawQ
from otbound.engines.vllm import VllmOneHot, VllmRejection, VllmStrictMatch, VllmTypical

__all__ = [
    "CHAIN_RULES",
    "ENGINE_RULES",
    "RELAXED_THRESHOLD_ACC",
    "get_chain_rule",
    "get_engine_rule",
]

#: ``threshold_acc`` of the shipped ``sglang_relaxed`` (an illustrative setting below the
#: default 1; the server takes any value in (0, 1]).
RELAXED_THRESHOLD_ACC = 0.5

#: name -> (class, settings), in the order tables list them.
_RULES: dict[str, tuple[type[EngineRule], Mapping[str, Any]]] = {
    "hf_assisted": (HFAssisted, {}),
    "hf_raw_q": (HFRawQ, {}),
    "hf_argmax_raw_q": (HFArgmaxRawQ, {}),
    "vllm_rejection": (VllmRejection, {}),
    "vllm_one_hot": (VllmOneHot, {}),
    "vllm_strict_match": (VllmStrictMatch, {}),
    "vllm_typical": (VllmTypical, {}),
    "filters_draft_only": (DraftFiltersOnly, {}),
    "llamacpp_sample_match": (LlamaSampleMatch, {}),
    "llamacpp_example": (LlamaExample, {}),
    "sglang_target_only": (SglangTargetOnly, {}),
    "sglang_relaxed": (SglangTargetOnly, {"threshold_acc": RELAXED_THRESHOLD_ACC}),
}

#: Names of the shipped engine rules.
ENGINE_RULES: tuple[str, ...] = tuple(_RULES)


def get_engine_rule(
    name: str,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    **options: Any,
) -> EngineRule:
    """An engine rule by name, with the request's processing.

    Parameters
    ----------
    name : str
        One of :data:`ENGINE_RULES`.
    temperature, top_k, top_p
        The request's processing (:class:`~otbound.engines.Processing`).
    **options
        The rule's own settings (``design=``, ``threshold_acc=`` ...), over the shipped ones.

    Returns
    -------
    EngineRule

    Examples
    --------
    >>> rule = get_engine_rule("hf_raw_q", top_k=2)
    >>> rule.lossless
    False
    >>> p, q = [0.5, 0.3, 0.2], [0.4, 0.4, 0.2]
    >>> fixed = get_engine_rule("hf_assisted", top_k=2)
    >>> round(rule.acceptance(p, q), 6), round(fixed.acceptance(p, q), 6)
    (0.96875, 0.875)
    """
    try:
        cls, shipped = _RULES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown engine rule {name!r}; valid: {', '.join(ENGINE_RULES)}"
        ) from None
    processing = Processing(temperature, top_k, top_p)
    rule = cls(processing, **{**shipped, **options})
    if name != cls.name:
        rule.name = name  # type: ignore[misc]  # a shipped setting of a class: its own name
    return rule


#: Block rules on drafted chains (sequence verifiers, :mod:`otbound.engines.blocks`).
CHAIN_RULES: tuple[str, ...] = ("vllm_block", "ascend_block")


def get_chain_rule(name: str) -> ChainRule:
    """A block rule by name (one of :data:`CHAIN_RULES`).

    Examples
    --------
    >>> get_chain_rule("vllm_block").lossless
    True
    """
    classes = {"vllm_block": VllmBlock, "ascend_block": AscendBlock}
    if name not in classes:
        raise ValueError(f"unknown chain rule {name!r}; valid: {', '.join(CHAIN_RULES)}")
    return classes[name]()
