"""The 95 % intervals of Rao-Blackwellised estimates cover the exact rate 95 % of the time.

Rows of the shipped sample where the exact acceptance is known: ``n = 2`` on the full
vocabulary (closed forms) and ``n = 3`` on the sample's rows cut to at most 40 tokens (the
exact sums over rejected prefixes or draft tuples), for ``rrs_without_replacement`` and
``importance``. Each row is estimated as ``compute_bounds`` estimates a row without an exact
rate (pilots, then a fresh final sample sized for a standard error of 0.005), on many seeds.

**Power.** 32 rows × 75 seeds = 2,400 intervals, which must cover at least 93.5 % of the
time. Intervals that cover with probability 95 % fail that with probability
``P[Bin(2400, 0.95) < 2244] ≈ 5e-4``; intervals that cover 92 % pass it with probability
``P[Bin(2400, 0.92) ≥ 2244] ≈ 3e-3``. The betting intervals of :meth:`Estimate.ci` cover
99.5 % here; the normal intervals ``mean ± 1.96 s/√m`` of the same estimates (the interval
these rows had) cover 91.8 %, and the test checks that they would fail it, so that the rows
keep the power to tell the two apart.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import otbound as ob
from otbound.verifiers.base import TARGET_SE

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"
SEEDS = 75
LEVEL = 0.95
#: The least share of the intervals that must cover (module docstring: the power).
LEAST_COVERAGE = 0.935

pytestmark = pytest.mark.skipif(
    not (SAMPLE / "manifest.json").is_file(), reason="no sample dump in data/sample"
)


def _cut(p: np.ndarray, q: np.ndarray, most: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """``p`` and ``q`` on at most ``most`` tokens (the 24 likeliest of each), renormalised."""
    keep = np.union1d(np.argsort(-p)[:24], np.argsort(-q)[:24])[:most]
    return p[keep] / p[keep].sum(), q[keep] / q[keep].sum()


def _rows() -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """(verifier, n, p, q) of eight steps of the sample: n = 2 on the full vocabulary and
    n = 3 on the cut rows, for both Rao-Blackwellised verifiers."""
    shard = ob.open_dump(SAMPLE).read_shard(0).distributions(1.0)
    steps = np.random.default_rng(0).choice(shard.target.shape[0], 8, replace=False)
    rows = []
    for step in steps:
        p, q = shard.target[step], shard.draft[step]
        for name in ("rrs_without_replacement", "importance"):
            rows.append((name, 2, p, q))
            rows.append((name, 3, *_cut(p, q)))
    return rows


def test_rao_blackwellised_intervals_cover_the_exact_rate() -> None:
    """Coverage, the rows' power, and width: an interval that covers by being wide (a range
    wider than the verifier's, a higher level) fails the bound on the median width."""
    covered = normal_covered = total = 0
    widths = []  # each interval's width over the normal interval's
    for index, (name, n, p, q) in enumerate(_rows()):
        v = ob.get_verifier(name)
        step = v.validate_step(p, q)
        exact = v.acceptance_of(step, n)
        assert exact is not None  # the oracle: closed form (n = 2) or exact sum (n = 3)
        for seed in range(SEEDS):
            rng = np.random.default_rng([seed, index])
            est = v._sampled_estimate(step, n, 20_000, rng, TARGET_SE)
            assert est.method == "rao_blackwell" and est.stderr < TARGET_SE
            low, high = est.ci(LEVEL)
            covered += low <= exact <= high
            half = 1.959964 * est.stderr
            normal_covered += abs(est.acceptance - exact) <= half
            widths.append((high - low) / (2 * half))
            total += 1
    assert total == 2_400
    assert covered / total >= LEAST_COVERAGE, covered / total
    assert normal_covered / total < LEAST_COVERAGE, normal_covered / total  # the rows' power
    # not vacuous: the median interval is 2.0 normal widths here (a higher level, 2.6; the
    # range (0, 1) in place of the verifier's, 35)
    assert np.median(widths) <= 2.2, np.median(widths)


def _grid_interval(values: np.ndarray, low: float, high: float, level: float) -> np.ndarray:
    """The betting interval by brute force: the hedged capitals of the module
    :mod:`otbound.verifiers._betting`, written out with numpy on a grid of candidate means,
    and the grid points neither capital rejects."""
    y = (values - low) / (high - low)
    m = y.size
    log_ratio = math.log(2.0 / (1.0 - level))
    mu = (0.5 + np.cumsum(y)) / np.arange(2, m + 2)
    var = (0.25 + np.cumsum((y - mu) ** 2)) / np.arange(2, m + 2)
    bets = np.sqrt(2.0 * log_ratio / (m * np.concatenate([[0.25], var[:-1]])))
    nu = np.linspace(1e-6, 1.0 - 1e-6, 20_001)[:, None]
    up = np.log1p(np.minimum(bets, 0.75 / nu) * (y - nu)).sum(axis=1)
    down = np.log1p(-np.minimum(bets, 0.75 / (1.0 - nu)) * (y - nu)).sum(axis=1)
    kept = nu[(up < log_ratio) & (down < log_ratio), 0]
    return low + (high - low) * kept


def test_betting_interval_is_the_set_no_capital_rejects() -> None:
    """The bisection's ends are the ends of the grid's accepted set (to the grid's step) on
    skewed, spread, constant and two-valued samples, on ranges other than [0, 1]."""
    from otbound.verifiers._betting import betting_interval

    rng = np.random.default_rng(11)
    samples = [
        rng.beta(0.3, 4.0, 256),
        rng.random(64),
        np.full(256, 0.4),
        np.where(rng.random(500) < 0.01, 0.9, 0.2),
    ]
    for values in samples:
        for low, high, level in ((0.0, 1.0, 0.95), (-0.5, 2.0, 0.9)):
            kept = _grid_interval(values, low, high, level)
            lo, hi = betting_interval(values, low, high, level)
            step = (high - low) / 20_000
            assert kept.min() - step <= lo <= kept.min() and kept.max() <= hi <= kept.max() + step
    with pytest.raises(ValueError, match="level must be in"):
        betting_interval(samples[0], 0.0, 1.0, 1.0)
    assert betting_interval(np.full(5, 0.3), 0.3, 0.3, 0.95) == (0.3, 0.3)  # one value: known


def test_betting_interval_covers_a_mean_carried_by_a_rare_value() -> None:
    """256 values of 0.5, each 1 with probability 1/500 (mean 0.501; the sample misses the
    rare value 60 % of the time): the betting interval covers the mean in at least 95 % of
    2,000 samples, where the normal interval covers about 40 %."""
    from otbound.verifiers._betting import betting_interval

    rng = np.random.default_rng(13)
    mean = 0.5 + 0.5 / 500
    covered = normal = 0
    for _ in range(2_000):
        values = np.where(rng.random(256) < 1 / 500, 1.0, 0.5)
        lo, hi = betting_interval(values, 0.0, 1.0, LEVEL)
        covered += lo <= mean <= hi
        normal += abs(values.mean() - mean) <= 1.959964 * values.std(ddof=1) / 16
    assert covered / 2_000 >= 0.95 and normal / 2_000 < 0.5, (covered, normal)


@pytest.mark.parametrize("name", ["rrs_without_replacement", "importance"])
def test_every_value_lies_in_the_declared_range(name: str) -> None:
    """The range each verifier proves for its Rao-Blackwellised values
    (``_conditional_range``) holds every one of 4,000 values, on rows of every shape (flat,
    spiky, from the sample) and ``n`` = 2, 3, 5, and is not loose where values can show it:
    on the sample's rows some values come within 5 % of its width of the lower end, and for
    ``rrs_without_replacement`` of the upper end (``importance``'s upper end is the worst
    case of a rare coincidence, which 4,000 values need not reach)."""
    v = ob.get_verifier(name)
    rng = np.random.default_rng(17)
    rows = [(rng.dirichlet(np.full(9, a)), rng.dirichlet(np.full(9, b))) for a, b in
            ((1.0, 1.0), (0.1, 1.0), (1.0, 0.1), (0.2, 0.2))]  # fmt: skip
    sample = [(p, q) for name_, n, p, q in _rows() if n == 2 and name_ == name]
    reach = []
    for p, q in rows + sample[:3]:
        for n in (2, 3, 5):
            if n > np.count_nonzero(q > 0):
                continue
            values = v._conditional(p, q, n, 4_000, rng)
            low, high = v._conditional_range(p, q, n)
            assert low - 1e-12 <= values.min() and values.max() <= high + 1e-12, (n, low, high)
            if p.size > 100:
                reach.append(
                    ((values.min() - low) / (high - low), (high - values.max()) / (high - low))
                )
    assert min(r[0] for r in reach) <= 0.05, reach
    assert name == "importance" or min(r[1] for r in reach) <= 0.05, reach


def test_a_value_outside_the_declared_range_is_refused(monkeypatch) -> None:
    """A range that a value breaks by more than rounding is a bug (the interval would rest on
    it): the estimate raises, naming the verifier, the value and the range."""
    v = ob.get_verifier("rrs_without_replacement")
    row = _rows()[0]
    step = v.validate_step(row[2], row[3])
    monkeypatch.setattr(type(v), "_conditional_range", lambda self, p, q, n: (0.0, 0.5))
    refused = (
        r"Rao-Blackwellised value of verifier 'rrs_without_replacement' \(n=2\), which its "
        r"_conditional_range puts in \[0\.0, 0\.5\] at index"
    )
    with pytest.raises(ValueError, match=refused):
        v._sampled_estimate(step, 2, 1_000, np.random.default_rng(0), None)
