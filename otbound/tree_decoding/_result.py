"""What a tree-decoding run returns: the per-call table's columns and
:class:`TreeDecodingResult`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from otbound.tree_decoding._dynamic import System
from otbound.tree_decoding._specs import TreeSpec
from otbound.tree_decoding._summary import TREE_KEYS

__all__ = ["DYNAMIC_STEP_COLUMNS", "STEP_COLUMNS", "TreeDecodingResult"]

#: Columns of the per-call table (``tree_steps.parquet``).
STEP_COLUMNS: tuple[str, ...] = (
    *TREE_KEYS,
    "branching",
    "prompt",
    "call",
    "tokens",
    "accepted",
    "bonus",
    "root_acceptance",
    "root_alpha_star",
    "positional",
    "alpha_star",
)

#: Columns the per-call table of a dynamic run adds (:mod:`._dynamic`, :mod:`._budget`).
DYNAMIC_STEP_COLUMNS: tuple[str, ...] = (
    "root",
    "stopping",
    "budget",
    "nodes_scored",
    "draft_calls",
    "target_passes",
    "max_depth",
    "draft_passes",
    "draft_seconds",
    "target_seconds",
    "beam_prediction",
    "node_features",
    "node_accepted",
)


@dataclass(frozen=True)
class TreeDecodingResult:
    """The output of :func:`run_tree_decoding`.

    Attributes
    ----------
    steps : pandas.DataFrame
        One row per target call (:data:`STEP_COLUMNS`): ``tokens`` appended, ``accepted``
        drafts, ``bonus`` (the walk reached a leaf), and at the root context the verifier's
        acceptance ``root_acceptance``, the design's ``root_alpha_star``, and the per-depth
        matrices ``positional`` and ``alpha_star`` (nested lists) the prediction averages.
    summary : pandas.DataFrame
        :func:`summarise_tree_steps` of ``steps``.
    differences : pandas.DataFrame
        :func:`tree_differences` of ``steps``: every pair of runs (at one budget) compared on
        the same prompts, the difference in tokens per call and its paired interval.
    continuations : pandas.DataFrame
        ``verifier, tree, prompt, tokens`` (the generated token ids).
    trees : tuple of TreeSpec
    seed : int
    temperature : float
    fingerprint : str or None
        The hash of the settings, prompts and models the checkpoint is keyed by (with
        ``parts_dir`` only).
    settings : dict
        What the fingerprint covers (:func:`checkpoint_settings`; with ``parts_dir`` only).
    resumed : int
        (verifier, tree) pairs read from ``parts_dir`` instead of computed.
    systems : tuple of System
        The dynamic systems run (beam trees, target roots, stopping, budgets), else empty.
    """

    steps: pd.DataFrame
    summary: pd.DataFrame
    continuations: pd.DataFrame = field(repr=False)
    trees: tuple[TreeSpec, ...] = ()
    seed: int = 0
    temperature: float = 1.0
    fingerprint: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict, repr=False)
    resumed: int = 0
    systems: tuple[System, ...] = ()
    differences: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)
