"""One shard of a dump -> tidy rows: ``α*`` and every verifier's acceptance, per step."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from otbound.analysis._config import AnalysisConfig
from otbound.analysis._device import acceptance_on, bound_on
from otbound.analysis._intervals import acceptance_interval
from otbound.dumps import Dump, ShardData, prepare_distributions
from otbound.evaluate import COMPARE_COLUMNS, SKIPPED_COLUMNS, compare, skipped_cells
from otbound.problem import Step

#: Columns of the per-step table: the step's metadata, the temperature, :func:`compare`'s
#: columns, and the ends of the certified interval of ``α*`` (equal to it for full rows).
STEP_COLUMNS: tuple[str, ...] = (
    "step",
    "prompt_id",
    "position",
    "token",
    "temperature",
    *(c for c in COMPARE_COLUMNS if c != "step"),
    "alpha_star_lower",
    "alpha_star_upper",
)

#: Columns of the table of skipped cells: :func:`otbound.evaluate.skipped_cells`' columns with
#: the temperature after the step.
SKIPPED_CELL_COLUMNS: tuple[str, ...] = ("step", "temperature", *SKIPPED_COLUMNS[1:])

_DTYPES = {
    "step": "int64",
    "prompt_id": "Int64",
    "position": "Int64",
    "token": "Int64",
    "temperature": "float64",
    "n": "int64",
    "design": "string",
    "verifier": "string",
    "acceptance": "float64",
    "ci_low": "float64",
    "ci_high": "float64",
    "exact": "bool",
    "alpha_star": "float64",
    "alpha_star_lower": "float64",
    "alpha_star_upper": "float64",
    "gap": "float64",
    "ratio": "float64",
    "trials": "int64",
    "stderr": "float64",
    "reason": "string",
}


@dataclass(frozen=True)
class ShardOutcome:
    """What :func:`analyse_shard` found in one shard.

    Attributes
    ----------
    shard_id : str
    steps : int
        Steps analysed in the shard (all of them, unless ``max_steps`` cut it).
    rows : pandas.DataFrame
        The per-step table (columns :data:`STEP_COLUMNS`).
    skipped : numpy.ndarray of int64
        Global ids of the bad steps dropped (``skip_bad_steps``).
    skipped_cells : pandas.DataFrame
        The (step, temperature, n, design, verifier) cells without a row, with the reason
        (columns :data:`SKIPPED_CELL_COLUMNS`; see :func:`otbound.evaluate.skipped_cells`).
    """

    shard_id: str
    steps: int
    rows: pd.DataFrame
    skipped: np.ndarray
    skipped_cells: pd.DataFrame


def empty_steps(columns: tuple[str, ...] = STEP_COLUMNS) -> pd.DataFrame:
    """An empty per-step table (or table of skipped cells) with the right columns and dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=_DTYPES[c]) for c in columns})


def concat_typed(frames: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    """``frames`` concatenated, with ``columns`` in order and their dtypes."""
    table = pd.concat([empty_steps(columns), *frames], ignore_index=True)
    return table[list(columns)].astype({c: _DTYPES[c] for c in columns})


def _full_rows(
    data: ShardData, rows: slice, temperature: float, config: AnalysisConfig
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """Exact ``α*`` and verifier rows for full-vocabulary rows; the bad steps dropped; the
    cells without a row (:func:`otbound.evaluate.skipped_cells`)."""
    dist = prepare_distributions(
        cast(np.ndarray, data.target)[rows],  # full rows: arrays, not TopKRows
        cast(np.ndarray, data.draft)[rows],
        temperature=temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        values=data.values,
        step_ids=data.step[rows],
        skip_bad_steps=config.skip_bad_steps,
        truncate_vocab=config.truncate_vocab,
    )
    if dist.step.size == 0:
        return empty_steps(), dist.skipped, empty_steps(SKIPPED_COLUMNS)
    frame = compare(
        _trusted_rows(dist.target, dist.draft),
        None,
        n=config.n,
        verifiers=config.verifier_names,
        designs=config.designs,
        trials=config.mc_trials,
        seed=config.seed,
        target_se=config.mc_target_se,
        step_ids=dist.step,
        bound=bound_on(config.device),
        acceptance=acceptance_on(config.device),
    )
    cells = skipped_cells(frame)
    frame.attrs.clear()
    frame["alpha_star_lower"] = frame["alpha_star"]
    frame["alpha_star_upper"] = frame["alpha_star"]
    return frame, dist.skipped, cells


def _trusted_rows(target: np.ndarray, draft: np.ndarray) -> Step:
    """The rows of :func:`otbound.dumps.prepare_distributions` as the validated :class:`Step`
    that :func:`otbound.compare` would make of them, without its copy and checks.

    They are softmaxes of logits whose bad rows (NaN, ``+inf``, every token masked) were
    found and dropped, so every entry is finite and non-negative and every row sums to one up
    to rounding; what :func:`otbound._checks.as_distribution` adds is the division by the row
    sums (numpy's, so the values are the same bit for bit), done here in place on arrays that
    are this run's own.
    """
    target /= target.sum(axis=-1, keepdims=True)
    draft /= draft.sum(axis=-1, keepdims=True)
    return Step(target, draft).freeze()


def _interval_rows(
    data: ShardData, rows: slice, temperature: float, config: AnalysisConfig
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """``"bound"`` rows holding the certified interval of ``α*`` for top-k rows (every cell
    gets one: no skipped cells)."""
    index = np.arange(data.num_steps)[rows]
    frames, skipped = [], np.zeros(0, dtype=np.int64)
    for n in config.n:
        for design in config.designs:
            iv = acceptance_interval(
                data.target.take(index),
                data.draft.take(index),
                n,
                design,
                temperature=temperature,
                top_k=config.top_k,
                top_p=config.top_p,
                step_ids=data.step[rows],
                skip_bad_steps=config.skip_bad_steps,
            )
            skipped = iv.skipped
            point = np.where(iv.exact, iv.lower, np.nan)
            frames.append(
                pd.DataFrame(
                    {
                        "step": iv.step,
                        "n": n,
                        "design": design,
                        "verifier": "bound",
                        "acceptance": point,
                        "ci_low": iv.lower,
                        "ci_high": iv.upper,
                        "exact": iv.exact,
                        "alpha_star": point,
                        "alpha_star_lower": iv.lower,
                        "alpha_star_upper": iv.upper,
                        "gap": np.where(iv.exact, 0.0, np.nan),
                        "ratio": np.where(iv.exact & (point > 0), 1.0, np.nan),
                        "trials": 0,
                        "stderr": 0.0,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True), skipped, empty_steps(SKIPPED_COLUMNS)


def _temperature_major(frame: pd.DataFrame, temperatures: tuple[float, ...]) -> pd.DataFrame:
    """``frame``'s rows in the order of ``temperatures``, then of the steps, then as they were
    (a stable sort): the order of a shard's table however its steps were cut into chunks or
    parts (a chunk's full rows come step by step, its top-k interval rows ``n`` by ``n``)."""
    if frame.empty:
        return frame
    rank = {t: i for i, t in enumerate(temperatures)}
    order = np.lexsort((frame["step"].to_numpy(), frame["temperature"].map(rank).to_numpy()))
    if np.array_equal(order, np.arange(order.size)):
        return frame
    return frame.iloc[order].reset_index(drop=True)


def merge_parts(parts: list[ShardOutcome], temperatures: tuple[float, ...]) -> ShardOutcome:
    """One shard's outcome from the outcomes of its parts (:func:`analyse_shard` with
    ``steps``), given in step order; ``temperatures`` as in the run's configuration.

    The tables are concatenated and put in temperature order, as :func:`analyse_shard` puts
    a whole shard's; the steps are added up.
    """
    first = parts[0]
    if len(parts) == 1:
        return first
    return ShardOutcome(
        shard_id=first.shard_id,
        steps=sum(part.steps for part in parts),
        rows=_temperature_major(
            pd.concat([part.rows for part in parts], ignore_index=True), temperatures
        ),
        skipped=np.concatenate([part.skipped for part in parts]),
        skipped_cells=_temperature_major(
            pd.concat([part.skipped_cells for part in parts], ignore_index=True), temperatures
        ),
    )


#: The last shard a part read in this process, kept for the process's next part of it
#: (:func:`analyse_shard` with ``steps``; the parts of a shard are handed out one after the
#: other). A part reads its whole shard: the checksum of its file and the 16-bit logits'
#: conversion cost, on shards of 1,024 steps at V = 151,936, as much as analysing tens of
#: steps. One entry: the memory of one shard a process, which a part holds anyway.
_PART_SHARD: dict[tuple[object, ...], ShardData] = {}


def _shard_key(dump: Dump, shard: int) -> tuple[object, ...] | None:
    """What identifies the data of a shard as read: the dump, its reader and options, and
    the shard file's identity (size, modification time, inode); None if the file cannot be
    looked at (the read then says why)."""
    info = dump.shard(shard)
    path = Path(info.file)
    if not path.is_absolute():
        path = dump.path / path
    try:
        stat = path.stat()
    except OSError:
        return None
    options = (dump.source, dump.verifies, dump.values)
    return (str(dump.path.resolve()), info, options, stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _read_for_part(dump: Dump, shard: int) -> ShardData:
    """:meth:`Dump.read_shard`, or the shard this process's previous part read if it is the
    same one, unchanged (:data:`_PART_SHARD`)."""
    key = _shard_key(dump, shard)
    if key is not None and key in _PART_SHARD:
        return _PART_SHARD[key]
    _PART_SHARD.clear()  # one shard at a time
    data = dump.read_shard(shard)
    if key is not None:
        _PART_SHARD[key] = data
    return data


def forget_part_shard() -> None:
    """Drop the shard kept for the next part (:data:`_PART_SHARD`): at the end of a run."""
    _PART_SHARD.clear()


def analyse_shard(
    dump: Dump,
    shard: int,
    config: AnalysisConfig,
    progress: Callable[[int], None] | None = None,
    *,
    steps: tuple[int, int] | None = None,
) -> ShardOutcome:
    """``α*`` of each design and each verifier's acceptance at every step of one shard (or of
    a part of it).

    The shard is read once and processed ``config.chunk_steps`` steps at a time (memory
    stays at a few ``chunk_steps × V`` arrays; own-format and ``.npy``/``.safetensors``
    shards are memory maps). For each temperature, ``p`` and ``q`` are processed identically
    (:func:`otbound.dumps.prepare_distributions`) and passed to :func:`otbound.compare`.
    Top-k (truncated) rows give ``"bound"`` rows only, with the certified interval
    ``[alpha_star_lower, alpha_star_upper]`` of the full-vocabulary ``α*``
    (:func:`otbound.analysis.acceptance_interval`); ``alpha_star`` is NaN where it is not a point.
    With ``config.max_steps``, only the shard's steps among the dump's first ``max_steps``
    are analysed (none for a shard past them).

    Parameters
    ----------
    dump : Dump
    shard : int
        Position of the shard in ``dump.shards``.
    config : AnalysisConfig
    progress : callable, optional
        Called with the number of steps finished after each chunk.
    steps : (int, int), optional
        Analyse only the steps at positions ``start .. stop − 1`` of the shard (after
        ``max_steps``); a step's rows do not depend on the steps analysed with it, so the
        parts of a shard, concatenated in order (:func:`merge_parts`), give the rows of the
        whole shard.

    Returns
    -------
    ShardOutcome

    Raises
    ------
    DumpError
        The shard is corrupt or truncated, or holds bad steps without ``skip_bad_steps``.
    """
    data = dump.read_shard(shard) if steps is None else _read_for_part(dump, shard)
    if config.max_steps is not None:
        sizes = [info.num_steps for info in dump.shards]
        data = data.head(config.steps_per_shard(sizes)[dump.shard(shard).index])
    first, stop = (0, data.num_steps) if steps is None else steps
    if not 0 <= first <= stop <= data.num_steps:
        raise ValueError(f"steps must lie in 0 .. {data.num_steps} with start <= stop, got {steps}")
    rows_of = _interval_rows if data.is_topk else _full_rows
    frames, skipped, cells = [], [], []
    with warnings.catch_warnings():
        # the vocabulary cut is announced once per run, not once per chunk
        warnings.filterwarnings("ignore", message="target and draft vocabularies differ")
        for start in range(first, stop, config.chunk_steps):
            rows = slice(start, min(start + config.chunk_steps, stop))
            for i, temperature in enumerate(config.temperatures):
                frame, bad, missing = rows_of(data, rows, temperature, config)
                frames.append(frame.assign(temperature=temperature))
                cells.append(missing.assign(temperature=temperature))
                if i == 0:
                    skipped.append(bad)
            if progress is not None:
                progress(rows.stop - rows.start)
    table = _temperature_major(concat_typed(frames, STEP_COLUMNS), config.temperatures)
    meta = data.metadata.set_index("step")
    for column in ("prompt_id", "position", "token"):
        table[column] = table["step"].map(meta[column]) if column in meta else pd.NA
    return ShardOutcome(
        shard_id=data.shard.id,
        steps=stop - first,
        rows=table.astype({c: _DTYPES[c] for c in STEP_COLUMNS}),
        skipped=np.concatenate(skipped) if skipped else np.zeros(0, dtype=np.int64),
        skipped_cells=_temperature_major(
            concat_typed(cells, SKIPPED_CELL_COLUMNS), config.temperatures
        ),
    )
