"""The notebooks in ``notebooks/`` run top to bottom without an error.

Each notebook is executed in a fresh Jupyter kernel (``nbclient``), with smaller sizes than its
defaults: the values in :data:`SMALL` are put in a cell inserted right after the notebook's cell
tagged ``parameters``. The dump is the sample in ``data/sample`` when it exists, else a stand-in
built with ``dump_factory`` (``OTBOUND_SAMPLE`` tells the notebooks where it is). A cell that
raises fails the test (``CellExecutionError`` names the cell and shows the traceback).

A notebook must also show the right numbers, not only print its sentences: after the last cell
the test pickles what the notebook computed (:data:`EXPORTS`) and checks it (:data:`CHECKS`)
against the library and against each other: ``α*`` equal to :func:`otbound.optimal_acceptance`
on the same rows to 1e-12, never falling as ``n`` grows, above every lossless verifier's exact
acceptance; the printed lines rebuilt from the per-step table; tokens per call equal to the mean
over the calls, the prediction at most the bound, the prediction from the dump equal to its
formula.

Skipped when the notebooks extra is not installed (``pip install -e ".[notebooks]"``).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dump_factory import write_dump

import otbound as ob

nbformat = pytest.importorskip(
    "nbformat", reason='executing the notebooks needs pip install -e ".[notebooks]"'
)
nbclient = pytest.importorskip(
    "nbclient", reason='executing the notebooks needs pip install -e ".[notebooks]"'
)
pytest.importorskip(
    "ipykernel", reason='executing the notebooks needs pip install -e ".[notebooks]"'
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
SAMPLE = ROOT / "data" / "sample"

#: Sizes for the test run, per notebook (names must be set in its parameters cell).
SMALL: dict[str, dict[str, object]] = {
    "01_quickstart": {"MAX_STEPS": 24, "N_DRAFTS": (2, 4), "MC_TRIALS": 50},
    "02_validate_a_new_verifier": {
        "TRIALS": 50_000,
        "RHO_GRID": 6,
        "COMPARE_STEPS": 8,
        "N_DRAFTS": (2, 4),
        "LOSSY_TRIALS": 20_000,
    },
    "03_anatomy_of_the_bound": {"N_MAX": 4},
    "04_temperature_and_drafts": {
        "MAX_STEPS": 12,
        "TEMPERATURES": (0.5, 1.0),
        "N_DRAFTS": (2, 4),
        "MC_TRIALS": 50,
    },
    "05_draft_trees": {
        "MAX_PROMPTS": 2,
        "MAX_NEW_TOKENS": 8,
        "TREES": "binary:1-2,ternary:1",
        "PREDICTION_TRIALS": 100,
        "MAX_STEPS": 16,
    },
    "06_dynamic_drafting": {
        "MAX_PROMPTS": 2,
        "MAX_NEW_TOKENS": 6,
        "BUDGETS": (4, 8),
        "VERIFIERS": ("rrs_without_replacement", "kseq"),
        "PREDICTION_TRIALS": 100,
    },
    "07_sequence_level_verification": {
        "SURROGATE_WINDOWS": 2,
        "MAX_PROMPTS": 2,
        "MAX_NEW_TOKENS": 8,
        "TREES": "chain:1-2,binary:1,paths2:2",
        "PREDICTION_TRIALS": 100,
    },
    # logs the real pair when it is here; the suite runs it without (tests/test_real_pair.py
    # runs it with the pair, opt-in)
    "08_real_pair": {"MAX_PROMPTS": 2, "MAX_NEW_TOKENS": 8, "MAX_STEPS": 16, "N_DRAFTS": (2, 4)},
    "09_audit_a_rule": {"MAX_STEPS": 4, "TRIALS": 20_000},
    "10_optimal_verifier": {
        "MAX_STEPS": 24,
        "N_DRAFTS": (2, 4),
        "TRIALS": 20_000,
        "MAX_PROMPTS": 2,
        "MAX_NEW_TOKENS": 6,
        "TREES": "chain:2,binary:1",
    },
}

#: Notebooks that need the real pair (``scripts/get_real_pair.py``); the suite runs them with the
#: pair hidden and checks that they say so and stop, without an error.
NEEDS_REAL_PAIR = ("08_real_pair",)

#: Text a notebook's outputs must contain (labels of the facts it shows; the values themselves
#: are checked by :data:`CHECKS`).
EXPECTED: dict[str, tuple[str, ...]] = {
    # α* per design and n (by hand, then on the dump), the run's files, the verifiers against it
    "01_quickstart": ("0.9929", "files written: steps.parquet", "α* from", "best verifier"),
    # the lossless check passes a lossless verifier and fails the duplicate-skipping RRS
    "02_validate_a_new_verifier": ("passed at significance", "FAILED at significance"),
    # sequential vs conditional Poisson: their set laws and bounds differ
    "03_anatomy_of_the_bound": ("0.5143", "0.4839", "0.99286", "1.00000"),
    # Sun et al.'s example in ninths, two i.i.d. paths in 81sts, the surrogate's gap lines
    "07_sequence_level_verification": (
        "= 10/9",
        "= 11/9",
        "= 12/9",
        "= 131/81",
        "past the token-level bound",
        "gap closed",
    ),
}

#: What the test reads from a notebook's namespace after it ran: name -> expression there.
EXPORTS: dict[str, dict[str, str]] = {
    "01_quickstart": {"dump": "str(DUMP)", "steps": "steps", "summary": "summary"},
    "02_validate_a_new_verifier": {
        "p": "p",
        "q": "q",
        "n": "N",
        "passed": "check.passed",
        "mine": "mine.acceptance(p, q, N)",
        "alpha_star": "alpha_star",
        "lossy": "{name: c.passed for name, c in lossy.items()}",
        "rows": "rows",
        "P": "P",
        "Q": "Q",
    },
    "03_anatomy_of_the_bound": {
        "p": "p",
        "q": "q",
        "n": "N",
        "primal": "primal.acceptance",
        "dual": "dual.acceptance",
        "H": "H",
        "alpha": "alpha",
        "p50": "p50",
        "qd": "qd",
        "star": "star",
    },
    "04_temperature_and_drafts": {
        "dump": "str(DUMP)",
        "steps": "steps",
        "summary": "summary",
        "change": "{what: delta.to_dict() for what, delta in change.items()}",
    },
    "05_draft_trees": {
        "steps": "result.steps",
        "summary": "summary",
        "side": "side",
        "table": "table",
        "branching": "branching",
    },
    "06_dynamic_drafting": {
        "steps": "result.steps",
        "summary": "summary",
        "budgets": "BUDGETS",
    },
    "07_sequence_level_verification": {
        "dump": "str(DUMP.resolve())",
        "tokens": "SURROGATE_TOKENS",
        "trees": "SURROGATE_TREES",
        "sun": "sun",
        "sun_paths": "sun_paths",
        "models": "models",
        "exact": "exact",
        "surrogate": "surrogate",
        "steps": "result.steps",
        "summary": "summary",
        "real": "real",
    },
    "08_real_pair": {"run": "RUN", "summary": "summary", "facts": "facts"},
    "09_audit_a_rule": {
        "dump": "str(DUMP)",
        "settings": "SETTINGS",
        "trials": "TRIALS",
        "results": "{name: (r.summary(), r.steps, r.message) for name, r in results.items()}",
        "table": "table",
        "exact": "exact.summary()",
        "by_hand": "by_hand",
        "toy": "(p_toy, q_toy)",
    },
    "10_optimal_verifier": {
        "p": "p",
        "q": "q",
        "n": "N",
        "acceptance": "acceptance",
        "alpha_star": "alpha_star",
        "passed": "check.passed",
        "set_rule": "(set_rule.acceptance(), set_rule.gap, set_star, set_check.passed)",
        "table": "table",
        "gaps": "gaps",
        "steps": "result.steps",
        "mine": "mine",
    },
}


@pytest.fixture(scope="module")
def sample_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``data/sample`` if it is there, else a small stand-in dump (two shards, V = 2000)."""
    if (SAMPLE / "manifest.json").is_file():
        return SAMPLE
    path = tmp_path_factory.mktemp("notebook-sample") / "sample"
    write_dump(path, shards=(64, 64), vocab=2000)
    return path


def _parameters_index(nb) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            return index
    raise AssertionError("no code cell tagged 'parameters'")


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def _export_cell(stem: str, path: Path) -> str:
    """A cell that pickles :data:`EXPORTS` ``[stem]``, evaluated in the notebook's namespace."""
    items = ", ".join(f"{name!r}: {expr}" for name, expr in EXPORTS[stem].items())
    return (
        "import pickle as _pickle\n"
        f"with open({str(path)!r}, 'wb') as _file:\n"
        f"    _pickle.dump({{{items}}}, _file)"
    )


def _check_steps_table(steps: pd.DataFrame, dump: str) -> None:
    """A ``steps.parquet`` of a run: α* is the library's on the dump's rows, grows with n, and
    bounds every exact verifier's acceptance at every step."""
    bound = steps[steps["verifier"] == "bound"]
    # α* at every step of the first shard equals optimal_acceptance on the same rows
    shard = ob.open_dump(dump).read_shard(0)
    where = {int(s): i for i, s in enumerate(shard.distributions(temperature=1.0).step)}
    inside = bound[bound["step"].isin(list(where))]
    for (t, design, n), rows in inside.groupby(["temperature", "design", "n"]):
        dist = shard.distributions(temperature=float(t))
        i = [where[int(s)] for s in rows["step"]]
        expected = ob.optimal_acceptance(dist.target[i], dist.draft[i], n=int(n), design=design)
        np.testing.assert_allclose(rows["alpha_star"], expected, rtol=0, atol=1e-12)
    assert inside["step"].nunique() >= 4
    # α* cannot fall when a draft is added, for any design
    keys = ["step", "temperature", "design"]
    for _, part in bound.sort_values("n").groupby(keys):
        assert np.all(np.diff(part["alpha_star"].to_numpy()) >= -1e-12), part
    # no lossless verifier beats its design's bound (exact rows: no Monte Carlo noise)
    exact = steps[(steps["verifier"] != "bound") & steps["exact"]]
    assert len(exact) > 0
    over = exact[exact["acceptance"] > exact["alpha_star"] + 1e-9]
    assert over.empty, over
    star = bound.set_index([*keys, "n"])["alpha_star"]
    joined = exact.join(star.rename("bound_row"), on=[*keys, "n"])
    assert np.allclose(joined["alpha_star"], joined["bound_row"], rtol=0, atol=1e-12)


def _check_01(facts: dict, text: str) -> None:
    steps, summary = facts["steps"], facts["summary"]
    _check_steps_table(steps, facts["dump"])
    # the headline line per n: the best verifier and the spread of α*, from the steps table
    for n, part in steps.groupby("n"):
        bound = part[part["verifier"] == "bound"].groupby("design")["alpha_star"].mean()
        mean = part[part["verifier"] != "bound"].groupby("verifier")["acceptance"].mean()
        assert np.allclose(
            summary[(summary["n"] == n) & (summary["verifier"] == "bound")]
            .set_index("design")["alpha_star"]
            .sort_index(),
            bound.sort_index(),
            rtol=0,
            atol=1e-12,
        )
        line = (
            f"n = {n}: α* from {bound.min():.3f} ({bound.idxmin()}) to {bound.max():.3f} "
            f"({bound.idxmax()}); best verifier {mean.idxmax()} at {mean.max():.3f}"
        )
        assert line in text, f"no {line!r} in the outputs"


def _check_02(facts: dict, text: str) -> None:
    p, q, n = facts["p"], facts["q"], facts["n"]
    assert facts["passed"], "the lossless fixed-ρ K-SEQ failed the check"
    assert facts["alpha_star"] == pytest.approx(ob.optimal_acceptance(p, q, n=n), abs=1e-12)
    assert facts["mine"] <= facts["alpha_star"] + 1e-12
    lossy = facts["lossy"]
    assert lossy["rrs (shipped)"] is True
    assert [name for name, ok in lossy.items() if not ok] == ["rrs, skipping duplicates"]
    rows = facts["rows"]
    assert (rows["acceptance"] <= rows["alpha_star"] + 1e-9).all()
    P, Q = facts["P"], facts["Q"]
    for row in rows[rows["verifier"] == "kseq"].head(6).itertuples():
        i = int(np.flatnonzero(rows["step"].unique() == row.step)[0])
        assert row.alpha_star == pytest.approx(
            ob.optimal_acceptance(P[i], Q[i], n=int(row.n)), abs=1e-12
        )


def _check_03(facts: dict, text: str) -> None:
    p, q, n = facts["p"], facts["q"], facts["n"]
    star = ob.optimal_acceptance(p, q, n=n)
    assert facts["primal"] == pytest.approx(star, abs=1e-9)
    assert facts["dual"] == pytest.approx(star, abs=1e-9)
    H = facts["H"]
    assert 1 + p[H].sum() - q[H].sum() ** n == pytest.approx(star, abs=1e-9)
    alpha = facts["alpha"]
    for design in alpha.columns:
        for k in alpha.index:
            expected = ob.optimal_acceptance(facts["p50"], facts["qd"], n=int(k), design=design)
            assert alpha.loc[k, design] == pytest.approx(expected, abs=1e-12)
    assert (alpha.diff().iloc[1:] >= -1e-12).all().all(), "α* falls with n"
    assert facts["star"]["without_replacement"] == pytest.approx(0.992857, abs=1e-6)
    assert facts["star"]["conditional_poisson"] == pytest.approx(1.0, abs=1e-9)


def _check_04(facts: dict, text: str) -> None:
    steps = facts["steps"]
    _check_steps_table(steps, facts["dump"])
    # the change from the coldest to the hottest temperature at the largest n, from the steps
    top = steps[steps["n"] == steps["n"].max()]
    cold, hot = top["temperature"].min(), top["temperature"].max()
    change = {}
    for what, rows, by, column in (
        ("α*", top[top["verifier"] == "bound"], "design", "alpha_star"),
        ("gap", top[top["verifier"] != "bound"], "verifier", "gap"),
    ):
        mean = rows.groupby(["temperature", by])[column].mean()
        change[what] = (mean.loc[hot] - mean.loc[cold]).sort_index()
        shown = pd.Series(facts["change"][what]).sort_index()
        assert np.allclose(shown, change[what], rtol=0, atol=1e-12), (what, shown, change[what])
        for verb, picked in (("rises", change[what] > 0.01), ("falls", change[what] < -0.01)):
            names = ", ".join(change[what].index[picked]) or "none"
            line = f"  {what} {verb} by more than 0.01 for {names}"
            assert line in text, f"no {line!r} in the outputs"


def _check_05(facts: dict, text: str) -> None:
    steps, summary, side = facts["steps"], facts["summary"], facts["side"]
    assert len(steps) > 0
    # every call appends its accepted drafts and one more token, at most depth + 1 in all
    assert (steps["tokens"] >= 1).all() and (steps["tokens"] <= steps["depth"] + 1).all()
    assert (steps["accepted"] <= steps["depth"]).all()
    # a lossless verifier does not beat its design's α* at the root context (where its
    # acceptance is exact: RRS without replacement is Monte Carlo above two drafts)
    monte_carlo = (steps["verifier"] == "rrs_without_replacement") & (
        steps["branching"].map(max) > 2
    )
    exact = steps[~monte_carlo]
    assert (exact["root_acceptance"] <= exact["root_alpha_star"] + 1e-9).all()
    ran = summary[summary["applicable"]]
    assert len(ran) == steps.groupby(["verifier", "tree"]).ngroups
    for row in ran.itertuples():
        calls = steps[(steps["verifier"] == row.verifier) & (steps["tree"] == row.tree)]
        assert row.calls == len(calls)
        assert row.tokens_per_call == pytest.approx(calls["tokens"].mean(), abs=1e-12)
        assert row.ci_low <= row.tokens_per_call <= row.ci_high
        assert row.predicted <= row.token_level_bound + 1e-9, row
        if row.verifier in ("greedy", "spechub"):  # optimal for their design at every node
            assert row.predicted == pytest.approx(row.token_level_bound, abs=1e-9), row
    # the pairs of verifiers on one tree that the paired interval separates, from the calls
    separated = total = 0
    for _, part in steps.groupby("tree"):
        names = list(dict.fromkeys(part["verifier"]))
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                runs = (part[part["verifier"] == a], part[part["verifier"] == b])
                separated += ob.paired_difference(*runs).excludes_zero
                total += 1
    line = f"{separated} of {total} pairs of verifiers on one tree separated by the paired 95%"
    assert line in text, f"no {line!r} in the outputs"
    # the prediction from the dump: 1 + Σ_d Π_{i ≤ d} ᾱ(b_i), ᾱ(b) the mean acceptance at n = b
    table, branching = facts["table"], facts["branching"]
    for row in side[side["from_dump"].notna()].itertuples():
        rows = table[table["verifier"] == row.verifier]
        mean = rows.groupby("n")[["acceptance", "alpha_star"]].mean()
        factors = branching[row.tree]
        for column, value in (("acceptance", row.from_dump), ("alpha_star", row.bound_from_dump)):
            expected = 1 + np.cumprod([mean.loc[b, column] for b in factors]).sum()
            assert value == pytest.approx(expected, abs=1e-12), (row, column)
        assert row.from_dump <= row.bound_from_dump + 1e-12


def _check_07(facts: dict, text: str) -> None:
    from otbound import sequence as seq
    from otbound.tree_decoding import SEQUENCE_TREE_VERIFIERS, TreeLayout
    from otbound.trees import kary_tree

    # Sun et al.'s example: enumerations and closed forms to 1e-12, the LPs (HiGHS) to 1e-9
    sun = facts["sun"]
    ninths = {
        "token verification": 10,
        "token verification, Σ_k Π α_d": 10,
        "block verification": 11,
        "traversal verification": 11,
        "multi-path verification, K = 1": 11,
        "token-level bound": 10,
        "coupling bound, Σ_k (1 − TV(P_1:k, Q_1:k))": 12,
    }
    for name, k in ninths.items():
        assert sun[name] == pytest.approx(k / 9, abs=1e-12), name
    assert sun["verification bound (LP)"] == pytest.approx(11 / 9, abs=1e-9)
    assert sun["coupling bound (LP)"] == pytest.approx(12 / 9, abs=1e-9)
    # two i.i.d. paths of two tokens: the token level at the root (n = 2), then 1 − TV = 2/3
    paths, p, q = facts["sun_paths"], [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    for name, verifier in (("RRS (token-level)", "rrs"), ("K-SEQ (token-level)", "kseq")):
        expected = ob.get_verifier(verifier).acceptance(p, q, 2) * (1 + 2 / 3)
        assert paths[name] == pytest.approx(expected, abs=1e-12), name
        assert paths[name] <= paths["token-level bound (i.i.d.)"] + 1e-12
    assert paths["token-level bound (i.i.d.)"] == pytest.approx(120 / 81, abs=1e-12)
    multipath = paths["multi-path verification, K = 2"]
    assert multipath == pytest.approx(131 / 81, abs=1e-12)
    assert multipath > paths["token-level bound (i.i.d.)"] + 1e-3
    verification = paths["verification bound (LP, i.i.d. paths)"]
    assert multipath <= verification + 1e-9
    assert verification <= paths["coupling bound (LP, i.i.d. paths)"] + 1e-9

    # the surrogate: each window's laws are consecutive dump steps of one prompt, top-k tokens
    trees, models, exact, k = facts["trees"], facts["models"], facts["exact"], facts["tokens"]
    shard = ob.open_dump(facts["dump"]).read_shard(0)
    dist = shard.distributions(temperature=1.0)
    prompt_of = shard.metadata.set_index("step")["prompt_id"]
    where = {int(s): i for i, s in enumerate(dist.step)}
    depth = max(len(path) for tree in trees.values() for path in tree)
    assert len(models) >= 2 and set(exact["window"]) == set(models)
    for start, (p_rows, q_rows) in models.items():
        assert p_rows.shape == q_rows.shape == (depth + 1, k)
        for d in range(depth + 1):
            i = where[start] + d
            assert int(dist.step[i]) == start + d and prompt_of[start + d] == prompt_of[start]
            p_d, q_d = dist.target[i], dist.draft[i]
            top = np.sort(np.argsort(-(p_d + q_d), kind="stable")[:k])
            assert np.allclose(p_rows[d], p_d[top] / p_d[top].sum(), rtol=0, atol=1e-15)
            assert np.allclose(q_rows[d], q_d[top] / q_d[top].sum(), rtol=0, atol=1e-15)
    # the first window again, from the library: enumerations to 1e-12, LPs to 1e-9
    first = next(iter(models))
    p_rows, q_rows = models[first]
    for row in exact[exact["window"] == first].itertuples():
        tree = trees[row.tree]
        drafting = "iid" if row.drafting == "chain" else row.drafting
        if row.kind in ("sequence-level", "check"):
            expected, tol = seq.tree_acceptance(p_rows, q_rows, tree, verifier=row.name), 1e-12
        elif row.name == "verification bound":
            bound = seq.optimal_verification_acceptance(p_rows, q_rows, tree, drafting)
            expected, tol = bound.acceptance, 1e-9
        elif row.name in ("coupling bound", "per-depth sum"):
            bound = seq.optimal_tree_acceptance(p_rows, q_rows, tree, drafting)
            expected = bound.acceptance if row.name == "coupling bound" else bound.closed_form
            tol = 1e-9
        else:
            continue  # token level: below, from each verifier's exact acceptance
        assert row.accepted == pytest.approx(expected, abs=tol), row
    for (window, name, drafting), part in exact.groupby(["window", "tree", "drafting"]):
        keys = zip(part["kind"], part["name"], strict=True)
        value = dict(zip(keys, part["accepted"], strict=True))
        bounds = {n: v for (kind, n), v in value.items() if kind == "bound"}
        # every verifier, sequence- or token-level, below the verification bound of its drafting
        below = part[part["kind"] != "bound"]["accepted"]
        assert (below <= bounds["verification bound"] + 1e-9).all(), part
        assert bounds["verification bound"] <= bounds["coupling bound"] + 1e-9
        assert bounds["coupling bound"] <= bounds["per-depth sum"] + 1e-9
        token = part[part["kind"] == "token-level"]
        assert len(token) > 0 and (token["accepted"] <= bounds["token-level bound"] + 1e-12).all()
        p_rows, q_rows = models[window]
        layout = TreeLayout.from_paths(trees[name])
        if [list(x) for x in layout.paths] == kary_tree(list(layout.branching)):
            # complete trees: E[τ] = Σ_d Π_{i<d} α(b_i), α the verifier's exact acceptance
            design = "iid" if drafting == "chain" else drafting
            factors = list(enumerate(layout.branching))
            star = [
                ob.optimal_acceptance(p_rows[i], q_rows[i], n=b, design=design) for i, b in factors
            ]
            assert bounds["token-level bound"] == pytest.approx(np.cumprod(star).sum(), abs=1e-12)
            for row in token.itertuples():
                rates = [
                    ob.get_verifier(row.name).acceptance(p_rows[i], q_rows[i], b)
                    for i, b in factors
                ]
                assert row.accepted == pytest.approx(np.cumprod(rates).sum(), abs=1e-12), row
        if drafting == "chain":  # token verification is at the token-level bound, block beyond
            gamma = len(trees[name])
            closed = seq.token_acceptance(p_rows, q_rows, gamma)
            assert np.allclose(token["accepted"], closed, rtol=0, atol=1e-12)
            assert value[("check", "token")] == pytest.approx(closed, abs=1e-12)
            block = value[("sequence-level", "block")]
            assert block == pytest.approx(bounds["verification bound"], abs=1e-7)
            for other in ("traversal", "multipath"):
                assert value[("sequence-level", other)] == pytest.approx(block, abs=1e-9)
            assert bounds["coupling bound"] == pytest.approx(bounds["per-depth sum"], abs=1e-9)
        elif drafting == "without_replacement":  # RRS w/o replacement, two implementations
            rrs = value[("token-level", "rrs_without_replacement")]
            assert value[("check", "token")] == pytest.approx(rrs, abs=1e-9)
    # the gap table and its lines, from the exact values
    mean = exact.groupby(["tree", "drafting", "kind", "name"])["accepted"].mean()
    surrogate = facts["surrogate"]
    assert len(surrogate) == exact.groupby(["tree", "drafting"]).ngroups
    for row in surrogate.itertuples():
        part = mean.loc[(row.tree, row.drafting)]
        token, sequence, bound = part["token-level"], part["sequence-level"], part["bound"]
        # the best by name (ties on chains: every token-level verifier is speculative sampling)
        assert token[row.best_token_level] == pytest.approx(token.max(), abs=1e-12)
        assert sequence[row.best_sequence_level] == pytest.approx(sequence.max(), abs=1e-12)
        for got, expected in (
            (row.token_level, token.max()),
            (row.sequence_level, sequence.max()),
            (row.token_level_bound, bound["token-level bound"]),
            (row.verification_bound, bound["verification bound"]),
            (row.coupling_bound, bound["coupling bound"]),
        ):
            assert got == pytest.approx(expected, abs=1e-12), row
        assert row.sequence_level <= row.verification_bound + 1e-9
        gap = bound["token-level bound"] - token.max()
        head = (
            f"{row.tree} ({row.drafting}): best token-level {row.best_token_level} "
            f"{row.token_level:.4f}, token-level bound {row.token_level_bound:.4f}, "
            f"best sequence-level {row.best_sequence_level} {row.sequence_level:.4f}"
        )
        if gap > 1e-9:
            share = (sequence.max() - token.max()) / gap
            assert row.closes_token_gap == pytest.approx(share, abs=1e-9)
            line = f"{head}: gap closed {share:.0%}"
        else:
            assert np.isnan(row.closes_token_gap)
            line = f"{head}: no token-level gap"
        assert line in text, f"no {line!r} in the outputs"

    # real tree decoding: tokens per call, intervals, what applies where
    steps, summary, real = facts["steps"], facts["summary"], facts["real"]
    sequence_level = list(SEQUENCE_TREE_VERIFIERS)
    assert len(steps) > 0
    assert (steps["tokens"] >= 1).all() and (steps["tokens"] <= steps["depth"] + 1).all()
    assert (steps["accepted"] <= steps["depth"]).all()
    token_steps = steps[~steps["verifier"].isin(sequence_level)]
    assert (token_steps["root_acceptance"] <= token_steps["root_alpha_star"] + 1e-9).all()
    ran = summary[summary["applicable"]]
    assert len(ran) == steps.groupby(["verifier", "tree"]).ngroups
    assert set(sequence_level) <= set(ran["verifier"])
    for row in ran.itertuples():
        calls = steps[(steps["verifier"] == row.verifier) & (steps["tree"] == row.tree)]
        assert row.calls == len(calls)
        assert row.tokens_per_call == pytest.approx(calls["tokens"].mean(), abs=1e-12)
        assert row.ci_low <= row.tokens_per_call <= row.ci_high
        if row.verifier in sequence_level:  # the token-level bound does not bound them
            assert np.isnan(row.predicted) and np.isnan(row.token_level_bound), row
        else:
            assert row.predicted <= row.token_level_bound + 1e-9, row
    block = summary[summary["verifier"] == "block"]
    assert (block["applicable"] == (block["family"] == "chain")).all()
    both = [
        tree
        for tree, part in ran.groupby("tree")
        if part["verifier"].isin(sequence_level).any()
        and (~part["verifier"].isin(sequence_level)).any()
    ]
    assert sorted(real["tree"]) == sorted(both)
    for row in real.itertuples():
        part = ran[ran["tree"] == row.tree]
        token = part[~part["verifier"].isin(sequence_level)].set_index("verifier")
        sequence = part[part["verifier"].isin(sequence_level)].set_index("verifier")
        assert row.best_token_level == token["tokens_per_call"].idxmax()
        assert row.best_sequence_level == sequence["tokens_per_call"].idxmax()
        assert row.token_level == pytest.approx(token["tokens_per_call"].max(), abs=1e-12)
        assert row.sequence_level == pytest.approx(sequence["tokens_per_call"].max(), abs=1e-12)
        assert row.token_level_bound == pytest.approx(token["token_level_bound"].mean(), abs=1e-12)
        assert row.difference == pytest.approx(row.sequence_level - row.token_level, abs=1e-12)
        # the paired interval of the difference, rebuilt from the calls of the two runs
        runs = [steps[(steps["verifier"] == v) & (steps["tree"] == row.tree)] for v in (
            row.best_sequence_level, row.best_token_level)]  # fmt: skip
        paired = ob.paired_difference(*runs)
        assert row.difference == pytest.approx(paired.difference, abs=1e-12)
        assert row.difference_ci == pytest.approx((paired.ci_low, paired.ci_high), abs=1e-12)
        assert row.separated == paired.excludes_zero
        assert row.token_ci[0] <= row.token_level <= row.token_ci[1]
        assert row.sequence_ci[0] <= row.sequence_level <= row.sequence_ci[1]


def _check_06(facts: dict, text: str) -> None:
    steps, summary = facts["steps"], facts["summary"]
    ran = summary[summary["applicable"]]
    assert set(ran["budget"]) == set(facts["budgets"])
    assert (ran["nodes"] <= ran["budget"]).all()
    assert (ran["target_tokens_per_call"] <= ran["nodes"] + 1e-12).all()
    # the stopping policy acts in this run: every tree whole under fixed, pruned under it
    is_fixed = ran["stopping"] == "fixed"
    np.testing.assert_allclose(ran.loc[is_fixed, "target_tokens_per_call"], ran[is_fixed]["nodes"])
    assert (ran.loc[~is_fixed, "target_tokens_per_call"] < ran.loc[~is_fixed, "nodes"]).any()
    beams = summary[summary["family"].str.startswith("beam")]
    assert (beams["applicable"] == (beams["verifier"] == "rrs_without_replacement")).all()
    keys = ["verifier", "tree", "root", "stopping", "budget"]
    for row in ran.itertuples():
        part = steps[
            (steps["verifier"] == row.verifier) & (steps["tree"] == row.tree)
            & (steps["root"] == row.root) & (steps["stopping"] == row.stopping)
            & (steps["budget"] == row.budget)
        ]  # fmt: skip
        assert row.calls == len(part)
        assert row.tokens_per_call == pytest.approx(part["tokens"].mean(), abs=1e-12)
        assert row.ci_low <= row.tokens_per_call <= row.ci_high
        assert np.isnan(row.predicted) == (row.stopping != "fixed")
    assert ran.groupby(keys).ngroups == len(ran)

    # the lines, rebuilt from the calls with ob.paired_difference: each budget's highest mean
    # and the systems the paired interval does not separate from it; beams against binary trees
    def calls(row):
        hit = np.logical_and.reduce([steps[k] == getattr(row, k) for k in keys])
        return steps[hit]

    def name(row):
        return f"{row.verifier} {row.tree} {row.root} {row.stopping}"

    best = ran.sort_values("tokens_per_call", ascending=False).groupby("budget").head(1)
    for row in best.itertuples():
        others = ran[(ran["budget"] == row.budget) & (ran.index != row.Index)]
        close = [
            name(o)
            for o in others.itertuples()
            if not ob.paired_difference(calls(row), calls(o)).excludes_zero
        ]
        line = (
            f"budget {row.budget:g}: highest mean {name(row)} {row.tokens_per_call:.2f} tokens "
            f"per call; not separated from it by the paired 95% interval: "
            f"{', '.join(sorted(close)) or 'none'}"
        )
        assert line in text, f"no {line!r} in the outputs"
    fixed = ran[(ran["stopping"] == "fixed") & (ran["verifier"] == "rrs_without_replacement")]
    for (budget, root), part in fixed.groupby(["budget", "root"]):
        family = {row.family: row for row in part.itertuples()}
        if not {"beam4", "binary"} <= set(family):
            continue
        d = ob.paired_difference(calls(family["beam4"]), calls(family["binary"]))
        verdict = "separated" if d.excludes_zero else "not separated"
        line = (
            f"budget {budget:g}, {root} root: beam4 − binary = {d.difference:+.2f} "
            f"[{d.ci_low:+.2f}, {d.ci_high:+.2f}] tokens per call ({verdict})"
        )
        assert line in text, f"no {line!r} in the outputs"


def _check_09(facts: dict, text: str) -> None:
    from otbound.audits import audit_rules, detectable_tv
    from otbound.engines import Processing

    settings, dump = facts["settings"], facts["dump"]
    results = facts["results"]
    good, bad = results["speculative"][0], results["resample_target"][0]
    assert good["lossless"] and not bad["lossless"] and bad["p_value"] < 1e-5
    processing = Processing(settings["temperature"], settings["top_k"], settings["top_p"])
    rows = ob.open_dump(dump).read_shard(0).distributions(1.0)
    for name, (summary, steps, message) in results.items():
        assert message in text, f"{name}: no {message!r} in the outputs"
        assert len(steps) == settings["max_steps"] and (steps["trials"] == facts["trials"]).all()
        # α* at each step: the library's on the processed rows (iid, one draft)
        for row in steps.itertuples():
            i = int(np.flatnonzero(rows.step == row.step)[0])
            p, q = processing.apply(rows.target[i]), processing.apply(rows.draft[i])
            assert row.alpha_star == pytest.approx(ob.optimal_acceptance(p, q, n=1), abs=1e-12)
        # the stated power: the pooled test's degrees of freedom and trials
        dof, trials = int(steps["dof"].sum()), int(steps["trials"].sum())
        assert summary["tv_detectable"] == pytest.approx(detectable_tv(dof, trials, 1e-5, 0.99))
        assert summary["tv"] == pytest.approx(steps["tv"].mean(), abs=1e-12)
    assert good["tv_detectable"] <= 0.05 and bad["tv"] > 5 * good["tv_detectable"]
    # the engine rules' exact rows, again from the library
    table = facts["table"].set_index("rule")
    for result in audit_rules(["hf_assisted", "hf_raw_q"], dump, **settings):
        for column in ("tv", "acceptance", "alpha_star", "above_alpha_star"):
            assert table.loc[result.rule, column] == pytest.approx(
                result.summary()[column], abs=1e-12
            )
    assert table.loc["hf_raw_q", "acceptance"] > table.loc["hf_raw_q", "alpha_star"]
    # the exact audit of the shortcut: its law min(p, q) + (1 − β) p, by hand
    p, q = facts["toy"]
    beta = np.minimum(p, q).sum()
    law = np.minimum(p, q) + (1 - beta) * p
    exact = facts["exact"]
    assert exact["method"] == "exact" and not exact["lossless"]
    assert exact["tv"] == pytest.approx(0.5 * np.abs(law - p).sum(), abs=1e-12)
    assert exact["tv"] == pytest.approx(facts["by_hand"], abs=1e-12)
    keep = np.minimum(1.0, p / q)
    assert exact["acceptance"] == pytest.approx(
        float(np.sum(q * (keep + (1 - keep) * p))), abs=1e-12
    )


def _check_10(facts: dict, text: str) -> None:
    p, q, n = facts["p"], facts["q"], facts["n"]
    star = ob.optimal_acceptance(p, q, n=n)
    assert facts["alpha_star"] == star
    assert facts["acceptance"] == pytest.approx(star, abs=1e-12) and facts["passed"]
    set_acceptance, set_gap, set_star, set_passed = facts["set_rule"]  # without replacement
    assert set_star == ob.optimal_acceptance(p, q, n=n, design="without_replacement")
    assert set_gap == pytest.approx(set_star - set_acceptance, abs=1e-12) and set_passed
    assert abs(set_gap) <= 1e-12, f"the round rule left {set_gap:.1e} of α* on the step"
    table = facts["table"]
    mine = table[table.verifier == "optimal"].set_index(["step", "n"]).acceptance
    bound = table[(table.verifier == "bound") & (table.design == "iid")]
    np.testing.assert_allclose(mine, bound.set_index(["step", "n"]).acceptance, atol=1e-12)
    for row in facts["gaps"].itertuples():  # each gap from the table, paired by prompt
        at_n = table[table.n == row.n]
        d = ob.paired_difference(
            at_n[at_n.verifier == "optimal"], at_n[at_n.verifier == row.verifier],
            value="acceptance", cluster="prompt",
        )  # fmt: skip
        assert (row.gap, row.ci_low, row.ci_high) == (d.difference, d.ci_low, d.ci_high)
        assert row.gap >= 0 and row.separated == d.excludes_zero
    steps = facts["steps"]
    for row in facts["mine"].itertuples():  # the tree lines, rebuilt from the calls
        a = steps[(steps.verifier == "optimal") & (steps.tree == row.tree_a)]
        b = steps[(steps.verifier == row.verifier_b) & (steps.tree == row.tree_a)]
        d = ob.paired_difference(a, b)
        assert row.difference == pytest.approx(d.difference, abs=1e-12)
        verdict = "separated" if d.excludes_zero else "not separated at this size"
        line = (
            f"{row.tree_a}: optimal − {row.verifier_b} = {d.difference:+.3f} tokens per call "
            f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]: {verdict}"
        )
        assert line in text, f"no {line!r} in the outputs"


#: Checks of the values a notebook computed, against the library and each other.
CHECKS: dict[str, Callable[[dict, str], None]] = {
    "01_quickstart": _check_01,
    "02_validate_a_new_verifier": _check_02,
    "03_anatomy_of_the_bound": _check_03,
    "04_temperature_and_drafts": _check_04,
    "05_draft_trees": _check_05,
    "06_dynamic_drafting": _check_06,
    "07_sequence_level_verification": _check_07,
    "09_audit_a_rule": _check_09,
    "10_optimal_verifier": _check_10,
}


def test_every_notebook_has_test_sizes() -> None:
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"
    missing = [p.stem for p in NOTEBOOKS if p.stem not in SMALL]
    assert not missing, f"give {missing} small parameter values in SMALL, for a quick test run"


def _collected(*args: str) -> list[str]:
    """The node ids ``pytest --collect-only`` finds, run from the repository root as a user."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_documented_nbmake_command_collects_every_notebook() -> None:
    """``pytest --nbmake notebooks/ -o addopts=""`` (the README's command) runs each notebook
    at its default sizes, and without ``--nbmake`` nothing in ``notebooks/`` is collected."""
    pytest.importorskip("nbmake", reason='nbmake comes with pip install -e ".[notebooks]"')
    found = _collected("--nbmake", "notebooks/", "-o", "addopts=")
    assert sorted(found) == [f"notebooks/{p.name}::{p.name}" for p in NOTEBOOKS]
    assert _collected("notebooks/", "-o", "addopts=") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_saved_clean(path: Path) -> None:
    """Committed without outputs, with a parameters cell that reads the dump's location."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{path.name} has outputs: clear them (jupyter nbconvert --clear-output --inplace)"
            )
    params = nb.cells[_parameters_index(nb)].source
    for name in SMALL[path.stem]:
        assert f"\n{name} = " in f"\n{params}", f"{path.name}: {name} is not a parameter"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(
    path: Path, sample_dump: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Runs at small sizes and shows what it computed: values checked by :data:`CHECKS`."""
    nb = nbformat.read(path, as_version=4)
    overrides = "\n".join(f"{k} = {v!r}" for k, v in SMALL[path.stem].items())
    nb.cells.insert(_parameters_index(nb) + 1, nbformat.v4.new_code_cell(overrides))
    monkeypatch.setenv("OTBOUND_SAMPLE", str(sample_dump))
    if path.stem in NEEDS_REAL_PAIR:  # the suite never loads the real pair
        monkeypatch.setenv("OTBOUND_REAL_PAIR", str(tmp_path / "no-pair"))
        monkeypatch.delenv("OTBOUND_REAL_DUMP", raising=False)
    # numba's OpenMP threads busy-wait; on a shared, loaded machine that costs 10x
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    exported = tmp_path / "facts.pickle"
    nb.cells.append(nbformat.v4.new_code_cell(_export_cell(path.stem, exported)))
    client.execute()  # raises CellExecutionError if a cell raises
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    if path.stem in NEEDS_REAL_PAIR:
        assert "The real pair is not here" in _outputs_text(nb)
        return
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, f"{path.name} drew no figure"
    text = _outputs_text(nb)
    for expected in EXPECTED.get(path.stem, ()):
        assert expected in text, f"{path.name}: no {expected!r} in the outputs"
    with exported.open("rb") as file:
        facts = pickle.load(file)
    CHECKS[path.stem](facts, text)
