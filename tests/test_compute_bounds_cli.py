"""The compute_bounds command line: outputs, and one readable line for every bad input."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dump_factory import write_dump

import otbound
from otbound.analysis import _runner
from otbound.cli import compute_bounds
from otbound.cli.compute_bounds import main

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--n", "2,3", "--design", "iid,without_replacement", "--mc-trials", "100", "--quiet"]
PNG = b"\x89PNG\r\n\x1a\n"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert lines[0].startswith("compute_bounds: error: "), lines[0]
    assert "Traceback" not in err
    return lines[0]


def bad_step_ids(line: str) -> dict[str, set[int]]:
    """The step ids the NaN/Inf message names for each model ("target at 2 steps: 3, 5")."""
    found = re.findall(r"\b(target|draft) at \d+ steps?: (\d+(?:, \d+)*)", line)
    return {side: {int(s) for s in ids.split(", ")} for side, ids in found}


def no_partial_files(out: Path) -> None:
    leftovers = [p for p in out.rglob(".*") if ".tmp-" in p.name] if out.exists() else []
    assert not leftovers, leftovers


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "dump"
    write_dump(path)
    return path


def test_outputs_table_and_figures(dump: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(capsys, dump, *FAST[:-1], "--temperature", "1,0.5", "--out", out)
    assert code == 0, err
    steps = pd.read_parquet(out / "steps.parquet")
    for column in ("step", "n", "design", "verifier", "acceptance", "alpha_star", "temperature"):
        assert column in steps.columns
    assert set(steps.temperature) == {1.0, 0.5}
    summary = pd.read_csv(out / "summary.csv")
    assert {"acceptance_ci_low", "gap", "gap_ci_high"} <= set(summary.columns)
    assert "α* bound" in stdout and "n=3" in stdout and "temperature 0.5" in stdout
    figures = sorted(p.name for p in out.glob("*.png"))
    assert figures == [
        "acceptance_vs_n_T0.5.png",
        "acceptance_vs_n_T1.png",
        "acceptance_vs_temperature_n2.png",
        "acceptance_vs_temperature_n3.png",
        "gap_distribution_T0.5.png",
        "gap_distribution_T1.png",
    ]
    for figure in figures:
        data = (out / figure).read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000
    no_partial_files(out)


def test_missing_dump(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, tmp_path / "nothing.npz", "--out", tmp_path / "out")
    assert code == 1 and "nothing.npz" in one_error_line(err)


def test_missing_sample(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(compute_bounds, "SAMPLE_DUMP", tmp_path / "no-sample")
    code, _, err = run(capsys, "--out", tmp_path / "out", "--quiet")
    assert code == 1 and "sample" in one_error_line(err)


def test_wrong_keys_list_the_keys_found(tmp_path: Path, capsys) -> None:
    np.savez(tmp_path / "run.npz", logits_a=np.zeros((3, 5)), logits_b=np.zeros((3, 5)))
    code, _, err = run(capsys, tmp_path / "run.npz", "--out", tmp_path / "out", "--quiet")
    line = one_error_line(err)
    assert code == 1 and "logits_a" in line and "logits_b" in line
    code, _, err = run(
        capsys,
        tmp_path / "run.npz",
        "--target-key",
        "logits_a",
        "--draft-key",
        "logits_b",
        *FAST,
        "--out",
        tmp_path / "out",
    )
    assert code == 0, err


def test_nan_logits_name_the_steps_and_can_be_skipped(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(0)
    target, draft = rng.normal(size=(10, 20)), rng.normal(size=(10, 20))
    target[3, 4] = np.nan
    draft[7, 0] = np.inf
    np.savez(tmp_path / "run.npz", target_logits=target, draft_logits=draft)
    out = tmp_path / "out"
    code, _, err = run(capsys, tmp_path / "run.npz", *FAST, "--out", out)
    line = one_error_line(err)
    assert code == 1 and "--skip-bad-steps" in line
    assert bad_step_ids(line) == {"target": {3}, "draft": {7}}
    assert not (out / "steps.parquet").exists()
    code, _, err = run(capsys, tmp_path / "run.npz", *FAST, "--out", out, "--skip-bad-steps")
    assert code == 0, err
    assert "skipped 2 bad step(s)" in err
    assert set(pd.read_parquet(out / "steps.parquet").step) == set(range(10)) - {3, 7}


def test_vocabulary_mismatch(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(1)
    np.savez(
        tmp_path / "run.npz",
        target_logits=rng.normal(size=(6, 20)),
        draft_logits=rng.normal(size=(6, 24)),
    )
    code, _, err = run(capsys, tmp_path / "run.npz", *FAST, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 1 and "--truncate-vocab" in line
    widths = re.search(r"the target has (\d+) tokens and the draft (\d+);", line)
    assert widths is not None and widths.groups() == ("20", "24")
    code, _, err = run(
        capsys, tmp_path / "run.npz", *FAST, "--out", tmp_path / "out", "--truncate-vocab"
    )
    assert code == 0, err
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1 and re.search(r"first (\d+)$", warnings[0]).group(1) == "20"


def test_corrupt_shard_finishes_the_others_then_resumes(tmp_path: Path, capsys) -> None:
    path = tmp_path / "dump"
    write_dump(path)
    shard = path / "shard-00001.safetensors"
    original = shard.read_bytes()
    shard.write_bytes(original[:-100])
    out = tmp_path / "out"
    code, _, err = run(capsys, path, *FAST, "--out", out)
    line = one_error_line(err)
    assert code == 1 and "shard-00001" in line and "--resume" in line
    assert sorted(p.name for p in (out / "shards").glob("shard-?????.parquet")) == [
        "shard-00000.parquet",
        "shard-00002.parquet",
    ]
    assert not (out / "steps.parquet").exists() and not (out / "summary.csv").exists()
    no_partial_files(out)
    shard.write_bytes(original)
    code, _, err = run(capsys, path, *FAST, "--out", out, "--resume")
    assert code == 0, err
    assert pd.read_parquet(out / "steps.parquet").step.nunique() == 33


def test_resume_with_other_settings_is_refused(dump: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(capsys, dump, *FAST, "--out", out)[0] == 0
    code, _, err = run(capsys, dump, *FAST, "--seed", "5", "--out", out, "--resume")
    line = one_error_line(err)
    assert code == 1 and "seed" in line


def test_max_steps(dump: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(capsys, dump, *FAST[:-1], "--max-steps", "14", "--out", out)
    assert code == 0, err
    assert set(pd.read_parquet(out / "steps.parquet").step) == set(range(14))
    assert "(14 steps;" in stdout
    code, _, err = run(capsys, dump, *FAST, "--out", out, "--resume")
    assert code == 1 and "max_steps" in one_error_line(err)
    code, _, err = run(capsys, dump, *FAST, "--max-steps", "0", "--out", out)
    assert code == 1 and "--max-steps must be at least 1" in one_error_line(err)


def test_unwritable_out(dump: Path, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = run(capsys, dump, *FAST, "--out", blocker / "out")
    assert code == 1 and "--out" in one_error_line(err)
    code, _, err = run(capsys, dump, *FAST, "--out", blocker)
    assert code == 1 and "not a directory" in one_error_line(err)


@pytest.mark.parametrize(
    ("args", "needle", "status"),
    [
        (["--n", "2,x"], "--n", 2),
        (["--n", "0"], "n must", 1),
        (["--design", "iid,nope"], "valid: iid", 1),
        (["--verifiers", "rrs,nope"], "valid: single", 1),
        (["--temperature", "-1"], "temperatures", 1),
        (["--jobs", "0"], "--jobs", 1),
        (["--top-p", "1.5"], "--top-p", 1),
        (["--n", "41"], "more drafts than the vocabulary", 1),
    ],
)
def test_bad_options(dump: Path, tmp_path: Path, capsys, args, needle, status) -> None:
    with pytest.raises(SystemExit) if status == 2 else contextlib.nullcontext():
        code, _, err = run(capsys, dump, "--quiet", "--out", tmp_path / "out", *args)
    if status == 2:
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err
        return
    assert code == status and needle in one_error_line(err)


def test_topk_dump_bound_only_and_refusals(tmp_path: Path, capsys) -> None:
    path = tmp_path / "topk"
    write_dump(path, topk=6)
    out = tmp_path / "out"
    code, stdout, err = run(capsys, path, "--n", "2,4", "--out", out)
    assert code == 0, err
    steps = pd.read_parquet(out / "steps.parquet")
    assert set(steps.verifier) == {"bound"} and set(steps.design) == {"iid"}
    assert (steps.alpha_star_lower <= steps.alpha_star_upper).all()
    assert "[" in stdout  # intervals in the table
    for args, needle in (
        (["--design", "without_replacement"], "no certified interval"),
        (["--verifiers", "rrs"], "verifiers need full distributions"),
        (["--temperature", "0.7"], "cannot be applied exactly"),
    ):
        code, _, err = run(capsys, path, "--quiet", "--out", out, *args)
        assert code == 1 and needle in one_error_line(err)


def test_script_runs_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "compute_bounds.py"),
            str(tmp_path / "x.npy"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"compute_bounds: error: no dump at {tmp_path / 'x.npy'}: no such file or directory"
    ]


def test_device_errors(dump: Path, tmp_path: Path, capsys) -> None:
    torch = pytest.importorskip("torch")
    code, _, err = run(capsys, dump, *FAST, "--out", tmp_path / "out", "--device", "gpu7")
    assert code == 1 and "--device" in one_error_line(err)
    if not torch.cuda.is_available():
        code, _, err = run(capsys, dump, *FAST, "--out", tmp_path / "out", "--device", "cuda")
        assert code == 1 and "no CUDA device" in one_error_line(err)
    code, _, err = run(capsys, dump, *FAST, "--out", tmp_path / "out", "--device", "cpu")
    assert code == 0, err


def test_skipped_cells_are_counted_listed_and_the_table_shows_their_steps(
    tmp_path: Path, capsys
) -> None:
    """Steps 0-3 have two draft tokens: n = 3 without replacement does not apply there."""
    rng = np.random.default_rng(12)
    target, draft = rng.dirichlet(np.ones(10), 12), rng.dirichlet(np.ones(10), 12)
    draft[:4, 2:] = 0.0
    draft /= draft.sum(axis=1, keepdims=True)
    np.savez(tmp_path / "run.npz", target_probs=target, draft_probs=draft)
    out = tmp_path / "out"
    code, stdout, err = run(
        capsys,
        tmp_path / "run.npz",
        "--n",
        "2,3",
        "--design",
        "without_replacement",
        "--verifiers",
        "rrs_without_replacement",
        "--out",
        out,
        "--no-figures",
    )
    assert code == 0, err
    lines = [x for x in err.splitlines() if "cells" in x]
    assert lines == [
        "compute_bounds: skipped 8 of 48 (step, n, design, verifier) cells: 8 n larger than "
        "the support of q (listed in skipped.csv)"
    ]
    cells = pd.read_csv(out / "skipped.csv")
    assert set(cells.step) == {0, 1, 2, 3} and set(cells.n) == {3} and len(cells) == 8
    assert set(cells.verifier) == {"bound", "rrs_without_replacement"}
    record = json.loads((out / "run.json").read_text())
    assert record["skipped_cells"]["skipped"] == 8 and record["skipped_cells"]["cells"] == 48
    # the header counts the temperature's steps; a cell over fewer steps says how many
    table = stdout.split("\n\n")[0].splitlines()
    assert table[0].startswith("temperature 1 (12 steps;")
    for row in table[3:]:  # under the two header lines and the index names
        assert re.findall(r"\((\d+) steps\)", row) == ["8"], row  # the n=3 column only
    assert "skipped.csv" in stdout


def _buggy_shard(dump, shard, config, progress=None, *, steps=None):
    raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")


def test_a_bug_stops_the_run_with_its_traceback(dump: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr(_runner, "analyse_shard", _buggy_shard)
    out = tmp_path / "out"
    code, _, err = run(capsys, dump, *FAST, "--out", out)
    assert code == 1
    assert "Traceback (most recent call last)" in err and "_buggy_shard" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("compute_bounds: error: ") and "TypeError" in last
    assert "not a bad dump" in last and "fix the dump" not in err
    record = json.loads((out / "run.json").read_text())
    assert "TypeError: unsupported operand" in record["error"]["traceback"]
    assert not (out / "steps.parquet").exists()


def test_resume_with_another_version_is_refused(
    dump: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    out = tmp_path / "out"
    assert run(capsys, dump, *FAST, "--out", out)[0] == 0
    before = otbound.__version__
    monkeypatch.setattr("otbound._version.__version__", "99.0")
    code, _, err = run(capsys, dump, *FAST, "--out", out, "--resume")
    line = one_error_line(err)
    assert code == 1 and f"made by otbound {before}, this is otbound 99.0" in line
