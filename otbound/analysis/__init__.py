"""Bounds and verifiers on a whole dump: per-step tables, summaries, resumable parallel runs.

The stage behind ``scripts/compute_bounds.py``::

    dump (otbound.dumps) -> analyse_shard (per shard: compare on p, q per temperature)
                         -> run_analysis (processes or dask; resume; atomic files)
                         -> summarise / gap_histogram -> otbound.plots

``α*`` per step of dumped rows, a point for full rows and a certified interval for top-k rows,
is :func:`acceptance_interval` (:func:`topk_interval` for the rows alone).

Examples
--------
>>> import numpy as np, tempfile, otbound as ob
>>> from otbound.analysis import AnalysisConfig, run_analysis
>>> rng = np.random.default_rng(0)
>>> with tempfile.TemporaryDirectory() as tmp:
...     np.savez(tmp + "/run.npz", target_logits=rng.normal(size=(8, 50)),
...              draft_logits=rng.normal(size=(8, 50)))
...     config = AnalysisConfig(n=(2,), designs=("iid",), verifiers=("rrs",))
...     result = run_analysis(ob.open_dump(tmp + "/run.npz"), config, tmp + "/out",
...                           progress=False, figures=False)
...     result.summary[["verifier", "steps"]].to_dict("records")
[{'verifier': 'bound', 'steps': 8}, {'verifier': 'rrs', 'steps': 8}]
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.analysis._config import (
        DEFAULT_DESIGNS,
        DEFAULT_N,
        DUMP_DESIGNS,
        OPT_IN_VERIFIERS,
        AnalysisConfig,
        verifiers_for,
    )
    from otbound.analysis._device import acceptance_on, bound_on, check_device
    from otbound.analysis._intervals import (
        INTERVAL_DESIGNS,
        AcceptanceInterval,
        acceptance_interval,
        topk_interval,
    )
    from otbound.analysis._runner import (
        HISTOGRAM_FILE,
        RUN_FILE,
        SKIPPED_FILE,
        STEPS_FILE,
        SUMMARY_FILE,
        AnalysisError,
        RunResult,
        run_analysis,
    )
    from otbound.analysis._shard import (
        SKIPPED_CELL_COLUMNS,
        STEP_COLUMNS,
        ShardOutcome,
        analyse_shard,
    )
    from otbound.analysis._summary import SUMMARY_COLUMNS, gap_histogram, summarise
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.analysis._config": (
                "DEFAULT_DESIGNS",
                "DEFAULT_N",
                "DUMP_DESIGNS",
                "OPT_IN_VERIFIERS",
                "AnalysisConfig",
                "verifiers_for",
            ),
            "otbound.analysis._device": ("acceptance_on", "bound_on", "check_device"),
            "otbound.analysis._intervals": (
                "INTERVAL_DESIGNS",
                "AcceptanceInterval",
                "acceptance_interval",
                "topk_interval",
            ),
            "otbound.analysis._runner": (
                "HISTOGRAM_FILE",
                "RUN_FILE",
                "SKIPPED_FILE",
                "STEPS_FILE",
                "SUMMARY_FILE",
                "AnalysisError",
                "RunResult",
                "run_analysis",
            ),
            "otbound.analysis._shard": (
                "SKIPPED_CELL_COLUMNS",
                "STEP_COLUMNS",
                "ShardOutcome",
                "analyse_shard",
            ),
            "otbound.analysis._summary": ("SUMMARY_COLUMNS", "gap_histogram", "summarise"),
        },
    )

__all__ = [
    "DEFAULT_DESIGNS",
    "DEFAULT_N",
    "DUMP_DESIGNS",
    "HISTOGRAM_FILE",
    "INTERVAL_DESIGNS",
    "OPT_IN_VERIFIERS",
    "RUN_FILE",
    "SKIPPED_CELL_COLUMNS",
    "SKIPPED_FILE",
    "STEPS_FILE",
    "STEP_COLUMNS",
    "SUMMARY_COLUMNS",
    "SUMMARY_FILE",
    "AcceptanceInterval",
    "AnalysisConfig",
    "AnalysisError",
    "RunResult",
    "ShardOutcome",
    "acceptance_interval",
    "acceptance_on",
    "analyse_shard",
    "bound_on",
    "check_device",
    "gap_histogram",
    "run_analysis",
    "summarise",
    "topk_interval",
    "verifiers_for",
]
