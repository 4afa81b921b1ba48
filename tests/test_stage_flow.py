"""The importance stage's top-``s`` LP solved as a maximum flow
(:mod:`otbound.verifiers._stage_flow`), against two independent oracles: the LP in the weights
``W`` solved by HiGHS, and the minimum cut of the flow network by enumerating every subset of
the top tokens."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import sparse

from otbound._sorting import stable_argsort
from otbound.bounds import LP_SLACK, LPError, solve_lp
from otbound.verifiers import importance
from otbound.verifiers._importance_kernels import stage_key, stage_top
from otbound.verifiers._stage_flow import stage_flow


def _random_distribution(rng: np.random.Generator, vocab: int) -> np.ndarray:
    x = rng.dirichlet(np.full(vocab, rng.choice([0.05, 0.3, 1.0, 5.0])))
    if rng.random() < 0.3:  # zero masses
        x[rng.random(vocab) < 0.4] = 0.0
        x = x / x.sum() if x.sum() > 0 else np.full(vocab, 1.0 / vocab)
    return x


def _stage_lps(count: int, seed: int) -> list[np.ndarray]:
    """The (4, s) LP rows of random stages, as the verifier builds them."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        vocab = int(rng.integers(2, 30))
        s = int(min(rng.integers(2, 11), vocab))
        p, a, b = (_random_distribution(rng, vocab) for _ in range(3))
        if rng.random() < 0.3:  # i.i.d. slots
            b = a
        if rng.random() < 0.1:  # p = q: every deficit met by the rank rule
            p = a = b
        order = stable_argsort(stage_key(p, a, b))
        out.append(stage_top(order, p, a, b, s)[2])
    return out


def _induced_top(lp: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``p_I`` on the top tokens from the LP's rows: ``base + Σ_j a_y b_j W[y, j] −
    Σ_i a_i b_y W[i, y]`` (off the diagonal)."""
    a, b, _, base = lp
    moved = np.outer(a, b) * keep * ~np.eye(a.size, dtype=bool)
    out: np.ndarray = base + moved.sum(axis=1) - moved.sum(axis=0)
    return out


def _highs_value(lp: np.ndarray) -> float:
    """The LP ``max Σ t_y``, ``t_y ≤ p_y``, ``t_y ≤ p_I(y)``, ``W ∈ [0, 1]``, in the
    variables ``W[i, j]`` (i ≠ j) and ``t``, written out densely and solved by HiGHS."""
    a, b, p, base = lp
    s = a.size
    ii, jj = np.nonzero(~np.eye(s, dtype=bool))
    matrix = np.zeros((s, ii.size + s))
    for k, (i, j) in enumerate(zip(ii, jj, strict=True)):
        matrix[i, k] -= a[i] * b[j]  # W[i, j] moves the pair's mass from j to i
        matrix[j, k] += a[i] * b[j]
    matrix[:, ii.size :] = np.eye(s)
    cost = np.concatenate((np.zeros(ii.size), np.ones(s)))
    upper = np.concatenate((np.ones(ii.size), p))
    solution = solve_lp(cost, sparse.csc_array(matrix), -np.inf, base, 0.0, upper, maximize=True)
    return float(solution.objective)


def _min_cut(lp: np.ndarray) -> float:
    """The LP's optimum as ``Σ min(p, start)`` plus the minimum cut of the rank-rule network,
    by enumerating the tokens on the source's side."""
    a, b, p, base = lp
    s = a.size
    mass = np.outer(a, b) + np.outer(a, b).T
    start = base - b * (a.sum() - a) + np.array([mass[y, y + 1 :].sum() for y in range(s)])
    surplus, deficit = np.maximum(start - p, 0.0), np.maximum(p - start, 0.0)
    best = np.inf
    for side in itertools.product((False, True), repeat=s):
        inside = np.array(side)
        crossing = sum(
            mass[i, j] for i in range(s) for j in range(i + 1, s) if inside[i] and not inside[j]
        )
        best = min(best, surplus[~inside].sum() + deficit[inside].sum() + crossing)
    return float(np.minimum(p, start).sum() + best)


@pytest.mark.parametrize("seed", range(4))
def test_stage_flow_is_the_lp_optimum(seed):
    """The flow's value is the brute-force minimum cut to 1e-12; its weights reach that value;
    HiGHS (tolerances 1e-10) never beats it and stays within its tolerance below."""
    for lp in _stage_lps(150, seed):
        keep, value, gap = stage_flow(lp)
        assert abs(gap) <= 1e-15
        assert value == pytest.approx(_min_cut(lp), abs=1e-12)
        reached = np.minimum(lp[2], _induced_top(lp, keep)).sum()
        assert reached == pytest.approx(value, abs=1e-12)
        if seed == 0:  # HiGHS on a share of the cases (a few ms each)
            highs = _highs_value(lp)
            assert highs <= value + 1e-12
            assert highs >= value - 1e-8


def test_stage_flow_weights_move_each_pair_one_way():
    """Weights lie in [0, 1], the diagonal is 1, and a pair's mass moves one way only (at most
    one of ``W[i, j]`` and ``W[j, i]`` is positive)."""
    moved = 0
    for lp in _stage_lps(200, 10):
        keep, _, _ = stage_flow(lp)
        s = keep.shape[0]
        off = ~np.eye(s, dtype=bool)
        assert np.all((keep >= 0.0) & (keep <= 1.0))
        assert np.all(np.diag(keep) == 1.0)
        assert np.all(np.minimum(keep, keep.T)[off] == 0.0)
        moved += np.count_nonzero(keep[off])
    assert moved > 100  # the flows do move mass


def _four_tokens() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Four top tokens of i.i.d. slots and no tail: ``a``, ``b``, the rows' ``base`` (slot 2
    keeps every pair) and ``p = base``."""
    a = np.array([0.4, 0.3, 0.2, 0.1])
    b = a.copy()
    base = a * b + b * (a.sum() - a)
    return a, b, base, base.copy()


def test_stage_flow_moves_nothing_where_no_token_is_short():
    """Where ``base`` meets every ``p_y`` it can, ``W = 0``: the challenger keeps every pair."""
    a, b, base, p = _four_tokens()
    for shift in (0.0, 0.01):
        keep, value, gap = stage_flow(np.stack((a, b, p - shift, base)))
        assert np.array_equal(keep, np.eye(4))
        assert value == pytest.approx((p - shift).sum(), abs=1e-15) and gap == 0.0


def test_stage_flow_moves_what_a_deficit_needs():
    """A deficit of 0.03 at the first token, a surplus of 0.03 at the last: 0.03 of the pair
    (first, last) moves from the last token to the first, nothing else moves."""
    a, b, base, p = _four_tokens()
    p[0] += 0.03
    p[3] -= 0.03
    keep, value, _ = stage_flow(np.stack((a, b, p, base)))
    assert value == pytest.approx(p.sum(), abs=1e-15)
    want = np.eye(4)
    want[0, 3] = 0.03 / (a[0] * b[3])
    np.testing.assert_allclose(keep, want, rtol=0, atol=1e-15)


def test_stage_weights_refuse_an_uncertified_flow():
    """NaN in the LP's rows gives no certificate: an LPError that names the stage, never
    weights."""
    lp = _stage_lps(1, 3)[0].copy()
    lp[2, 0] = np.nan
    with pytest.raises(LPError, match="importance stage LP"):
        importance.stage_weights(lp)
    good = importance.stage_weights(_stage_lps(1, 3)[0])
    assert not good.flags.writeable and abs(stage_flow(_stage_lps(1, 3)[0])[2]) <= LP_SLACK
