"""otbound.analysis: per-step tables against direct computation, summaries against an
independent interval, top-k intervals, chunking, processes, dask, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dump_factory import SHARDS, write_dump
from scipy import stats
from scipy.special import softmax

import otbound as ob
from otbound.analysis import (
    STEP_COLUMNS,
    SUMMARY_COLUMNS,
    AnalysisConfig,
    AnalysisError,
    _runner,
    analyse_shard,
    gap_histogram,
    run_analysis,
    summarise,
)
from otbound.verifiers.base import MIN_RB_TRIALS


@pytest.fixture(scope="module")
def dump_dir(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    path = tmp_path_factory.mktemp("dump") / "dump"
    t, d = write_dump(path)
    return path, t, d


def test_rows_equal_direct_computation(dump_dir) -> None:
    path, t, d = dump_dir
    config = AnalysisConfig(
        n=(1, 2, 3),
        designs=("iid", "without_replacement", "hub"),
        verifiers=("rrs", "kseq", "spechub", "rrs_without_replacement"),
        temperatures=(1.0, 0.5),
    )
    dump = ob.open_dump(path)
    rows = pd.concat([analyse_shard(dump, i, config).rows for i in range(len(SHARDS))])
    assert tuple(rows.columns) == STEP_COLUMNS
    rng = np.random.default_rng(7)
    for step in rng.choice(len(t), 6, replace=False):
        for temperature in (1.0, 0.5):
            p = softmax(t[step].astype(np.float32).astype(np.float64) / temperature)
            q = softmax(d[step].astype(np.float32).astype(np.float64) / temperature)
            at = rows[(rows.step == step) & (rows.temperature == temperature)]
            assert set(at.prompt_id) == {step // 3} and set(at.position) == {step % 3}
            for n in (1, 2, 3):
                for design in ("iid", "without_replacement"):
                    bound = at[(at.n == n) & (at.design == design) & (at.verifier == "bound")]
                    want = ob.optimal_acceptance(p, q, n, design)
                    assert bound.alpha_star.item() == pytest.approx(want, abs=1e-12)
                    assert bound.alpha_star_lower.item() == bound.alpha_star_upper.item()
                for name in ("rrs", "kseq", "rrs_without_replacement"):
                    row = at[(at.n == n) & (at.verifier == name)]
                    v = ob.get_verifier(name)
                    assert row.acceptance.item() == pytest.approx(v.acceptance(p, q, n), abs=1e-12)
                    star = ob.optimal_acceptance(p, q, n, v.design)
                    assert row.alpha_star.item() == pytest.approx(star, abs=1e-12)
                    assert row.gap.item() == pytest.approx(star - row.acceptance.item(), abs=1e-12)
                    assert row.gap.item() >= -1e-12
            # SpecHub and its bound exist at n = 2 only, and it reaches the hub bound
            hub = at[at.design == "hub"]
            assert set(hub.n) == {2}
            assert np.allclose(hub.acceptance, hub.alpha_star, atol=1e-12)


def test_temperature_zero_is_argmax(dump_dir) -> None:
    path, t, d = dump_dir
    config = AnalysisConfig(n=(1,), designs=("iid",), verifiers=("single",), temperatures=(0.0,))
    rows = analyse_shard(ob.open_dump(path), 0, config).rows
    bound = rows[rows.verifier == "bound"].sort_values("step")
    same = np.argmax(t[:12], axis=1) == np.argmax(d[:12], axis=1)
    np.testing.assert_array_equal(bound.alpha_star.to_numpy(), same.astype(float))


def test_chunking_does_not_change_rows(dump_dir) -> None:
    path, _, _ = dump_dir
    dump = ob.open_dump(path)
    kwargs = dict(n=(2, 4), designs=("iid",), verifiers=("importance", "rrs"), mc_trials=300)
    a = analyse_shard(dump, 1, AnalysisConfig(**kwargs, chunk_steps=5)).rows
    b = analyse_shard(dump, 1, AnalysisConfig(**kwargs, chunk_steps=256)).rows
    key = ["step", "n", "verifier"]
    pd.testing.assert_frame_equal(
        a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    )
    # the Monte Carlo rows (importance at n = 4: V^4 tuples, Rao-Blackwellised) are really
    # Monte Carlo rows, with their standard errors
    mc = a[(a.verifier == "importance") & (a.n == 4)]
    assert len(mc) and (~mc.exact).all() and (mc.stderr > 0).all()
    assert mc.trials.between(MIN_RB_TRIALS, 300).all()  # sized by the pilot, capped at 300


def test_no_monte_carlo_rows_without_trials(dump_dir) -> None:
    path, _, _ = dump_dir
    config = AnalysisConfig(n=(1, 2), designs=("iid",), verifiers=("gls",), mc_trials=0)
    rows = analyse_shard(ob.open_dump(path), 0, config).rows
    gls = rows[rows.verifier == "gls"]
    assert set(gls.n) == {1, 2} and gls.exact.all()  # exact for every n (quadrature)


def test_config_validation_names_the_argument() -> None:
    with pytest.raises(ValueError, match="designs"):
        AnalysisConfig(designs=("per_slot",))
    with pytest.raises(ValueError, match="unknown verifier"):
        AnalysisConfig(verifiers=("nope",))
    with pytest.raises(ValueError, match="temperatures"):
        AnalysisConfig(temperatures=(-1.0,))
    with pytest.raises(ValueError, match="n must"):
        AnalysisConfig(n=(0,))
    with pytest.raises(ValueError, match="mc_trials"):
        AnalysisConfig(mc_trials=-1)
    assert AnalysisConfig(designs=("hub",)).verifier_names == ("spechub",)
    with pytest.raises(ValueError, match="max_steps"):
        AnalysisConfig(max_steps=0)
    assert AnalysisConfig().fingerprint() == AnalysisConfig(chunk_steps=3).fingerprint()
    assert AnalysisConfig().fingerprint() != AnalysisConfig(seed=1).fingerprint()
    # a subset is other settings; a whole-dump run keeps the fingerprint it had before
    assert AnalysisConfig().fingerprint() != AnalysisConfig(max_steps=5).fingerprint()
    assert "max_steps" not in AnalysisConfig().to_dict()
    assert AnalysisConfig(max_steps=5).steps_per_shard([3, 4, 9]) == (3, 2, 0)
    assert AnalysisConfig().steps_per_shard([3, 4, 9]) == (3, 4, 9)


# -- summaries ---------------------------------------------------------------------------------


def _frame(values: np.ndarray, prompts: np.ndarray | None) -> pd.DataFrame:
    m = values.size
    return pd.DataFrame(
        {
            "step": np.arange(m),
            "prompt_id": pd.array(prompts, dtype="Int64")
            if prompts is not None
            else pd.array([pd.NA] * m, dtype="Int64"),
            "temperature": 1.0,
            "n": 2,
            "design": "iid",
            "verifier": "rrs",
            "acceptance": values,
            "exact": True,
            "alpha_star": values + 0.1,
            "alpha_star_lower": values + 0.1,
            "alpha_star_upper": values + 0.1,
            "gap": 0.1,
        }
    )


def test_summary_interval_equals_t_interval_of_prompt_means() -> None:
    """With equal-size prompts the cluster-robust interval is Student's t interval of the
    prompt means (an independent formula)."""
    rng = np.random.default_rng(0)
    prompts = np.repeat(np.arange(9), 4)
    values = rng.random(prompts.size)
    row = summarise(_frame(values, prompts)).iloc[0]
    means = values.reshape(9, 4).mean(axis=1)
    lo, hi = stats.t.interval(0.95, 8, loc=means.mean(), scale=stats.sem(means))
    assert row.acceptance == pytest.approx(values.mean(), abs=1e-14)
    assert row.acceptance_ci_low == pytest.approx(lo, abs=1e-12)
    assert row.acceptance_ci_high == pytest.approx(hi, abs=1e-12)
    assert row.steps == 36 and row.prompts == 9
    assert row.alpha_star == pytest.approx(values.mean() + 0.1)
    assert tuple(summarise(_frame(values, prompts)).columns) == SUMMARY_COLUMNS


def test_summary_without_prompts_treats_steps_as_independent() -> None:
    values = np.random.default_rng(1).random(25)
    row = summarise(_frame(values, None)).iloc[0]
    lo, hi = stats.t.interval(0.95, 24, loc=values.mean(), scale=stats.sem(values))
    assert (row.acceptance_ci_low, row.acceptance_ci_high) == pytest.approx((lo, hi), abs=1e-12)


def test_summary_is_the_same_built_in_pieces() -> None:
    rng = np.random.default_rng(2)
    prompts = rng.integers(0, 6, 40)
    frame = _frame(rng.random(40), np.sort(prompts))
    from otbound.analysis._summary import cluster_sums, fold_cluster_sums, summarise_clusters

    pieces = [cluster_sums(frame.iloc[:13]), cluster_sums(frame.iloc[13:])]
    pd.testing.assert_frame_equal(summarise_clusters(fold_cluster_sums(pieces)), summarise(frame))


def test_summary_of_compare_table_as_it_is() -> None:
    """``compare`` has no temperature, prompt or certified interval: each step is a prompt of
    its own (or the metadata's prompt), the temperature is unknown (NaN)."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(12), 18), rng.dirichlet(np.ones(12), 18)
    rows = ob.compare(p, q, n=(2, 3), verifiers=["rrs", "kseq"], trials=0)
    summary = summarise(rows)
    assert tuple(summary.columns) == SUMMARY_COLUMNS
    assert summary.temperature.isna().all() and (summary.prompts == 18).all()
    filled = rows.assign(
        temperature=np.nan,
        prompt_id=pd.array([pd.NA] * len(rows), dtype="Int64"),
        alpha_star_lower=rows.alpha_star,
        alpha_star_upper=rows.alpha_star,
    )
    pd.testing.assert_frame_equal(summary, summarise(filled))
    rrs = rows[(rows.verifier == "rrs") & (rows.n == 2)]
    row = summary[(summary.verifier == "rrs") & (summary.n == 2)].iloc[0]
    lo, hi = stats.t.interval(0.95, 17, loc=rrs.acceptance.mean(), scale=stats.sem(rrs.acceptance))
    assert (row.acceptance_ci_low, row.acceptance_ci_high) == pytest.approx((lo, hi), abs=1e-12)
    # prompts from the metadata: 6 prompts of 3 steps
    meta = pd.DataFrame({"step": np.arange(18), "prompt_id": np.arange(18) // 3})
    by_prompt = summarise(rows, metadata=meta)
    assert (by_prompt.prompts == 6).all()
    pd.testing.assert_frame_equal(
        by_prompt, summarise(filled.assign(prompt_id=rows.step // 3).astype({"prompt_id": "Int64"}))
    )
    hist = gap_histogram(rows)
    assert hist["count"].sum() == (rows.verifier != "bound").sum()
    # the figures draw it; no temperature is named
    from otbound import plots

    for fig in (plots.acceptance_vs_n(summary), plots.gap_distribution(hist)):
        title = fig.get_suptitle()
        assert "temperature" not in title and "nan" not in title, title
    with pytest.raises(ValueError, match="columns acceptance"):
        summarise(rows.drop(columns="acceptance"))


def test_gap_histogram_counts_every_verifier_row() -> None:
    frame = _frame(np.linspace(0, 1, 11), None)
    frame["gap"] = [-0.3, 0.0, 0.0, 0.004, 0.005, 0.2, 0.5, 0.99, 1.0, 1.5, np.nan]
    hist = gap_histogram(frame)
    assert hist["count"].sum() == 10
    assert hist.loc[hist.bin_low == 0.0, "count"].item() == 3  # 0, 0, 0.004
    assert hist.bin_low.min() == pytest.approx(-0.1)  # -0.3 lands in the first bin


# -- top-k dumps -------------------------------------------------------------------------------


def test_topk_rows_give_certified_intervals(tmp_path: Path) -> None:
    t, d = write_dump(tmp_path / "topk", topk=8, seed=3)
    config = AnalysisConfig(n=(2, 4), designs=("iid",), verifiers=())
    dump = ob.open_dump(tmp_path / "topk")
    rows = pd.concat([analyse_shard(dump, i, config).rows for i in range(3)])
    assert set(rows.verifier) == {"bound"}
    for _, row in rows.iterrows():
        full = ob.optimal_acceptance(
            softmax(t[row.step].astype(np.float64)), softmax(d[row.step].astype(np.float64)), row.n
        )
        assert row.alpha_star_lower - 1e-9 <= full <= row.alpha_star_upper + 1e-9
    assert (rows.alpha_star_upper > rows.alpha_star_lower).any()


# -- runs --------------------------------------------------------------------------------------

SMALL = dict(n=(2, 3), designs=("iid", "without_replacement"), mc_trials=200)


def _run(dump, out, **kwargs):
    return run_analysis(dump, AnalysisConfig(**SMALL), out, progress=False, figures=False, **kwargs)


def test_run_writes_tables_and_processes_match(dump_dir, tmp_path: Path) -> None:
    path, _, _ = dump_dir
    dump = ob.open_dump(path)
    one = _run(dump, tmp_path / "one")
    two = _run(dump, tmp_path / "two", jobs=2)
    assert one.ok and two.ok
    a = pd.read_parquet(tmp_path / "one" / "steps.parquet")
    b = pd.read_parquet(tmp_path / "two" / "steps.parquet")
    pd.testing.assert_frame_equal(a, b)
    assert a.step.nunique() == sum(SHARDS)
    assert {"bound", "rrs", "kseq", "rrs_without_replacement", "gls"} <= set(a.verifier)
    summary = pd.read_csv(tmp_path / "one" / "summary.csv")
    assert (summary.steps == sum(SHARDS)).all()
    record = json.loads((tmp_path / "one" / "run.json").read_text())
    assert record["complete"] and record["config"]["n"] == [2, 3]
    assert not list((tmp_path / "one").glob(".*tmp*"))


def test_dask_cluster_gives_the_local_result(dump_dir, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    path, _, _ = dump_dir
    dump = ob.open_dump(path)
    local = _run(dump, tmp_path / "local")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        remote = _run(dump, tmp_path / "dask", dask=cluster.scheduler_address)
    assert local.ok and remote.ok
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "local" / "steps.parquet"),
        pd.read_parquet(tmp_path / "dask" / "steps.parquet"),
    )


def _corrupt(path: Path, shard: int) -> bytes:
    file = path / f"shard-{shard:05d}.safetensors"
    original = file.read_bytes()
    file.write_bytes(original[: len(original) // 2])
    return original


def test_failed_shard_then_resume(tmp_path: Path) -> None:
    path = tmp_path / "dump"
    write_dump(path)
    original = _corrupt(path, 1)
    done: list[str] = []
    failed = _run(ob.open_dump(path), tmp_path / "out", on_shard_done=done.append)
    assert not failed.ok and list(failed.failures) == ["shard-00001"]
    assert "shard-00001" not in done and len(done) == 2
    assert not (tmp_path / "out" / "steps.parquet").exists()
    (path / "shard-00001.safetensors").write_bytes(original)
    redone: list[str] = []
    resumed = _run(ob.open_dump(path), tmp_path / "out", resume=True, on_shard_done=redone.append)
    assert resumed.ok and redone == ["shard-00001"] and resumed.resumed == 2
    clean = _run(ob.open_dump(path), tmp_path / "clean")
    assert clean.ok
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "out" / "steps.parquet"),
        pd.read_parquet(tmp_path / "clean" / "steps.parquet"),
    )
    # the summary of shards read back (resumed) and of one summed as it came in: the same
    for name in ("summary.csv", "gap_histogram.csv"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()


def test_resume_refuses_other_settings(dump_dir, tmp_path: Path) -> None:
    path, _, _ = dump_dir
    dump = ob.open_dump(path)
    assert _run(dump, tmp_path / "out").ok
    with pytest.raises(ValueError, match=r"settings differ.*mc_trials"):
        run_analysis(
            dump,
            AnalysisConfig(**{**SMALL, "mc_trials": 5}),
            tmp_path / "out",
            resume=True,
            progress=False,
            figures=False,
        )


def test_max_steps_analyses_the_first_steps_only(tmp_path: Path) -> None:
    path = tmp_path / "dump"
    write_dump(path)
    config = AnalysisConfig(**SMALL)
    full = run_analysis(ob.open_dump(path), config, tmp_path / "all", progress=False, figures=False)
    _corrupt(path, 2)  # the shards past max_steps are never read
    head = AnalysisConfig(**SMALL, max_steps=15)  # all of shard 0, 3 steps of shard 1
    done: list[str] = []
    part = run_analysis(
        ob.open_dump(path),
        head,
        tmp_path / "head",
        progress=False,
        figures=False,
        on_shard_done=done.append,
    )
    assert full.ok and part.ok and part.steps == 15 and done == ["shard-00000", "shard-00001"]
    a = pd.read_parquet(tmp_path / "all" / "steps.parquet")
    b = pd.read_parquet(tmp_path / "head" / "steps.parquet")
    pd.testing.assert_frame_equal(b, a[a.step < 15].reset_index(drop=True))
    assert (part.summary.steps == 15).all()
    record = json.loads((tmp_path / "head" / "run.json").read_text())
    assert record["config"]["max_steps"] == 15 and record["steps"] == 15
    # a run on a subset is not resumed into a run on more steps, nor the other way round
    for other, out in ((config, "head"), (AnalysisConfig(**SMALL, max_steps=20), "head")):
        with pytest.raises(ValueError, match=r"settings differ.*max_steps"):
            run_analysis(ob.open_dump(path), other, tmp_path / out, resume=True, progress=False)
    with pytest.raises(ValueError, match=r"settings differ.*max_steps"):
        run_analysis(ob.open_dump(path), head, tmp_path / "all", resume=True, progress=False)
    # a shard on its own: the part of it among the first max_steps (all of it for a large one)
    dump = ob.open_dump(path)
    shard = analyse_shard(dump, 1, head)
    assert shard.steps == 3 and set(shard.rows.step) == {12, 13, 14}
    assert analyse_shard(dump, 1, AnalysisConfig(**SMALL, max_steps=10**6)).steps == 12


def test_torch_device_gives_the_numpy_rows(dump_dir) -> None:
    pytest.importorskip("torch")
    path, _, _ = dump_dir
    dump = ob.open_dump(path)
    kwargs = dict(
        n=(1, 2, 3),
        designs=("iid", "greedy", "topk", "hub", "without_replacement"),
        verifiers=("rrs", "greedy", "spechub"),
    )
    numpy_rows = analyse_shard(dump, 0, AnalysisConfig(**kwargs)).rows
    torch_rows = analyse_shard(dump, 0, AnalysisConfig(**kwargs, device="cpu")).rows
    assert len(numpy_rows) == len(torch_rows) > 0
    for column in ("alpha_star", "acceptance", "gap"):
        np.testing.assert_allclose(torch_rows[column], numpy_rows[column], rtol=0, atol=1e-9)
    assert (
        AnalysisConfig(**kwargs, device="cpu").fingerprint()
        == AnalysisConfig(**kwargs).fingerprint()
    )


# -- skipped cells, bugs, resume keys ----------------------------------------------------------


def test_run_records_every_skipped_cell(dump_dir, tmp_path: Path) -> None:
    """With top-k 3 only three tokens are left: n = 4 does not apply to a distinct-draft
    design, and every such (step, temperature, n, design, verifier) cell is written down."""
    path, _, _ = dump_dir
    config = AnalysisConfig(
        n=(2, 4),
        designs=("iid", "without_replacement"),
        verifiers=("rrs", "rrs_without_replacement", "gls"),
        temperatures=(1.0, 0.5),
        top_k=3,
    )
    dump = ob.open_dump(path)
    shard = analyse_shard(dump, 0, config)
    cells = shard.skipped_cells
    assert list(cells.columns) == ["step", "temperature", "n", "design", "verifier", "reason"]
    support = cells[cells.reason == "n larger than the support of q"]
    assert set(support.n) == {4} and set(support.design) == {"without_replacement"}
    assert set(support.verifier) == {"bound", "rrs_without_replacement"}
    assert len(support) == 12 * 2 * 2  # steps × temperatures × (bound, verifier)
    no_trials = cells[cells.reason == "no exact acceptance and no Monte Carlo trials"]
    assert no_trials.empty  # gls is exact at every n now (before: no value at n = 2, 4)
    assert len(cells) + len(shard.rows) == 12 * 2 * 2 * (3 + 2)  # the whole grid
    result = run_analysis(dump, config, tmp_path / "out", progress=False, figures=False)
    assert result.ok and result.cells == sum(SHARDS) * 2 * 2 * 5
    written = pd.read_parquet(tmp_path / "out" / "skipped.parquet")
    assert (
        len(written)
        == len(result.skipped_cells)
        == sum(SHARDS) * 2 * 2 + len(written[written.verifier == "gls"])
    )
    csv = pd.read_csv(tmp_path / "out" / "skipped.csv")
    pd.testing.assert_frame_equal(csv, written, check_dtype=False)
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert record["skipped_cells"] == {
        "cells": result.cells,
        "skipped": len(written),
        "by_reason": written.reason.value_counts().to_dict(),
    }


def _buggy_shard(dump, shard, config, progress=None, *, steps=None):
    """A shard analysis with a bug in it (module level: spawned workers import it)."""
    raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_bug_stops_the_run_with_its_traceback(dump_dir, tmp_path: Path, monkeypatch, jobs):
    """Only a dump error is a bad shard: a bug stops the run, the traceback kept in run.json."""
    path, _, _ = dump_dir
    monkeypatch.setattr(_runner, "analyse_shard", _buggy_shard)
    with pytest.raises(AnalysisError, match="TypeError") as info:
        _run(ob.open_dump(path), tmp_path / "out", jobs=jobs)
    assert "dump" not in str(info.value).replace("not a bad dump", "")
    assert "unsupported operand" in info.value.traceback
    record = json.loads((tmp_path / "out" / "run.json").read_text())
    assert not record["complete"] and "failures" not in record
    assert record["error"]["shard"].startswith("shard-0000")
    assert "TypeError: unsupported operand" in record["error"]["traceback"]
    assert "_buggy_shard" in record["error"]["traceback"]  # where it happened, worker included
    assert not (tmp_path / "out" / "steps.parquet").exists()


def test_a_plain_value_error_is_a_bug_not_a_bad_shard(dump_dir, tmp_path: Path, monkeypatch):
    def nan_in_the_sweep(dump, shard, config, progress=None, *, steps=None):
        raise ValueError("the sweep produced NaN")

    path, _, _ = dump_dir
    monkeypatch.setattr(_runner, "analyse_shard", nan_in_the_sweep)
    with pytest.raises(AnalysisError, match="NaN"):
        _run(ob.open_dump(path), tmp_path / "out")


def test_resume_refuses_another_otbound_version(dump_dir, tmp_path: Path, monkeypatch) -> None:
    path, _, _ = dump_dir
    dump = ob.open_dump(path)
    assert _run(dump, tmp_path / "out").ok
    before = ob.__version__
    monkeypatch.setattr("otbound._version.__version__", "99.0")
    with pytest.raises(ValueError, match=rf"otbound {before}.*this is otbound 99\.0") as info:
        _run(dump, tmp_path / "out", resume=True)
    assert "\n" not in str(info.value)


def test_resume_refuses_a_changed_dump(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    file = tmp_path / "run.npz"
    np.savez(file, target_logits=rng.normal(size=(6, 20)), draft_logits=rng.normal(size=(6, 20)))
    assert _run(ob.open_dump(file), tmp_path / "out").ok
    np.savez(file, target_logits=rng.normal(size=(6, 20)), draft_logits=rng.normal(size=(6, 20)))
    with pytest.raises(ValueError, match="another dump"):
        _run(ob.open_dump(file), tmp_path / "out", resume=True)
    # an otbound dump directory rewritten with other logits
    write_dump(tmp_path / "dump", seed=1)
    assert _run(ob.open_dump(tmp_path / "dump"), tmp_path / "dir").ok
    shutil.rmtree(tmp_path / "dump")
    write_dump(tmp_path / "dump", seed=2)
    with pytest.raises(ValueError, match="another dump"):
        _run(ob.open_dump(tmp_path / "dump"), tmp_path / "dir", resume=True)


def test_the_analysis_rows_are_the_step_compare_would_validate():
    """The softmax rows handed to compare as a trusted Step equal compare's own validation of
    them, bit for bit (the division by the row sums, in place)."""
    from otbound.analysis._shard import _trusted_rows
    from otbound.dumps import prepare_distributions
    from otbound.problem import Step

    rng = np.random.default_rng(9)
    logits = rng.normal(0.0, 3.0, (2, 12, 500)).astype(np.float32)
    for temperature in (1.0, 0.7):
        dist = prepare_distributions(logits[0], logits[1], temperature=temperature, top_p=0.9)
        want = Step.validate(dist.target, dist.draft)
        got = _trusted_rows(dist.target.copy(), dist.draft.copy())
        assert np.array_equal(got.p, want.p) and np.array_equal(got.q, want.q)
