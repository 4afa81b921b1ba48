"""The engine rules: their exact laws against brute-force enumeration written from the
engines' code (``engine_oracles``), their samplers against their laws, the law given the
drafts against the closed form, and what each rule claims against what its law does."""

from __future__ import annotations

import numpy as np
import pytest
from engine_oracles import oracle, random_pair, total_variation
from scipy.special import chdtrc

import otbound as ob
from otbound.audits._rules import enumerate_law
from otbound.drafts import get_design
from otbound.engines import ENGINE_RULES, EngineRule, Processing, get_engine_rule

#: Processing settings the laws are checked under (the request's temperature, top-k, top-p).
SETTINGS = (
    {},
    {"top_k": 3},
    {"temperature": 0.7, "top_k": 4, "top_p": 0.8},
    {"top_p": 0.6},
    {"temperature": 1.4, "top_p": 0.9},
)


def _ns(name: str) -> tuple[int, ...]:
    return (1, 2, 3) if name.startswith("sglang") else (1,)


@pytest.mark.parametrize("name", ENGINE_RULES)
def test_law_and_acceptance_equal_brute_force(name):
    checked = 0
    for seed in range(4):
        p, q = random_pair(seed)
        for settings in SETTINGS:
            rule = get_engine_rule(name, **settings)
            for n in _ns(name):
                law, acceptance = oracle(name, p.tolist(), q.tolist(), n=n, **settings)
                assert np.abs(rule.output_law(p, q, n) - law).max() <= 1e-12, (settings, n)
                assert rule.acceptance(p, q, n) == pytest.approx(acceptance, abs=1e-12)
                checked += 1
    assert checked >= 20


#: Rows with ties and zeros in dyadic masses (sums are exact, so top-p's cut falls exactly on a
#: token): a tie at top-k's k-th token and at top-p's cut, an all-tied target, zeros on both
#: sides.
TIED_ROWS = (
    ([0.375, 0.25, 0.25, 0.125, 0.0], [0.125, 0.25, 0.25, 0.375, 0.0]),
    ([0.25, 0.25, 0.25, 0.25, 0.0], [0.5, 0.25, 0.25, 0.0, 0.0]),
    ([0.5, 0.25, 0.25, 0.0, 0.0], [0.25, 0.25, 0.5, 0.0, 0.0]),
)
TIED_SETTINGS = (
    {},
    {"top_k": 2},
    {"top_k": 1},
    {"top_p": 0.625},
    {"top_p": 0.5},
    {"temperature": 0},
    {"temperature": 0.5, "top_k": 3},
)


@pytest.mark.parametrize("name", ENGINE_RULES)
def test_ties_and_zeros_equal_brute_force(name):
    """Top-k keeps every token tied with the k-th, top-p breaks a tie at its cut by the lower
    id, the argmax of a tie is the lower id, and tokens of mass zero stay out, as the oracle's
    plain loops do."""
    for p, q in TIED_ROWS:
        for settings in TIED_SETTINGS:
            rule = get_engine_rule(name, **settings)
            for n in _ns(name):
                law, acceptance = oracle(name, p, q, n=n, **settings)
                got = rule.output_law(np.array(p), np.array(q), n)
                assert np.abs(got - law).max() <= 1e-12, (p, settings, n)
                assert rule.acceptance(np.array(p), np.array(q), n) == pytest.approx(
                    acceptance, abs=1e-12
                )


def test_an_undefined_residual_draw_is_refused_in_one_line():
    """llama.cpp's example pairs the two filtered lists by position: here every pair cancels,
    the residual has no mass over three tokens, and the draft is rejected for sure."""
    p, q = np.array([0.5, 0.0, 0.25, 0.25, 0.0]), np.array([0.0, 0.5, 0.25, 0.0, 0.25])
    rule = get_engine_rule("llamacpp_example")
    with pytest.raises(ValueError, match=r"llamacpp_example: .*the engine's draw is undefined"):
        rule.output_law(p, q)
    with pytest.raises(ValueError) as caught:
        rule.acceptance(p, q)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("single", "acc"), [(0.3, 1.0), (0.2, 0.6), (1.0, 0.4)])
def test_sglang_thresholds_equal_brute_force(single, acc):
    """Both thresholds below 1, so that ``threshold_single`` decides some siblings."""
    hits = 0
    for seed in range(6):
        p, q = random_pair(seed)
        rule = get_engine_rule("sglang_target_only", threshold_single=single, threshold_acc=acc)
        for n in (1, 2, 3):
            law, acceptance = oracle("sglang_target_only", p.tolist(), q.tolist(), n=n,
                                     threshold_single=single, threshold_acc=acc)  # fmt: skip
            assert np.abs(rule.output_law(p, q, n) - law).max() <= 1e-12
            assert rule.acceptance(p, q, n) == pytest.approx(acceptance, abs=1e-12)
            hits += int((p[np.argsort(-q, kind="stable")[:n]] >= single).any())
    assert hits > 0 or single == 1.0


@pytest.mark.parametrize("name", ENGINE_RULES)
def test_law_given_drafts_sums_to_the_closed_form(name):
    p, q = random_pair(11)
    rule = get_engine_rule(name, temperature=0.8, top_k=5)
    for n in _ns(name):
        sides = rule.sides(p, q)
        law, acceptance = enumerate_law(
            lambda drafts, sides=sides: rule.conditional_law(drafts, p, q),
            get_design(rule.design),
            rule.drafts_from(sides),
            n,
            name,
        )
        assert np.abs(law - rule.output_law(p, q, n)).max() <= 1e-12
        assert acceptance == pytest.approx(rule.acceptance(p, q, n), abs=1e-12)


def _chi_square_p_value(tokens: np.ndarray, law: np.ndarray) -> float:
    """Goodness of fit of sampled tokens to ``law`` (tokens of expected count < 5 pooled)."""
    counts = np.bincount(tokens, minlength=law.size).astype(float)
    assert counts[law <= 0].sum() == 0, "a token of probability zero was drawn"
    expected = tokens.size * law
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    wanted = np.append(expected[big], expected[~big].sum())
    keep = wanted > 0
    if keep.sum() == 1:  # a point mass: every token must be it
        return 1.0 if observed[keep][0] == tokens.size else 0.0
    statistic = float(((observed[keep] - wanted[keep]) ** 2 / wanted[keep]).sum())
    return float(chdtrc(int(keep.sum()) - 1, statistic))


@pytest.mark.parametrize("name", ENGINE_RULES)
def test_samples_follow_the_law(name):
    p, q = random_pair(5, vocab=9)
    rule = get_engine_rule(name, temperature=0.9, top_k=6, top_p=0.95)
    for n in _ns(name):
        sim = rule.simulate(p, q, n, trials=100_000, seed=3)
        assert _chi_square_p_value(sim.tokens, rule.output_law(p, q, n)) > 1e-6
        assert sim.acceptance == pytest.approx(rule.acceptance(p, q, n), abs=0.01)
        token, accepted = rule.verify(sim.drafts[0], p, q, rng=0)
        assert rule.output_law(p, q, n)[token] > 0 and accepted == (token in sim.drafts[0])


@pytest.mark.parametrize("name", ENGINE_RULES)
def test_the_claim_matches_the_law(name):
    """Lossless rules keep the target law under every setting; lossy ones break it under the
    settings they are lossy for, by more than rounding."""
    worst = 0.0
    for seed in range(4):
        p, q = random_pair(seed)
        for settings in SETTINGS[1:]:
            rule = get_engine_rule(name, **settings)
            tv = total_variation(rule.output_law(p, q), rule.target_law(p))
            if rule.lossless:
                assert tv <= 1e-12, (settings, tv)
            worst = max(worst, tv)
    if not get_engine_rule(name, top_k=3).lossless:
        assert worst > 0.01


def test_claims_depend_on_the_settings():
    assert get_engine_rule("hf_raw_q").lossless
    assert not get_engine_rule("hf_raw_q", top_p=0.9).lossless
    assert get_engine_rule("vllm_strict_match", temperature=0).lossless
    assert not get_engine_rule("vllm_strict_match").lossless
    assert get_engine_rule("filters_draft_only", temperature=0.6).lossless
    assert not get_engine_rule("sglang_target_only", threshold_acc=0.9).lossless
    assert not get_engine_rule("hf_argmax_raw_q").lossless


def test_one_hot_q_is_lossless_for_a_sampled_draft_too():
    p, q = random_pair(3)
    rule = get_engine_rule("vllm_one_hot", design="iid", top_k=4)
    target = rule.target_law(p)
    assert np.abs(rule.output_law(p, q) - target).max() <= 1e-15
    assert rule.acceptance(p, q) == pytest.approx(float(rule.draft_law(q) @ target), abs=1e-15)


def test_sglang_at_its_defaults_reaches_the_topk_bound():
    p, q = random_pair(8, vocab=12)
    rule = get_engine_rule("sglang_target_only")
    for n in (1, 2, 4):
        assert rule.acceptance(p, q, n) == pytest.approx(
            ob.optimal_acceptance(p, q, n=n, design="topk"), abs=1e-12
        )


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"temperature": -1}, "temperature must be"),
        ({"top_k": 0}, "top_k must be"),
        ({"top_p": 1.5}, "top_p must be"),
        ({"design": "hub"}, "draws with design"),
        ({"threshold_acc": 0}, "threshold_acc must be"),
    ],
)
def test_bad_settings_are_refused(kwargs, words):
    name = "sglang_target_only" if "threshold_acc" in kwargs else "hf_assisted"
    with pytest.raises(ValueError, match=words):
        get_engine_rule(name, **kwargs)


def test_unknown_rule_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown engine rule 'vllm'; valid: hf_assisted"):
        get_engine_rule("vllm")


def test_bad_drafts_and_rows_are_refused():
    rule = get_engine_rule("hf_assisted")
    with pytest.raises(ValueError, match=r"token ids in \[0, 3\)"):
        rule.verify([5], [0.5, 0.3, 0.2], [0.4, 0.4, 0.2])
    with pytest.raises(ValueError, match="defined for n=1"):
        rule.verify([0, 1], [0.5, 0.3, 0.2], [0.4, 0.4, 0.2])
    with pytest.raises(ValueError, match="shape"):
        rule.output_law([[0.5, 0.5]], [[0.5, 0.5]])


def test_processing_matches_the_dump_pipeline():
    p, _ = random_pair(2, vocab=30)
    processing = Processing(0.6, 10, 0.9)
    expected = ob.dumps.to_probabilities(np.log(p), 0.6, 10, 0.9)[0]
    assert np.abs(processing.apply(p) - expected).max() <= 1e-12
    assert Processing().apply(p) is p


def test_every_rule_is_an_engine_rule_with_a_cited_source():
    import inspect

    for name in ENGINE_RULES:
        rule = get_engine_rule(name)
        assert isinstance(rule, EngineRule) and rule.name == name
        module = inspect.getmodule(type(rule))
        assert module is not None and "commit" in (module.__doc__ or "")


def test_llamacpp_residual_of_no_mass_over_one_surviving_token():
    """Both sides keep one token, different ones: the draft is rejected, the residual has no
    mass, and the draw from the target's one-entry list returns its only token."""
    p, q = np.array([0.96, 0.02, 0.02]), np.array([0.02, 0.96, 0.02])
    rule = get_engine_rule("llamacpp_example", top_p=0.9)
    assert rule.output_law(p, q).tolist() == [1.0, 0.0, 0.0]
    assert rule.acceptance(p, q) == 0.0
    assert ob.audit(rule, p, q).lossless
