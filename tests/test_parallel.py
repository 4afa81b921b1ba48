"""otbound.analysis._parallel: how many processes a run takes, the parts a dump is cut into,
and the rows of a run cut into parts against the rows of one process."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
from dump_factory import SHARDS, write_dump
from hypothesis import given, settings
from hypothesis import strategies as st

import otbound as ob
from otbound.analysis import AnalysisConfig, _parallel, analyse_shard, run_analysis
from otbound.analysis._shard import merge_parts
from otbound.dumps import DumpError

SMALL = dict(n=(2, 3), designs=("iid", "without_replacement"), mc_trials=200)


@pytest.fixture(scope="module")
def dump_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dump") / "dump"
    write_dump(path)
    return path


# -- the parts ---------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=12),
    jobs=st.integers(2, 6),
)
def test_parts_cover_every_step_once_in_order(sizes: list[int], jobs: int) -> None:
    shards = dict(enumerate(sizes))
    parts = _parallel.plan_parts(shards, jobs)
    for shard, steps in shards.items():
        mine = [p for p in parts if p.shard == shard]
        assert mine and all(p.of == len(mine) for p in mine)
        assert mine[0].start == 0 and mine[-1].stop == steps
        assert all(a.stop == b.start for a, b in itertools.pairwise(mine))
        assert all(p.start < p.stop for p in mine) or steps == 0
    if len(sizes) >= _parallel.PARTS_PER_JOB * jobs:
        assert len(parts) == len(sizes)  # whole shards: enough of them to share
    else:  # no part above a share of the work left (plus a sliver), none below the least
        largest = max(_parallel.MIN_PART_STEPS, -(-sum(sizes) // (2 * jobs)))
        least = _parallel.MIN_PART_STEPS // 2
        for part in parts:
            assert part.stop - part.start < largest + least
            assert part.stop - part.start >= least or part.of == 1


def test_parts_shrink_as_the_work_is_handed_out() -> None:
    parts = _parallel.plan_parts({0: 576}, 2)
    lengths = [p.stop - p.start for p in parts]
    assert lengths[0] == 144 and lengths == sorted(lengths, reverse=True)
    assert lengths[-1] <= _parallel.MIN_PART_STEPS + _parallel.MIN_PART_STEPS // 2
    assert sum(lengths) == 576 and all(p.of == len(parts) for p in parts)


# -- how many processes ------------------------------------------------------------------------


def test_jobs_given_as_a_number_are_kept() -> None:
    config = AnalysisConfig(**SMALL)
    assert _parallel.resolve_jobs(3, 10, 40, config) == 3


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "two", None])
def test_bad_jobs_are_refused(jobs) -> None:
    with pytest.raises(ValueError, match="jobs must be an integer >= 1 or 'auto'"):
        _parallel.resolve_jobs(jobs, 10, 40, AnalysisConfig(**SMALL))


def test_auto_jobs(monkeypatch) -> None:
    config = AnalysisConfig(**SMALL)
    monkeypatch.setattr(_parallel, "usable_cores", lambda: 8)
    monkeypatch.setattr(_parallel, "available_memory", lambda: 64 * 2**30)
    assert _parallel.resolve_jobs("auto", 576, 8192, config) == 8
    assert _parallel.resolve_jobs("auto", 3, 8192, config) == 1  # too little work
    assert _parallel.resolve_jobs("auto", 100, None, config) == 1  # an empty dump
    on_gpu = AnalysisConfig(**SMALL, device="cpu")
    assert _parallel.resolve_jobs("auto", 576, 8192, on_gpu) == 1  # torch: one process
    # the memory: each process holds a chunk of 256 steps × V and the shard it reads
    each = _parallel.BASE_BYTES + _parallel.BYTES_PER_ENTRY * 256 * 151_936
    monkeypatch.setattr(_parallel, "available_memory", lambda: int(3 * each / 0.8) + 1)
    assert _parallel.resolve_jobs("auto", 10_000, 151_936, config) == 3
    shard = _parallel.BYTES_PER_SHARD_ENTRY * 1024 * 151_936
    monkeypatch.setattr(_parallel, "available_memory", lambda: int(3 * (each + shard) / 0.8) + 1)
    assert _parallel.resolve_jobs("auto", 10_000, 151_936, config, shard_steps=1024) == 3
    assert _parallel.resolve_jobs("auto", 10_000, 151_936, config, shard_steps=4096) == 1
    monkeypatch.setattr(_parallel, "available_memory", lambda: 10)
    assert _parallel.resolve_jobs("auto", 10_000, 151_936, config) == 1
    monkeypatch.setattr(_parallel, "available_memory", lambda: None)  # unknown: the cores
    assert _parallel.resolve_jobs("auto", 10_000, 151_936, config) == 8


def test_the_machine_is_read() -> None:
    assert _parallel.usable_cores() >= 1
    memory = _parallel.available_memory()
    assert memory is None or memory > 0


# -- the rows ----------------------------------------------------------------------------------


def test_parts_of_a_shard_give_its_rows(dump_path: Path) -> None:
    dump = ob.open_dump(dump_path)
    config = AnalysisConfig(**SMALL, temperatures=(1.0, 0.5), chunk_steps=4)
    whole = analyse_shard(dump, 0, config)
    cuts = [0, 1, 6, 6, 12]
    parts = [analyse_shard(dump, 0, config, steps=(a, b)) for a, b in itertools.pairwise(cuts)]
    merged = merge_parts(parts, config.temperatures)
    assert merged.steps == whole.steps == SHARDS[0]
    pd.testing.assert_frame_equal(merged.rows, whole.rows)
    pd.testing.assert_frame_equal(merged.skipped_cells, whole.skipped_cells)
    with pytest.raises(ValueError, match=r"steps must lie in 0 \.\. 12"):
        analyse_shard(dump, 0, config, steps=(5, 13))


def _run(dump, out, figures=False, **kwargs):
    config = AnalysisConfig(**SMALL)
    return run_analysis(dump, config, out, progress=False, figures=figures, **kwargs)


def test_a_run_in_parts_on_two_processes_gives_the_files_of_one(
    dump_path: Path, tmp_path: Path, monkeypatch
) -> None:
    """Bit for bit: the rows (the kernels run on one thread in each process, and no bound
    depends on the threads), the summaries and the figures (one drawn in the worker)."""
    monkeypatch.setattr(_parallel, "MIN_PART_STEPS", 2)  # the shards of 12 steps cut in parts
    dump = ob.open_dump(dump_path)
    one = _run(dump, tmp_path / "one", figures=True, jobs=1)
    two = _run(dump, tmp_path / "two", figures=True, jobs=2)
    assert one.ok and two.ok
    assert len(_parallel.plan_parts(dict(enumerate(SHARDS)), 2)) > len(SHARDS)
    assert [p.name for p in one.files] == [p.name for p in two.files]
    for path in one.files:
        if path.suffix == ".parquet":
            a, b = (pd.read_parquet(tmp_path / side / path.name) for side in ("one", "two"))
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        else:  # CSV and PNG files, byte for byte
            assert path.read_bytes() == (tmp_path / "two" / path.name).read_bytes(), path.name
    assert {"acceptance_vs_n.png", "gap_distribution.png"} <= {p.name for p in two.files}


def test_tasks_beside_the_workers_come_back_in_order() -> None:
    with _parallel.LocalProcesses(2) as workers:
        seen = []
        tasks = ["ab".upper, "cd".upper, "ef".upper]
        assert workers.beside(tasks, meanwhile=lambda: seen.append(1)) == ["AB", "CD", "EF"]
        assert seen == [1]
        assert workers.beside([]) == []
    with pytest.raises(ValueError, match="jobs >= 2"):
        _parallel.LocalProcesses(1)


def _shard_one_is_bad(dump, shard, config, progress=None, *, steps=None):
    """A dump error in every part of shard 1 (module level: spawned workers import it)."""
    if shard == 1:
        raise DumpError(f"shard 1, steps {steps}: truncated")
    return analyse_shard(dump, shard, config, progress, steps=steps)


def test_a_bad_shard_cut_into_parts_is_reported_once(
    dump_path: Path, tmp_path: Path, monkeypatch
) -> None:
    from otbound.analysis import _runner

    monkeypatch.setattr(_parallel, "MIN_PART_STEPS", 2)
    monkeypatch.setattr(_runner, "analyse_shard", _shard_one_is_bad)
    result = _run(ob.open_dump(dump_path), tmp_path / "out", jobs=2)
    assert not result.ok
    assert list(result.failures) == ["shard-00001"]
    assert "truncated" in result.failures["shard-00001"]
    assert not (tmp_path / "out" / "steps.parquet").exists()
