"""The ``otbound`` command: subcommands, ``--version``, ``python -m otbound``, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import otbound
from otbound.cli.main import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m otbound ARGS`` in ``cwd`` (outside the clone when a test asks)."""
    return subprocess.run(
        [sys.executable, "-m", "otbound", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"otbound {otbound.__version__}"
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in text
    assert main([]) == 2  # no command: the help, and the usage status


def test_unknown_command_is_one_line(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown command 'frobnicate'" in err and "bounds, log, trees" in err


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_subcommand_help_names_the_command(name, capsys):
    with pytest.raises(SystemExit) as stop:
        main([name, "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: otbound {name} ")


def test_python_m_otbound_bounds_outside_the_clone(tmp_path):
    """From any directory: a user's own ``.npz``, the same table as the library's."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 40))
    np.savez(tmp_path / "mine.npz", target_logits=logits[0], draft_logits=logits[1])
    done = run(
        "bounds", "mine.npz", "--n", "2", "--design", "iid", "--verifiers", "rrs",
        "--out", "out", "--quiet", "--no-figures", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    steps = pd.read_parquet(tmp_path / "out" / "steps.parquet")
    bound = steps[steps.verifier == "bound"].sort_values("step")
    p = otbound.softmax(logits[0])
    q = otbound.softmax(logits[1])
    expected = otbound.optimal_acceptance(p, q, n=2)
    np.testing.assert_allclose(bound.acceptance.to_numpy(), expected, rtol=0, atol=1e-12)


def test_bounds_without_a_dump_outside_the_clone_says_where_the_sample_is(
    tmp_path, monkeypatch, capsys
):
    """An installed package has no sample: one line says where it is, exit 1."""
    from otbound.cli import compute_bounds

    monkeypatch.setattr(compute_bounds, "SAMPLE_DUMP", tmp_path / "sample")
    assert compute_bounds.main(["--quiet"], prog="otbound bounds") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("otbound bounds: error: no DUMP given")
    assert "data/sample in a clone of otbound" in err


def test_console_script_is_declared():
    """``pip install`` puts ``otbound`` on the PATH: the entry point is :func:`run`, which
    ends the process with :func:`main`'s status."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"otbound": "otbound.cli.main:run"}
    assert "version" in project["dynamic"]


def test_a_command_ends_after_its_exit_handlers_with_its_status():
    """``exit_now``: the atexit handlers run and the streams are flushed, then the process
    ends with the status (without the interpreter's teardown)."""
    done = _python(
        "import atexit, sys",
        "atexit.register(lambda: print('handler', file=sys.stderr))",
        "print('written', end='')",
        "exit_now(3)",
        "print('never')",
    )
    assert done.returncode == 3
    assert done.stdout == "written" and done.stderr == "handler\n"
    version = subprocess.run(
        [sys.executable, "-m", "otbound", "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.startswith("otbound ")


def test_a_command_whose_output_is_lost_does_not_end_with_status_0():
    """stdout into a closed pipe: the flush fails, the status is 120 (as Python's own exit)
    and stderr says so."""
    done = _python(
        "import os, sys",
        "read, write = os.pipe()",
        "os.close(read)",
        "sys.stdout = open(write, 'w')",
        "print('lost')",
        "exit_now(0)",
    )
    assert done.returncode == 120
    assert "cannot write the output" in done.stderr


def _python(*lines: str) -> subprocess.CompletedProcess[str]:
    """``lines`` run by a fresh interpreter that has imported ``exit_now``."""
    code = "\n".join(["from otbound.cli._common import exit_now", *lines])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_import_otbound_does_not_load_cvxpy_or_scipy_stats():
    """cvxpy and scipy.stats (half a second each to import) are loaded where they are used:
    the reference LP, the lossless check's p-value, a summary's intervals."""
    code = "import sys, otbound; print('cvxpy' in sys.modules, 'scipy.stats' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False False"
