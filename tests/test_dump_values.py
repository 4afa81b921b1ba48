"""Probabilities stored where logits are expected: refused by the readers, declared with
``values="probs"`` (``--values probs``); real logits pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import otbound.dumps as od
from otbound.cli.compute_bounds import SAMPLE_DUMP, main
from otbound.dumps._safetensors import write_safetensors

STEPS, VOCAB = 12, 30
FAST = ["--n", "2", "--design", "iid", "--mc-trials", "0", "--quiet", "--no-figures"]
FORMATS = ("npy", "npz", "safetensors", "pt")


def _probs(seed: int = 0, steps: int = STEPS, vocab: int = VOCAB) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.dirichlet(np.full(vocab, 0.3), size=steps) for _ in range(2))


def _save(path: Path, target: np.ndarray, draft: np.ndarray, names: str = "logits") -> Path:
    """``target``/``draft`` in the format of ``path``'s suffix, under ``*_{names}`` keys."""
    arrays = {f"target_{names}": target, f"draft_{names}": draft}
    suffix = path.suffix
    if suffix == ".npy":
        np.save(path, np.stack([target, draft]))
    elif suffix == ".npz":
        np.savez(path, **arrays)
    elif suffix == ".safetensors":
        with open(path, "wb") as f:
            write_safetensors(f, arrays)
    else:
        torch = pytest.importorskip("torch")
        torch.save({k: torch.from_numpy(v) for k, v in arrays.items()}, path)
    return path


def _run(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _steps(out: Path) -> pd.DataFrame:
    frame = pd.read_parquet(out / "steps.parquet")
    return frame.sort_values(["step", "n", "design", "verifier"]).reset_index(drop=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_probabilities_under_logits_names_are_refused_by_the_cli(
    fmt: str, tmp_path: Path, capsys
) -> None:
    path = _save(tmp_path / f"run.{fmt}", *_probs())
    out = tmp_path / "out"
    code, stdout, err = _run(capsys, path, *FAST, "--out", out)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("compute_bounds: error: ") and "Traceback" not in err
    assert "probabilities, not logits" in lines[0] and "--values probs" in lines[0]
    assert not (out / "steps.parquet").exists() and "1.000" not in stdout


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_probs_gives_the_table_of_the_probs_names(fmt: str, tmp_path: Path, capsys) -> None:
    target, draft = _probs(1)
    reference = _save(tmp_path / "named.npz", target, draft, names="probs")
    code, _, err = _run(capsys, reference, *FAST, "--out", tmp_path / "ref")
    assert code == 0, err
    path = _save(tmp_path / f"run.{fmt}", target, draft)
    code, _, err = _run(capsys, path, *FAST, "--values", "probs", "--out", tmp_path / "out")
    assert code == 0, err
    want, got = _steps(tmp_path / "ref"), _steps(tmp_path / "out")
    pd.testing.assert_frame_equal(got, want)
    assert want["alpha_star"].mean() < 0.95  # not the flattened near-1 table


def test_the_python_api_refuses_and_accepts_the_declaration(tmp_path: Path) -> None:
    target, draft = _probs(2)
    path = _save(tmp_path / "run.npy", target, draft)
    with pytest.raises(od.DumpError, match=r"--values probs.*values='probs'"):
        od.open_dump(path)
    with pytest.raises(od.DumpError, match="probabilities, not logits"):
        od.open_dump(path, values="logits")  # declared logits that look like probabilities
    dump = od.open_dump(path, values="probs")
    assert dump.values == ("probs", "probs")
    np.testing.assert_allclose(dump.read_shard(0).distributions().target, target, rtol=1e-12)
    with pytest.raises(ValueError, match="values must be one of"):
        od.open_dump(path, values="probabilities")
    with pytest.raises(ValueError, match="probs=True contradicts values='logits'"):
        od.open_dump(path, values="logits", probs=True)


def test_rows_past_the_first_ones_are_checked_when_the_shard_is_read(tmp_path: Path) -> None:
    """Opening looks at the first rows only; reading a shard checks every row."""
    rng = np.random.default_rng(3)
    target, draft = (rng.normal(size=(300, VOCAB)) * 2 for _ in range(2))
    target[250] = rng.dirichlet(np.ones(VOCAB))
    path = _save(tmp_path / "run.safetensors", target, draft)
    dump = od.open_dump(path, shard_steps=200)
    dump.read_shard(0)
    with pytest.raises(od.DumpError, match=r"target_logits.*1 step: 250.*--values probs"):
        dump.read_shard(1)


def test_half_precision_probabilities_are_caught(tmp_path: Path) -> None:
    """float16 rows sum to 1 only within the dtype's rounding: here off by about 1.5e-3, more
    than float32 or float64 rows could be."""
    target, draft = _probs(4, vocab=200)
    target = (target * (1 + 1.5e-3)).astype(np.float16)
    excess = np.abs(target.astype(np.float64).sum(1) - 1)
    assert np.all((1.2e-3 < excess) & (excess < 1.9e-3))
    path = _save(tmp_path / "run.npz", target, draft.astype(np.float16))
    with pytest.raises(od.DumpError, match="probabilities, not logits"):
        od.open_dump(path)


def test_a_dump_directory_of_probabilities_is_refused_then_declared(tmp_path: Path) -> None:
    target, draft = _probs(5)
    with od.DumpWriter(tmp_path / "d", dtype="float64") as writer:
        writer.write_shard(target, draft)
    with pytest.raises(od.DumpError, match=r"shard-00000.*target_logits.*--values probs"):
        od.open_dump(tmp_path / "d").read_shard(0)
    shard = od.open_dump(tmp_path / "d", values="probs").read_shard(0)
    assert shard.values == ("probs", "probs")
    np.testing.assert_allclose(shard.distributions().draft, draft, rtol=1e-12)


@pytest.mark.parametrize("fmt", FORMATS)
def test_real_logits_are_not_refused(fmt: str, tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(6)
    target = rng.normal(size=(STEPS, VOCAB)).astype(np.float32)
    path = _save(tmp_path / f"run.{fmt}", target, target + rng.normal(size=target.shape))
    for values in ("auto", "logits"):
        code, _, err = _run(capsys, path, *FAST, "--values", values, "--out", tmp_path / values)
        assert code == 0, err


def test_the_sample_dump_is_not_refused() -> None:
    dump = od.open_dump(SAMPLE_DUMP)
    assert dump.check() == {}


def test_compressed_npz_is_checked_from_its_first_rows_at_open(tmp_path: Path) -> None:
    target, draft = _probs(7)
    np.savez_compressed(tmp_path / "run.npz", target_logits=np.log(target), draft_logits=draft)
    with pytest.raises(od.DumpError, match=r"draft_logits holds probabilities.*12 steps"):
        od.open_dump(tmp_path / "run.npz")


def test_the_tolerance_follows_the_storage_dtype() -> None:
    """Wide enough for a softmax stored in the dtype, never below what values="probs" takes."""
    assert od.probability_tolerance("float16", 152064) == pytest.approx(6.5e-3, rel=0.01)
    assert od.probability_tolerance("BF16", 10) == pytest.approx(4 * 2.0**-8)
    assert od.probability_tolerance("float32", 152064) == od.probability_tolerance("F64", 2)
    assert od.probability_tolerance("float64", 2) == 1e-3
