"""The optimal verifier's round rule for draft sets: an exact marginal, α* reached, lossless.

Oracles: brute-force enumeration of the design's draft sets (``set_support``) and ordered
tuples (``tuple_support``) with every combination of rounds, the sweep (``optimal_acceptance``)
and the set LP (``method="lp"``). The marginal is checked for arbitrary shares, not only the
fitted ones: losslessness must not depend on the fit.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import otbound as ob
from otbound.drafts.registry import get_design
from otbound.selection import RoundRule, has_round_rule, round_rule
from otbound.selection import rounds as rounds_module
from otbound.selection.rounds import clock_nodes, round_blocks, round_marginal
from otbound.verifiers.optimal import OptimalTransport

DESIGNS = ("conditional_poisson", "without_replacement")


def _rows(rng: np.random.Generator, vocab: int, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """Random and extreme steps: Dirichlet, peaked, masses down to 1e-300, p = q, disjoint
    supports, tied ratios, zeros on both sides."""
    if kind == 0:
        return rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
    if kind == 1:
        return rng.dirichlet(np.full(vocab, 0.2)), rng.dirichlet(np.full(vocab, 0.2))
    if kind == 2:  # masses down to 1e-300 on both sides
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        p[rng.random(vocab) < 0.4] = 1e-300
        q[-1], q[0] = 1e-300, 1e-9
        return p / p.sum(), q / q.sum()
    if kind == 3:
        p = rng.dirichlet(np.ones(vocab))
        return p, p.copy()
    if kind == 4:
        half = vocab // 2
        p, q = np.zeros(vocab), np.zeros(vocab)
        p[:half] = rng.dirichlet(np.ones(half))
        q[half:] = rng.dirichlet(np.ones(vocab - half))
        return p, q
    if kind == 5:  # two ratios, each shared by many tokens
        q = rng.integers(1, 4, vocab).astype(float)
        p = q * rng.integers(1, 3, vocab)
        return p / p.sum(), q / q.sum()
    p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
    p[rng.random(vocab) < 0.3] = 0.0
    q[rng.integers(vocab)] = 0.0
    p[0] += p.sum() == 0
    return p / p.sum(), q / q.sum()


def _winner_law(rule: RoundRule, drafts: tuple[int, ...]) -> np.ndarray:
    """P(each draft is selected), enumerated over every combination of rounds: the highest
    block wins, then the highest round, then the highest p/q (the earliest position)."""
    positions = [int(rule.position[x]) for x in drafts]
    block = np.searchsorted(rule.blocks.starts, positions, side="right") - 1
    out = np.zeros(len(drafts))
    for rounds in itertools.product(range(rule.shares.shape[0]), repeat=len(drafts)):
        weight = np.prod([rule.shares[k, i] for k, i in zip(rounds, positions, strict=True)])
        if weight > 0:
            keys = [(-block[j], rounds[j], -positions[j]) for j in range(len(drafts))]
            out[max(range(len(drafts)), key=keys.__getitem__)] += weight
    return out


def _brute_marginal(rule: RoundRule, q: np.ndarray) -> np.ndarray:
    """``r`` by enumeration over the design's sets and every combination of rounds."""
    sets, probs = get_design(rule.design).set_support(q, rule.n)
    r = np.zeros(q.size)
    for members, weight in zip(sets, probs, strict=True):
        drafts = tuple(int(x) for x in members if x >= 0)
        r[list(drafts)] += weight * _winner_law(rule, drafts)
    return r


def _with_shares(p, q, n, design, shares) -> RoundRule:
    """A round rule with the given shares (any, not fitted)."""
    blocks = round_blocks(p, q, n, design)
    r_sorted = round_marginal(blocks.q_sorted, shares, blocks.starts, n, design)
    r = np.zeros(p.size)
    r[blocks.order] = r_sorted
    return RoundRule(design, n, p, blocks, shares, r, blocks.violation(r_sorted))


def _output_law(rule: RoundRule, q: np.ndarray) -> tuple[np.ndarray, float]:
    """The verifier's output law and P(Y ∈ drafts), enumerated over the ordered draft tuples:
    the selection law, then the single-draft test with ``r`` as the draft."""
    p, r = rule.target, rule.selection
    rest = np.maximum(p - r, 0.0)
    rest = rest / rest.sum() if rest.sum() > 0 else p
    tuples, probs = get_design(rule.design).tuple_support(q, rule.n)
    law, hit = np.zeros(p.size), 0.0
    for drafts, weight in zip(tuples, probs, strict=True):
        given = np.zeros(p.size)
        for z, chance in zip(drafts, _winner_law(rule, tuple(drafts)), strict=True):
            keep = min(1.0, p[z] / r[z]) if r[z] > 0 else 1.0  # chance is 0 there
            given[z] += chance * keep
            given += chance * (1.0 - keep) * rest
        law += weight * given
        hit += weight * given[np.unique(drafts)].sum()
    return law, hit


@pytest.mark.parametrize("design", DESIGNS)
def test_the_marginal_equals_enumeration_for_any_shares(design):
    rng = np.random.default_rng(1)
    for case in range(28):
        vocab = int(rng.integers(3, 7))
        p, q = _rows(rng, vocab, case % 7)
        support = int(np.count_nonzero(q > 0))
        n = int(rng.integers(2, support + 1))
        blocks = round_blocks(p, q, n, design)
        rounds = 3 if case % 2 else 5
        shares = rng.dirichlet(np.full(rounds, 0.5), size=blocks.order.size).T  # any shares
        for rule in (_with_shares(p, q, n, design, shares), round_rule(p, q, n, design)):
            brute = _brute_marginal(rule, q)
            assert np.abs(brute - rule.selection).max() <= 1e-12, (case, n)
            assert rule.selection.sum() == pytest.approx(1.0, abs=1e-12)
            assert np.all(rule.selection[q == 0] == 0.0)


@pytest.mark.parametrize("design", DESIGNS)
def test_acceptance_is_alpha_star_on_random_and_extreme_rows(design):
    rng = np.random.default_rng(2)
    short = 0
    for case in range(42):
        vocab = int(rng.integers(2, 8))
        p, q = _rows(rng, vocab, case % 7)
        support = int(np.count_nonzero(q > 0))
        for n in range(2, min(4, support) + 1):
            star = ob.optimal_acceptance(p, q, n=n, design=design)
            rule = round_rule(p, q, n, design)
            assert rule.alpha_star == pytest.approx(star, abs=1e-12)
            if abs(rule.acceptance() - star) > 1e-12:
                short += 1  # the fit left a gap: it is reported as such
            assert rule.gap == pytest.approx(star - rule.acceptance(), abs=1e-12)
            assert rule.gap >= -1e-12
            if vocab <= 5 and case % 3 == 0:
                lp = OptimalTransport(design, method="lp").acceptance(p, q, n)
                assert rule.acceptance() == pytest.approx(lp, abs=1e-9)
    assert short == 0


@pytest.mark.parametrize("design", DESIGNS)
def test_the_output_law_is_p_for_fitted_and_unfitted_rules(design):
    rng = np.random.default_rng(3)
    for case in range(14):
        p, q = _rows(rng, int(rng.integers(3, 6)), case % 7)
        n = int(rng.integers(2, min(3, np.count_nonzero(q > 0)) + 1))
        fitted = round_rule(p, q, n, design)
        law, hit = _output_law(fitted, q)
        assert np.abs(law - p).max() <= 1e-12, case
        exact = OptimalTransport(design).acceptance(p, q, n)
        assert exact is not None and hit == pytest.approx(exact, abs=1e-12)
        shares = rng.dirichlet(np.ones(3), size=fitted.blocks.order.size).T
        loose = _with_shares(p, q, n, design, shares)
        law, hit = _output_law(loose, q)
        assert np.abs(law - p).max() <= 1e-12, case
        # a rejected selection lands on a draft only through a violation
        low = loose.acceptance()
        assert low - 1e-12 <= hit <= low + loose.violation + 1e-12


def test_the_enumeration_sees_a_marginal_off_on_one_token():
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    rule = round_rule(p, q, 3, "conditional_poisson")
    r = rule.selection.copy()
    r[0] += 1e-6
    r[1] -= 1e-6
    wrong = RoundRule(rule.design, 3, p, rule.blocks, rule.shares, r, rule.violation)
    assert np.abs(_brute_marginal(wrong, q) - wrong.selection).max() > 1e-7
    assert np.abs(_output_law(wrong, q)[0] - p).max() > 1e-8


@pytest.mark.parametrize("design", DESIGNS)
def test_the_sampled_selection_follows_the_enumeration(design):
    rng = np.random.default_rng(5)
    q = rng.dirichlet(np.ones(6))
    p = 0.5 * q + 0.5 * rng.dirichlet(np.ones(6))  # blocks of several tokens: rounds matter
    fitted = round_rule(p, q, 3, design)
    assert np.diff(fitted.blocks.starts).max() >= 3
    shares = rng.dirichlet(np.ones(3), size=fitted.blocks.order.size).T
    trials = 50_000
    for rule in (fitted, _with_shares(p, q, 3, design, shares)):
        for drafts in ((4, 1, 2), (0, 3, 5), (5, 2, 0)):
            law = _winner_law(rule, drafts)
            rows = np.repeat(np.array([drafts]), trials, axis=0)
            chosen, mass = rule.select(rows, rng)
            seen = np.array([(chosen == x).mean() for x in drafts])
            assert np.abs(seen - law).max() <= 5 * np.sqrt(0.25 / trials), drafts
            assert np.array_equal(mass, rule.selection[chosen])


@pytest.mark.parametrize("design", DESIGNS)
def test_check_lossless_passes_and_catches_planted_bugs(design, monkeypatch):
    rng = np.random.default_rng(6)
    p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
    verifier = OptimalTransport(design)
    assert ob.check_lossless(p, q, n=3, trials=100_000, seed=1, verifier=verifier).passed
    assert verifier.acceptance(p, q, 3) == pytest.approx(
        ob.optimal_acceptance(p, q, n=3, design=design), abs=1e-9
    )
    original = rounds_module.round_marginal

    def off_on_one_token(*args, **kwargs):
        r = original(*args, **kwargs).copy()
        top, low = np.argmax(r), np.argmin(r)
        moved = 0.5 * r[top]
        r[top] -= moved
        r[low] += moved
        return r

    monkeypatch.setattr(rounds_module, "round_marginal", off_on_one_token)
    bad = OptimalTransport(design)
    assert not ob.check_lossless(p, q, n=3, trials=100_000, seed=1, verifier=bad).passed
    monkeypatch.undo()

    def shifted(selected, p, r, rng, rest_cdf=None):
        out = original_test(selected, p, r, rng, rest_cdf)
        return np.where(out == selected, out, (out + 1) % p.size)

    original_test = rounds_module.single_draft_test
    monkeypatch.setattr(rounds_module, "single_draft_test", shifted)
    bad = OptimalTransport(design)
    assert not ob.check_lossless(p, q, n=3, trials=100_000, seed=1, verifier=bad).passed


@pytest.mark.parametrize("design", DESIGNS)
def test_one_trial_verify_outputs_p(design):
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    verifier = OptimalTransport(design)
    drafts = get_design(design).sample(q, 2, 4000, rng)
    outs = np.array([verifier.verify(d, p, q, seed)[0] for seed, d in enumerate(drafts)])
    assert np.abs(np.bincount(outs, minlength=6) / outs.size - p).max() < 0.03


def _language_model_like(seed: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """``p``, ``q``: softmaxes of correlated normal logits with spread 2.5."""
    z = np.random.default_rng(seed).normal(size=(2, vocab)) * 2.5
    z[1] += 0.6 * z[0]
    p, q = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("design", DESIGNS)
def test_alpha_star_at_32000_tokens(design):
    p, q = _language_model_like(8, 32_000)
    verifier = OptimalTransport(design)
    rule = verifier.rule(p, q, 2)
    assert isinstance(rule, RoundRule)
    star = ob.optimal_acceptance(p, q, n=2, design=design)
    assert rule.alpha_star == pytest.approx(star, abs=1e-12)
    assert abs(rule.gap) <= 1e-12  # the fit reaches α*
    exact = verifier.acceptance(p, q, 2)
    assert exact is not None and exact == rule.exact_acceptance()
    sim = verifier.simulate(p, q, n=2, trials=20_000, seed=1)
    assert sim.accepted.mean() == pytest.approx(rule.acceptance(), abs=0.02)


def test_methods_edges_and_messages():
    p, q = np.array([0.3, 0.4, 0.2, 0.1]), np.array([0.5, 0.3, 0.2, 0.0])
    cp = OptimalTransport("conditional_poisson")
    assert cp.uses_rounds(3) and not cp.uses_levels(3)
    assert not OptimalTransport("conditional_poisson", method="lp").uses_rounds(3)
    assert has_round_rule("without_replacement", 8) and not has_round_rule("iid", 2)
    with pytest.raises(ValueError, match="method='lp'"):
        OptimalTransport("iid", method="rounds").verify([0, 1], p, q, 0)
    with pytest.raises(ValueError, match="larger than the support of q"):
        round_rule(p, q, 4, "conditional_poisson")
    with pytest.raises(ValueError, match="round rule serves"):
        round_rule(p, q, 2, "iid")
    with pytest.raises(ValueError, match="q = 0"):
        round_rule(p, q, 2, "conditional_poisson").select(np.array([[0, 3]]), None)
    one = round_rule(p, q, 1, "without_replacement")  # one draft: r = q
    assert np.allclose(one.selection, q, atol=1e-15)
    every = round_rule(p, q, 3, "without_replacement")  # n = support: one set
    assert every.acceptance() == pytest.approx(
        ob.optimal_acceptance(p, q, n=3, design="without_replacement"), abs=1e-12
    )
    big = np.full(20_000, 1 / 20_000)
    assert cp.applies(big, big, 4)
    assert not OptimalTransport("conditional_poisson", method="lp").applies(big, big, 4)


def test_masses_down_to_1e_300_and_a_clear_error_beyond():
    p = np.full(4, 0.25)
    q = np.array([1.0, 1e-300, 1e-300, 1e-300])  # e_3(q) = 1e-900: below the floats
    q /= q.sum()
    for design in DESIGNS:
        for n in (2, 3, 4):
            rule = round_rule(p, q, n, design)
            assert np.all(np.isfinite(rule.selection))
            assert rule.selection.sum() == pytest.approx(1.0, abs=1e-12)
            star = ob.optimal_acceptance(p, q, n=n, design=design)
            assert rule.acceptance() == pytest.approx(star, abs=1e-12)
    q = np.array([5e-324, 1.0, 0.5, 1e-300])  # e_2 of the scaled masses overflows
    q /= q.sum()
    with pytest.raises(ValueError, match=r"round rule .* not finite"):
        round_rule(p, q, 4, "conditional_poisson")


def test_an_unfitted_rule_reports_no_exact_acceptance():
    rng = np.random.default_rng(9)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    blocks = round_blocks(p, q, 3, "conditional_poisson")
    shares = np.zeros((3, blocks.order.size))
    shares[0] = 1.0  # every token in round 0: the priority order inside each block
    loose = _with_shares(p, q, 3, "conditional_poisson", shares)
    assert loose.violation > 1e-6
    assert loose.exact_acceptance() is None
    assert loose.gap == pytest.approx(loose.violation, abs=1e-12)


@pytest.mark.parametrize("n", [30, 60])
def test_the_clock_integral_keeps_its_accuracy_at_many_drafts(n):
    # the clock integrand narrows as n grows (log T_(n) has variance ≈ 1/n): each block's
    # total is f's step whatever the shares, from the design's own prefix masses
    rng = np.random.default_rng(10)
    vocab = 100
    p, q = rng.dirichlet(np.ones(vocab)), np.full(vocab, 1 / vocab) * rng.uniform(0.9, 1.1, vocab)
    q /= q.sum()
    blocks = round_blocks(p, q, n, "without_replacement")
    shares = rng.dirichlet(np.ones(3), size=blocks.order.size).T
    r = round_marginal(blocks.q_sorted, shares, blocks.starts, n, "without_replacement")
    tail = get_design("without_replacement").prefix_mass(blocks.q_sorted[::-1][None, :], n)[0]
    f_prefix = 1.0 - tail[::-1]
    f_prefix[0] = 0.0
    totals = np.add.reduceat(r, blocks.starts[:-1])
    assert np.abs(totals - np.diff(f_prefix[blocks.starts])).max() <= 1e-13
    finer = round_marginal(blocks.q_sorted, shares, blocks.starts, n, "without_replacement", 0.02)
    assert np.abs(r - finer).max() <= 1e-14


def test_tilted_odds_beyond_the_floats_leave_the_other_fits():
    # a spread q at n = 60 of 100: the first fit leaves a violation, and the clocks' odds
    # e^{q t*} − 1 at t* (60 fired) reach 1e295, beyond conditional-Poisson fields in floats
    rng = np.random.default_rng(3)
    rng.normal(size=(2, 100))
    z = rng.normal(size=(2, 100)) * 2
    z[1] += 0.5 * z[0]
    p, q = np.exp(z)
    p, q = p / p.sum(), q / q.sum()
    n, design = 60, "without_replacement"
    blocks = round_blocks(p, q, n, design)
    top = np.full(blocks.order.size, rounds_module.ROUNDS - 1.0)
    first = rounds_module._fit(blocks, n, design, rounds_module.ROUNDS, top, tilted=False)
    assert first.violation > rounds_module.FIT_TOLERANCE  # the fallbacks run
    with pytest.raises(ValueError, match="not a positive normal float"):
        rounds_module.poisson_scaled(rounds_module._tilted(blocks.q_sorted, n), n)
    rule = round_rule(p, q, n, design)
    assert rule.selection.sum() == pytest.approx(1.0, abs=1e-13)
    assert rule.violation <= first.violation
    assert abs(rule.gap) <= 1e-11  # α* from the design's prefix masses, good to ~1e-12 here


def test_the_clock_nodes_serve_hundreds_of_drafts():
    # t_lo^{n+1} e_{n+1}(q) ≤ 1e-18, with e_{n+1} of 400 equal masses C(400, n+1) / 400^{n+1}
    # far below the floats (n = 200)
    q = np.full(400, 1 / 400)
    for n in (2, 60, 200):
        nodes, weights = clock_nodes(q, n, 0.15)
        assert np.all(np.isfinite(nodes)) and np.all(weights > 0)
        log_top = (
            math.lgamma(401) - math.lgamma(n + 2) - math.lgamma(400 - n) - (n + 1) * math.log(400)
        )
        assert (n + 1) * np.log(nodes[0]) + log_top <= np.log(1e-18)


@pytest.mark.parametrize(("seed", "n"), [(0, 2), (1, 3), (2, 5)])
def test_what_lies_left_of_the_clock_grid_is_the_next_clocks_tail(seed, n):
    # summed over tokens and rounds, the integrand left of t_lo is the density of the
    # (n+1)-th clock: its integral is P[N(t_lo) ≥ n + 1] (Poisson-binomial, by recursion),
    # which the grid's left end puts below t_lo^{n+1} e_{n+1}(q) = 1e-18 / 4^{n+1}
    from otbound.selection._round_kernels import wor_round_values

    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(40)), rng.dirichlet(np.full(40, 0.3))
    blocks = round_blocks(p, q, n, "without_replacement")
    shares = rng.dirichlet(np.ones(3), size=blocks.order.size).T
    nodes, _ = clock_nodes(blocks.q_sorted, n, 0.15)
    t_lo, h = nodes[0], 0.02
    left = t_lo * np.exp(-h * (np.arange(2000, 0, -1) - 0.5))  # midpoints below t_lo
    sums = rounds_module.share_sums(shares)
    values = wor_round_values(blocks.q_sorted, sums, blocks.starts, n, left, h * left, 1)
    integral = float((shares * values).sum())
    fired = -np.expm1(-blocks.q_sorted * t_lo)
    law = np.zeros(blocks.order.size + 1)  # P[N(t_lo) = k]
    law[0] = 1.0
    for chance in fired:
        law[1:] = law[1:] * (1.0 - chance) + law[:-1] * chance
        law[0] *= 1.0 - chance
    tail = float(law[n + 1 :].sum())
    assert integral == pytest.approx(tail, rel=1e-3)
    assert tail <= 1e-18 / 4.0 ** (n + 1) * (1.0 + 1e-9)


def test_a_block_fit_stops_once_its_exact_violation_is_met():
    # one block of slope near 1 (p a hair off q), whose violation falls sweep by sweep: with
    # a tolerance as large as the block's mass no sweep runs, with a negative one every sweep
    # runs, and the rule's tolerance stops earlier than that with at most its violation
    from otbound.selection._round_kernels import fit_positions

    rng = np.random.default_rng(12)
    q = rng.dirichlet(np.ones(30))
    p = q * (1.0 + 1e-3 * rng.normal(size=30))
    p /= p.sum()
    n, design = 3, "conditional_poisson"
    blocks = round_blocks(p, q, n, design)
    scaled, whole = rounds_module.poisson_scaled(blocks.q_sorted, n)
    top = np.full(blocks.order.size, rounds_module.ROUNDS - 1.0)
    scale = np.ones((rounds_module.ROUNDS, top.size))

    def fit(tolerance: float) -> np.ndarray:
        args = (blocks.target * whole, blocks.p_sorted * whole, blocks.slope < 1.0)
        return fit_positions(scaled, *args, blocks.starts, n, top, scale, 60, 1.3, tolerance)

    def violation(position: np.ndarray) -> float:
        return rounds_module._evaluate(blocks, position, rounds_module.ROUNDS, n, design).violation

    assert violation(top) > 1e-6
    assert np.array_equal(fit(1.0), top)  # met before the first sweep
    early, full = fit(rounds_module.BLOCK_TOLERANCE), fit(-1.0)
    assert violation(early) <= rounds_module.FIT_TOLERANCE / 4
    assert not np.array_equal(early, full)  # it stopped before the end


def test_a_stuck_without_replacement_fit_hands_over(monkeypatch):
    # clock values that no position changes (an unfitted marginal in every round): the
    # violation stays far above the coarse rule's error, and the defect correction stops
    # after two corrections without a tenth's gain (it would go on at the fine step)
    rng = np.random.default_rng(13)
    p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
    n, design = 2, "without_replacement"
    blocks = round_blocks(p, q, n, design)
    top = np.full(blocks.order.size, rounds_module.ROUNDS - 1.0)
    low = rounds_module.shares_from_positions(top * 0.0, 3)  # all in round 0: priority order
    unfitted = round_marginal(blocks.q_sorted, low, blocks.starts, n, design)
    stuck = np.tile(unfitted, (3, 1))  # the same value in every round: r moves with no share
    calls = []
    real = rounds_module.round_values

    def frozen(q_sorted, shares, starts, n, design, step):  # type: ignore[no-untyped-def]
        if design != "without_replacement":
            return real(q_sorted, shares, starts, n, design, step)
        calls.append(step)
        return stuck

    monkeypatch.setattr(rounds_module, "round_values", frozen)
    rounds_module._fit_without_replacement(blocks, n, 3, top, blocks.q_sorted, 15)
    violation = blocks.violation((rounds_module.shares_from_positions(top, 3) * stuck).sum(axis=0))
    assert violation > rounds_module.STALL_VIOLATION
    assert calls == [rounds_module.COARSE_STEP] * 3


@pytest.mark.parametrize("design", DESIGNS)
def test_lossless_at_32000_tokens_and_a_residual_off_by_one_token_is_caught(design, monkeypatch):
    # check_lossless's default test at 200,000 trials detects a TV of 0.01 with power 0.99
    # (tests/test_optimal_levels.py shows the bound); a residual shifted by one token fails it
    from otbound.selection import rule as rule_module

    trials = 200_000
    p, q = _language_model_like(14, 32_000)
    assert ob.check_lossless(
        p, q, n=2, trials=trials, seed=2, verifier=OptimalTransport(design)
    ).passed

    def shifted(selected, p, r, rng, rest_cdf=None):  # type: ignore[no-untyped-def]
        out = rule_module.single_draft_test(selected, p, r, rng, rest_cdf)
        return np.where(out == selected, out, (out + 1) % p.size)

    monkeypatch.setattr(rounds_module, "single_draft_test", shifted)
    bad = OptimalTransport(design)
    assert not ob.check_lossless(p, q, n=2, trials=trials, seed=3, verifier=bad).passed


def test_a_fit_held_by_the_coarse_clock_rule_goes_on_at_the_fine_step():
    # p = q at n = 16: one block of slope 1, where the coarse clock rule's own error (about
    # 1e-5) is the floor of the coarse corrections; the fit must finish at the fine step
    q = np.random.default_rng(0).dirichlet(np.full(100, 30.0))
    rule = round_rule(q.copy(), q, 16, "without_replacement")
    assert rule.violation <= rounds_module.FIT_TOLERANCE
