"""The audit: its verdicts on lossless and lossy rules (exact and Monte Carlo, with the power
it states, met by the least detectable law; one lossy step among many), the HF raw-``q``
mechanism, a user's function with a planted bug, block rules on chains, bad rules in one line,
and the ``otbound audit`` command."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from engine_oracles import oracle, process, random_pair, total_variation
from scipy.stats import chi2, ncx2

import otbound as ob
from otbound.audits import audit_rules, detectable_tv
from otbound.cli.audit import main
from otbound.engines import CHAIN_RULES, ENGINE_RULES, get_chain_rule, get_engine_rule
from otbound.sequence import sequence_law

#: The processing the docs' table uses (the engines' defaults), at its two temperatures.
DOCS = (
    {"temperature": 1.0, "top_k": 50, "top_p": 0.9},
    {"temperature": 0.6, "top_k": 50, "top_p": 0.9},
)
SMALL = {"temperature": 0.8, "top_k": 5, "top_p": 0.95}

LOSSLESS = [n for n in ENGINE_RULES if get_engine_rule(n, **SMALL).lossless]
LOSSY = [n for n in ENGINE_RULES if not get_engine_rule(n, **SMALL).lossless]


def _rows(seeds=(0, 1), vocab=8):
    pairs = [random_pair(s, vocab=vocab) for s in seeds]
    return np.stack([p for p, _ in pairs]), np.stack([q for _, q in pairs])


def speculative(drafts, p, q, rng):
    """Leviathan et al.'s rule, written as a user would."""
    x = int(drafts[0])
    if rng.random() < min(1.0, p[x] / q[x]):
        return x
    excess = np.maximum(p - q, 0.0)
    return int(np.searchsorted(np.cumsum(excess), rng.random() * excess.sum(), side="right"))


def speculative_with_a_bug(drafts, p, q, rng):
    """The same, except that the residual never gives its likeliest token (a one-token bug)."""
    x = int(drafts[0])
    if rng.random() < min(1.0, p[x] / q[x]):
        return x
    excess = np.maximum(p - q, 0.0)
    excess[np.argmax(excess)] = 0.0
    return int(np.searchsorted(np.cumsum(excess), rng.random() * excess.sum(), side="right"))


@pytest.mark.parametrize("name", LOSSLESS)
def test_every_lossless_rule_passes_with_power_099_at_tv_001(name):
    p, q = _rows()
    simulated = ob.audit(name, p, q, **SMALL, exact=False, trials=150_000)
    assert simulated.lossless, simulated.message
    assert simulated.tv_detectable <= 0.01
    assert simulated.method == "monte_carlo" and simulated.p_value >= 1e-5
    exact = ob.audit(name, p, q, **SMALL)
    assert exact.lossless and exact.method == "exact" and exact.tv_max <= 1e-12
    assert exact.acceptance <= exact.alpha_star + 1e-12
    assert simulated.acceptance == pytest.approx(exact.acceptance, abs=0.01)


@pytest.mark.parametrize("name", LOSSY)
def test_every_lossy_rule_is_flagged_with_its_exact_tv(name):
    p, q = _rows()
    result = ob.audit(name, p, q, **SMALL)
    assert not result.lossless
    for row, (p_row, q_row) in zip(result.steps.itertuples(), zip(p, q, strict=True), strict=True):
        law, acceptance = oracle(name, p_row.tolist(), q_row.tolist(), **SMALL)
        target = process(p_row.tolist(), **SMALL)
        assert row.tv == pytest.approx(total_variation(law, target), abs=1e-12)
        assert row.acceptance == pytest.approx(acceptance, abs=1e-12)
    simulated = ob.audit(name, p, q, **SMALL, exact=False, trials=100_000)
    assert not simulated.lossless and simulated.p_value < 1e-5
    assert simulated.tv == pytest.approx(result.tv, abs=0.01)


@pytest.mark.parametrize("settings", DOCS)
def test_every_lossy_rule_is_flagged_on_the_sample_at_the_docs_settings(settings):
    results = audit_rules([*ENGINE_RULES], None, **settings, max_steps=12)
    for result in results:
        assert result.method == "exact" and len(result.steps) == 12
        assert result.lossless == result.declared, result.message
        if not result.lossless:
            assert result.tv > 0.05 and result.tv_max >= result.worst["tv"].iloc[0] - 1e-15
        else:
            assert result.above_alpha_star == 0


def test_the_hf_raw_q_verdict_reproduces_the_mechanism():
    """Drafts from the filtered ``Q'`` (raw mass kept ``Z``), tested against the raw ``q``: a
    draft is kept w.p. ``min(1, P_x / q_x) = min(1, P_x / (Z Q'_x))``, the ratio inflated by
    ``1 / Z``, and the residual ``(P − q)⁺`` subtracts the raw mass of a token the drafter never
    proposes (``Q' = 0``) from the target's."""
    p = np.array([0.50, 0.10, 0.35, 0.05])
    q = np.array([0.55, 0.25, 0.12, 0.08])
    raw, fixed = get_engine_rule("hf_raw_q", top_k=2), get_engine_rule("hf_assisted", top_k=2)
    target, proposed = raw.target_law(p), raw.draft_law(q)
    z = q[proposed > 0].sum()
    assert z == pytest.approx(0.8) and proposed[2] == 0 and target[2] > 0
    # the ratio: token 0 kept for sure, where the draft's own law keeps it w.p. P_0 / Q'_0
    assert raw.conditional_law([0], p, q)[0] == 1.0
    assert target[0] / (z * proposed[0]) > 1 > target[0] / proposed[0]
    assert fixed.conditional_law([0], p, q)[0] == pytest.approx(target[0] / proposed[0], abs=1e-15)
    # the residual after a rejection (token 1, which the target filters out)
    residual = raw.conditional_law([1], p, q)
    assert np.allclose(residual, np.maximum(target - q, 0) / np.maximum(target - q, 0).sum())
    assert fixed.conditional_law([1], p, q)[2] == pytest.approx(1.0)  # (P − Q')⁺: all on token 2
    assert residual[2] < 1.0 and target[2] - q[2] < target[2]  # q_2 taken out, never proposed
    # the audit: lossy, the drafted token over-produced and the never-proposed one short
    result, law = ob.audit(raw, p, q), raw.output_law(p, q)
    assert not result.lossless and ob.audit(fixed, p, q).lossless
    assert law[0] > target[0] + 0.1 and law[2] < target[2] - 0.1
    assert result.tv == pytest.approx(0.5 * np.abs(law - target).sum(), abs=1e-15)
    # by hand: P = (10, 0, 7, 0)/17, Q' = (11, 5, 0, 0)/16, (P − q)⁺ = (0.65, 0, 4.96, 0)/17
    assert result.tv == pytest.approx(11 / 16 + 5 / 16 * 0.65 / 5.61 - 10 / 17, abs=1e-15)
    # above α* (= Σ min(P, Q')): the signature of a rule that cheats
    assert result.alpha_star == pytest.approx(np.minimum(target, proposed).sum(), abs=1e-15)
    assert result.acceptance == pytest.approx(11 / 16, abs=1e-15)  # Q'_0: always kept
    assert result.acceptance > result.alpha_star + 0.09 and result.above_alpha_star == 1


def test_a_user_function_with_a_one_token_bug_is_caught():
    p, q = _rows(seeds=(3,), vocab=6)
    good = ob.audit(speculative, p, q, trials=60_000)
    assert good.lossless and good.kind == "function" and good.rule == "speculative"
    bad = ob.audit(speculative_with_a_bug, p, q, trials=60_000)
    assert not bad.lossless and bad.p_value < 1e-5
    assert bad.acceptance == pytest.approx(good.acceptance, abs=0.01)  # same acceptance, wrong law
    assert bad.worst["step"].tolist() == [0]


def test_a_rule_with_conditional_law_is_enumerated_exactly():
    class Declared:
        name, design = "declared", "iid"

        def verify(self, drafts, p, q, rng):
            return speculative(drafts, p, q, rng)

        def conditional_law(self, drafts, p, q):
            x = int(drafts[0])
            keep = min(1.0, p[x] / q[x])
            excess = np.maximum(p - q, 0.0)
            law = (1 - keep) * excess / excess.sum() if keep < 1 else np.zeros_like(p)
            law[x] += keep
            return law

    p, q = random_pair(4)
    result = ob.audit(Declared(), p, q)
    assert result.method == "exact" and result.lossless and result.tv_max <= 1e-12
    assert result.acceptance == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)


def test_a_shipped_verifier_is_audited_by_simulation():
    p, q = _rows(seeds=(5,))
    result = ob.audit("rrs", p, q, n=2, trials=100_000)
    assert result.kind == "verifier" and result.lossless and result.method == "monte_carlo"
    assert result.alpha_star == pytest.approx(ob.optimal_acceptance(p[0], q[0], n=2), abs=1e-12)


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        (lambda drafts, p, q: 0, r"'<lambda>': verify must take \(drafts, p, q, rng\)"),
        (lambda drafts, p, q, rng: 99, r"returned token 99 .* outside the vocabulary \[0, 8\)"),
        (lambda drafts, p, q, rng: 1.5, r"returned 1.5 .* expected a token id"),
        ("not_a_rule", "unknown rule 'not_a_rule'"),
        (42, "is not a rule"),
    ],
)
def test_a_bad_rule_is_one_readable_line(rule, words):
    p, q = random_pair(0, vocab=8)
    with pytest.raises(ValueError, match=words) as caught:
        ob.audit(rule, p, q, trials=10)
    assert "\n" not in str(caught.value)


def test_an_engine_rule_keeps_its_processing():
    with pytest.raises(ValueError, match="carries its own processing"):
        ob.audit(get_engine_rule("hf_raw_q", top_k=2), [0.5, 0.5], [0.5, 0.5], top_p=0.5)


def test_the_stated_power_is_the_noncentral_chi_square():
    for dof, trials in ((1, 10_000), (19, 200_000), (400, 1_000_000)):
        delta = detectable_tv(dof, trials, 1e-5, 0.99)
        critical = chi2.isf(1e-5, dof)
        assert ncx2.sf(critical, dof, 4 * trials * delta**2) == pytest.approx(0.99, abs=1e-6)
    # every law at bin TV δ has noncentrality at least 4 N δ²
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.dirichlet(np.ones(10))
        r = rng.dirichlet(np.ones(10))
        tv = 0.5 * np.abs(r - p).sum()
        assert ((r - p) ** 2 / p).sum() >= 4 * tv**2 - 1e-12
    assert math.isinf(detectable_tv(0, 100, 1e-5, 0.99))


#: A dyadic target whose two likeliest tokens hold exactly half the mass.
HALVES = np.array([0.25, 0.25, 0.125, 0.125, 0.125, 0.0625, 0.0625, 0.0])


class Tilted:
    """A rule whose output law is ``p (1 ± 2 tv)``: up on the tokens of ``p ≥ 1/4`` (half the
    mass), down on the others, on the steps whose draft is in ``rows``; ``p`` elsewhere. The
    least detectable law at its ``tv``: ``Σ (r − p)² / p = 4 tv²``, Cauchy–Schwarz's equality."""

    name, design = "tilted", "iid"

    def __init__(self, tv: float, rows: list[np.ndarray]) -> None:
        self.tv, self.rows = tv, rows

    def simulate(self, p, q, n, trials, seed):
        rng = np.random.default_rng(seed)
        drafts = rng.choice(p.size, size=(trials, n), p=q)
        tilted = any(np.allclose(q, row, rtol=0, atol=1e-15) for row in self.rows)
        law = p * (1 + 2 * self.tv * np.where(p >= 0.25, 1, -1)) if tilted else p
        tokens = rng.choice(p.size, size=trials, p=law)
        return SimpleNamespace(tokens=tokens, accepted=(drafts == tokens[:, None]).any(axis=1))


def _halves(steps: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(21)
    p = np.stack([rng.permutation(HALVES) for _ in range(steps)])
    return p, rng.dirichlet(np.ones(HALVES.size), size=steps)


def test_the_stated_power_is_met_by_the_least_detectable_law():
    """The audit of 2 steps × 150,000 trials states the TV it detects with probability 0.99
    (at most 0.01): a law 1.2 times that far, of the shape hardest to detect, is flagged."""
    p, q = _halves(2)
    clean = ob.audit(Tilted(0.0, list(q)), p, q, trials=150_000)
    stated = clean.tv_detectable
    assert clean.lossless and stated <= 0.01
    tilted = ob.audit(Tilted(1.2 * stated, list(q)), p, q, trials=150_000)
    assert not tilted.lossless and tilted.p_value < 1e-5, tilted.message
    assert tilted.tv_detectable == stated


def test_one_lossy_step_among_many_is_flagged_by_its_own_test():
    """200 steps × 5,000 trials, one of them off by TV 0.069 (noncentrality 95): pooled over
    the steps the deviation does not reach significance, the step's own p-value is below
    significance / 200 (Bonferroni), and the verdict is LOSSY, with that step the worst."""
    p, q = _halves(200)
    result = ob.audit(Tilted(0.069, [q[5]]), p, q, trials=5_000)
    assert result.p_value >= 1e-5 and not result.lossless, result.message
    assert result.steps["p_value"].idxmin() == 5 and result.worst["step"].iloc[0] == 5
    assert result.steps["p_value"][5] < 1e-5 / 200


def test_the_dump_audit_equals_the_row_audit():
    dump = ob.open_dump(ob.audits.SAMPLE_DUMP)
    rows = dump.read_shard(0).distributions(1.0)
    by_dump = ob.audit_dump("llamacpp_example", None, temperature=0.6, top_k=50, max_steps=3)
    by_rows = ob.audit(
        "llamacpp_example", rows.target[:3], rows.draft[:3], temperature=0.6, top_k=50
    )
    assert np.allclose(by_dump.steps["tv"], by_rows.steps["tv"], rtol=0, atol=1e-15)
    assert by_dump.alpha_star == pytest.approx(by_rows.alpha_star, abs=1e-15)


def _chain(seed, vocab=4, gamma=3):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(vocab), size=gamma + 1), rng.dirichlet(np.ones(vocab), size=gamma)


def test_vllm_block_is_lossless_and_optimal_on_chains():
    p, q = _chain(0)
    exact = ob.audit("vllm_block", p, q)
    assert exact.method == "exact" and exact.lossless and exact.tv_max <= 1e-12
    assert exact.acceptance == pytest.approx(exact.alpha_star, abs=1e-12)
    # its law is the product law, by enumeration of every chain and coin
    law = sequence_law(p, q, 3, verifier=get_chain_rule("vllm_block"))
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    for z, mass in law.items():
        assert mass == pytest.approx(np.prod([p[d, t] for d, t in enumerate(z)]), abs=1e-12)
    simulated = ob.audit("vllm_block", p, q, exact=False, trials=100_000)
    assert simulated.lossless and simulated.acceptance == pytest.approx(exact.acceptance, abs=0.02)


def test_the_ascend_port_is_flagged_and_accepts_beyond_block_verification():
    p, q = _chain(1)
    result = ob.audit("ascend_block", p, q, trials=100_000)
    assert result.method == "monte_carlo" and not result.lossless and result.p_value < 1e-5
    assert result.acceptance > result.alpha_star and result.above_alpha_star == 1
    # the vectorised iterations and the per-trial code read against the source agree
    rule = get_chain_rule("ascend_block")
    fast, _ = rule.simulate_rows(p, q, 40_000, np.random.default_rng(2))
    slow = rule.simulate(p, q, 3, trials=8_000, seed=3).sequences
    table = pd.crosstab(
        np.r_[np.zeros(len(fast)), np.ones(len(slow))],
        np.r_[fast @ 4 ** np.arange(4), slow @ 4 ** np.arange(4)],
    )
    from scipy.stats import chi2_contingency

    assert chi2_contingency(table.loc[:, table.sum() >= 20])[1] > 1e-4
    with pytest.raises(ValueError, match="not enumerable"):
        sequence_law(p, q, 3, verifier=rule)


def test_chains_come_from_consecutive_steps_of_one_prompt():
    from otbound.audits._api import dump_chains

    dump = ob.open_dump(ob.audits.SAMPLE_DUMP)
    shard = dump.read_shard(0)
    prompts = shard.metadata.set_index("step")["prompt_id"]
    chains = list(dump_chains(dump, 3, max_steps=80))
    assert len(chains) >= 10
    for start, p_rows, q_rows in chains:
        assert p_rows.shape[0] == 4 and q_rows.shape[0] == 3
        assert prompts.loc[start : start + 3].nunique() == 1
    assert [c[0] for c in chains] == sorted({c[0] for c in chains})


def test_the_command_prints_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "audit"
    args = [
        "--rule",
        "hf_assisted,hf_raw_q",
        "--top-k",
        "50",
        "--max-steps",
        "4",
        "--out",
        str(out),
    ]
    assert main([*args, "--temperature", "1,0.6", "--quiet"]) == 0
    summary = pd.read_csv(out / "audit.csv")
    assert summary[["rule", "temperature"]].values.tolist() == [
        ["hf_assisted", 1.0], ["hf_raw_q", 1.0], ["hf_assisted", 0.6], ["hf_raw_q", 0.6]
    ]  # fmt: skip
    assert summary["lossless"].tolist() == [True, False, True, False]
    assert json.loads((out / "audit.json").read_text())["rules"][1]["rule"] == "hf_raw_q"
    steps = pd.read_csv(out / "steps.csv")
    assert len(steps) == 16 and set(steps["rule"]) == {"hf_assisted", "hf_raw_q"}
    # the table matches the library's audit of the same steps
    direct = ob.audit_dump("hf_raw_q", None, temperature=0.6, top_k=50, max_steps=4)
    assert summary.loc[3, "tv"] == pytest.approx(direct.tv, abs=1e-12)
    capsys.readouterr()
    # --resume keeps the finished temperatures (their part files are not rewritten)
    part = out / "parts" / "temperature-1.json"
    before = part.stat().st_mtime_ns
    assert main([*args, "--temperature", "1", "--resume"]) == 0
    assert part.stat().st_mtime_ns == before
    text = capsys.readouterr().out
    assert "hf_raw_q" in text and "LOSSY" in text and "steps that deviate most" in text


def test_the_command_audits_a_function_in_a_file(tmp_path, capsys):
    rule = tmp_path / "myrule.py"
    rule.write_text(
        "def verify(drafts, p, q, rng):\n    return int(drafts[0])  # always accept: lossy\n"
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                "--rule",
                f"{rule}:verify",
                "--max-steps",
                "2",
                "--trials",
                "20000",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    summary = pd.read_csv(out / "audit.csv")
    assert summary.loc[0, "rule"] == "verify" and not summary.loc[0, "lossless"]
    assert summary.loc[0, "method"] == "monte_carlo"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--rule", "nosuchfile.py:verify"], "no file nosuchfile.py"),
        (["--rule", "vllm"], "unknown rule 'vllm'"),
        (["--max-steps", "0"], "--max-steps must be at least 1"),
        (["--top-p", "2"], "top_p must be"),
    ],
)
def test_the_command_fails_in_one_line(tmp_path, capsys, argv, words):
    assert main([*argv, "--out", str(tmp_path / "x"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("audit: error:") and words in err and "\n" not in err


def test_the_command_reports_a_wrong_signature_in_one_line(tmp_path, capsys):
    rule = tmp_path / "two.py"
    rule.write_text("def verify(drafts, p):\n    return 0\n")
    assert main(["--rule", f"{rule}:verify", "--out", str(tmp_path / "x"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "verify must take (drafts, p, q, rng)" in err and "\n" not in err


def test_chain_rules_are_listed():
    assert CHAIN_RULES == ("vllm_block", "ascend_block")


def test_the_command_audits_block_rules_beside_single_draft_ones(tmp_path, capsys):
    out = tmp_path / "chains"
    argv = ["--rule", "hf_assisted,ascend_block", "--n", "1", "--gamma", "2", "--top-k", "5"]
    assert main([*argv, "--max-steps", "6", "--trials", "5000", "--out", str(out), "--quiet"]) == 0
    summary = pd.read_csv(out / "audit.csv").set_index("rule")
    assert (
        summary.loc["hf_assisted", "steps"] == 6 and summary.loc["ascend_block", "kind"] == "chain"
    )
    assert summary.loc["ascend_block", "steps"] == 2  # two chains of three steps in six
