"""The optimal verifier's level rule: acceptance α* at any vocabulary, lossless exactly.

Oracles: the sweep (``optimal_acceptance``), the set LP (``method="lp"``), POT's exact transport
on the enumerated draft tuples, and the rule's output law enumerated exactly (every draft tuple,
every choice of level pieces, ties in a slot split evenly), independent of the slot values the
rule's marginal is computed from; the torch formula against the numpy rule. Every check runs on
the extreme rows of ``_rows``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import ot
import pytest

import otbound as ob
from otbound.audits import detectable_tv
from otbound.selection import (
    has_level_rule,
    level_rule,
    level_rule_acceptance,
    single_draft_test,
)
from otbound.verifiers.optimal import OptimalTransport


def _rows(rng: np.random.Generator, vocab: int, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """Random and extreme steps: Dirichlet, peaked, log-normal with masses to 1e-300 on both
    sides (slots thinner than a float's spacing), p = q, disjoint supports, tied ratios and tied
    masses, zeros on both sides."""
    if kind == 0:
        return rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
    if kind == 1:
        return rng.dirichlet(np.full(vocab, 0.1)), rng.dirichlet(np.full(vocab, 0.1))
    if kind == 2:
        x, y = np.exp(rng.normal(size=(2, vocab)) * 60.0)
        x, y = x / x.sum(), y / y.sum()
        x[rng.random(vocab) < 0.3] = 1e-300
        y[rng.random(vocab) < 0.3] = 1e-300
        return x / x.sum(), y / y.sum()
    if kind == 3:
        p = rng.dirichlet(np.ones(vocab))
        return p, p.copy()
    if kind == 4 and vocab >= 2:
        half = vocab // 2
        p, q = np.zeros(vocab), np.zeros(vocab)
        p[:half] = rng.dirichlet(np.ones(half))
        q[half:] = rng.dirichlet(np.ones(vocab - half))
        return p, q
    if kind == 5:  # q on a grid, p = q times 1 or 2: two ratios, each shared by many tokens
        q = rng.integers(1, 4, vocab).astype(float)
        p = q * rng.integers(1, 3, vocab)
        return p / p.sum(), q / q.sum()
    p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
    p[rng.random(vocab) < 0.3] = 0.0
    q[rng.random(vocab) < 0.3] = 0.0
    p[0] += p.sum() == 0
    q[-1] += q.sum() == 0
    return p / p.sum(), q / q.sum()


def _race(rule, drafts: tuple[int, ...]) -> np.ndarray:
    """P(each draft is selected), enumerated: each draft's piece (slot) with its share, the
    highest slot wins, ties in one slot split evenly (uniform places)."""
    n = len(drafts)
    out = np.zeros(n)
    choices = []
    start, slot, cumulative, _ = rule.tables
    for token in drafts:
        k = rule.position[token]
        lo, hi = start[k], start[k + 1]
        shares = np.diff(np.concatenate([[0.0], cumulative[lo:hi]]))
        choices.append(list(zip(slot[lo:hi], shares, strict=True)))
    for combo in itertools.product(*choices):
        weight = np.prod([share for _, share in combo])
        top = min(slot for slot, _ in combo)
        winners = [j for j, (slot, _) in enumerate(combo) if slot == top]
        for j in winners:
            out[j] += weight / len(winners)
    return out


def _enumerated_selection(rule, q: np.ndarray, n: int) -> np.ndarray:
    """The true selection marginal over every i.i.d. draft tuple."""
    live = np.flatnonzero(q > 0)
    selected = np.zeros(q.size)
    for drafts in itertools.product(live, repeat=n):
        chance = np.prod(q[list(drafts)])
        for j, share in enumerate(_race(rule, drafts)):
            selected[drafts[j]] += chance * share
    return selected


def _output_law(p: np.ndarray, r_true: np.ndarray, r_rule: np.ndarray) -> np.ndarray:
    """The law of the single-draft test of a selection with true marginal ``r_true`` when the
    test uses ``r_rule``: kept with ``min(1, p/r_rule)``, else the residual of ``r_rule``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = np.where(r_rule > 0, np.minimum(1.0, p / r_rule), 0.0)
    rest = np.maximum(p - r_rule, 0.0)
    rest = rest / rest.sum() if rest.sum() > 0 else p
    return r_true * keep + np.sum(r_true * (1 - keep)) * rest


@pytest.mark.parametrize("kind", range(7))
def test_acceptance_is_alpha_star_on_random_and_extreme_rows(kind):
    """Both paths: ``Σ min(p, r)`` of the built rule, and ``level_rule_acceptance`` (one pass
    over the slots, no swaps: what ``acceptance``, ``compute_bounds`` and torch use)."""
    rng = np.random.default_rng(kind)
    worst = 0.0
    for _ in range(60):
        p, q = _rows(rng, int(rng.integers(1, 30)), kind)
        for n in (1, 2, 3, 4, 8):
            star = ob.optimal_acceptance(p, q, n=n)
            rule = level_rule(p, q, n)
            worst = max(worst, abs(rule.acceptance() - star))
            worst = max(worst, abs(level_rule_acceptance(p, q, n) - star))
            assert rule.selection.sum() == pytest.approx(1.0, abs=1e-12)
    assert worst < 1e-12


@pytest.mark.parametrize("kind", range(7))
def test_acceptance_equals_the_set_lp_and_pot(kind):
    rng = np.random.default_rng(100 + kind)
    levels, lp = OptimalTransport(method="levels"), OptimalTransport(method="lp")
    for _ in range(6):
        p, q = _rows(rng, int(rng.integers(2, 6)), kind)
        for n in (1, 2, 3, 4):
            value = levels.acceptance(p, q, n)
            assert value == pytest.approx(lp.acceptance(p, q, n), abs=1e-7)  # HiGHS
            if n <= 3:
                tuples = np.array(list(itertools.product(range(p.size), repeat=n)))
                chance = np.prod(q[tuples], axis=1)
                cost = 1.0 - (tuples[:, :, None] == np.arange(p.size)).any(axis=1)
                assert value == pytest.approx(1.0 - ot.emd2(chance, p, cost), abs=1e-9)


@pytest.mark.parametrize("kind", range(7))
def test_the_selection_marginal_is_the_rules_own_and_the_output_is_p(kind):
    rng = np.random.default_rng(200 + kind)
    for _ in range(5):
        p, q = _rows(rng, int(rng.integers(2, 6)), kind)
        for n in (2, 3):
            rule = level_rule(p, q, n)
            true = _enumerated_selection(rule, q, n)
            # relative: tokens of mass 1e-300 are held to their own size, not to 1e-13
            np.testing.assert_allclose(true, rule.selection, rtol=1e-12, atol=0)
            np.testing.assert_allclose(_output_law(p, true, rule.selection), p, atol=1e-12)


def test_the_sampled_selection_follows_the_race():
    """``select`` draws what the enumerated race says, ties in a slot included: for tuples
    that hold a token and a partner of its swaps, 200,000 selections against the race."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(11)
    checked = 0
    while checked < 6:
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        rule = level_rule(p, q, 3)
        start, slot, _, _ = rule.tables
        shared = [k for k in range(rule.order.size) if start[k + 1] - start[k] > 1]
        if not shared:
            continue
        owner = rule.order[shared[0]]
        partner = rule.order[slot[start[shared[0]] + 1]]
        drafts = (owner, partner, owner)
        chance = _race(rule, drafts)
        picked, _ = rule.select(np.tile(drafts, (200_000, 1)), np.random.default_rng(checked))
        observed = np.array([np.sum(picked == t) for t in (owner, partner)])
        expected = np.array([chance[0] + chance[2], chance[1]]) * picked.size
        keep = expected > 0
        if keep.sum() == 2:
            assert chisquare(observed, expected).pvalue > 1e-5
        else:
            assert observed[~keep].sum() == 0
        checked += 1


def test_the_enumeration_sees_a_wrong_marginal():
    """The oracle above is not blind: a rule whose marginal is off on one token fails it."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    rule = level_rule(p, q, 3)
    true = _enumerated_selection(rule, q, 3)
    wrong = rule.selection.copy()
    wrong[[0, 1]] += [1e-3, -1e-3]
    assert np.abs(_output_law(p, true, wrong) - p).max() > 1e-5


def _swaps(p: np.ndarray, q: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """The rule's slots, blocks and swaps in slot order: each swap as its giver (the upper
    slot) holds it in its level law, checked equal to what the taker holds of it."""
    from otbound.selection._kernels import convex_minorant_blocks, slot_values

    rule = level_rule(p, q, n)
    q_sorted, p_sorted = q[rule.order], p[rule.order]
    _, values = slot_values(q_sorted, n)
    mass = q_sorted * values
    starts = convex_minorant_blocks(p_sorted, mass)
    held = [rule.pieces(token) for token in rule.order]  # each owner's slots and measures
    down = sorted(
        (k, j, m)
        for k, (slots, ms) in enumerate(held)
        for j, m in zip(slots[1:], ms[1:], strict=True)
        if j > k
    )
    up = sorted(
        (j, k, m)
        for k, (slots, ms) in enumerate(held)
        for j, m in zip(slots[1:], ms[1:], strict=True)
        if j < k
    )
    assert [(a, b) for a, b, _ in down] == [(a, b) for a, b, _ in up]  # each swap, both ends
    assert [m for *_, m in down] == [m for *_, m in up]  # the same measure, bit for bit
    giver = np.array([a for a, _, _ in down], dtype=np.int64)
    taker = np.array([b for _, b, _ in down], dtype=np.int64)
    measure = np.array([m for *_, m in down])
    named = {"q": q_sorted, "p": p_sorted, "mass": mass, "starts": starts}
    return {**named, "giver": giver, "taker": taker, "measure": measure}


@pytest.mark.parametrize("kind", range(7))
def test_swaps_fit_their_slots_and_use_each_slot_once(kind):
    """The measure budget: every swap lies inside one block, from a slot to one below it, and
    no slot gives more than its length (its owner keeps ``≥ 0`` of it, but for rounding); the
    level laws' pieces use each slot's length exactly once (one draft's level is uniform); and
    the marginal is the target ``r = c_j p`` on each block (``c_j``: its vertex masses over
    its ``p``), to the rounding of the block's mass (a deficit below it stays unserved)."""
    rng = np.random.default_rng(500 + kind)
    swapped = 0
    for _ in range(25):
        p, q = _rows(rng, int(rng.integers(2, 60)), kind)
        for n in (2, 3, 4, 8, 16):
            rule, s = level_rule(p, q, n), _swaps(p, q, n)
            giver, taker, measure, size = s["giver"], s["taker"], s["measure"], s["q"].size
            block = np.searchsorted(s["starts"], np.arange(size), side="right")
            assert np.all(giver < taker) and np.array_equal(block[giver], block[taker])
            assert np.all(measure > 0)
            given = np.bincount(giver, measure, size) + np.bincount(taker, measure, size)
            assert np.all(given <= s["q"] * (1 + 1e-12)), (n, (given / s["q"]).max())
            swapped += giver.size
            start, slot, cumulative, _ = rule.tables
            owner = np.repeat(np.arange(size), np.diff(start))
            share = np.diff(cumulative, prepend=0.0)
            share[start[:-1]] = cumulative[start[:-1]]  # each owner from 0
            used = np.bincount(slot, share * s["q"][owner], size)
            scale = s["q"].copy()  # rounding: of the largest length a piece is a share of
            np.maximum.at(scale, slot, s["q"][owner])
            assert np.all(np.abs(used - s["q"]) <= 1e-12 * scale), n
            r = rule.selection[rule.order]
            for lo, hi in zip(s["starts"][:-1], s["starts"][1:], strict=True):
                gain, total = s["p"][lo:hi], s["mass"][lo:hi].sum()
                if gain.sum() > 0:  # to the rounding of the block's mass
                    want = total / gain.sum() * gain
                    np.testing.assert_allclose(r[lo:hi], want, rtol=1e-9, atol=1e-12 * total)
    assert kind in (3, 4) or swapped > 0  # there were swaps to check


def test_slots_thinner_than_a_float_stay_ordered():
    """Tokens 0 and 1 hold the two top slots, each 1e-20 long (both round to level 1.0), in
    blocks of their own: a draft of token 0 beats one of token 1 every time, as the race says;
    comparing ``a + u q`` as floats would leave it to the order of the drafts."""
    p = np.array([0.3, 0.2, 0.25, 0.25])
    q = np.array([1e-20, 1e-20, 0.5, 0.5 - 2e-20])
    rule = level_rule(p, q, 3)
    assert rule.position[[0, 1]].tolist() == [0, 1]
    start = rule.tables[0]
    assert start[1] - start[0] == 1 == start[2] - start[1]  # no swaps
    for drafts in ((1, 0, 2), (0, 1, 2), (1, 1, 0)):
        chance = _race(rule, drafts)
        picked, _ = rule.select(np.tile(drafts, (2_000, 1)), np.random.default_rng(0))
        assert np.all(picked == 0) and chance[drafts.index(0)] == 1.0


@pytest.mark.parametrize("kind", range(7))
def test_torch_acceptance_equals_numpy_on_extreme_rows(kind):
    """``level_rule_acceptance_torch`` against the numpy rule and the sweep, on the rows above
    (masses to 1e-300, p = q, disjoint supports, ties, q = 0) and n to 16."""
    torch = pytest.importorskip("torch")
    from otbound.selection.torch_levels import level_rule_acceptance_torch

    rng = np.random.default_rng(600 + kind)
    rows = [_rows(rng, 40, kind) for _ in range(30)]
    p, q = (np.array(side) for side in zip(*rows, strict=True))
    for n in (1, 2, 3, 4, 8, 16):
        got = level_rule_acceptance_torch(torch.from_numpy(p), torch.from_numpy(q), n).numpy()
        want = [level_rule_acceptance(p[i], q[i], n) for i in range(len(p))]
        star = [ob.optimal_acceptance(p[i], q[i], n=n) for i in range(len(p))]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
        np.testing.assert_allclose(got, star, rtol=0, atol=1e-12)


def test_a_subnormal_q_takes_the_top_slot_without_a_warning():
    """``p / q`` overflows to ``+inf`` where ``q`` is subnormal: that token takes the top slot
    (its ratio is the largest) and no RuntimeWarning reaches the user."""
    import warnings

    p, q = np.array([0.5, 0.25, 0.25]), np.array([5e-324, 0.5, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rule = level_rule(p, q, 2)
        value = level_rule_acceptance(p, q, 2)
    assert rule.order[0] == 0 and value == pytest.approx(ob.optimal_acceptance(p, q, n=2))


def _outputs_follow_p(tokens: np.ndarray, p: np.ndarray) -> float:
    """Chi-square p-value of ``tokens`` against ``p`` (tokens of expected count < 5 pooled);
    a token with ``p = 0`` must never come out."""
    from scipy.stats import chisquare

    counts = np.bincount(tokens, minlength=p.size)
    assert counts[p == 0].sum() == 0
    own = p * tokens.size >= 5
    observed = np.append(counts[own], counts[~own].sum())
    expected = np.append(p[own], p[~own].sum()) * tokens.size
    keep = expected > 0
    return float(chisquare(observed[keep], expected[keep]).pvalue) if keep.sum() > 1 else 1.0


@pytest.mark.parametrize("kind", range(7))
def test_simulate_and_verify_are_lossless_on_extreme_rows(kind):
    """``simulate`` (the batch path) and ``verify`` (one trial) on the extreme rows: the output
    follows ``p`` and never lands where ``p = 0``, and the share of accepted trials is the
    acceptance (4 standard errors); a draft of a token with ``q = 0`` is refused."""
    rng = np.random.default_rng(700 + kind)
    verifier = OptimalTransport()
    for row in range(2):
        p, q = _rows(rng, int(rng.integers(2, 7)), kind)
        for n in (1, 2, 3):
            exact = verifier.acceptance(p, q, n)
            sim = verifier.simulate(p, q, n, trials=40_000, seed=row)
            assert _outputs_follow_p(sim.tokens, p) > 1e-5, (row, n)
            se = math.sqrt(exact * (1 - exact) / sim.tokens.size)
            assert abs(sim.accepted.mean() - exact) <= 4 * se + 1e-12, (row, n)
        drafts = rng.choice(p.size, size=(500, 2), p=q)
        one = [verifier.verify(d, p, q, seed) for seed, d in enumerate(drafts)]
        tokens = np.array([token for token, _ in one])
        assert _outputs_follow_p(tokens, p) > 1e-5, row
        exact = verifier.acceptance(p, q, 2)
        accepted = np.mean([hit for _, hit in one])
        assert abs(accepted - exact) <= 4 * math.sqrt(exact * (1 - exact) / 500) + 1e-12, row
    if np.any(q == 0):
        with pytest.raises(ValueError, match="q = 0"):
            verifier.verify([int(np.argmin(q)), int(np.argmax(q))], p, q, 0)


@pytest.mark.parametrize("vocab", [32_000, 151_936])
def test_acceptance_equals_the_sweep_at_real_vocabularies(vocab):
    rng = np.random.default_rng(vocab)
    logits = rng.normal(size=(2, vocab)) * 3.0
    logits[1] += 0.5 * logits[0]
    p, q = np.exp(logits - logits.max(axis=1, keepdims=True))
    p, q = p / p.sum(), q / q.sum()
    for n in (1, 2, 3, 4, 8):
        got = OptimalTransport().acceptance(p, q, n)
        assert got == pytest.approx(ob.optimal_acceptance(p, q, n=n), abs=1e-12)


def _coarse_p_value(tokens: np.ndarray, p: np.ndarray, bins: int) -> float:
    """Chi-square of the output against ``p`` over ``bins`` bins of about equal mass."""
    from scipy.stats import chisquare

    order = np.argsort(p)
    edges = np.searchsorted(np.cumsum(p[order]), np.linspace(0, 1, bins + 1)[1:-1])
    label = np.empty(p.size, dtype=np.int64)
    label[order] = np.searchsorted(edges, np.arange(p.size), side="right")
    observed = np.bincount(label[tokens], minlength=bins)
    expected = np.bincount(label, weights=p, minlength=bins) * tokens.size
    return float(chisquare(observed, expected).pvalue)


def test_lossless_at_32000_tokens_with_power_099_at_tv_001():
    rng = np.random.default_rng(7)
    vocab, trials, bins = 32_000, 200_000, 20
    z = rng.normal(size=(2, vocab)) * 2.5
    z[1] += 0.6 * z[0]
    p, q = np.exp(z - z.max(axis=1, keepdims=True))
    p, q = p / p.sum(), q / q.sum()
    verifier = OptimalTransport()
    assert detectable_tv(bins - 1, trials, 1e-5, 0.99) <= 0.01
    sim = verifier.simulate(p, q, n=4, trials=trials, seed=1)
    assert _coarse_p_value(sim.tokens, p, bins) > 1e-5
    assert ob.check_lossless(p, q, n=4, trials=trials, seed=2, verifier=verifier).passed
    # the acceptance it reports is what it does
    assert sim.accepted.mean() == pytest.approx(verifier.acceptance(p, q, 4), abs=0.005)


def test_a_residual_off_by_one_token_is_caught(monkeypatch):
    from otbound.selection import rule as rule_module

    rng = np.random.default_rng(8)
    vocab = 32_000
    z = rng.normal(size=(2, vocab)) * 2.5
    p, q = np.exp(z - z.max(axis=1, keepdims=True))
    p, q = p / p.sum(), q / q.sum()

    def shifted(selected, p, r, rng, rest_cdf=None):
        out = single_draft_test(selected, p, r, rng, rest_cdf)
        kept = out == selected
        return np.where(kept, out, (out + 1) % p.size)

    monkeypatch.setattr(rule_module, "single_draft_test", shifted)
    result = ob.check_lossless(p, q, n=2, trials=200_000, seed=3, verifier=OptimalTransport())
    assert not result.passed


def test_one_trial_verify_outputs_p():
    rng = np.random.default_rng(9)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    verifier = OptimalTransport()
    drafts = rng.choice(6, size=(4000, 3), p=q)
    outs = np.array([verifier.verify(d, p, q, seed)[0] for seed, d in enumerate(drafts)])
    assert np.abs(np.bincount(outs, minlength=6) / outs.size - p).max() < 0.03


def test_methods_and_their_messages():
    p, q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])
    assert OptimalTransport().uses_levels(4)
    assert not OptimalTransport(method="lp").uses_levels(4)
    assert OptimalTransport(design="without_replacement").acceptance(p, q, 2) == pytest.approx(
        ob.optimal_acceptance(p, q, n=2, design="without_replacement"), abs=1e-7
    )
    with pytest.raises(ValueError, match="method must be one of auto, levels, rounds, lp"):
        OptimalTransport(method="fast")
    wor = OptimalTransport(design="without_replacement", method="levels")
    with pytest.raises(ValueError, match="method='lp'"):
        wor.verify([0, 1], p, q, 0)
    assert not has_level_rule("without_replacement", 2)
    with pytest.raises(ValueError, match="no level rule"):
        level_rule(p, q, 2, "topk")
    big = np.full(151_936, 1 / 151_936)
    assert OptimalTransport().applies(big, big, 4)
    assert not OptimalTransport(method="lp").applies(big, big, 4)


def test_one_draft_is_single_draft_sampling_trial_for_trial():
    """With one draft the rule selects it, spending no randomness, and the test is ``single``'s:
    the same random numbers give the same tokens (tree decoding's runs coincide on chains)."""
    rng = np.random.default_rng(12)
    p, q = rng.dirichlet(np.ones(40)), rng.dirichlet(np.ones(40))
    drafts = rng.choice(40, size=500, p=q)
    optimal, single = OptimalTransport(), ob.get_verifier("single")
    ours = [optimal.verify([d], p, q, seed)[0] for seed, d in enumerate(drafts)]
    theirs = [single.verify([d], p, q, seed)[0] for seed, d in enumerate(drafts)]
    assert ours == theirs
