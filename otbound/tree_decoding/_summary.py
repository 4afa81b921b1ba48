r"""Tokens per target call per verifier and tree: the mean with a 95% interval clustered over
prompts, beside the prediction and the token-level bound.

* **Measured**: the ratio estimator ``Σ_c T_c / Σ_c M_c`` over prompts ``c`` (``T_c`` tokens
  appended in prompt ``c``'s ``M_c`` target calls), with the cluster-robust Student-t interval
  of :func:`otbound.stats.cluster_mean_interval` (calls of one prompt share a context, so they
  are not independent).
* **Predicted**: :func:`otbound.trees.block_efficiency` of the per-depth positional acceptance
  averaged over the root contexts of the same calls (the verifier's own text), the i.i.d.
  approximation of :mod:`otbound.trees`. Exact when the pair is context-free.
* **Token-level bound** (``token_level_bound``): :func:`otbound.trees.bound_block_efficiency`
  of the design's ``α*`` averaged over the same contexts: no lossless *token-level* verifier of
  the design (one that decides node by node, from the drafts of one node's children and
  ``p``, ``q`` there) beats it in that model. It does **not** bound the sequence-level
  verifiers (``block``, ``traversal``, ``multipath``, :mod:`otbound.sequence`), which decide
  on whole paths; their rows leave the prediction and this bound empty, with a note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from otbound._checks import clip_rounding
from otbound.stats import cluster_mean_interval
from otbound.tree_decoding._walk import SEQUENCE_TREE_VERIFIERS
from otbound.trees import block_efficiency, bound_block_efficiency, kary_tree

#: Columns that identify a verifier/tree pair (first in both tables).
TREE_KEYS: tuple[str, ...] = ("verifier", "design", "family", "tree", "nodes", "depth")

#: Columns of :func:`summarise_tree_steps`.
TREE_SUMMARY_COLUMNS: tuple[str, ...] = (
    *TREE_KEYS,
    "applicable",
    "calls",
    "prompts",
    "tokens_per_call",
    "ci_low",
    "ci_high",
    "predicted",
    "token_level_bound",
    "note",
)

_KEYS = list(TREE_KEYS)

#: The note of a sequence-level verifier's row.
_SEQUENCE_NOTE = (
    "sequence-level verifier: no exact prediction; the token-level bound does not bound it"
)


def mean_matrix(cells: pd.Series) -> np.ndarray | None:
    """The mean of per-call matrices (nested lists); None when there are none."""
    mats = [
        np.array([list(r) for r in m], dtype=float)
        for m in cells
        if isinstance(m, list | tuple | np.ndarray)
    ]
    if not mats or mats[0].size == 0:
        return None
    mean: np.ndarray = np.mean(np.stack(mats), axis=0)
    return mean


def _paths(part: pd.DataFrame, trees: Mapping[str, Sequence[Sequence[int]]]) -> list[list[int]]:
    name = str(part["tree"].iloc[0])
    if name in trees:
        return [list(p) for p in trees[name]]
    return kary_tree([int(b) for b in part["branching"].iloc[0]])


def summarise_tree_steps(
    steps: pd.DataFrame,
    trees: Mapping[str, Sequence[Sequence[int]]] | None = None,
    not_applicable: Iterable[Mapping[str, object]] = (),
    level: float = 0.95,
) -> pd.DataFrame:
    """One row per (verifier, tree): tokens per call, its interval, prediction, token-level bound.

    Parameters
    ----------
    steps : pandas.DataFrame
        The per-call table of :func:`run_tree_decoding` (``tree_steps.parquet``).
    trees : mapping of tree name to path list, optional
        The trees' shapes; default: the complete trees of the ``branching`` column.
    not_applicable : iterable of mappings
        Rows for verifier/tree pairs that were not run (keys of :data:`TREE_SUMMARY_COLUMNS`,
        ``note`` saying why); they get ``applicable = False`` and NaN values.
    level : float, default 0.95
        Confidence level of the interval.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`TREE_SUMMARY_COLUMNS`, sorted by verifier, family and nodes.
    """
    trees = dict(trees or {})
    records: list[dict[str, object]] = []
    for key, part in steps.groupby(_KEYS, sort=False):
        record: dict[str, object] = dict(zip(_KEYS, key, strict=True))
        per_prompt = part.groupby("prompt")["tokens"].agg(["sum", "count"])
        mean, low, high = cluster_mean_interval(
            per_prompt["sum"].to_numpy(float), per_prompt["count"].to_numpy(float), level
        )
        paths = _paths(part, trees)
        positional = mean_matrix(part["positional"]) if "positional" in part else None
        stars = mean_matrix(part["alpha_star"]) if "alpha_star" in part else None
        empty = not paths
        record.update(
            applicable=True,
            calls=len(part),
            prompts=len(per_prompt),
            tokens_per_call=mean,
            ci_low=low,
            ci_high=high,
            predicted=1.0 if empty else np.nan,
            token_level_bound=1.0 if empty else np.nan,
            note=_SEQUENCE_NOTE if record["verifier"] in SEQUENCE_TREE_VERIFIERS else "",
        )
        if positional is not None and not empty:
            positional = clip_rounding(positional, 0.0, 1.0, "positional acceptance")
            record["predicted"] = block_efficiency(positional, paths)
        if stars is not None and not empty:
            stars = clip_rounding(stars, 0.0, 1.0, "α* per depth")
            record["token_level_bound"] = bound_block_efficiency(stars, paths)
        records.append(record)
    for row in not_applicable:
        records.append({**dict(row), "applicable": False, "calls": 0, "prompts": 0})
    frame = pd.DataFrame(records, columns=list(TREE_SUMMARY_COLUMNS))
    if frame.empty:
        return frame
    frame["applicable"] = frame["applicable"].astype(bool)
    order = {name: i for i, name in enumerate(dict.fromkeys(frame["verifier"]))}
    frame["_order"] = frame["verifier"].map(order)
    frame = frame.sort_values(["_order", "family", "nodes"], kind="stable", ignore_index=True)
    return frame.drop(columns="_order")
