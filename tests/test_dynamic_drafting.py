"""Dynamic drafting (``otbound.tree_decoding._dynamic``, ``_stopping``, ``_budget``).

* lossless at the sequence level, as the static trees' test (tests/test_tree_decoding.py):
  RSD-S beam trees, target-initialised roots and the stopping policies ``confidence``,
  ``confidence-path`` and ``learned`` on the tiny Llama pair, chi-square against the enumerated
  sequence law at 35,000 sequences (power 0.99 against any law at TV 0.02) for the four runs
  that cover beams, target roots and each stopping policy (the learned one fitted on a pilot
  run of its own system); each run is seen to draw and verify drafts below the root's
  children in a substantial share of its calls, and each policy to expand between a fifth
  and four fifths of the nodes it judges there; a walk that reads a beam's children in the
  wrong order is rejected by the same check;
* the dynamic path equals the static one for k-ary trees with a draft root and ``fixed``;
* the beam's conditional Gumbels, its capacity and budget rule, the per-depth acceptance, the
  cost model, and the context-free beam prediction against measured tokens per call;
* the command line: ``--trees beam4:…``, ``--root``, ``--stopping``, ``--budget`` with
  ``--resume``, bad options in one line with exit status 2, and ``train-stopping``.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_tree_decoding import (
    LENGTH,
    LOSSY_SAMPLES,
    PROMPT,
    SAMPLES,
    SIGNIFICANCE,
    _chi_square_p_value,
    _codes,
    _llama,
    _sequence_probabilities,
)

from otbound import get_verifier
from otbound.tree_decoding import (
    StoppingPolicy,
    System,
    capacity_nodes,
    decode_system,
    decode_tree,
    depth_acceptance,
    largest_depth,
    parse_stopping,
    run_tree_decoding,
    speedup,
)
from otbound.tree_decoding._dynamic import conditional_gumbel
from otbound.trees import beam_block_efficiency, kary_tree

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="needs torch and transformers (pip install 'otbound[torch]')",
)
needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None,
    reason="needs scikit-learn (pip install 'otbound[stopping]')",
)


@pytest.fixture(scope="module")
def pair():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    return _llama(4, 0, std=0.2, layers=1, tie=False), _llama(4, 1, std=0.2, layers=1)


def _decode(pair, verifier, system: System, samples: int, seed: int = 0) -> tuple[list, np.ndarray]:
    """``samples`` continuations of :data:`PROMPT` by ``system``: the per-call records and
    each sequence's cell."""
    target, draft = pair
    prompts = [(i, PROMPT) for i in range(samples)]
    records, out = decode_system(
        target, draft, prompts, system, verifier, np.random.default_rng(seed),
        max_new_tokens=LENGTH, temperature=1.0, batch_size=samples,
    )  # fmt: skip
    sequences = [out[i] for i in range(samples)]
    assert all(len(s) == LENGTH for s in sequences)
    return records, _codes(sequences)


def _learned_policy(pair, folder: Path, system: System) -> StoppingPolicy:
    """A logistic decision model fitted on ``system``'s own nodes, expanding about half.

    A pilot run of ``system`` with every node expanded (another seed than the tested run's)
    records the features of the one node each call judges (the target root's child, which the
    walk always accepts) and whether a draft below it was accepted (``accepted >= 2``). The
    model fitted on them gets the threshold, among its predictions on the pilot's nodes, whose
    share of expanded nodes is nearest to one half.
    """
    from sklearn.linear_model import LogisticRegression

    from otbound.tree_decoding import save_decision_model

    records, _ = _decode(pair, get_verifier("rrs_without_replacement"), system, 1_000, seed=1)
    assert all(len(r["node_features"]) == 1 for r in records)
    x = np.array([r["node_features"][0] for r in records])
    y = np.array([r["accepted"] >= 2 for r in records])
    model = LogisticRegression().fit(x, y)
    prob = model.predict_proba(x)[:, 1]
    share = {float(t): float((prob >= t).mean()) for t in np.unique(prob)}
    threshold = min(share, key=lambda t: abs(share[t] - 0.5))
    path = folder / "stop.pkl"
    save_decision_model(path, model, threshold)
    return parse_stopping(f"learned:{path}")


#: (verifier, family, depth, root, stopping): beams, target roots and every policy.
LOSSLESS_SYSTEMS = {
    "beam2": ("rrs_without_replacement", "beam2", 2, "draft", "fixed"),
    "target-conf": ("rrs", "binary", 2, "target", "confidence:0.35"),
    "beam-target-lrn": ("rrs_without_replacement", "beam3", 2, "target", "learned"),
    "conf-path": ("greedy", "binary", 2, "draft", "confidence-path:0.3"),
}
STOPPING_CASES = [case for case, spec in LOSSLESS_SYSTEMS.items() if spec[4] != "fixed"]


@dataclass(frozen=True)
class _Run:
    """One lossless run: its system, per-call records and sequence cells."""

    system: System
    records: list
    codes: np.ndarray

    def calls(self, column: str) -> np.ndarray:
        """A per-call record column."""
        return np.array([r[column] for r in self.records])


@pytest.fixture(scope="module")
def lossless_runs(pair, tmp_path_factory):
    """The run of a :data:`LOSSLESS_SYSTEMS` case at :data:`SAMPLES` sequences, made once."""
    runs: dict[str, _Run] = {}

    def run(case: str) -> _Run:
        if case not in runs:
            name, family, depth, root, stopping = LOSSLESS_SYSTEMS[case]
            if stopping == "learned":
                folder = tmp_path_factory.mktemp("stopping")
                policy = _learned_policy(pair, folder, System(family, depth, root))
            else:
                policy = parse_stopping(stopping)
            system = System(family, depth, root, policy)
            runs[case] = _Run(system, *_decode(pair, get_verifier(name), system, SAMPLES))
        return runs[case]

    return run


def _first_level(system: System) -> int:
    """Nodes every call scores whatever the policy decides: the root's children."""
    return 1 if system.root == "target" else system.width


@needs_torch
@needs_sklearn
@pytest.mark.slow
@pytest.mark.parametrize("case", list(LOSSLESS_SYSTEMS))
def test_dynamic_systems_are_lossless(lossless_runs, pair, case: str) -> None:
    """Drafts below the root's children are drawn and verified in a substantial share of the
    run's calls (every call under ``fixed``, more than a fifth but not all under a stopping
    policy), a draft below depth 1 is accepted in more than a tenth of them, and the
    sequences follow the target's law."""
    run = lossless_runs(case)
    expanded = run.calls("nodes_scored") > _first_level(run.system)
    if run.system.stopping.kind == "fixed":
        assert (run.calls("nodes_scored") == run.system.nodes).all()
    else:  # and not in every call: the policy's stops are checked node by node below
        assert 0.2 < expanded.mean() < 1, f"{case}: expanded in {expanded.mean():.1%} of calls"
    deep = run.calls("accepted") >= 2  # a draft accepted below an expanded node
    assert deep.mean() > 0.1, f"{case}: a draft below depth 1 accepted in {deep.mean():.1%}"
    p_value = _chi_square_p_value(run.codes, _sequence_probabilities(pair[0], 1.0))
    assert p_value > SIGNIFICANCE, f"{case} {run.system.key}: p = {p_value:.2e}"


@needs_torch
@needs_sklearn
@pytest.mark.slow
@pytest.mark.parametrize("case", STOPPING_CASES)
def test_the_stopping_policies_do_stop_and_expand(lossless_runs, case: str) -> None:
    """On the lossless run's own node features, each policy expands between a fifth and four
    fifths of the nodes it judges, and every call's tree follows its decisions: the nodes
    scored are the root's children plus the children of the nodes it expanded (``k`` each in
    a k-ary tree; the ``W`` slots of the next level in a beam, once any node is expanded)."""
    run = lossless_runs(case)
    system = run.system
    judged = [len(r["node_features"]) for r in run.records]
    features = np.array([f for r in run.records for f in r["node_features"]])
    go = system.stopping.expand(features)
    share = go.mean()
    assert 0.2 < share < 0.8, f"{case}: expands {share:.1%} of the nodes"
    decided = np.split(go, np.cumsum(judged)[:-1])
    below = [system.width * (d.any() if system.beam else d.sum()) for d in decided]
    np.testing.assert_array_equal(run.calls("nodes_scored"), _first_level(system) + np.array(below))


class _WrongOrder:
    """Lossy: RRS without replacement on a beam's children sorted by token id, not draw order."""

    design = "without_replacement"
    name = "wrong_order"

    def __init__(self) -> None:
        self.inner = get_verifier("rrs_without_replacement")

    def verify(self, drafts, p, q, rng):
        return self.inner.verify(np.sort(drafts)[::-1], p, q, rng)


@needs_torch
def test_lossless_check_rejects_a_beam_read_in_the_wrong_order(pair) -> None:
    _, codes = _decode(pair, _WrongOrder(), System("beam3", 2), LOSSY_SAMPLES * 2, seed=5)
    p_value = _chi_square_p_value(codes, _sequence_probabilities(pair[0], 1.0))
    assert p_value < 1e-6, f"the lossy beam walk passed: p = {p_value:.2e}"


@needs_torch
@pytest.mark.parametrize("kv_cache", [True, False])
@pytest.mark.parametrize(("name", "family"), [("rrs", "binary"), ("greedy", "ternary")])
def test_static_trees_through_the_dynamic_path_are_unchanged(
    kv_cache: bool, name: str, family: str
) -> None:
    """A complete k-ary tree with a draft root and ``fixed`` stopping decodes, call by call,
    what the static path decodes from the same seed (i.i.d. drafts, and Hu et al.'s greedy set
    of two deterministic drafts and a sampled one); drafts are accepted down to depth 2."""
    target, draft = _llama(40, 0, std=0.3), _llama(40, 1, std=0.3, layers=1)
    prompts = [(0, [3, 4, 5]), (1, [3, 4, 6, 7, 8]), (2, [9])]
    settings = {"max_new_tokens": 10, "batch_size": 3, "kv_cache": kv_cache}
    width = System(family, 2).width
    static = decode_tree(
        target, draft, prompts, kary_tree([width, width]), get_verifier(name),
        np.random.default_rng(3), predict=False, **settings,
    )  # fmt: skip
    dynamic = decode_system(
        target, draft, prompts, System(family, 2), get_verifier(name),
        np.random.default_rng(3), **settings,
    )  # fmt: skip
    assert dynamic[1] == static[1]
    assert [r["tokens"] for r in dynamic[0]] == [r["tokens"] for r in static[0]]
    assert max(r["accepted"] for r in dynamic[0]) == 2


# -- pieces without models ---------------------------------------------------------------------


def test_conditional_gumbel_keeps_order_and_maximum() -> None:
    rng = np.random.default_rng(0)
    with np.errstate(divide="ignore"):
        phi = np.log(np.array([0.1, 0.2, 0.3, 0.4, 0.0])) + rng.gumbel(size=5)
    g = conditional_gumbel(1.5, phi)
    finite = np.isfinite(phi)
    assert np.isneginf(g[~finite]).all()
    assert g[finite].max() == pytest.approx(1.5)
    assert (np.argsort(g[finite]) == np.argsort(phi[finite])).all()
    # the plain formula where it is stable
    z = phi[finite].max()
    plain = -np.log(np.exp(-1.5) - np.exp(-z) + np.exp(-phi[finite]))
    np.testing.assert_allclose(g[finite], plain, rtol=1e-10)


def _truncated_gumbel_cdf(g: np.ndarray, q: float, top: float) -> np.ndarray:
    """``P(G <= g | G <= T)`` of a Gumbel of location ``log q``: ``exp(q (e^{−T} − e^{−g}))``."""
    return np.exp(q * (np.exp(-top) - np.exp(-np.minimum(g, top))))


def _truncated_gumbel_mean(location: float, top: float) -> float:
    """``E[G | G <= T]`` of a Gumbel of location ``μ``: ``T − e^c E_1(c)``, ``c = e^{μ − T}``.

    ``G = μ − log E`` with ``E ~ Exp(1)``; ``G <= T`` iff ``E >= c``, and then ``E = c + E'``
    (memoryless), so the mean is ``μ − log c − E[log(1 + E'/c)] = T − e^c E_1(c)``.
    """
    from scipy import special

    c = float(np.exp(location - top))
    return top - float(np.exp(c) * special.exp1(c))


def test_conditional_gumbel_is_the_truncated_gumbel() -> None:
    """Kool et al.: ``G̃`` has the law of ``log q_x + Gumbel`` conditioned on its maximum
    being ``T``. By simulation: its maximum is ``T``; its argmax is ``x`` with probability
    ``q_x``; and where ``x`` is not the argmax, ``G̃_x`` is a Gumbel of location ``log q_x``
    truncated at ``T`` (CDF ``exp(q_x (e^{−T} − e^{−g}))``, ``g <= T``): a Kolmogorov-Smirnov
    test per token, and the simulated mean within four standard errors of the exact one."""
    from scipy import stats

    rng = np.random.default_rng(1)
    q = np.array([0.5, 0.3, 0.2])
    top = 0.7
    draws = np.array(
        [conditional_gumbel(top, np.log(q) + rng.gumbel(size=3)) for _ in range(40_000)]
    )
    assert np.allclose(draws.max(axis=1), top)
    freq = np.bincount(draws.argmax(axis=1), minlength=3) / len(draws)
    np.testing.assert_allclose(freq, q, atol=0.01)
    for x, qx in enumerate(q):
        below = draws[draws.argmax(axis=1) != x, x]
        assert stats.kstest(below, _truncated_gumbel_cdf, (qx, top)).pvalue > 1e-3, f"token {x}"
        exact = _truncated_gumbel_mean(float(np.log(qx)), top)
        error = below.std() / np.sqrt(below.size)
        assert abs(below.mean() - exact) < 4 * error, f"token {x}: {below.mean()} vs {exact}"


def test_capacity_and_budget_rule() -> None:
    assert capacity_nodes("binary", 3) == 14
    assert capacity_nodes("beam4", 5) == 20
    assert capacity_nodes("beam4", 5, "target") == 17
    assert capacity_nodes("chain", 4, "target") == 4
    assert largest_depth("binary", 16) == 3  # 14 nodes
    assert largest_depth("beam4", 16) == 4
    assert largest_depth("beam4", 3) == 0
    assert largest_depth("beam4", 3, "target") == 1
    with pytest.raises(ValueError, match="beam width of at least 1"):
        System("beam0", 2)


def test_a_deep_beam_enumerates_no_tree() -> None:
    """A beam of budget 64 (depth 16) lays out 64 slots; its ``4^16`` paths are never listed
    (they once were, for an unused k-ary subtree: 24 GB and a killed notebook)."""
    system = System("beam4", 16)
    assert system.nodes == 64
    assert system.subtree_paths() == [] and system.static_paths() is None
    assert System("binary", 2).subtree_paths() == [[0], [1], [0, 0], [0, 1], [1, 0], [1, 1]]


def test_depth_acceptance_and_speedup() -> None:
    accepted = np.array([0, 1, 2, 2, 1])
    bonus = np.array([False, False, True, False, True])
    rates = depth_acceptance(accepted, bonus, 3)
    assert rates[0] == pytest.approx(4 / 5)
    assert rates[1] == pytest.approx(2 / 3)  # one call stopped at depth 1 with a bonus
    assert rates[2] == pytest.approx(0 / 1)
    assert speedup(3.0, 1.0, 2.0, 1.0, 0.5) == pytest.approx(1.5)
    assert speedup(3.0, 2.0, 0.0, 1.0, 0.5) == pytest.approx(1.5)


def test_beam_prediction_of_width_one_is_the_chain() -> None:
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    beta = np.minimum(p, q).sum()
    est = beam_block_efficiency(
        p, q, 1, 3, 20_000, 0, verifier=get_verifier("rrs_without_replacement")
    )
    assert est == pytest.approx((1 - beta**4) / (1 - beta), abs=0.03)


def test_bad_stopping_options_are_named(tmp_path) -> None:
    for bad, message in (
        ("sometimes", "cannot read 'sometimes'"),
        ("confidence:2", "threshold in \\[0, 1\\]"),
        ("confidence:x", "needs a number"),
        (f"learned:{tmp_path / 'none.pkl'}", "no decision model"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_stopping(bad)
    junk = tmp_path / "junk.pkl"
    junk.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a decision model"):
        parse_stopping(f"learned:{junk}")


# -- context-free pair: the beam's measured tokens per call against its prediction ------------


@needs_torch
def test_context_free_beam_matches_its_prediction() -> None:
    from test_tree_decoding import _context_free, _plain_logits, _softmax

    vocab = 8
    target, draft = _context_free(vocab, 0, scale=0.2, noise=0.2)
    p = _softmax(_plain_logits(target, [0]))
    q = _softmax(_plain_logits(draft, [0]))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, vocab, size=4).tolist() for _ in range(24)]
    result = run_tree_decoding(
        target, draft, prompts, verifiers=["rrs_without_replacement"], trees="beam2:2,beam3:3",
        max_new_tokens=20, batch_size=24, prediction_trials=300,
    )  # fmt: skip
    for row in result.summary.itertuples():
        family, depth = row.family, int(row.depth)
        exact = beam_block_efficiency(
            p,
            q,
            int(family[4:]),
            depth,
            20_000,
            1,
            verifier=get_verifier("rrs_without_replacement"),
        )
        assert row.ci_low <= exact <= row.ci_high, f"{row.tree}: {exact:.3f} not in interval"
        assert row.predicted == pytest.approx(exact, abs=0.1)
        assert row.target_tokens_per_call <= row.nodes


# -- budgets and the summary -------------------------------------------------------------------


@needs_torch
def test_budget_run_sizes_trees_and_fills_the_columns() -> None:
    models = (_llama(40, 0, std=0.3), _llama(40, 1, std=0.3, layers=1))
    result = run_tree_decoding(
        *models, [[3, 4, 5], [3, 4, 6]], verifiers=["rrs_without_replacement", "kseq"],
        trees="binary,beam2", budgets=[3, 6], root=("draft", "target"),
        stopping="fixed,confidence:0.2", max_new_tokens=6, prediction_trials=50,
    )  # fmt: skip
    s = result.summary
    ran = s[s["applicable"]]
    assert (ran["nodes"] <= ran["budget"]).all()
    assert (ran["target_tokens_per_call"] <= ran["nodes"] + 1e-12).all()
    fixed = ran[ran["stopping"] == "fixed"]
    np.testing.assert_allclose(fixed["target_tokens_per_call"], fixed["nodes"])
    assert set(ran["tree"]) >= {"binary-1", "binary-2", "beam2-1", "beam2-3"}
    assert ran["predicted"].notna().eq(ran["stopping"] == "fixed").all()
    assert ran.loc[ran["stopping"] != "fixed", "note"].str.contains("no prediction").all()
    assert ((ran["mcsd_acceptance"] >= 0) & (ran["mcsd_acceptance"] <= 1)).all()
    assert (ran["accept_d1"].between(0, 1)).all()
    na = s[~s["applicable"]]
    assert set(na["verifier"]) == {"kseq"} and set(na["family"]) == {"beam2"}
    steps = result.steps
    one = steps[(steps["tree"] == "binary-2") & (steps["root"] == "draft")]
    assert (one["draft_calls"] <= 2).all() and (one["target_passes"] == 1).all()
    with pytest.raises(ValueError, match="budget must be a whole number of nodes >= 1"):
        run_tree_decoding(*models, [[3, 4]], trees="binary", budgets=[0])


# -- the command line --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    root = tmp_path_factory.mktemp("dyn-models")
    paths = {"target": root / "target", "draft": root / "draft"}
    _llama(40, 0, std=0.3).save_pretrained(paths["target"])
    _llama(40, 1, std=0.3, layers=1).save_pretrained(paths["draft"])
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": [3, 4, 5 + i]}) for i in range(3)))
    paths["prompts"] = prompts
    return paths


def _args(saved_pair, out: Path, *extra: str) -> list[str]:
    return [
        "--target", str(saved_pair["target"]), "--draft", str(saved_pair["draft"]),
        "--prompts", str(saved_pair["prompts"]), "--max-prompts", "2", "--max-new-tokens", "4",
        "--prediction-trials", "50", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


@needs_torch
@needs_sklearn
def test_cli_budget_run_resumes_and_trains_a_stopping_model(saved_pair, tmp_path, monkeypatch):
    from otbound.cli.simulate_trees import main
    from otbound.cli.train_stopping import main as train

    run = ["--verifiers", "rrs_without_replacement,rrs", "--trees", "beam2,binary",
           "--budget", "4,6", "--root", "draft,target"]  # fmt: skip
    whole = tmp_path / "whole"
    assert main(_args(saved_pair, whole, *run)) == 0
    summary = pd.read_csv(whole / "tree_summary.csv")
    for column in ("budget", "target_tokens_per_call", "draft_calls_per_call",
                   "tokens_per_call", "mcsd_acceptance", "accept_d1", "speedup"):  # fmt: skip
        assert column in summary.columns
    assert (whole / "tokens_per_call_vs_budget.png").stat().st_size > 10_000
    # interrupted after two systems, then resumed: the tables of the whole run
    import otbound.tree_decoding._run as run_module

    calls: list[int] = []
    original = run_module.decode_system

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(run_module, "decode_system", counted)
    out = tmp_path / "out"
    assert main(_args(saved_pair, out, *run)) == 130
    calls.clear()
    monkeypatch.setattr(
        run_module, "decode_system", lambda *a, **k: (calls.append(1), original(*a, **k))[1]
    )
    assert main(_args(saved_pair, out, *run, "--resume")) == 0
    timing = ["draft_seconds", "target_seconds"]
    steps = [pd.read_parquet(d / "tree_steps.parquet").drop(columns=timing) for d in (out, whole)]
    pd.testing.assert_frame_equal(*steps)
    assert len(calls) == len(summary[summary["applicable"]]) - 2
    # a decision model from the run's nodes, then a run with it
    model = tmp_path / "stop.pkl"
    assert train([str(whole / "tree_steps.parquet"), "--out", str(model), "--quiet"]) == 0
    assert json.loads(model.with_suffix(".json").read_text())["held_out"]["log_loss"] > 0
    learned = tmp_path / "learned"
    args = ["--verifiers", "rrs", "--trees", "binary:2", "--stopping", f"fixed,learned:{model}"]
    assert main(_args(saved_pair, learned, *args)) == 0
    summary = pd.read_csv(learned / "tree_summary.csv")
    assert summary["stopping"].str.startswith("learned:").sum() == 1


@needs_torch
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trees", "beam0:2"], "beam width of at least 1"),
        (["--trees", "binary", "--budget", "0"], "--budget"),
        (["--trees", "binary", "--budget", "4,x"], "--budget"),
        (["--stopping", "learned:/no/such/model.pkl"], "no decision model"),
        (["--stopping", "confidence:3"], "threshold in [0, 1]"),
        (["--root", "both"], "--root"),
    ],
)
def test_cli_bad_dynamic_options_are_one_line(saved_pair, tmp_path, capsys, extra, message):
    from otbound.cli.simulate_trees import main

    try:
        status = main(_args(saved_pair, tmp_path / "o", *extra))
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("simulate_trees: error:") and message in err, err


@needs_torch
@needs_sklearn
def test_train_stopping_refuses_a_table_without_nodes(saved_pair, tmp_path, capsys) -> None:
    from otbound.cli.simulate_trees import main
    from otbound.cli.train_stopping import main as train

    static = tmp_path / "static"
    assert main(_args(saved_pair, static, "--verifiers", "rrs", "--trees", "binary:1")) == 0
    capsys.readouterr()
    assert train([str(static / "tree_steps.parquet"), "--out", str(tmp_path / "m.pkl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no per-node records" in err, err
