"""The first run says what it is doing: on a cold numba cache the main job prints
"compiling kernels (first run only)", compiles the kernels on the first steps, and only then
starts its progress bar (:mod:`otbound.analysis._first_run`).

No timing: the cold cache is seen in numba's cache files (a kernel of a fresh module, then its
files deleted), the order of message, warm-up and bar is recorded, and a fresh process with
an empty ``NUMBA_CACHE_DIR`` shows the message once, then not again.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import pandas as pd
import pytest
from dump_factory import write_dump

import otbound as ob
from otbound.analysis import AnalysisConfig, run_analysis
from otbound.analysis import _first_run as first_run
from otbound.analysis import _runner as runner

ROOT = Path(__file__).resolve().parents[1]
SMALL = AnalysisConfig(n=(2,), designs=("iid",), verifiers=("rrs",), mc_trials=0)


def _fresh_kernel(folder: Path, name: str) -> Any:
    """A cached kernel in a module of its own under ``folder``, never compiled before."""
    source = folder / f"{name}.py"
    source.write_text(
        textwrap.dedent(
            """
            import numba

            @numba.njit(cache=True)
            def twice(x):
                return 2 * x
            """
        )
    )
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.twice


def _cache_files(kernel: Any) -> list[Path]:
    name = kernel.py_func.__name__
    return [p for p in Path(kernel.stats.cache_path).iterdir() if f".{name}-" in p.name]


def test_a_cache_is_cold_until_a_kernel_is_compiled_and_again_once_its_files_go(
    tmp_path: Path,
) -> None:
    kernel = _fresh_kernel(tmp_path, "first_run_kernel_a")
    assert first_run.kernels_cold([kernel])
    assert kernel(3) == 6  # compiled, and written to numba's cache
    assert _cache_files(kernel)
    assert not first_run.kernels_cold([kernel])
    for path in _cache_files(kernel):
        path.unlink()
    assert first_run.kernels_cold([kernel])


def test_one_cached_kernel_is_enough_to_call_the_cache_warm(tmp_path: Path) -> None:
    """A run leaves the kernels of the paths it did not take uncompiled: a cache is cold only
    when none of the kernels has an entry (else every later run would say it compiles)."""
    cold = _fresh_kernel(tmp_path, "first_run_kernel_b")
    warm = _fresh_kernel(tmp_path, "first_run_kernel_c")
    warm(1)
    assert first_run.kernels_cold([cold])
    assert not first_run.kernels_cold([cold, warm])
    assert not first_run.kernels_cold([])  # no kernel: nothing to compile


def test_the_kernels_looked_at_are_otbounds_cached_ones() -> None:
    from otbound import _pairwise

    kernels = first_run.cached_kernels()
    assert _pairwise.pairwise_sum in kernels
    assert all(k.__module__.startswith("otbound") for k in kernels)
    assert all(k._cache.cache_path for k in kernels)  # each has an on-disk cache


@pytest.fixture()
def small_dump(tmp_path: Path) -> ob.dumps.Dump:
    write_dump(tmp_path / "dump", shards=(5, 4))
    return ob.open_dump(tmp_path / "dump")


Run = Callable[..., tuple[list[object], str]]


@pytest.fixture()
def recorded_run(
    small_dump: ob.dumps.Dump,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Run:
    """``run(out, cold=..., **options)`` analyses the small dump into ``tmp_path / out`` with
    the cache seen as ``cold``; returns the order of events (the warm-up's shard, steps and
    numba threads; the bar's start) and what the run wrote on stderr."""
    analyse, real_bar = first_run.analyse_shard, runner.tqdm

    def run(out: str, *, cold: bool, **options: Any) -> tuple[list[object], str]:
        events: list[object] = []

        def warm_up(dump: Any, shard: int, config: Any, *args: Any, **kw: Any) -> Any:
            events.append(("warm-up", shard, kw["steps"], numba.get_num_threads()))
            return analyse(dump, shard, config, *args, **kw)

        def bar(*args: Any, **kw: Any) -> Any:
            events.append("bar")
            return real_bar(*args, **kw)

        monkeypatch.setattr(first_run, "kernels_cold", lambda: cold)
        monkeypatch.setattr(first_run, "analyse_shard", warm_up)
        monkeypatch.setattr(runner, "tqdm", bar)
        capsys.readouterr()
        run_analysis(small_dump, SMALL, tmp_path / out, figures=False, **options)
        return events, capsys.readouterr().err

    return run


def test_a_cold_run_says_so_and_compiles_before_the_bar_starts(
    recorded_run: Run, tmp_path: Path
) -> None:
    events, err = recorded_run("cold", cold=True)
    assert events == [("warm-up", 0, (0, first_run.WARM_STEPS), numba.get_num_threads()), "bar"]
    assert err.startswith(first_run.COMPILING + "\n")
    assert "bounds:" in err and err.index(first_run.COMPILING) < err.index("bounds:")
    # the warm-up's rows are not the run's: the tables are those of a warm run
    recorded_run("warm", cold=False)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "cold" / "steps.parquet"),
        pd.read_parquet(tmp_path / "warm" / "steps.parquet"),
    )


def test_a_warm_run_goes_straight_to_the_bar(recorded_run: Run) -> None:
    events, err = recorded_run("out", cold=False)
    assert events == ["bar"]
    assert first_run.COMPILING not in err


def test_a_quiet_cold_run_compiles_first_without_a_word(recorded_run: Run) -> None:
    events, err = recorded_run("out", cold=True, progress=False)
    assert [e[0] for e in events if isinstance(e, tuple)] == ["warm-up"]
    assert err == ""


def test_with_workers_the_warm_up_takes_one_thread_as_the_run_does(
    small_dump: ob.dumps.Dump, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process with workers analyses on one numba thread, where the kernels take a row at a
    time: the warm-up compiles those kernels, not the batch ones."""
    seen: list[int] = []
    monkeypatch.setattr(first_run, "kernels_cold", lambda: True)
    monkeypatch.setattr(
        first_run, "analyse_shard", lambda *a, **k: seen.append(numba.get_num_threads())
    )
    threads = numba.get_num_threads()
    for one_thread in (True, False):
        with first_run.kernels_compiled(
            small_dump, {1: 4}, SMALL, announce=False, one_thread=one_thread
        ) as compiled:
            assert compiled
    assert seen == [1, threads]
    assert numba.get_num_threads() == threads  # restored


def test_nothing_to_analyse_here_means_no_warm_up(
    small_dump: ob.dumps.Dump, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pending step in this process (a resumed run, or a dask cluster's workers): no
    message, no warm-up."""
    monkeypatch.setattr(first_run, "kernels_cold", lambda: True)
    monkeypatch.setattr(first_run, "analyse_shard", lambda *a, **k: pytest.fail("warm-up"))
    for pending in ({}, {0: 0}):
        with first_run.kernels_compiled(small_dump, pending, SMALL, announce=True) as compiled:
            assert not compiled


def test_a_failing_warm_up_leaves_the_error_to_the_run(
    small_dump: ob.dumps.Dump, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up analyses steps that the run analyses again: an error there (a bad shard, a
    bug) is not raised from the warm-up, since the run meets those steps and reports it its
    own way."""

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ValueError("a bad step")

    monkeypatch.setattr(first_run, "kernels_cold", lambda: True)
    monkeypatch.setattr(first_run, "analyse_shard", fail)
    with first_run.kernels_compiled(small_dump, {0: 5}, SMALL, announce=False) as compiled:
        assert compiled


@pytest.mark.slow
def test_a_fresh_cache_prints_the_message_once(tmp_path: Path) -> None:
    """The real thing: ``otbound bounds`` in fresh processes on an empty ``NUMBA_CACHE_DIR``
    says it compiles, before the bar; the second run, on the cache the first wrote, does not."""
    write_dump(tmp_path / "dump", shards=(4,))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    env.pop("NUMBA_DISABLE_JIT", None)
    command = [sys.executable, "-m", "otbound", "bounds", str(tmp_path / "dump")]
    options = ["--n", "2", "--design", "iid", "--verifiers", "rrs", "--mc-trials", "0"]
    options += ["--no-figures", "--jobs", "1"]
    errs = []
    for run in ("first", "second"):
        done = subprocess.run(
            [*command, *options, "--out", str(tmp_path / run)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr
        errs.append(done.stderr)
    assert first_run.COMPILING in errs[0]
    assert errs[0].index(first_run.COMPILING) < errs[0].index("bounds:")
    assert first_run.COMPILING not in errs[1]
