"""Tests of otbound.evaluate: the lossless check and the comparison table."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kstest

from otbound import optimal_acceptance
from otbound.evaluate import check_lossless, compare, skipped_cells
from otbound.verifiers import VERIFIERS, get_verifier

P4 = np.array([0.1, 0.2, 0.3, 0.4])
Q4 = np.array([0.4, 0.3, 0.2, 0.1])


def res(p, q):
    d = np.maximum(p - q, 0.0)
    return d / d.sum() if d.sum() > 0 else p.copy()


class PlainRRS:
    """A user's own verifier: correct RRS with replacement, one trial at a time."""

    name = "plain_rrs"
    design = "iid"

    def acceptance(self, p, q, n=2):
        return None

    def verify(self, drafts, p, q, rng):
        target = p
        for x in drafts:
            if rng.random() < min(1.0, target[x] / q[x]):
                return int(x), True
            target = res(target, q)
        y = int(rng.choice(p.size, p=target))
        return y, y in list(drafts)


class SkipDuplicatesRRS(PlainRRS):
    """The planted bug: a duplicate draft is skipped without updating the residual."""

    name = "buggy_rrs"

    def verify(self, drafts, p, q, rng):
        target, seen = p, set()
        for x in drafts:
            x = int(x)
            if x in seen:
                continue  # BUG: correct RRS rejects it again and moves to res(target, q)
            seen.add(x)
            if rng.random() < min(1.0, target[x] / q[x]):
                return x, True
            target = res(target, q)
        y = int(rng.choice(p.size, p=target))
        return y, y in list(drafts)


def buggy_law(p, q):
    """Exact output law of the planted bug at n = 2, by enumerating the draft pairs."""
    law = np.zeros(p.size)
    for x1, x2 in itertools.product(range(p.size), repeat=2):
        w = q[x1] * q[x2]
        a1 = min(1.0, p[x1] / q[x1])
        law[x1] += w * a1
        p2 = res(p, q)
        if x2 == x1:
            law += w * (1 - a1) * p2  # skipped: samples p_2 instead of p_3
            continue
        a2 = min(1.0, p2[x2] / q[x2])
        law[x2] += w * (1 - a1) * a2
        law += w * (1 - a1) * (1 - a2) * res(p2, q)
    return law


# -- the planted bug ---------------------------------------------------------------------------


def test_planted_bug_is_off_by_tv_0027_and_fails_at_default_settings():
    law = buggy_law(P4, Q4)
    tv = 0.5 * np.abs(law - P4).sum()
    assert tv == pytest.approx(0.027, abs=0.001)
    result = check_lossless(P4, Q4, n=2, verifier=SkipDuplicatesRRS())  # the defaults
    assert not result.passed
    assert result.p_value < 1e-20
    assert result.tv_lower > 0.015  # the bound certifies a real difference
    assert result.tv_lower <= tv <= result.tv_upper
    assert "FAILED" in result.message


def test_correct_user_verifier_with_verify_only_passes():
    result = check_lossless(P4, Q4, n=2, trials=50_000, seed=3, verifier=PlainRRS())
    assert result.passed, result.message
    assert result.trials == 50_000
    assert result.tv_lower == 0.0 and result.tv_distance < result.tv_upper


# -- every shipped verifier passes on >= 50 random cases -----------------------------------------


def random_case(rng, kind, vocab):
    if kind == "onehot":
        p = np.zeros(vocab)
        p[rng.integers(vocab)] = 1.0
        q = rng.dirichlet(np.ones(vocab))
    elif kind == "disjoint":
        perm = rng.permutation(vocab)
        half = vocab // 2
        p, q = np.zeros(vocab), np.zeros(vocab)
        p[perm[:half]] = rng.dirichlet(np.ones(half))
        q[perm[half:]] = rng.dirichlet(np.ones(vocab - half))
    elif kind == "near_uniform":
        p = np.full(vocab, 1.0 / vocab) * (1 + rng.uniform(-0.02, 0.02, vocab))
        q = np.full(vocab, 1.0 / vocab) * (1 + rng.uniform(-0.02, 0.02, vocab))
    elif kind == "peaked":
        p, q = rng.dirichlet(np.full(vocab, 0.15)), rng.dirichlet(np.full(vocab, 0.15))
    elif kind == "onehot_q":
        p = rng.dirichlet(np.ones(vocab))
        q = np.zeros(vocab)
        q[rng.integers(vocab)] = 1.0
    else:
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
    return p / p.sum(), q / q.sum()


LOSSLESS_KINDS = ("dirichlet", "onehot", "disjoint", "near_uniform", "peaked", "onehot_q")


@pytest.mark.parametrize("name", VERIFIERS)
def test_every_shipped_verifier_passes_the_lossless_check(name):
    """Default settings (200,000 trials, significance 1e-5), fixed seeds, >= 50 cases each,
    one-hot, disjoint and near-uniform included; n from 1 to 4 where the verifier applies."""
    v = get_verifier(name)
    rng = np.random.default_rng(2024)
    passed = 0
    kinds_seen = set()
    attempt = 0
    while passed < 50:
        kind = LOSSLESS_KINDS[attempt % len(LOSSLESS_KINDS)]
        vocab = int(rng.integers(2, 13))
        n = 2 if name == "spechub" else int(rng.integers(1, 5))
        p, q = random_case(rng, kind, vocab)
        attempt += 1
        if not v.applies(p, q, n):
            continue
        result = check_lossless(p, q, n, seed=attempt, verifier=v)
        assert result.passed, (name, kind, n, p, q, result.message)
        passed += 1
        kinds_seen.add(kind)
    assert {"onehot", "disjoint", "near_uniform"} <= kinds_seen


def test_check_lossless_false_failure_rate_is_calibrated():
    """p-values of an exact sampler are close to uniform (pooled chi-square on small counts)."""

    class Exact:
        design = "iid"

        def acceptance(self, p, q, n=2):
            return None

        def simulate(self, p, q, n=2, trials=100, seed=0):
            return np.random.default_rng(seed).choice(p.size, size=trials, p=p), None

    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(40, 0.5))  # many small bins: pooling matters
    pvals = np.array(
        [
            check_lossless(p, p, 1, trials=2_000, seed=s, verifier=Exact()).p_value
            for s in range(400)
        ]
    )
    assert 0.02 <= np.mean(pvals < 0.05) <= 0.09
    assert kstest(pvals, "uniform").pvalue > 1e-3


def test_pooled_bins_have_expected_counts_of_at_least_five():
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.full(300, 0.3))
    result = check_lossless(p, rng.dirichlet(np.ones(300)), 2, trials=3_000, seed=1, verifier="rrs")
    assert np.all(result.expected >= 5.0)
    assert result.dof == result.bins - 1
    assert result.observed.sum() == pytest.approx(3_000)
    assert result.bins < 300  # the small tokens were pooled
    assert result.passed


def test_one_hot_target_has_a_single_bin():
    result = check_lossless([0.0, 1.0, 0.0], [0.3, 0.3, 0.4], 2, trials=1_000, verifier="rrs")
    assert result.passed and result.dof == 0 and result.p_value == 1.0


def test_tokens_outside_the_support_fail():
    class FromDraft(PlainRRS):
        def verify(self, drafts, p, q, rng):
            return int(drafts[0]), True  # outputs q, not p

    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.3, 0.5])
    result = check_lossless(p, q, 1, trials=2_000, verifier=FromDraft())
    assert not result.passed and result.p_value == 0.0
    assert "p = 0" in result.message

    class OutOfRange(PlainRRS):
        def simulate(self, p, q, n=2, trials=10, seed=0):
            return np.full(trials, p.size), np.zeros(trials, bool)

    result = check_lossless(p, q, 1, trials=100, verifier=OutOfRange())
    assert not result.passed and "outside the vocabulary" in result.message


def test_protocol_errors_list_what_is_missing():
    with pytest.raises(TypeError, match=r"design.*acceptance.*simulate"):
        check_lossless(P4, Q4, verifier=object())

    class NoRun:
        design = "iid"

        def acceptance(self, p, q, n=2):
            return None

    with pytest.raises(TypeError, match="simulate") as info:
        check_lossless(P4, Q4, verifier=NoRun())
    assert "design" not in str(info.value).split("lacks")[1]
    with pytest.raises(TypeError, match="acceptance"):
        compare(P4, Q4, n=2, verifiers=[type("X", (), {"design": "iid", "verify": None})()])


def test_check_lossless_bad_arguments():
    with pytest.raises(ValueError, match="significance"):
        check_lossless(P4, Q4, significance=0.0, verifier="rrs")
    with pytest.raises(ValueError, match="trials"):
        check_lossless(P4, Q4, trials=0, verifier="rrs")
    with pytest.raises(ValueError, match="p has a negative"):
        check_lossless([-0.1, 0.5, 0.6], [0.3, 0.3, 0.4], verifier="rrs")
    with pytest.raises(ValueError, match="unknown verifier"):
        check_lossless(P4, Q4, verifier="nope")
    with pytest.raises(ValueError, match="n must be"):
        check_lossless(P4, Q4, n=0, verifier="rrs")


# -- compare ------------------------------------------------------------------------------------

COLUMNS = [
    "step",
    "n",
    "design",
    "verifier",
    "acceptance",
    "ci_low",
    "ci_high",
    "exact",
    "alpha_star",
    "gap",
    "ratio",
]


def test_compare_table_shape_values_and_skips():
    """Every row against its verifier: the exact ones equal ``acceptance`` with a zero-width
    interval; the Monte Carlo ones (at V = 30, importance sampling at n = 4) carry the trials
    asked for and an interval around the estimate."""
    rng = np.random.default_rng(0)
    estimated = 0
    for vocab in (6, 30):
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        df = compare(p, q, n=(2, 4), trials=20_000)
        assert list(df.columns[: len(COLUMNS)]) == COLUMNS
        assert not df.duplicated(["step", "n", "design", "verifier"]).any()
        rows = df[df.verifier != "bound"]
        assert set(rows[rows.n == 2].verifier) == set(VERIFIERS)
        assert set(rows[rows.n == 4].verifier) == set(VERIFIERS) - {"spechub"}  # hub: n = 2
        bounds = df[df.verifier == "bound"]
        assert "hub" in set(bounds[bounds.n == 2].design) and "hub" not in set(
            bounds[bounds.n == 4].design
        )
        for row in rows.itertuples():
            v = get_verifier(row.verifier)
            assert row.design == v.design
            assert row.alpha_star == pytest.approx(optimal_acceptance(p, q, row.n, row.design))
            assert row.gap == pytest.approx(row.alpha_star - row.acceptance)
            assert row.ratio == pytest.approx(row.acceptance / row.alpha_star)
            exact = v.acceptance(p, q, row.n)
            assert row.exact == (exact is not None)
            if exact is not None:
                assert row.acceptance == pytest.approx(exact) and row.ci_low == row.ci_high
            else:
                assert row.ci_low <= row.acceptance <= row.ci_high and row.trials == 20_000
                assert row.ci_low < row.ci_high and row.stderr > 0
                estimated += 1
        gls = rows[rows.verifier == "gls"]
        assert gls.exact.all()  # exact for every n since the quadrature (Monte Carlo before)
        assert (rows[rows.exact].stderr == 0).all() and (rows[rows.exact].trials == 0).all()
    assert estimated > 0, "no Monte Carlo row: give the test a case without a closed form"


def test_compare_skips_optimal_at_large_vocabulary_and_batches_steps():
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(100), size=3)
    q = rng.dirichlet(np.ones(100))  # broadcast over the three steps
    lp = get_verifier("optimal", method="lp")
    df = compare(p, q, n=4, verifiers=["rrs", lp, "kseq"], designs=["iid", "topk"])
    assert set(df.verifier) == {"rrs", "kseq", "bound"}  # 100^4 tuples: no LP-plan row
    levels = compare(p, q, n=4, verifiers=["optimal"])  # its level rule: any vocabulary
    mine, bound = levels[levels.verifier == "optimal"], levels[levels.verifier == "bound"]
    np.testing.assert_allclose(mine.acceptance, bound.acceptance, rtol=0, atol=1e-12)
    assert sorted(df.step.unique()) == [0, 1, 2]
    assert set(df[df.verifier == "bound"].design) == {"iid", "topk"}
    for step in range(3):
        row = df[(df.step == step) & (df.verifier == "rrs")].iloc[0]
        assert row.acceptance == pytest.approx(get_verifier("rrs").acceptance(p[step], q, 4))
    small = compare(p[0, :6] / p[0, :6].sum(), q[:6] / q[:6].sum(), n=2, verifiers=["optimal"])
    assert "optimal" in set(small.verifier)


def test_compare_monte_carlo_for_a_user_verifier_covers_the_truth_and_is_reproducible():
    a = compare(P4, Q4, n=2, verifiers=[PlainRRS(), "rrs"], trials=4_000, seed=7)
    b = compare(P4, Q4, n=2, verifiers=[PlainRRS(), "rrs"], trials=4_000, seed=7)
    c = compare(P4, Q4, n=2, verifiers=[PlainRRS(), "rrs"], trials=4_000, seed=8)
    pd.testing.assert_frame_equal(a, b)
    mine = a[a.verifier == "plain_rrs"].iloc[0]
    truth = get_verifier("rrs").acceptance(P4, Q4, 2)
    assert not mine.exact and mine.trials == 4_000
    assert mine.ci_low <= truth <= mine.ci_high
    assert c[c.verifier == "plain_rrs"].acceptance.iloc[0] != mine.acceptance


def test_compare_bad_arguments():
    with pytest.raises(ValueError, match="n must be"):
        compare(P4, Q4, n=[])
    with pytest.raises(ValueError, match="n must be"):
        compare(P4, Q4, n=0)
    with pytest.raises(ValueError, match="unknown verifier"):
        compare(P4, Q4, verifiers=["nope"])
    with pytest.raises(ValueError, match="p and q must have the same vocabulary"):
        compare(P4, Q4[:3] / Q4[:3].sum())
    with pytest.raises(ValueError, match="unknown design"):
        compare(P4, Q4, designs=["nope"])


def test_compare_step_ids_name_the_steps_and_fix_their_monte_carlo_streams():
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(30), size=5), rng.dirichlet(np.ones(30), size=5)
    kwargs = dict(n=(2, 3), verifiers=[PlainRRS(), "rrs"], trials=500, seed=3)
    whole = compare(p, q, **kwargs, step_ids=[10, 11, 12, 13, 14])
    assert sorted(set(whole.step)) == [10, 11, 12, 13, 14]
    # the same step analysed alone, under its id, gets the same Monte Carlo row
    alone = compare(p[3:4], q[3:4], **kwargs, step_ids=[13])
    pd.testing.assert_frame_equal(
        alone.reset_index(drop=True), whole[whole.step == 13].reset_index(drop=True)
    )
    # under another id it gets another stream
    other = compare(p[3:4], q[3:4], **kwargs, step_ids=[99])
    mc = other.verifier == "plain_rrs"
    mine = alone[alone.verifier == "plain_rrs"].acceptance
    assert not np.array_equal(other[mc].acceptance, mine)
    with pytest.raises(ValueError, match="step_ids"):
        compare(p, q, **kwargs, step_ids=[1, 2])


def test_compare_without_trials_drops_only_the_monte_carlo_rows():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    table = compare(p, q, n=(1, 2), verifiers=["gls", "rrs", PlainRRS()], trials=0)
    assert table.exact.all()
    gls = table[table.verifier == "gls"]
    assert list(gls.n) == [1, 2]  # exact for every n (it was n = 1 only before the quadrature)
    assert "plain_rrs" not in set(table.verifier)  # no acceptance formula: no row
    assert sorted(table[table.verifier == "rrs"].n) == [1, 2]


def test_compare_shares_the_sweep_across_n_and_falls_back_where_n_does_not_apply():
    """The default bound takes every n of a without-replacement design from one sort; a step
    with too few tokens for the largest n gets no row at that n; α* equals a per-n bound's."""
    rng = np.random.default_rng(21)
    p = rng.dirichlet(np.ones(12), size=4)
    q = rng.dirichlet(np.ones(12), size=4)
    q[1, 3:] = 0.0  # step 1: three tokens with q > 0, so n = 8 does not apply there
    q[1] /= q[1].sum()
    calls = []

    def one_n_at_a_time(p_, q_, n, design):
        calls.append((n, design))
        return optimal_acceptance(p_, q_, n, design)

    settings = {"verifiers": ["rrs_without_replacement"], "trials": 0, "n": [2, 3, 8]}
    shared = compare(p, q, **settings)
    single = compare(p, q, **settings, bound=one_n_at_a_time)
    assert calls  # the custom bound was used for every design, without_replacement included
    assert {d for _, d in calls} == {"without_replacement"}
    keys = ["step", "n", "design", "verifier"]
    pd.testing.assert_frame_equal(shared[keys], single[keys])
    np.testing.assert_allclose(shared["alpha_star"], single["alpha_star"], rtol=0, atol=1e-13)
    assert not ((shared["step"] == 1) & (shared["n"] == 8)).any()
    assert ((shared["step"] == 0) & (shared["n"] == 8)).any()


# -- skipped cells -----------------------------------------------------------------------------


def test_compare_reports_every_skipped_cell_with_its_reason():
    """Every (step, n, design, verifier) without a row is in ``skipped_cells`` with its reason,
    and the rows and the skipped cells together make up the whole grid."""
    rng = np.random.default_rng(31)
    p = rng.dirichlet(np.ones(8), size=3)
    q = rng.dirichlet(np.ones(8), size=3)
    q[1, 3:] = 0.0  # step 1: three tokens with q > 0
    q[1] /= q[1].sum()
    verifiers = ["rrs", "rrs_without_replacement", "spechub", PlainRRS()]
    df = compare(p, q, n=(2, 4), verifiers=verifiers, trials=0)
    skipped = skipped_cells(df)
    assert list(skipped.columns) == ["step", "n", "design", "verifier", "reason"]
    designs = {"rrs": "iid", "rrs_without_replacement": "without_replacement", "spechub": "hub"}
    grid = {  # every cell: the verifiers' and one "bound" cell per design
        (s, k, d, v)
        for s in range(3)
        for k in (2, 4)
        for v, d in [
            *designs.items(),
            ("plain_rrs", "iid"),
            *(("bound", d) for d in designs.values()),
        ]
    }
    rows = set(df[["step", "n", "design", "verifier"]].itertuples(index=False, name=None))
    cells = set(skipped[["step", "n", "design", "verifier"]].itertuples(index=False, name=None))
    assert rows.isdisjoint(cells) and rows | cells == grid
    reason = {cell[:4]: cell[4] for cell in skipped.itertuples(index=False, name=None)}
    support = "n larger than the support of q"
    assert reason[1, 4, "without_replacement", "bound"] == support
    assert reason[1, 4, "without_replacement", "rrs_without_replacement"] == support
    assert (
        reason[0, 4, "hub", "spechub"]
        == reason[0, 4, "hub", "bound"]
        == "design defined for n=2 only"
    )
    assert reason[2, 2, "iid", "plain_rrs"] == "no exact acceptance and no Monte Carlo trials"
    assert len(skipped) == len(grid) - len(df)
    # a verifier outside its own limits (the LP plan enumerates V^n draft tuples)
    big = rng.dirichlet(np.ones(100))
    lp = get_verifier("optimal", method="lp")
    table = compare(big, big[::-1], n=4, verifiers=[lp], trials=0)
    assert skipped_cells(table).reason.tolist() == ["the verifier does not apply"]


def test_compare_without_skips_has_an_empty_skipped_table_and_tables_concatenate():
    a = compare(P4, Q4, n=2, verifiers=["rrs"], trials=0)
    b = compare(P4, Q4, n=4, verifiers=["rrs", "spechub"], trials=0)
    assert skipped_cells(a).empty and list(skipped_cells(a).columns)[-1] == "reason"
    assert len(skipped_cells(b)) == 2  # spechub and the hub bound at n = 4
    both = pd.concat([a, b], ignore_index=True)  # the records do not stop a concatenation
    assert len(both) == len(a) + len(b)
    assert skipped_cells(b[b.verifier == "rrs"]).equals(skipped_cells(b))


def test_compare_raises_errors_of_the_bound_instead_of_dropping_rows():
    """A ValueError inside the bound (a NaN in a sweep, a clipping check) is a bug signal:
    it propagates; only the documented not-applicable cells are skipped."""

    def broken(p, q, n, design):
        raise ValueError("the sweep produced NaN")

    with pytest.raises(ValueError, match="the sweep produced NaN"):
        compare(P4, Q4, n=2, verifiers=["rrs"], trials=0, bound=broken)

    def nan_for_one_step(p, q, n, design):
        out = np.atleast_1d(np.asarray(optimal_acceptance(p, q, n, design), dtype=float))
        out[0] = np.nan
        return out

    with pytest.raises(ValueError, match="NaN"):
        compare(P4, Q4, n=2, verifiers=["rrs"], trials=0, bound=nan_for_one_step)


def test_compare_raises_errors_of_the_shared_sweep(monkeypatch):
    import otbound.evaluate as evaluate

    def broken(p, q, counts, design):
        raise ValueError("NaN in the shared sweep")

    monkeypatch.setattr(evaluate, "optimal_acceptance_by_n", broken)
    with pytest.raises(ValueError, match="NaN in the shared sweep"):
        compare(P4, Q4, n=(2, 3), verifiers=["rrs_without_replacement"], trials=0)


def test_compare_gives_each_estimated_row_the_estimate_of_its_own_seed():
    """compare estimates a step's Monte Carlo rows together (every ``n`` of a step, so the
    caches of a step serve them all); each row is still :meth:`estimate` alone with the seed
    of ``(seed, step, n, verifier index)``, whatever else was estimated before it."""
    rng = np.random.default_rng(72)
    p = rng.dirichlet(np.full(600, 0.3), size=2)
    q = rng.dirichlet(np.full(600, 0.3), size=2)
    names = ["importance", "rrs_without_replacement"]
    df = compare(
        p, q, n=(2, 3, 4), verifiers=names, designs=(), trials=2_000, seed=5, target_se=0.01,
        step_ids=[10, 11],
    )  # fmt: skip
    estimated = df[~df["exact"]]
    assert len(estimated) == 2 * 2 * 2  # n = 3, 4 of both verifiers on both steps
    for row in estimated.itertuples():
        index = names.index(row.verifier)
        run_seed = int(
            np.random.SeedSequence(5, spawn_key=(row.step, row.n, index)).generate_state(1)[0]
        )
        alone = get_verifier(row.verifier).estimate(
            p[row.step - 10], q[row.step - 10], row.n, 2_000, run_seed, target_se=0.01
        )
        assert (row.acceptance, row.stderr, row.trials) == (
            alone.acceptance,
            alone.stderr,
            alone.trials,
        ), (row.verifier, row.n)


def test_compare_gives_each_shipped_verifier_its_acceptance_bit_for_bit():
    """compare asks a shipped verifier for every ``n`` of a step at once
    (:meth:`~otbound.verifiers.base.BaseVerifier.acceptances_of`); each row is still the value
    of ``acceptance`` alone, on steps large enough for the shared sorts and quadrature."""
    rng = np.random.default_rng(71)
    p = rng.dirichlet(np.full(3_000, 0.3), size=3)
    q = rng.dirichlet(np.full(3_000, 0.3), size=3)
    names = ["single", "rrs", "rrs_without_replacement", "kseq", "importance", "gls", "topk"]
    df = compare(p, q, n=(2, 4, 8), verifiers=names, designs=(), trials=0)
    checked = 0
    for row in df.itertuples():
        want = get_verifier(row.verifier).acceptance(p[row.step], q[row.step], row.n)
        assert row.acceptance == want, (row.verifier, row.n)
        checked += 1
    assert checked >= 3 * 3 * 5
