"""Running the analysis over a dump's shards: in this process, in local processes, or on a
dask.distributed cluster; resumable; every output written atomically."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sys
import traceback
import uuid
from collections.abc import Callable, Generator, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from otbound._files import atomic_output, write_json
from otbound.analysis._config import AnalysisConfig
from otbound.analysis._first_run import kernels_compiled
from otbound.analysis._parallel import Jobs, LocalProcesses, plan_parts, resolve_jobs
from otbound.analysis._shard import (
    SKIPPED_CELL_COLUMNS,
    ShardOutcome,
    analyse_shard,
    concat_typed,
)
from otbound.analysis._summary import (
    cluster_sums,
    fold_cluster_sums,
    gap_histogram,
    merge_histograms,
    summarise_clusters,
)
from otbound.dumps import Dump, DumpError, ShardInfo
from otbound.resume import ResumeMismatch, compare_settings, fingerprint, read_record

#: Files a completed run leaves in its output directory (figures come beside them).
RUN_FILE = "run.json"
STEPS_FILE = "steps.parquet"
SUMMARY_FILE = "summary.csv"
SUMMARY_PARQUET = "summary.parquet"
HISTOGRAM_FILE = "gap_histogram.csv"
#: The (step, temperature, n, design, verifier) cells without a row, with the reason.
SKIPPED_FILE = "skipped.csv"
SKIPPED_PARQUET = "skipped.parquet"
#: Per-shard results, kept so that ``resume`` can skip finished shards.
SHARD_DIR = "shards"
#: The version of the shard tables' contents, part of a run's key: the shards kept by a run
#: of another format are redone on resume, not mixed in. 2: the rows of a shard by
#: temperature, then by step (whatever its chunks and parts), and the without-replacement
#: bound the same on any number of threads.
ROWS_FORMAT = 2

_FINAL_FILES = (
    STEPS_FILE,
    SUMMARY_FILE,
    SUMMARY_PARQUET,
    HISTOGRAM_FILE,
    SKIPPED_FILE,
    SKIPPED_PARQUET,
)

#: Shard results kept in memory as per-prompt sums before they are folded together.
_FOLD_EVERY = 16


class AnalysisError(RuntimeError):
    """A shard's analysis failed for another reason than a bad dump: a bug in otbound, a
    verifier or a bound. The run stops; the traceback is kept in ``run.json``.

    Attributes
    ----------
    shard : str
        The shard being analysed.
    traceback : str
        The formatted traceback (a worker process's included).
    """

    def __init__(self, message: str, shard: str, traceback: str) -> None:
        super().__init__(message)
        self.shard = shard
        self.traceback = traceback


@dataclass
class RunResult:
    """What :func:`run_analysis` did.

    Attributes
    ----------
    out : pathlib.Path
        The output directory.
    steps : int
        Steps analysed: all the dump's, or its first ``config.max_steps``.
    skipped : numpy.ndarray of int64
        Global ids of bad steps dropped (``skip_bad_steps``).
    failures : dict of str to str
        Shards of the dump that could not be read or processed (a
        :class:`~otbound.dumps.DumpError`), with the reason; empty when all succeeded.
    resumed : int
        Shards whose results were taken from an earlier run (``resume=True``).
    summary : pandas.DataFrame or None
        The summary table (None when a shard failed: no final output is written then).
    files : list of pathlib.Path
        The final files written (tables and figures).
    cells : int
        The (step, temperature, n, design, verifier) cells of the run: rows and skipped cells.
    skipped_cells : pandas.DataFrame or None
        The cells without a row, with the reason (``skipped.csv``; see
        :func:`otbound.evaluate.skipped_cells`).
    """

    out: Path
    steps: int
    skipped: np.ndarray
    failures: dict[str, str]
    resumed: int = 0
    summary: pd.DataFrame | None = None
    files: list[Path] = field(default_factory=list)
    cells: int = 0
    skipped_cells: pd.DataFrame | None = None

    @property
    def ok(self) -> bool:
        """Whether every shard was analysed and the outputs written."""
        return not self.failures


def dump_fingerprint(dump: Dump) -> str:
    """A hash of what the dump holds (its manifest; a single file's size and time too)."""
    parts: dict[str, Any] = {"source": dump.source, "manifest": dump.manifest}
    if dump.path.is_file():
        stat = dump.path.stat()
        parts["file"] = [stat.st_size, stat.st_mtime_ns]
    return fingerprint(parts)


class _ShardStore:
    """``OUT/shards``: one Parquet table per finished shard, then a JSON marker naming the run
    it belongs to (written last, so a marker means a complete table)."""

    def __init__(self, out: Path, run_key: str) -> None:
        self.directory = out / SHARD_DIR
        self.run_key = run_key

    def _paths(self, shard_id: str) -> tuple[Path, Path, Path]:
        """The shard's rows, skipped cells and marker."""
        base = self.directory / shard_id
        return (
            base.with_name(f"{shard_id}.parquet"),
            base.with_name(f"{shard_id}.skipped.parquet"),
            base.with_name(f"{shard_id}.json"),
        )

    def clear(self) -> None:
        if self.directory.is_dir():
            for path in self.directory.iterdir():
                if path.suffix in (".parquet", ".json"):
                    path.unlink()

    def marker(self, shard_id: str) -> dict[str, Any] | None:
        """The finished shard's record, or None if it is not finished for this run."""
        table, cells, marker = self._paths(shard_id)
        try:
            record: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if record.get("run_key") != self.run_key or not (table.is_file() and cells.is_file()):
            return None
        return record

    def save(self, outcome: ShardOutcome) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        table, cells, marker = self._paths(outcome.shard_id)
        with atomic_output(table) as tmp:
            outcome.rows.to_parquet(tmp, index=False)
        with atomic_output(cells) as tmp:
            outcome.skipped_cells.to_parquet(tmp, index=False)
        write_json(
            marker,
            {
                "shard": outcome.shard_id,
                "run_key": self.run_key,
                "steps": outcome.steps,
                "skipped": outcome.skipped.tolist(),
            },
        )

    def rows(self, shard_id: str) -> pd.DataFrame:
        return pd.read_parquet(self._paths(shard_id)[0])

    def skipped_cells(self, shard_id: str) -> pd.DataFrame:
        return pd.read_parquet(self._paths(shard_id)[1])


def _in_process(
    dump: Dump, pending: list[int], config: AnalysisConfig, bar: tqdm
) -> Generator[tuple[int, ShardOutcome | Exception], None, None]:
    for index in pending:
        try:
            yield index, analyse_shard(dump, index, config, bar.update)
        except Exception as exc:  # to the caller: a DumpError is a bad shard, else a bug
            yield index, exc


def _on_dask(
    dump: Dump, pending: list[int], config: AnalysisConfig, address: str
) -> Generator[tuple[int, ShardOutcome | Exception], None, None]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise ImportError(
            "running on a dask cluster needs dask.distributed: pip install 'otbound[dask]'"
        ) from None
    try:
        client = Client(address, set_as_default=False, timeout="20s")  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise OSError(f"cannot reach the dask scheduler at {address}: {exc}") from None
    run = uuid.uuid4().hex[:8]
    try:
        futures = {
            client.submit(analyse_shard, dump, i, config, key=f"otbound-{run}-shard-{i}"): i
            for i in pending
        }
        for future in dask_completed(list(futures), loop=client.loop):  # type: ignore[no-untyped-call]
            index = futures[future]
            try:
                yield index, future.result()
            except Exception as exc:
                yield index, exc
    finally:
        client.close()  # type: ignore[no-untyped-call]


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return text if isinstance(exc, ValueError | OSError) and text else f"{name}: {text}"


#: A shard's contribution to the summary: its :func:`cluster_sums`, its :func:`gap_histogram`
#: and its number of rows.
_ShardSums = tuple[pd.DataFrame, pd.DataFrame, int]


def _shard_sums(rows: pd.DataFrame) -> _ShardSums:
    """What the summary takes of a shard's table (:func:`_summarise_shards`)."""
    return cluster_sums(rows), gap_histogram(rows), len(rows)


def _summarise_shards(
    store: _ShardStore, shards: list[ShardInfo], level: float, known: dict[str, _ShardSums]
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The summary, the gap histogram and the number of rows of the shard tables, in shard
    order: from ``known`` (the shards analysed by this run, summed as they came in, while the
    other processes went on) or from the stored table (one shard in memory at a time)."""
    sums: list[pd.DataFrame] = []
    histograms: list[pd.DataFrame] = []
    count = 0
    for info in shards:
        shard_sums, histogram, rows = known.get(info.id) or _shard_sums(store.rows(info.id))
        count += rows
        sums.append(shard_sums)
        histograms.append(histogram)
        if len(sums) >= _FOLD_EVERY:
            sums = [fold_cluster_sums(sums)]
    summary = summarise_clusters(fold_cluster_sums(sums), level)
    return summary, merge_histograms(histograms), count


def _write_steps(store: _ShardStore, shards: list[ShardInfo], out: Path) -> None:
    """Stream the shard tables into ``steps.parquet``."""
    with atomic_output(out / STEPS_FILE) as tmp:
        writer: pq.ParquetWriter | None = None
        try:
            for info in shards:
                table = pa.Table.from_pandas(store.rows(info.id), preserve_index=False)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
        if writer is None:
            pd.DataFrame().to_parquet(tmp)


def _write_skipped_cells(store: _ShardStore, shards: list[ShardInfo], out: Path) -> pd.DataFrame:
    """The shards' skipped cells, written to ``skipped.csv`` and ``skipped.parquet``."""
    parts = [store.skipped_cells(info.id) for info in shards]
    cells = concat_typed(parts, SKIPPED_CELL_COLUMNS)
    with atomic_output(out / SKIPPED_FILE) as tmp:
        cells.to_csv(tmp, index=False)
    with atomic_output(out / SKIPPED_PARQUET) as tmp:
        cells.to_parquet(tmp, index=False)
    return cells


def _bug(exc: BaseException, shard: str, run_file: Path, record: dict[str, Any]) -> AnalysisError:
    """Record an error that is not a bad dump in ``run.json``; the exception to raise."""
    text = "".join(traceback.format_exception(exc))
    write_json(
        run_file,
        {
            **record,
            "complete": False,
            "error": {"shard": shard, "exception": _describe(exc), "traceback": text},
        },
    )
    if isinstance(exc, BrokenProcessPool):  # the operating system ended a worker
        return AnalysisError(
            f"a worker process died while {shard} was analysed (killed by the system, most "
            "often for memory): the finished shards are kept; run again with the resume "
            "option and fewer processes (jobs=N) or smaller chunks (chunk_steps=N)",
            shard,
            text,
        )
    return AnalysisError(
        f"the analysis of {shard} failed ({type(exc).__name__}: {' '.join(str(exc).split())}): "
        "an error in otbound, a verifier or a bound, not a bad dump; the run stopped and the "
        f"traceback is in {RUN_FILE}",
        shard,
        text,
    )


def run_analysis(
    dump: Dump,
    config: AnalysisConfig,
    out: str | os.PathLike[str],
    *,
    jobs: Jobs = 1,
    dask: str | None = None,
    resume: bool = False,
    progress: bool = True,
    level: float = 0.95,
    figures: bool = True,
    on_shard_done: Callable[[str], None] | None = None,
) -> RunResult:
    """Analyse every shard of a dump (or its first ``config.max_steps`` steps) and write the
    tables and figures to ``out``.

    Shards are independent: each is analysed by :func:`analyse_shard` in this process
    (``jobs=1``), in ``jobs`` local processes (this one and ``jobs − 1`` workers, forked
    where that is safe, else spawned: :func:`otbound.analysis._parallel.start_method`; a
    dump with fewer than six shards a process is cut into parts of shards, so that the
    processes share the work evenly: :func:`otbound.analysis._parallel.plan_parts`), or on a
    dask.distributed cluster (``dask`` is the scheduler's address; the workers must be able
    to read the dump at the same path). The rows are the same bit for bit whichever way a
    run goes: a step's rows depend on the step, the settings and the seed only. Each finished
    shard's table is saved at once under ``out/shards``; with ``resume=True`` the shards
    finished by an earlier run with the same dump and settings are not redone.

    When every shard succeeded, ``out`` gets ``steps.parquet`` (one row per step ×
    temperature × n × design × verifier), ``skipped.csv`` and ``skipped.parquet`` (the cells
    without a row, with the reason: :func:`otbound.evaluate.skipped_cells`), ``summary.csv``
    and ``summary.parquet`` (:func:`otbound.analysis.summarise`), ``gap_histogram.csv`` and
    the figures of :func:`otbound.plots.save_run_figures`; ``run.json`` records the settings,
    the otbound version and what was done (the skipped cells counted by reason). When a shard
    of the dump is bad (a :class:`~otbound.dumps.DumpError`: corrupt, truncated, bad steps),
    the others are still analysed and saved, no final file is written, and the failures are
    returned: fix the dump and run again with ``resume=True``. Any other error is a bug: the
    run stops at once with :class:`AnalysisError`, its traceback in ``run.json``. Every file
    is written to a temporary name and renamed.

    Parameters
    ----------
    dump : Dump
        From :func:`otbound.open_dump`.
    config : AnalysisConfig
    out : path
        Output directory (created if missing).
    jobs : int or "auto", default 1
        Local processes, this one included; ``"auto"``: one per usable core, as many as the
        memory and the work allow (:func:`otbound.analysis._parallel.resolve_jobs`).
    dask : str, optional
        Address of a dask.distributed scheduler (``tcp://host:port``) to run the shards on.
    resume : bool, default False
        Keep the shard results of an earlier run into ``out``; refused if its dump, its
        otbound version or its settings differ.
    progress : bool, default True
        Show a tqdm progress bar over the steps (on stderr).
    level : float, default 0.95
        Confidence level of the summary's intervals.
    figures : bool, default True
        Write the PNG figures.
    on_shard_done : callable, optional
        Called with each shard's id once its table is saved.

    Returns
    -------
    RunResult

    Raises
    ------
    AnalysisError
        A shard's analysis failed with anything but a :class:`~otbound.dumps.DumpError`.
    ValueError
        Bad arguments, or a resume refused (one line naming what changed).
    """
    resolve_jobs(jobs, 0, None, config)  # a bad value is refused before anything is written
    out = Path(out)
    options = _RunOptions(jobs, dask, progress, level, figures, on_shard_done)
    record, store = _start_run(dump, config, out, resume)
    plan = _plan_shards(dump, config, store)
    # the workers first: forked, they must be made before the progress bar's thread starts;
    # then, on a cold cache, the kernels compiled in this process, before the bar starts
    compiled = plan.pending_sizes if dask is None else {}
    with (
        _local_processes(jobs, dump, config, plan.pending_sizes, dask, figures) as workers,
        kernels_compiled(dump, compiled, config, announce=progress, one_thread=workers is not None),
        _progress_bar(plan, progress) as bar,
    ):
        found = _analyse_pending(dump, config, plan, options, workers, bar)
        found.save_each(store, out / RUN_FILE, record, options, bar)
        bar.close()
        result = plan.result(out, found)
        if result.failures:
            write_json(out / RUN_FILE, {**record, "complete": False, "failures": result.failures})
            return result
        cells = _write_outputs(store, plan.shards, result, level, figures, workers, found.known)
    write_json(out / RUN_FILE, _complete_record(record, result, cells))
    return result


@dataclass(frozen=True)
class _RunOptions:
    """How :func:`run_analysis` runs (its keywords), as the steps below take them."""

    jobs: Jobs
    dask: str | None
    progress: bool
    level: float
    figures: bool
    on_shard_done: Callable[[str], None] | None


@dataclass(frozen=True)
class _ShardPlan:
    """The shards a run analyses (with ``max_steps``, those before it), how many steps each,
    and which are finished already (a resumed run's)."""

    sizes: tuple[int, ...]
    shards: list[ShardInfo]
    done: dict[str, dict[str, Any] | None]

    @property
    def pending(self) -> list[int]:
        """The dump indices of the shards left to analyse."""
        return [info.index for info in self.shards if self.done[info.id] is None]

    @property
    def pending_sizes(self) -> dict[int, int]:
        return {i: self.sizes[i] for i in self.pending}

    @property
    def finished_steps(self) -> int:
        return sum(r["steps"] for r in self.done.values() if r)

    def result(self, out: Path, found: _Outcomes) -> RunResult:
        """The run's result from the finished shards' bad steps and this run's outcomes."""
        skipped = [np.asarray(r["skipped"], dtype=np.int64) for r in self.done.values() if r]
        skipped += found.skipped
        return RunResult(
            out=out,
            steps=sum(self.sizes),
            skipped=np.sort(np.concatenate(skipped)) if skipped else np.zeros(0, dtype=np.int64),
            failures=dict(sorted(found.failures.items())),
            resumed=len(self.shards) - len(self.pending),
        )


@dataclass
class _Outcomes:
    """The shards' outcomes as they come in: each saved at once, or its failure noted."""

    outcomes: Generator[tuple[int, ShardOutcome | Exception], None, None]
    dump: Dump
    failures: dict[str, str] = field(default_factory=dict)
    known: dict[str, _ShardSums] = field(default_factory=dict)  # the summary's sums
    skipped: list[np.ndarray] = field(default_factory=list)

    def save_each(
        self,
        store: _ShardStore,
        run_file: Path,
        record: dict[str, Any],
        options: _RunOptions,
        bar: tqdm,
    ) -> None:
        """Save each shard's table as it comes; a bad shard (a :class:`DumpError`) is noted
        and the others go on, any other error stops the run (:func:`_bug`)."""
        try:
            for index, outcome in self.outcomes:
                info = self.dump.shards[index]
                if isinstance(outcome, DumpError):  # a bad shard: the others go on
                    self.failures[info.id] = _describe(outcome)
                    continue
                if isinstance(outcome, Exception):  # a bug: stop (the workers are shut down)
                    raise _bug(outcome, info.id, run_file, record)
                store.save(outcome)
                self.known[info.id] = _shard_sums(outcome.rows)
                self.skipped.append(outcome.skipped)
                if options.dask is not None:
                    bar.update(outcome.steps)
                if options.on_shard_done is not None:
                    options.on_shard_done(info.id)
        finally:  # on any error too: no more parts, and this process's threads restored
            self.outcomes.close()


def _start_run(
    dump: Dump, config: AnalysisConfig, out: Path, resume: bool
) -> tuple[dict[str, Any], _ShardStore]:
    """``run.json``'s record of the run (marked incomplete, written) and its shard store;
    a resume refused where the earlier run differs, the earlier results cleared otherwise."""
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "otbound": _version(),
        "dump": str(dump.path.resolve()),
        "dump_fingerprint": dump_fingerprint(dump),
        "config": config.to_dict(),
    }
    # a resumed run never mixes dumps, settings or versions
    run_key = fingerprint(
        [record["dump_fingerprint"], record["config"], record["otbound"], ROWS_FORMAT]
    )
    store = _ShardStore(out, run_key)
    record["run_key"] = run_key
    if resume:
        _check_resumable(out / RUN_FILE, record)
    else:
        store.clear()
        for name in (*_FINAL_FILES, RUN_FILE):
            with contextlib.suppress(FileNotFoundError):
                (out / name).unlink()
    write_json(out / RUN_FILE, {**record, "complete": False})
    return record, store


def _plan_shards(dump: Dump, config: AnalysisConfig, store: _ShardStore) -> _ShardPlan:
    """The shards to analyse and those the store holds finished for this run."""
    sizes = config.steps_per_shard([info.num_steps for info in dump.shards])
    shards = [  # with max_steps, the shards past it are left out
        info for info, k in zip(dump.shards, sizes, strict=True) if k or info.num_steps == 0
    ]
    return _ShardPlan(sizes, shards, {info.id: store.marker(info.id) for info in shards})


def _progress_bar(plan: _ShardPlan, progress: bool) -> tqdm:
    """The bar over the run's steps (on stderr), starting at those finished already."""
    return tqdm(
        total=sum(plan.sizes),
        initial=plan.finished_steps,
        unit="step",
        desc="bounds",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )


def _analyse_pending(
    dump: Dump,
    config: AnalysisConfig,
    plan: _ShardPlan,
    options: _RunOptions,
    workers: LocalProcesses | None,
    bar: tqdm,
) -> _Outcomes:
    """The pending shards' outcomes, as they finish: on dask, on the local workers, or here."""
    if options.dask is not None:
        outcomes = _on_dask(dump, plan.pending, config, options.dask)
    elif workers is not None:
        parts = plan_parts(plan.pending_sizes, workers.jobs)
        outcomes = workers.analyse(analyse_shard, dump, parts, config, bar.update)
    else:
        outcomes = _in_process(dump, plan.pending, config, bar)
    return _Outcomes(outcomes, dump)


def _complete_record(
    record: dict[str, Any], result: RunResult, cells: pd.DataFrame
) -> dict[str, Any]:
    """``run.json``'s record of a completed run: what was done, the skipped cells by reason."""
    return {
        **record,
        "complete": True,
        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "steps": result.steps,
        "skipped_steps": result.skipped.tolist(),
        "skipped_cells": {
            "cells": result.cells,
            "skipped": len(cells),
            "by_reason": cells["reason"].value_counts().to_dict(),
        },
        "files": [p.name for p in result.files],
    }


@contextlib.contextmanager
def _local_processes(
    jobs: Jobs,
    dump: Dump,
    config: AnalysisConfig,
    pending: dict[int, int],
    dask: str | None,
    figures: bool,
) -> Iterator[LocalProcesses | None]:
    """The worker processes of a local run that takes more than one (:func:`resolve_jobs`),
    or None."""
    steps = sum(pending.values())
    largest = max(pending.values(), default=0)
    processes = resolve_jobs(jobs, steps, dump.vocab_size, config, largest)
    if dask is not None or processes < 2 or steps < 2:
        yield None
        return
    with LocalProcesses(processes, warm=_import_plots if figures else None) as workers:
        yield workers


def _import_plots() -> None:
    """A worker's warm-up for the figures: matplotlib's import (module level: it pickles)."""
    import otbound.plots  # noqa: F401


def _write_outputs(
    store: _ShardStore,
    shards: list[ShardInfo],
    result: RunResult,
    level: float,
    figures: bool,
    workers: LocalProcesses | None,
    known: dict[str, _ShardSums],
) -> pd.DataFrame:
    """The final tables and figures of a run whose shards all succeeded, into ``result.out``
    (``result``'s cells, files and summary filled in). The summary comes first, so that the
    workers, when there are some, draw the figures while this process writes the tables
    (the summary takes the sums of the shards analysed by this run, ``known``, and reads the
    others' tables; the tables are read into ``steps.parquet``). Returns the skipped cells."""
    out = result.out
    summary, histogram, rows = _summarise_shards(store, shards, level, known)

    skipped_cells = pd.DataFrame()

    def tables() -> None:
        nonlocal skipped_cells
        _write_steps(store, shards, out)
        skipped_cells = result.skipped_cells = _write_skipped_cells(store, shards, out)
        with atomic_output(out / SUMMARY_FILE) as tmp:
            summary.to_csv(tmp, index=False)
        with atomic_output(out / SUMMARY_PARQUET) as tmp:
            summary.to_parquet(tmp, index=False)
        with atomic_output(out / HISTOGRAM_FILE) as tmp:
            histogram.to_csv(tmp, index=False)

    drawn: list[Path] = []
    if not figures:
        tables()
    else:  # the figures first to the workers, then the tables and this process's figures
        from otbound.plots import run_figures

        saves = [figure.save for figure in run_figures(summary, histogram, out)]
        if workers is not None:
            drawn = workers.beside(saves, meanwhile=tables)
        else:
            tables()
            drawn = [save() for save in saves]
    result.cells = rows + len(skipped_cells)
    result.files = [out / name for name in _FINAL_FILES] + drawn
    result.summary = summary
    return skipped_cells


def _version() -> str:
    from otbound._version import __version__

    return __version__


def _check_resumable(run_file: Path, record: dict[str, Any]) -> None:
    """Refuse to resume into a directory whose run used another dump, another version of
    otbound or other settings (:class:`otbound.resume.ResumeMismatch`)."""
    earlier = read_record(run_file)
    if earlier is None:
        return
    where = run_file.parent
    changed = {c.key: c for c in compare_settings(earlier, record, ("dump_fingerprint", "otbound"))}
    if "dump_fingerprint" in changed:
        raise ResumeMismatch(
            where,
            str(changed["dump_fingerprint"]),
            f"cannot resume: {where} holds a run on another dump ({earlier.get('dump')}); "
            "choose another output directory or drop the resume option",
        )
    if "otbound" in changed:
        raise ResumeMismatch(
            where,
            str(changed["otbound"]),
            f"cannot resume: the run in {where} was made by otbound {earlier.get('otbound')}, "
            f"this is otbound {record['otbound']} (the rows of two versions would mix); choose "
            "another output directory or drop the resume option",
        )
    before, now = earlier.get("config", {}), record["config"]
    differ = compare_settings(before, now, keys=sorted(set(before) | set(now)))
    if differ:
        details = "; ".join(f"{c.key}: {c.before!r} then, {c.now!r} now" for c in differ)
        raise ResumeMismatch(
            where,
            details,
            f"cannot resume: the settings differ from the run in {where} ({details})",
        )
