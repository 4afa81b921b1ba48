r"""Runs compared on the same prompts: the difference in tokens per call, with its paired interval.

Every run of a tree-decoding table decodes the same prompts, so two runs are compared prompt
by prompt: with ``T_{Ac}`` tokens in the ``M_{Ac}`` calls of prompt ``c`` in run A (likewise B),
the difference of the two ratio estimators

.. math::  D = \frac{\sum_c T_{Ac}}{\sum_c M_{Ac}} − \frac{\sum_c T_{Bc}}{\sum_c M_{Bc}}

gets the cluster-robust interval of :func:`otbound.stats.paired_difference_interval`, which
keeps the covariance of the two runs on a prompt (the prompt's difficulty, and the common
random numbers of :mod:`._streams`). Two runs are *separated* only where that interval
excludes zero; otherwise the data do not tell them apart, whatever their means.

Each interval holds at its own level: among many pairs some intervals exclude zero by chance
(about 1 in 20 at 95% where no difference exists). A claim picked from the table after looking
at all of it should use a stricter level (Bonferroni: ``level = 1 − 0.05 / pairs``).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from otbound.stats import paired_difference_interval
from otbound.tree_decoding._budget import SYSTEM_KEYS
from otbound.tree_decoding._summary import TREE_KEYS

#: The statistics of each pair (after the two runs' names).
_STATISTICS: tuple[str, ...] = (
    "prompts",
    "tokens_per_call_a",
    "tokens_per_call_b",
    "difference",
    "ci_low",
    "ci_high",
    "excludes_zero",
)

#: Columns of :func:`tree_differences` for a static run (a dynamic run adds ``root_a``,
#: ``stopping_a``, ``root_b``, ``stopping_b`` and ``budget``).
DIFFERENCE_COLUMNS: tuple[str, ...] = ("verifier_a", "tree_a", "verifier_b", "tree_b", *_STATISTICS)


def tree_differences(steps: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """Every pair of runs (at one budget): tokens per call of each, the difference, its interval.

    Parameters
    ----------
    steps : pandas.DataFrame
        The per-call table of :func:`run_tree_decoding` (``tree_steps.parquet``), static or
        dynamic.
    level : float, default 0.95
        Confidence level of each interval.

    Returns
    -------
    pandas.DataFrame
        One row per pair of runs ``(a, b)``, ``a`` first in the table's order: static runs, every
        pair; dynamic runs with budgets, every pair at the same budget. Columns
        :data:`DIFFERENCE_COLUMNS` (dynamic runs: with the roots, stopping policies and the
        budget): ``tokens_per_call_a − tokens_per_call_b = difference``, its interval
        ``[ci_low, ci_high]`` over ``prompts`` prompts, and ``excludes_zero``.

    Raises
    ------
    ValueError
        Two runs did not decode the same prompts.
    """
    dynamic = all(k in steps.columns for k in SYSTEM_KEYS)
    names = ["verifier", "tree", *(("root", "stopping") if dynamic else ())]
    columns = [
        *(f"{k}_a" for k in names),
        *(f"{k}_b" for k in names),
        *(("budget",) if dynamic else ()),
        *_STATISTICS,
    ]
    runs = _runs(steps, dynamic)
    records = []
    for budget, group in runs.items():
        for (a, sums_a), (b, sums_b) in combinations(group, 2):
            record = {f"{k}_a": a[k] for k in names} | {f"{k}_b": b[k] for k in names}
            if dynamic:
                record["budget"] = np.nan if budget is None else budget
            records.append(record | _pair(sums_a, sums_b, level))
    return pd.DataFrame(records, columns=columns)


def _runs(
    steps: pd.DataFrame, dynamic: bool
) -> dict[float | None, list[tuple[dict[str, object], pd.DataFrame]]]:
    """Each run's keys and per-prompt ``sum``/``count`` of tokens, grouped by budget (None:
    a static run, or dynamic runs without budgets)."""
    keys = [*TREE_KEYS, *(SYSTEM_KEYS if dynamic else ())]
    out: dict[float | None, list[tuple[dict[str, object], pd.DataFrame]]] = {}
    for key, part in steps.groupby(keys, sort=False, dropna=False):
        run = dict(zip(keys, key, strict=True))
        budget = run.get("budget")
        group = None if budget is None or pd.isna(budget) else float(budget)
        sums = part.groupby("prompt")["tokens"].agg(["sum", "count"])
        out.setdefault(group, []).append((run, sums))
    return out


def _pair(sums_a: pd.DataFrame, sums_b: pd.DataFrame, level: float) -> dict[str, object]:
    """The statistics of one pair of runs from their per-prompt sums."""
    prompts = sums_a.index.union(sums_b.index)
    a, b = sums_a.reindex(prompts, fill_value=0), sums_b.reindex(prompts, fill_value=0)
    totals_a, counts_a = a["sum"].to_numpy(float), a["count"].to_numpy(float)
    totals_b, counts_b = b["sum"].to_numpy(float), b["count"].to_numpy(float)
    difference, low, high = paired_difference_interval(
        totals_a, counts_a, totals_b, counts_b, level
    )
    return {
        "prompts": len(prompts),
        "tokens_per_call_a": totals_a.sum() / counts_a.sum(),
        "tokens_per_call_b": totals_b.sum() / counts_b.sum(),
        "difference": difference,
        "ci_low": low,
        "ci_high": high,
        "excludes_zero": bool(low > 0.0 or high < 0.0),
    }
