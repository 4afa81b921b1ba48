"""otbound.analysis._parallel: how many processes a run takes, the parts a dump is cut into,
and the rows of a run cut into parts against the rows of one process."""

from __future__ import annotations

import dataclasses
import itertools
import os
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
    assert _parallel.resolve_jobs("auto", 40, 32_000, config) == 3  # a part of 16 steps each
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


@pytest.mark.parametrize("topk", [None, 8])
def test_parts_of_a_shard_give_its_rows(tmp_path: Path, topk: int | None) -> None:
    """Full rows (with skipped cells, two temperatures, chunks of 4 steps) and top-k rows
    (interval rows come n by n inside a chunk): the parts, merged, are the whole shard's
    table, and whatever the chunks, the rows come by temperature, then by step."""
    write_dump(tmp_path / "dump", topk=topk)
    dump = ob.open_dump(tmp_path / "dump")
    if topk is None:
        config = AnalysisConfig(**SMALL, temperatures=(1.0, 0.5), chunk_steps=4)
    else:
        config = AnalysisConfig(n=(2, 4), designs=("iid",), verifiers=(), chunk_steps=4)
    whole = analyse_shard(dump, 0, config)
    cuts = [0, 1, 6, 6, 12]
    parts = [analyse_shard(dump, 0, config, steps=(a, b)) for a, b in itertools.pairwise(cuts)]
    merged = merge_parts(parts, config.temperatures)
    assert merged.steps == whole.steps == SHARDS[0]
    pd.testing.assert_frame_equal(merged.rows, whole.rows, check_exact=True)
    pd.testing.assert_frame_equal(merged.skipped_cells, whole.skipped_cells, check_exact=True)
    one_chunk = analyse_shard(dump, 0, dataclasses.replace(config, chunk_steps=256))
    pd.testing.assert_frame_equal(one_chunk.rows, whole.rows, check_exact=True)
    rank = whole.rows.temperature.map({t: -i for i, t in enumerate(config.temperatures)})
    keys = list(zip(rank, whole.rows.step, strict=True))
    assert keys == sorted(keys, key=lambda k: (-k[0], k[1]))
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


def _in_parts_with(analyse, dump_path: Path, out: Path, monkeypatch):
    """A run on two processes, the shards cut in parts, each part analysed by ``analyse``."""
    from otbound.analysis import _runner

    monkeypatch.setattr(_parallel, "MIN_PART_STEPS", 2)
    monkeypatch.setattr(_runner, "analyse_shard", analyse)
    return _run(ob.open_dump(dump_path), out, jobs=2)


def test_a_bad_shard_cut_into_parts_is_reported_once(
    dump_path: Path, tmp_path: Path, monkeypatch
) -> None:
    result = _in_parts_with(_shard_one_is_bad, dump_path, tmp_path / "out", monkeypatch)
    assert not result.ok
    assert list(result.failures) == ["shard-00001"]
    assert "truncated" in result.failures["shard-00001"]
    assert not (tmp_path / "out" / "steps.parquet").exists()


def _dies_in_a_worker(dump, shard, config, progress=None, *, steps=None):
    """A worker killed by the system (module level: spawned workers import it)."""
    import multiprocessing
    import os

    if multiprocessing.parent_process() is not None:
        os._exit(1)
    return analyse_shard(dump, shard, config, progress, steps=steps)


def test_a_worker_that_dies_stops_the_run_with_words_for_it(
    dump_path: Path, tmp_path: Path, monkeypatch
) -> None:
    from otbound.analysis import AnalysisError

    with pytest.raises(AnalysisError, match="a worker process died") as info:
        _in_parts_with(_dies_in_a_worker, dump_path, tmp_path / "out", monkeypatch)
    assert "the resume option" in str(info.value)
    assert not (tmp_path / "out" / "steps.parquet").exists()


def test_the_parts_of_a_shard_read_it_once_while_it_is_unchanged(
    tmp_path: Path, monkeypatch
) -> None:
    """A process keeps the shard its last part read for its next part of it; a shard file
    that changed (here its modification time) is read again, and the end of a run forgets
    it."""
    from otbound.analysis import _shard
    from otbound.dumps import Dump

    write_dump(tmp_path / "dump")
    dump = ob.open_dump(tmp_path / "dump")
    reads = []
    original = Dump.read_shard

    def counted(self, key):
        reads.append(key)
        return original(self, key)

    monkeypatch.setattr(Dump, "read_shard", counted)
    config = AnalysisConfig(**SMALL)
    _shard.forget_part_shard()
    first = analyse_shard(dump, 0, config, steps=(0, 6))
    analyse_shard(dump, 0, config, steps=(6, 12))
    assert reads == [0]
    analyse_shard(dump, 1, config, steps=(0, 6))
    assert reads == [0, 1] and len(_shard._PART_SHARD) == 1  # one shard kept at a time
    path = tmp_path / "dump" / dump.shard(1).file
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    analyse_shard(dump, 1, config, steps=(6, 12))
    assert reads == [0, 1, 1]
    analyse_shard(dump, 0, config)  # a whole shard: read as always, not kept
    assert reads == [0, 1, 1, 0]
    _shard.forget_part_shard()
    again = analyse_shard(dump, 0, config, steps=(0, 6))
    assert reads == [0, 1, 1, 0, 0]
    pd.testing.assert_frame_equal(again.rows, first.rows, check_exact=True)


@pytest.mark.parametrize("version", [1, 2])
def test_a_containers_limits_bound_the_cores_and_the_memory(tmp_path: Path, monkeypatch, version):
    monkeypatch.setattr(_parallel, "CGROUP", tmp_path)
    assert _parallel._cgroup_cores() is None and _parallel._cgroup_memory() is None  # none
    if version == 2:
        (tmp_path / "cpu.max").write_text("max 100000\n")
        assert _parallel._cgroup_cores() is None  # no quota
        (tmp_path / "cpu.max").write_text("150000 100000\n")
        (tmp_path / "memory.max").write_text(f"{4 * 2**30}\n")
        (tmp_path / "memory.current").write_text(f"{2**30}\n")
    else:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "memory").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
        assert _parallel._cgroup_cores() is None  # no quota
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
        (tmp_path / "memory" / "memory.limit_in_bytes").write_text(f"{4 * 2**30}\n")
        (tmp_path / "memory" / "memory.usage_in_bytes").write_text(f"{2**30}\n")
    assert _parallel._cgroup_cores() == 2  # 1.5 cores of quota: two processes
    assert _parallel._cgroup_memory() == 3 * 2**30
    assert _parallel.usable_cores() <= 2
    memory = _parallel.available_memory()
    assert memory is not None and memory <= 3 * 2**30


# -- how the workers start ---------------------------------------------------------------------


SAFE = _parallel.ProcessState(
    platform="linux",
    python=(3, 11, 7),
    python_threads=1,
    native_threads=_parallel.THREADS_AT_IMPORT,
    numba_threads=False,
    torch=False,
)


@pytest.mark.parametrize(
    "unsafe",
    [
        {"platform": "win32"},
        {"platform": "darwin"},
        {"python": (3, 10, 13)},  # its pool may fork a worker later, from a thread
        {"python_threads": 2},
        {"numba_threads": True},
        {"torch": True},
        {"native_threads": _parallel.THREADS_AT_IMPORT + 1},  # a thread started since
        {"python": (3, 12, 0)},  # deprecates forking with several native threads
    ],
    ids=str,
)
def test_workers_are_forked_only_where_it_is_safe(unsafe: dict) -> None:
    assert _parallel.start_method(SAFE) == "fork"
    assert _parallel.start_method(dataclasses.replace(SAFE, **unsafe)) == "spawn"
    single = dataclasses.replace(SAFE, python=(3, 13, 0), native_threads=1)
    assert _parallel.start_method(single) == "fork"


_THREAD_CHECKS = """
import threading
import numba
import numpy as np
from otbound.analysis import _parallel

before = _parallel.ProcessState.now()
assert before.python_threads == 1 and not before.numba_threads, before
assert before.native_threads == _parallel.THREADS_AT_IMPORT, before

@numba.njit(parallel=True)
def total(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i]
    return s

total(np.ones(4))
assert _parallel.ProcessState.now().numba_threads
release = threading.Event()
thread = threading.Thread(target=release.wait)
thread.start()
state = _parallel.ProcessState.now()
release.set()
thread.join()
assert state.python_threads == 2 and state.native_threads > before.native_threads, state
assert _parallel.start_method(state) == "spawn"
print("ok")
"""


def test_the_state_is_read_from_this_process() -> None:
    """In a fresh interpreter (numba's threads, once started, stay): a Python thread, and
    numba's layer once a parallel kernel ran, are seen."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _THREAD_CHECKS], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr


def test_the_workers_start_when_the_pool_is_made() -> None:
    with _parallel.LocalProcesses(3) as workers:
        assert len(workers._pool._processes) == 2


_FORKED_RUN = """
import sys
from pathlib import Path
import otbound as ob
from otbound.analysis import AnalysisConfig, _parallel, run_analysis

_parallel.MIN_PART_STEPS = 2  # the shards cut in parts
chosen = []
choose = _parallel.start_method
_parallel.start_method = lambda: chosen.append(choose()) or chosen[-1]
made = _parallel.LocalProcesses.__init__

def counted(self, jobs, warm=None):
    made(self, jobs, warm)
    assert len(self._pool._processes) == jobs - 1  # every worker made before any thread

_parallel.LocalProcesses.__init__ = counted
dump, out = ob.open_dump(sys.argv[1]), Path(sys.argv[2])
config = AnalysisConfig(n=(2, 3), designs=("iid", "without_replacement"), mc_trials=200)
# two processes first: this one has started no thread yet
two = run_analysis(dump, config, out / "two", jobs=2, progress=False)
one = run_analysis(dump, config, out / "one", jobs=1, progress=False)
assert one.ok and two.ok
print(" ".join(chosen))
"""


def test_forked_workers_give_the_files_of_one_process(dump_path: Path, tmp_path: Path) -> None:
    """In a fresh interpreter (this one may run numba's threads): where forking is safe the
    workers are forked, and the run writes the files of one process: the same names, the
    tables' values exactly, the other files byte for byte (``run.json`` holds the run's time
    and is left out)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FORKED_RUN, str(dump_path), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    methods = done.stdout.split()
    assert len(methods) == 1
    if sys.platform.startswith("linux") and (3, 11) <= sys.version_info < (3, 12):
        assert methods == ["fork"]
    names = sorted(p.name for p in (tmp_path / "one").iterdir() if p.is_file())
    assert names == sorted(p.name for p in (tmp_path / "two").iterdir() if p.is_file())
    assert "steps.parquet" in names and "acceptance_vs_n.png" in names
    for name in names:
        if name == "run.json":  # the run's time
            continue
        a, b = ((tmp_path / side / name).read_bytes() for side in ("one", "two"))
        if name.endswith(".parquet"):
            pd.testing.assert_frame_equal(
                pd.read_parquet(tmp_path / "one" / name),
                pd.read_parquet(tmp_path / "two" / name),
                check_exact=True,
            )
        else:
            assert a == b, name
