"""The systems of a dynamic tree-decoding run (:mod:`._dynamic`): which the settings name, the
checkpoint key of each, and each one's per-call prediction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from otbound.tree_decoding._beam_predict import BeamPrediction
from otbound.tree_decoding._config import TreeDecodingConfig
from otbound.tree_decoding._dynamic import System, largest_depth
from otbound.tree_decoding._layout import TreeLayout
from otbound.tree_decoding._prediction import RootPrediction
from otbound.tree_decoding._specs import TreeSpec, parse_trees
from otbound.tree_decoding._stopping import StoppingPolicy

__all__ = ["system_predictor", "system_spec", "systems_of"]


def systems_of(config: TreeDecodingConfig) -> tuple[list[System], list[dict[str, object]]]:
    """The systems of a dynamic run, and the budget/family pairs with no tree within budget."""
    policies = config.policies or (StoppingPolicy(),)
    if config.budgets is None:
        return _static_shape_systems(config.specs, config.roots, policies), []
    systems: list[System] = []
    skipped: list[dict[str, object]] = []
    for budget in config.budgets:
        if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 1:
            raise ValueError(
                f"budget must be a whole number of nodes >= 1 (one tree node per target call "
                f"at least), got {budget!r}"
            )
        for family in config.families:
            for r in config.roots:
                for policy in policies:
                    depth = largest_depth(family, int(budget), r)
                    if depth:
                        systems.append(System(family, depth, r, policy, int(budget)))
                    else:
                        skipped.append(_no_tree(family, r, policy, int(budget)))
    return systems, skipped


def _static_shape_systems(
    specs: Sequence[TreeSpec], roots: Sequence[str], policies: Sequence[StoppingPolicy]
) -> list[System]:
    """The systems of named trees (no budgets): each tree's family and depth, per root and
    policy (a target root needs a depth of at least 1)."""
    systems: list[System] = []
    for spec in specs:
        if spec.family in ("custom",) or spec.family.startswith("paths"):
            raise ValueError(
                f"trees: {spec.name} cannot be grown dynamically (beam trees, target roots, "
                "stopping and budgets take chain, binary, ternary, kN and beamW)"
            )
        for r in roots:
            for policy in policies:
                if r == "target" and spec.depth < 1:
                    continue
                systems.append(System(spec.family, spec.depth, r, policy, None))
    return systems


def _no_tree(family: str, root: str, policy: StoppingPolicy, budget: int) -> dict[str, object]:
    """The skipped row of a budget with no tree of ``family`` (and ``root``) within it."""
    return {
        "family": family,
        "tree": f"{family}-0",
        "nodes": 0,
        "depth": 0,
        "root": root,
        "stopping": policy.label,
        "budget": budget,
        "note": f"no {family} tree with a {root} root within {budget} nodes",
    }


def system_spec(system: System) -> TreeSpec:
    """A TreeSpec naming a system's checkpoint part (its key) with its capacity's paths."""
    paths = system.static_paths()
    if paths is None:
        paths = parse_trees(f"{system.family}:{system.depth}")[0].as_lists()
        if system.root == "target":
            paths = [[0], *[[0, *p] for p in paths[: system.width * (system.depth - 1)]]]
    return TreeSpec(system.key, system.family, tuple(tuple(p) for p in paths))


def system_predictor(
    verifier: Any, system: System, config: TreeDecodingConfig, seed: int
) -> BeamPrediction | RootPrediction | None:
    """The per-call prediction of a system (beams: :class:`BeamPrediction`; k-ary subtrees:
    :class:`RootPrediction`), or None where it has none (no prediction asked, a stopping
    policy that is not predictable, no subtree below a target root)."""
    if not (config.predict and system.stopping.predictable):
        return None
    if system.beam:
        below = system.depth - 1 if system.root == "target" else system.depth
        trials = max(1, config.prediction_trials // 100)
        return BeamPrediction(verifier, system.width, below, trials, seed)
    subtree = system.subtree_paths()
    if subtree:
        layout = TreeLayout.from_paths(subtree)
        return RootPrediction(verifier, layout, config.prediction_trials, seed)
    return None
