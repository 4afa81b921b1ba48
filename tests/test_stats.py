"""otbound.stats: the Wilson interval against published values and its closed form at 0/n and
n/n; the cluster-robust interval against a hand computation and the ordinary t interval; the
paired difference against the paired t interval, the variance decomposition and its coverage
in simulations where the true difference is known."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

import otbound as ob
from otbound.stats import (
    cluster_mean_interval,
    paired_difference,
    paired_difference_interval,
    wilson_interval,
)

Z95 = NormalDist().inv_cdf(0.975)  # 1.959963984540054, without scipy


def test_wilson_matches_published_values() -> None:
    # Newcombe (1998), Statistics in Medicine 17, 857-872, Table I, method 3 (Wilson score)
    lo, hi = wilson_interval(81, 263)
    assert (round(lo, 4), round(hi, 4)) == (0.2553, 0.3662)
    lo, hi = wilson_interval(15, 148)
    assert (round(lo, 4), round(hi, 4)) == (0.0624, 0.1605)
    lo, hi = wilson_interval(0, 20)
    assert (round(lo, 4), round(hi, 4)) == (0.0, 0.1611)
    lo, hi = wilson_interval(1, 29)
    assert (round(lo, 4), round(hi, 4)) == (0.0061, 0.1718)


@pytest.mark.parametrize("n", [1, 10, 263])
def test_wilson_at_zero_and_all_successes(n: int) -> None:
    z2 = Z95 * Z95
    lo, hi = wilson_interval(0, n)
    assert lo == pytest.approx(0.0, abs=1e-15) and lo >= 0.0
    assert hi == pytest.approx(z2 / (n + z2), rel=1e-12)
    lo, hi = wilson_interval(n, n)
    assert lo == pytest.approx(n / (n + z2), rel=1e-12)
    assert hi == pytest.approx(1.0, abs=1e-15) and hi <= 1.0


def test_wilson_closed_form_and_level() -> None:
    s, n = 7, 20
    p = s / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    assert wilson_interval(s, n) == pytest.approx((centre - half, centre + half), rel=1e-12)
    narrow, wide = wilson_interval(s, n, 0.8), wilson_interval(s, n, 0.99)
    assert wide[0] < narrow[0] < p < narrow[1] < wide[1]


@pytest.mark.parametrize(("successes", "trials"), [(0, 0), (-1, 5), (6, 5)])
def test_wilson_refuses_impossible_counts(successes: int, trials: int) -> None:
    with pytest.raises(ValueError, match="Wilson interval"):
        wilson_interval(successes, trials)


def test_the_verifiers_wilson_interval_agrees() -> None:
    from otbound.verifiers.base import wilson_interval as verifiers_wilson

    for s, n in [(0, 5), (3, 5), (5, 5), (81, 263)]:
        assert verifiers_wilson(s, n) == wilson_interval(s, n)


def test_cluster_interval_by_hand() -> None:
    totals, counts = np.array([3.0, 1.0, 2.0, 4.0]), np.array([2, 2, 1, 3])
    mean, lo, hi = cluster_mean_interval(totals, counts)
    # m = 10 / 8; residuals T_c - m M_c = 0.5, -1.5, 0.75, 0.25 (squares sum to 3.125);
    # se = sqrt(4/3 * 3.125) / 8; t(3 df, 0.975) = 3.182446305284263
    se = math.sqrt(4 / 3 * 3.125) / 8
    assert mean == pytest.approx(1.25, rel=1e-15)
    assert (lo, hi) == pytest.approx((1.25 - 3.182446305284263 * se, 1.25 + 3.182446305284263 * se))


def test_one_value_per_cluster_is_the_t_interval() -> None:
    values = np.random.default_rng(0).normal(size=12)
    mean, lo, hi = cluster_mean_interval(values, np.ones(12), 0.9)
    expect = scipy_stats.t.interval(0.9, 11, loc=values.mean(), scale=scipy_stats.sem(values))
    assert mean == pytest.approx(values.mean()) and (lo, hi) == pytest.approx(expect)


def test_cluster_interval_edge_cases() -> None:
    assert all(np.isnan(cluster_mean_interval(np.zeros(0), np.zeros(0))))
    mean, lo, hi = cluster_mean_interval(np.array([3.0, 0.0]), np.array([4, 0]))
    assert mean == 0.75 and np.isnan(lo) and np.isnan(hi)  # one cluster: no interval
    # empty clusters are left out (they do not add degrees of freedom)
    with_empty = cluster_mean_interval(np.array([1.0, 0.0, 3.0]), np.array([2, 0, 2]))
    without = cluster_mean_interval(np.array([1.0, 3.0]), np.array([2, 2]))
    assert with_empty == pytest.approx(without)


# ---------------------------------------------------------------------------------------------
# The paired difference of two ratio estimators on the same clusters


def _paired_t_interval(diffs: np.ndarray, level: float) -> tuple[float, float]:
    return scipy_stats.t.interval(
        level, diffs.size - 1, loc=diffs.mean(), scale=scipy_stats.sem(diffs)
    )


def test_one_value_per_cluster_is_the_paired_t_interval() -> None:
    rng = np.random.default_rng(1)
    shared = rng.normal(size=15)
    a, b = shared + rng.normal(0.3, 0.5, 15), shared + rng.normal(0.0, 0.5, 15)
    ones = np.ones(15)
    d, lo, hi = paired_difference_interval(a, ones, b, ones, 0.9)
    assert d == pytest.approx((a - b).mean(), rel=1e-12)
    assert (lo, hi) == pytest.approx(_paired_t_interval(a - b, 0.9), rel=1e-12)


def test_the_variance_is_the_two_variances_less_twice_the_covariance() -> None:
    # se(D)^2 = se_A^2 + se_B^2 - 2 C/(C-1) sum_c e_Ac e_Bc, from cluster_mean_interval's ends
    rng = np.random.default_rng(2)
    ma, mb = rng.integers(1, 9, 20).astype(float), rng.integers(1, 9, 20).astype(float)
    effect = rng.normal(size=20)
    ta, tb = ma * (2 + effect) + rng.normal(size=20), mb * (1.5 + effect) + rng.normal(size=20)
    t = scipy_stats.t.ppf(0.975, 19)
    mean_a, lo_a, _ = cluster_mean_interval(ta, ma)
    mean_b, lo_b, _ = cluster_mean_interval(tb, mb)
    e_a, e_b = (ta - mean_a * ma) / ma.sum(), (tb - mean_b * mb) / mb.sum()
    covariance = 20 / 19 * np.sum(e_a * e_b)
    se = math.sqrt(((mean_a - lo_a) / t) ** 2 + ((mean_b - lo_b) / t) ** 2 - 2 * covariance)
    d, lo, hi = paired_difference_interval(ta, ma, tb, mb)
    assert d == pytest.approx(mean_a - mean_b, rel=1e-12)
    assert (lo, hi) == pytest.approx((d - t * se, d + t * se), rel=1e-10)
    assert covariance > 0  # the shared effect: the paired interval is the narrower one


def _simulated_runs(rng: np.random.Generator, reps: int, clusters: int, sign: float):
    """Per-cluster totals and counts of two runs sharing a cluster effect (times ``sign`` in
    run B); true ratio means 2.0 and 1.7. A cluster's total is the sum of its ``M`` values
    ``mu + effect + N(0, 1)``: ``M (mu + effect) + sqrt(M) N(0, 1)``."""
    shape = (reps, clusters)
    effect = rng.normal(0.0, 0.8, shape)
    ma, mb = 1.0 + rng.poisson(8, shape), 1.0 + rng.poisson(5, shape)
    ta = ma * (2.0 + effect) + np.sqrt(ma) * rng.normal(size=shape)
    tb = mb * (1.7 + sign * effect) + np.sqrt(mb) * rng.normal(size=shape)
    return ta, ma, tb, mb


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_paired_interval_covers_the_true_difference(sign: float) -> None:
    """Over 4,000 simulated pairs of runs (40 clusters) the 95% interval of the difference
    covers the true 0.3 in 93.5-96.5% of them (binomial s.d. 0.34%); the interval that drops
    the pairing covariance (each run's own variance, added) covers about 100% when the shared
    cluster effect is positively correlated and far less than 95% when negatively: both are
    caught by the same band."""
    reps, clusters = 4000, 40
    ta, ma, tb, mb = _simulated_runs(np.random.default_rng(7), reps, clusters, sign)
    cover = unpaired_cover = 0
    t = scipy_stats.t.ppf(0.975, clusters - 1)
    for r in range(reps):
        d, lo, hi = paired_difference_interval(ta[r], ma[r], tb[r], mb[r])
        cover += lo <= 0.3 <= hi
        _, lo_a, _ = cluster_mean_interval(ta[r], ma[r])
        _, lo_b, _ = cluster_mean_interval(tb[r], mb[r])
        half = math.hypot(ta[r].sum() / ma[r].sum() - lo_a, tb[r].sum() / mb[r].sum() - lo_b)
        unpaired_cover += d - half <= 0.3 <= d + half
    assert 0.935 <= cover / reps <= 0.965, cover / reps
    unpaired = unpaired_cover / reps
    assert unpaired > 0.99 if sign > 0 else unpaired < 0.9, unpaired
    assert t > 2.0  # Student's t, not the normal quantile, at 39 degrees of freedom


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ((np.ones(3), np.ones(3), np.ones(2), np.ones(2)), "one length"),
        ((np.ones(3), np.array([1, 0, 1]), np.ones(3), np.ones(3)), "one run only"),
        ((np.array([1.0, np.nan]), np.ones(2), np.ones(2), np.ones(2)), "without NaN"),
        ((np.ones(2), np.array([1, -1]), np.ones(2), np.ones(2)), "counts >= 0"),
        ((np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2)), "at least one cluster"),
    ],
)
def test_paired_interval_refuses_what_it_cannot_pair(arrays, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_difference_interval(*arrays)


def test_paired_interval_edge_cases() -> None:
    # clusters empty in both runs are left out; one cluster: no interval; a bad level refused
    d, lo, hi = paired_difference_interval(
        np.array([4.0, 0.0, 6.0]),
        np.array([2, 0, 3]),
        np.array([2.0, 0.0, 4.0]),
        np.array([1, 0, 2]),
    )
    same = paired_difference_interval(
        np.array([4.0, 6.0]), np.array([2, 3]), np.array([2.0, 4.0]), np.array([1, 2])
    )
    assert (d, lo, hi) == pytest.approx(same)
    d, lo, hi = paired_difference_interval(np.array([3.0]), np.ones(1), np.array([1.0]), np.ones(1))
    assert d == 2.0 and np.isnan(lo) and np.isnan(hi)
    with pytest.raises(ValueError, match="level"):
        paired_difference_interval(np.ones(3), np.ones(3), np.ones(3), np.ones(3), level=95)


def test_paired_difference_of_two_tables() -> None:
    """Rows grouped by cluster (string ids, any order) give the totals and counts of
    :func:`paired_difference_interval`; the means are each run's ratio estimator."""
    a = pd.DataFrame({"prompt": list("xxyyyzz"), "tokens": [3, 2, 1, 2, 2, 3, 3]})
    b = pd.DataFrame({"prompt": list("zyxxzxy"), "tokens": [2, 1, 2, 1, 3, 2, 2]})
    result = paired_difference(a, b, level=0.9)
    expect = paired_difference_interval(
        np.array([5.0, 5.0, 6.0]),
        np.array([2, 3, 2]),
        np.array([5.0, 3.0, 5.0]),
        np.array([3, 2, 2]),
        0.9,
    )
    assert (result.difference, result.ci_low, result.ci_high) == pytest.approx(expect)
    assert result.mean_a == pytest.approx(16 / 7) and result.mean_b == pytest.approx(13 / 7)
    assert result.clusters == 3 and result.level == 0.9
    assert result.excludes_zero == (result.ci_low > 0 or result.ci_high < 0)


def test_paired_difference_says_what_is_wrong() -> None:
    a = {"prompt": [0, 0, 1], "tokens": [1.0, 2.0, 3.0]}
    with pytest.raises(ValueError, match="one run only"):
        paired_difference(a, {"prompt": [0, 2], "tokens": [1.0, 2.0]})
    with pytest.raises(ValueError, match="has no column 'tokens'"):
        paired_difference(a, {"prompt": [0, 1], "acceptance": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"b\['tokens'\] has 1 missing"):
        paired_difference(a, {"prompt": [0, 1], "tokens": [1.0, np.nan]})
    with pytest.raises(ValueError, match=r"a\['prompt'\] has 1 missing"):
        paired_difference({"prompt": [0, None], "tokens": [1.0, 2.0]}, a)
    steps = pd.DataFrame({"prompt_id": pd.array([0, 1, pd.NA], "Int64"), "gap": [0.1, 0.2, 0.3]})
    with pytest.raises(ValueError, match=r"a\['prompt_id'\] has 1 missing"):
        paired_difference(steps, steps, value="gap", cluster="prompt_id")
    whole = steps.iloc[:2]  # nullable integer ids without a missing one pair as integers
    assert paired_difference(whole, whole, value="gap", cluster="prompt_id").difference == 0.0


def test_the_summary_gap_interval_is_the_paired_interval() -> None:
    """``compute_bounds``' gap column (``α* − acceptance`` per step, then its clustered mean) is
    the paired interval of the bound against the verifier over the same steps."""
    from otbound.analysis import summarise

    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(6), size=30), rng.dirichlet(np.ones(6), size=30)
    rows = ob.compare(p, q, n=2, verifiers=["rrs", "kseq"], trials=0)
    rows["prompt_id"] = rows["step"] // 4  # 8 prompts of up to 4 steps
    summary = summarise(rows).set_index("verifier")
    for verifier in ("rrs", "kseq"):
        part = rows[rows["verifier"] == verifier]
        paired = paired_difference(part, part, value="alpha_star", cluster="prompt_id")
        gap = paired_difference(
            part.assign(value=part["alpha_star"]),
            part.assign(value=part["acceptance"]),
            value="value",
            cluster="prompt_id",
        )
        row = summary.loc[verifier]
        assert paired.difference == 0.0
        assert (row["gap"], row["gap_ci_low"], row["gap_ci_high"]) == pytest.approx(
            (gap.difference, gap.ci_low, gap.ci_high), rel=1e-12
        )
