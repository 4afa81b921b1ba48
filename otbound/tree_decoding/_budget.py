r"""Systems at a fixed target budget: the summary of dynamic runs and the speed-up estimate.

For each system (verifier × family × root × stopping) and budget ``B`` (``--budget``) the tree
is the largest of its family whose capacity, the nodes the target scores per call, is at most
``B`` (:func:`._dynamic.largest_depth`); with a stopping policy that tree is the cap, and the
nodes actually scored are counted per call. RSD's comparison (Jeon et al., arXiv 2402.14160,
"fixed computational budgets at LLM") is the same number of tree tokens per target call.

Columns added to the tree summary (:data:`SYSTEM_COLUMNS`), per system and budget:

* ``target_tokens_per_call``: mean nodes scored by the target per call (present slots);
* ``draft_calls_per_call``: mean draft forward passes a call needs (one per depth at which the
  row draws children or a learned decision reads the draft's distribution);
* ``target_passes_per_call``: 1, or 2 with a target root (the root pass, then the tree);
* ``tokens_per_call``: the existing ratio estimator, bonus included, with its interval
  clustered by prompt;
* ``mcsd_acceptance``: improved MCSD's metric (Lu et al., arXiv 2409.10644), the mean over calls
  of *accepted drafts / maximum draft length* ``D`` (the target root's child counts as
  accepted);
* ``accept_d1 .. accept_dK``: the walk's acceptance rate at depth ``d``: calls that accepted a
  node at depth ``d`` over calls whose walk reached an expanded node at depth ``d − 1``;
* ``speedup``: the cost model below.

**Cost model.** A call costs ``target_passes · c_target + draft_calls · c_draft`` against
``c_target`` per token of plain decoding, so

.. math::  \text{speed-up} = \frac{\text{tokens per call} · c_\text{target}}
           {\text{target passes} · c_\text{target} + \text{draft calls} · c_\text{draft}}.

``c_target`` and ``c_draft`` are the mean wall times of one batched target and draft forward
pass measured on the run (``c_target_measured``, ``c_draft_measured``), or the values given
(``--c-target``, ``--c-draft``); only their ratio matters. The model ignores that a pass over
more tree tokens costs more (true when decoding is memory-bound, as RSD assumes) and the
verification's own time.

**Prediction** (``predicted``): for ``fixed`` stopping, ``block_efficiency`` of the positional
acceptance at the first verified context (draft roots: the root; target roots: ``1 +`` that
of the subtree under the root's child); for ``beamW`` with ``fixed`` stopping, the context-free
Monte Carlo :func:`otbound.trees.beam_block_efficiency` of the same contexts. Under
``confidence`` and ``learned`` stopping no prediction is derived (the tree's shape depends on
the text); the note says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from otbound._checks import clip_rounding
from otbound.stats import cluster_mean_interval
from otbound.tree_decoding._summary import TREE_KEYS, mean_matrix
from otbound.trees import block_efficiency, bound_block_efficiency

#: Keys of a system's rows (after :data:`TREE_KEYS`).
SYSTEM_KEYS: tuple[str, ...] = ("root", "stopping", "budget")

#: Columns of :func:`summarise_systems` before the per-depth ``accept_dK`` columns.
SYSTEM_COLUMNS: tuple[str, ...] = (
    *TREE_KEYS,
    *SYSTEM_KEYS,
    "applicable",
    "calls",
    "prompts",
    "tokens_per_call",
    "ci_low",
    "ci_high",
    "target_tokens_per_call",
    "draft_calls_per_call",
    "target_passes_per_call",
    "mcsd_acceptance",
    "predicted",
    "token_level_bound",
    "speedup",
    "c_target",
    "c_draft",
    "note",
)

_NO_PREDICTION = "no prediction: the tree's shape depends on the text under {}"


def depth_acceptance(accepted: np.ndarray, bonus: np.ndarray, depth: int) -> np.ndarray:
    r"""Per-depth acceptance ``a_d = #{A ≥ d} / (#{A ≥ d} + #{A = d − 1, not bonus})``.

    ``A`` is a call's number of accepted drafts; a call with ``A = d − 1`` that did not end
    with a bonus was offered children at depth ``d`` and rejected them.

    Examples
    --------
    >>> depth_acceptance(np.array([0, 1, 2]), np.array([False, False, True]), 2).tolist()
    [0.6666666666666666, 0.5]
    """
    a = np.asarray(accepted, dtype=np.int64)
    b = np.asarray(bonus, dtype=bool)
    out = np.full(depth, np.nan)
    for d in range(1, depth + 1):
        hit = np.count_nonzero(a >= d)
        miss = np.count_nonzero((a == d - 1) & ~b)
        if hit + miss:
            out[d - 1] = hit / (hit + miss)
    return out


def measured_costs(steps: pd.DataFrame) -> tuple[float, float]:
    """``(c_target, c_draft)``: mean seconds of one batched target / draft pass in ``steps``."""
    if steps.empty or "target_seconds" not in steps:
        return float("nan"), float("nan")
    t_pass = steps["target_passes"].to_numpy(float)
    d_pass = steps["draft_passes"].to_numpy(float)
    c_target = steps["target_seconds"].sum() / max(t_pass.sum(), 1.0)
    c_draft = steps["draft_seconds"].sum() / max(d_pass.sum(), 1.0)
    return float(c_target), float(c_draft)


def speedup(
    tokens_per_call: float,
    target_passes: float,
    draft_calls: float,
    c_target: float,
    c_draft: float,
) -> float:
    """The cost model's speed-up over plain decoding (see the module docstring)."""
    cost = target_passes * c_target + draft_calls * c_draft
    return float(tokens_per_call * c_target / cost) if cost > 0 else float("nan")


def summarise_systems(
    steps: pd.DataFrame,
    not_applicable: Iterable[Mapping[str, object]] = (),
    *,
    c_target: float | None = None,
    c_draft: float | None = None,
    level: float = 0.95,
) -> pd.DataFrame:
    """One row per (verifier, tree, root, stopping, budget) of a dynamic run.

    Parameters
    ----------
    steps : pandas.DataFrame
        The per-call table of a dynamic run (:func:`otbound.tree_decoding.run_tree_decoding`
        with ``root``, ``stopping`` or ``budgets``, or beam trees).
    not_applicable : iterable of mappings
        Systems that were not run, with a ``note``.
    c_target, c_draft : float, optional
        The cost model's pass costs; default: measured on ``steps`` (:func:`measured_costs`).
    level : float, default 0.95

    Returns
    -------
    pandas.DataFrame
        :data:`SYSTEM_COLUMNS`, then ``accept_d1 ..``.
    """
    measured = measured_costs(steps)
    ct = measured[0] if c_target is None else float(c_target)
    cd = measured[1] if c_draft is None else float(c_draft)
    keys = [*TREE_KEYS, *SYSTEM_KEYS]
    deepest = int(steps["max_depth"].max()) if len(steps) else 0
    records: list[dict[str, object]] = []
    if len(steps):
        frame = steps.assign(budget=steps["budget"].fillna(-1))
        for key, part in frame.groupby(keys, sort=False):
            record: dict[str, object] = dict(zip(keys, key, strict=True))
            if record["budget"] == -1:
                record["budget"] = np.nan
            per_prompt = part.groupby("prompt")["tokens"].agg(["sum", "count"])
            mean, low, high = cluster_mean_interval(
                per_prompt["sum"].to_numpy(float), per_prompt["count"].to_numpy(float), level
            )
            depth = int(part["max_depth"].iloc[0])
            rates = depth_acceptance(part["accepted"], part["bonus"], depth)
            t_pass = float(part["target_passes"].mean())
            d_calls = float(part["draft_calls"].mean())
            record.update(
                applicable=True,
                calls=len(part),
                prompts=len(per_prompt),
                tokens_per_call=mean,
                ci_low=low,
                ci_high=high,
                target_tokens_per_call=float(part["nodes_scored"].mean()),
                draft_calls_per_call=d_calls,
                target_passes_per_call=t_pass,
                mcsd_acceptance=float((part["accepted"] / part["max_depth"]).mean()),
                predicted=_predicted(part),
                token_level_bound=_bound(part),
                speedup=speedup(mean, t_pass, d_calls, ct, cd),
                c_target=ct,
                c_draft=cd,
                note="" if str(record["stopping"]) == "fixed"
                else _NO_PREDICTION.format(record["stopping"]),
            )  # fmt: skip
            record.update({f"accept_d{d + 1}": rates[d] for d in range(depth)})
            records.append(record)
    for row in not_applicable:
        records.append({**dict(row), "applicable": False, "calls": 0, "prompts": 0})
    columns = [*SYSTEM_COLUMNS, *(f"accept_d{d + 1}" for d in range(deepest))]
    out = pd.DataFrame(records, columns=columns)
    if out.empty:
        return out
    out["applicable"] = out["applicable"].astype(bool)
    order = {name: i for i, name in enumerate(dict.fromkeys(out["verifier"]))}
    out["_order"] = out["verifier"].map(order)
    out = out.sort_values(
        ["budget", "_order", "family", "root", "stopping", "nodes"],
        kind="stable",
        ignore_index=True,
        na_position="first",
    )
    return out.drop(columns="_order")


def _subtree(part: pd.DataFrame) -> list[list[int]]:
    branching = [int(b) for b in part["branching"].iloc[0]]
    from otbound.trees import kary_tree

    return kary_tree(branching) if branching else []


def _predicted(part: pd.DataFrame) -> float:
    if str(part["stopping"].iloc[0]) != "fixed":
        return float("nan")
    if "beam_prediction" in part and part["beam_prediction"].notna().any():
        extra = 1.0 if str(part["root"].iloc[0]) == "target" else 0.0
        return extra + float(part["beam_prediction"].mean())
    if "positional" not in part:
        return float("nan")
    positional = mean_matrix(part["positional"])
    paths = _subtree(part)
    extra = 1.0 if str(part["root"].iloc[0]) == "target" else 0.0
    if not paths:
        return 1.0 + extra
    if positional is None:
        return float("nan")
    positional = clip_rounding(positional, 0.0, 1.0, "positional acceptance")
    return extra + block_efficiency(positional, paths)


def _bound(part: pd.DataFrame) -> float:
    if str(part["stopping"].iloc[0]) != "fixed" or "alpha_star" not in part:
        return float("nan")
    stars = mean_matrix(part["alpha_star"])
    paths = _subtree(part)
    extra = 1.0 if str(part["root"].iloc[0]) == "target" else 0.0
    if not paths:
        return 1.0 + extra
    if stars is None or "beam" in str(part["family"].iloc[0]):
        return float("nan")
    stars = clip_rounding(stars, 0.0, 1.0, "α* per depth")
    return extra + bound_block_efficiency(stars, paths)
