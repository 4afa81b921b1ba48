"""Draft designs against brute-force tuple probabilities, computed from the definitions in
docs/mathematics.md."""

from __future__ import annotations

import math

import numpy as np
import oracles
import pytest
from scipy import stats

from otbound.drafts import DESIGNS, get_design

ALL = oracles.DESIGN_NAMES
TOL = 1e-12


def test_registry_lists_every_design():
    assert set(ALL) <= set(DESIGNS)
    for name in ALL:
        assert get_design(name).name == name


def _as_dict(tuples: np.ndarray, probs: np.ndarray) -> dict[tuple[int, ...], float]:
    out: dict[tuple[int, ...], float] = {}
    for row, prob in zip(np.asarray(tuples).tolist(), np.asarray(probs).tolist(), strict=True):
        key = tuple(int(x) for x in row)
        assert key not in out, f"tuple {key} listed twice"
        out[key] = float(prob)
    return out


def _max_diff(a: dict, b: dict) -> float:
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def _report(failures: list[str], total: int) -> str:
    return f"{len(failures)} of {total} cases failed; first ones:\n" + "\n".join(failures[:5])


# -- tuple_support / set_support ---------------------------------------------------------------


@pytest.mark.parametrize("design", ALL)
def test_tuple_support_matches_oracle(design, gen):
    spec = get_design(design)
    cases = gen.cases(design, 300, seed=11, vocab=(2, 6))
    failures = []
    for case in cases:
        want = oracles.tuple_probs(design, case.q, case.n)
        tuples, probs = spec.tuple_support(case.q, case.n)
        assert tuples.ndim == 2 and tuples.shape[1] == case.n
        got = _as_dict(tuples, probs)
        err = _max_diff(got, want)
        if not err <= TOL:  # also catches NaN
            failures.append(f"{case}: max |tuple prob - oracle| = {err:.3g}")
    assert not failures, _report(failures, len(cases))


@pytest.mark.parametrize("design", ALL)
def test_set_support_sums_to_one_and_merges_tuples(design, gen):
    spec = get_design(design)
    cases = gen.cases(design, 300, seed=12, vocab=(2, 6))
    failures = []
    for case in cases:
        want: dict[frozenset, float] = {}
        for t, prob in oracles.tuple_probs(design, case.q, case.n).items():
            want[frozenset(t)] = want.get(frozenset(t), 0.0) + prob
        sets, probs = spec.set_support(case.q, case.n)
        got: dict[frozenset, float] = {}
        for row, prob in zip(sets.tolist(), probs.tolist(), strict=True):
            key = frozenset(x for x in row if x >= 0)
            assert key not in got, f"{case}: set {set(key)} listed twice"
            assert all(x >= 0 for x in row[: len(key)]), "padding must come last"
            got[key] = prob
        err = _max_diff(got, want)
        total = math.fsum(probs)
        if not (err <= TOL and abs(total - 1.0) <= TOL):
            failures.append(f"{case}: max error {err:.3g}, total {total!r}")
    assert not failures, _report(failures, len(cases))


def test_set_support_merges_repeated_draws():
    # iid, q = (.5, .5), n = 2: {0} .25, {1} .25, {0, 1} .5 (both orders merged).
    sets, probs = get_design("iid").set_support(np.array([0.5, 0.5]), 2)
    rows = zip(sets.tolist(), probs.tolist(), strict=True)
    got = {frozenset(x for x in row if x >= 0): pr for row, pr in rows}
    assert got == pytest.approx(
        {frozenset({0}): 0.25, frozenset({1}): 0.25, frozenset({0, 1}): 0.5}
    )


def test_without_replacement_tuple_support_tiny_masses():
    # After the two big tokens are drawn only 2e-30 of mass is left; 1 - used gives 0 there.
    q = np.array([0.5, 0.5, 1e-30, 1e-30])
    tuples, probs = get_design("without_replacement").tuple_support(q, 3)
    got = _as_dict(tuples, probs)
    assert got[(0, 1, 2)] == pytest.approx(0.25, rel=1e-12)
    assert _max_diff(got, oracles.without_replacement_tuples(q, 3)) <= TOL


def test_without_replacement_tuple_support_token_near_one():
    # One token at 1 - 1e-15: the mass left after drawing it is 1e-15, not 1 - (1 - 1e-15).
    q = np.array([1 - 1e-15, 4e-16, 3e-16, 2e-16, 1e-16])
    tuples, probs = get_design("without_replacement").tuple_support(q, 2)
    got = _as_dict(tuples, probs)
    want = oracles.without_replacement_tuples(q, 2)
    assert got[(0, 1)] == pytest.approx(want[(0, 1)], rel=1e-12)
    assert _max_diff(got, want) <= TOL


# -- prefix_mass ---------------------------------------------------------------------------------


def _prefix_oracle(design, q, n, orders):
    mass = oracles.subset_mass(oracles.tuple_probs(design, q, n), q.shape[-1])
    return np.array(
        [[mass[oracles.mask_of(order[:i])] for i in range(len(order) + 1)] for order in orders]
    )


def _check_prefix_mass(gen, design, cases, orders_per_case, seed):
    spec = get_design(design)
    rng = np.random.default_rng(seed)
    failures = []
    worst = 0.0
    for case in cases:
        orders = np.stack(
            [gen.random_order(design, case.q, case.n, rng) for _ in range(orders_per_case)]
        )
        if design == "per_slot":
            q_sorted = np.stack([case.q[:, o] for o in orders])
        else:
            q_sorted = case.q[orders]
        got = spec.prefix_mass(q_sorted, case.n)
        assert got.shape == (orders_per_case, case.q.shape[-1] + 1)
        want = _prefix_oracle(design, case.q, case.n, orders)
        err = float(np.max(np.abs(got - want)))
        worst = max(worst, err) if np.isfinite(err) else np.inf
        if not err <= TOL:
            failures.append(f"{case}: orders {orders.tolist()}: max |Q(H_i) - oracle| = {err:.3g}")
    return failures, worst


@pytest.mark.parametrize("design", ALL)
def test_prefix_mass_matches_oracle(design, gen):
    cases = gen.cases(design, 200, seed=13, vocab=(2, 7))
    failures, _ = _check_prefix_mass(gen, design, cases, 3, seed=14)
    assert not failures, _report(failures, len(cases))


def _extreme_q(rng, vocab):
    """Draft distributions with masses 1e-30 and 1e-12 next to ordinary ones, or one token
    at 1 - 1e-15."""
    style = int(rng.integers(4))
    if style == 3:
        rest = rng.dirichlet(np.ones(vocab - 1)) * 1e-15
        q = np.concatenate([[1 - 1e-15], rest])
        return q[rng.permutation(vocab)]
    q = rng.dirichlet(np.full(vocab, 0.5 if style == 2 else 1.0))
    k = int(rng.integers(1, vocab))
    q[rng.choice(vocab, size=k, replace=False)] = rng.choice([1e-30, 1e-12], size=k)
    return q / q.sum()


def test_without_replacement_prefix_mass_extreme_masses(gen):
    """The exponential-clock integral against brute force, to 1e-12, on 400 hard cases."""
    rng = np.random.default_rng(15)
    cases = []
    while len(cases) < 400:
        vocab = int(rng.integers(2, 8))
        q = _extreme_q(rng, vocab)
        n = int(rng.integers(1, min(4, vocab) + 1))
        cases.append(gen.Case(np.full(vocab, 1.0 / vocab), q, n, "extreme"))
    failures, worst = _check_prefix_mass(gen, "without_replacement", cases, 4, seed=16)
    assert not failures, _report(failures, len(cases)) + f"\nworst error {worst:.3g}"


@pytest.mark.parametrize(
    "q",
    [
        [1 - 1e-15, 4e-16, 3e-16, 2e-16, 1e-16],
        [0.5, 0.5 - 2e-30, 1e-30, 1e-30],
        [0.7, 0.3 - 2e-12, 1e-12, 1e-12],
        [1e-30, 1e-30, 1e-12, 1 - 1e-12 - 2e-30],
        [0.25, 0.25, 0.25, 0.25 - 3e-30, 1e-30, 1e-30, 1e-30],
    ],
)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_without_replacement_prefix_mass_every_order(q, n):
    """Every order of a few hand-made extreme distributions."""
    import itertools

    q = np.array(q)
    if n > np.count_nonzero(q):
        pytest.skip("n above the support")
    orders = np.array(list(itertools.permutations(range(q.size))))
    if len(orders) > 720:
        orders = orders[np.random.default_rng(0).choice(len(orders), 720, replace=False)]
    got = get_design("without_replacement").prefix_mass(q[orders], n)
    want = _prefix_oracle("without_replacement", q, n, orders)
    assert np.max(np.abs(got - want)) <= TOL


def test_math_md_example_numbers():
    q = np.array([0.5, 0.3, 0.2])
    order = np.array([[0, 1, 2]])
    wr = get_design("without_replacement").prefix_mass(q[order], 2)[0, 2]
    cp = get_design("conditional_poisson").prefix_mass(q[order], 2)[0, 2]
    assert round(wr, 4) == 0.5143
    assert round(cp, 4) == 0.4839
    h = oracles.mask_of([0, 1])
    assert wr == pytest.approx(
        oracles.subset_mass(oracles.without_replacement_tuples(q, 2), 3)[h], abs=TOL
    )
    assert cp == pytest.approx(
        oracles.subset_mass(oracles.conditional_poisson_tuples(q, 2), 3)[h], abs=TOL
    )
    # by hand: .5 * .3/.5 + .3 * .5/.7 and (.5 * .3) / (.5 * .3 + .5 * .2 + .3 * .2)
    assert wr == pytest.approx(0.3 + 0.15 / 0.7, abs=TOL)
    assert cp == pytest.approx(0.15 / 0.31, abs=TOL)


def test_sequential_pair_closed_form(gen):
    """n = 2: Q(H) = q(H) Σ_H q/(1−q) − Σ_H q²/(1−q), against the oracle and prefix_mass."""
    rng = np.random.default_rng(17)
    spec = get_design("without_replacement")
    for _ in range(200):
        vocab = int(rng.integers(2, 8))
        q = rng.dirichlet(np.ones(vocab))
        mass = oracles.subset_mass(oracles.without_replacement_tuples(q, 2), vocab)
        for h in range(2**vocab):
            members = [x for x in range(vocab) if h >> x & 1]
            assert oracles.sequential_pair_mass(q, members) == pytest.approx(mass[h], abs=1e-12)
        order = rng.permutation(vocab)
        got = spec.prefix_mass(q[order][None], 2)[0]
        want = [oracles.sequential_pair_mass(q, order[:i]) for i in range(vocab + 1)]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# -- sample --------------------------------------------------------------------------------------

SAMPLING = {
    "iid": ([0.4, 0.3, 0.2, 0.1, 0.0], 3),
    "without_replacement": ([0.4, 0.3, 0.0, 0.2, 0.1], 3),
    "conditional_poisson": ([0.4, 0.3, 0.2, 0.0, 0.1], 3),
    "greedy": ([0.1, 0.4, 0.2, 0.3, 0.0, 0.0], 3),
    "topk": ([0.1, 0.4, 0.2, 0.3], 3),
    "hub": ([0.15, 0.0, 0.6, 0.25], 2),  # q_a / (1 - q_a) != 1: the two orders differ
    "per_slot": ([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]], 2),
}


@pytest.mark.parametrize("design", ALL)
def test_sample_frequencies_match_oracle(design):
    q, n = SAMPLING[design]
    q = np.array(q)
    size = 200_000
    draws = get_design(design).sample(q, n, size, np.random.default_rng(2024))
    assert draws.shape == (size, n)
    assert np.issubdtype(draws.dtype, np.integer)
    want = oracles.tuple_probs(design, q, n)
    keys, counts = np.unique(draws, axis=0, return_counts=True)
    observed = {tuple(int(x) for x in k): int(c) for k, c in zip(keys, counts, strict=True)}
    impossible = set(observed) - set(want)
    assert not impossible, f"sampled tuples of probability 0: {sorted(impossible)[:5]}"
    # the tuple_support probabilities are the same distribution (checked above to 1e-12)
    tuples, probs = get_design(design).tuple_support(q, n)
    assert _max_diff(_as_dict(tuples, probs), want) <= TOL
    support = sorted(want)
    if len(support) == 1:
        assert observed == {support[0]: size}
        return
    obs = np.array([observed.get(t, 0) for t in support], dtype=float)
    exp = np.array([want[t] for t in support]) * size
    assert exp.min() >= 5, "test setup: expected counts too small for chi-square"
    result = stats.chisquare(obs, exp * (obs.sum() / exp.sum()))
    assert result.pvalue > 1e-3, f"chi-square p = {result.pvalue:.3g}"


@pytest.mark.parametrize("design", ALL)
@pytest.mark.parametrize("size", [1, 7])
def test_sample_shapes_dtype_and_seeding(design, size):
    q, n = SAMPLING[design]
    q = np.array(q)
    spec = get_design(design)
    a = spec.sample(q, n, size, np.random.default_rng(5))
    b = spec.sample(q, n, size, np.random.default_rng(5))
    assert a.shape == (size, n)
    assert np.issubdtype(a.dtype, np.integer)
    np.testing.assert_array_equal(a, b)
    want = oracles.tuple_probs(design, q, n)
    for row in a.tolist():
        assert tuple(row) in want


@pytest.mark.parametrize(
    "q",
    [
        [0.7, 0.1, 0.1, 0.05, 0.05],  # rows past the shift limit after one draw
        [1 - 3e-9, 1e-9, 0.0, 1e-9, 1e-9],  # one token holds nearly all the mass
        [0.05, 0.15, 0.2, 0.0, 0.25, 0.35],
    ],
)
def test_without_replacement_sampler_both_paths_match_oracle(q):
    q = np.array(q)
    n, size = 3, 200_000
    draws = get_design("without_replacement").sample(q, n, size, np.random.default_rng(11))
    assert np.all(np.sort(draws, axis=1)[:, 1:] != np.sort(draws, axis=1)[:, :-1])
    assert np.all(q[draws] > 0)
    want = oracles.tuple_probs("without_replacement", q, n)
    keys, counts = np.unique(draws, axis=0, return_counts=True)
    observed = {tuple(int(x) for x in k): int(c) for k, c in zip(keys, counts, strict=True)}
    assert set(observed) <= set(want)
    support = [t for t in sorted(want) if want[t] * size >= 5]
    obs = np.array([observed.get(t, 0) for t in support], dtype=float)
    exp = np.array([want[t] for t in support]) * size
    result = stats.chisquare(obs, exp * (obs.sum() / exp.sum()))
    assert result.pvalue > 1e-3, f"chi-square p = {result.pvalue:.3g}"


def test_without_replacement_sampler_large_vocabulary_distinct_and_in_support():
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.full(5_000, 0.05))
    q[rng.choice(5_000, 2_000, replace=False)] = 0.0
    q /= q.sum()
    draws = get_design("without_replacement").sample(q, 8, 20_000, rng)
    s = np.sort(draws, axis=1)
    assert np.all(s[:, 1:] != s[:, :-1])
    assert np.all(q[draws] > 0)
    # the first draft is a plain draw from q: its top token's frequency
    top = int(np.argmax(q))
    freq = np.mean(draws[:, 0] == top)
    assert abs(freq - q[top]) < 5 * math.sqrt(q[top] * (1 - q[top]) / 20_000)


def test_without_replacement_sampler_is_not_conditional_poisson():
    """The two distinct-draft designs differ: the sequential sampler must not draw conditional
    Poisson sets (Q({0,1}) = .5143 vs .4839 for q = (.5, .3, .2))."""
    q = np.array([0.5, 0.3, 0.2])
    size = 200_000
    for design, want in (
        ("without_replacement", 0.3 + 0.15 / 0.7),
        ("conditional_poisson", 0.15 / 0.31),
    ):
        draws = get_design(design).sample(q, 2, size, np.random.default_rng(7))
        frac = np.mean(np.all(draws < 2, axis=1))
        assert abs(frac - want) < 5 * math.sqrt(want * (1 - want) / size), (design, frac, want)


def _top_tokens_by_partition(q: np.ndarray, k: int) -> np.ndarray:
    """The partition-and-sort :func:`top_tokens` replaced (rows of a 2-d ``q``, ``k >= 1``)."""
    kth = -np.partition(-q, k - 1, axis=-1)[:, k - 1 : k]
    above = q > kth
    ties = q == kth
    room = k - above.sum(axis=-1, keepdims=True)
    chosen = above | (ties & (np.cumsum(ties, axis=-1) <= room))
    idx = np.nonzero(chosen)[1].reshape(q.shape[0], k)
    order = np.argsort(-np.take_along_axis(q, idx, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(idx, order, axis=-1)


def test_top_tokens_matches_the_sorted_order_and_the_partition_it_replaced():
    """The compiled pass gives the first ``k`` tokens of the order ``(−q, id)``: against the
    sort of the oracle and the former partition, on rows with ties at every boundary, zeros
    and one-hot rows, every ``k``."""
    from otbound.drafts.tokens import top_tokens

    rng = np.random.default_rng(91)
    checked = 0
    for case in range(60):
        vocab = int(rng.integers(1, 40))
        rows = rng.dirichlet(np.full(vocab, 0.5), size=3)
        if case % 3 == 0:  # ties: a few distinct values
            rows = np.round(rows * 4) / 4
        if case % 5 == 0:
            rows[:, rng.random(vocab) < 0.4] = 0.0
        if case % 7 == 0:
            rows[0] = np.eye(vocab)[int(rng.integers(vocab))]
        for k in range(vocab + 1):
            got = top_tokens(rows, k)
            assert got.shape == (3, k) and got.dtype == np.int64
            for r in range(3):
                assert got[r].tolist() == oracles.top_tokens(rows[r].tolist(), k)
            if k:
                assert np.array_equal(got, _top_tokens_by_partition(rows, k))
            assert np.array_equal(top_tokens(rows[1], k), got[1])
            checked += 1
    assert checked > 500


def test_top_tokens_beyond_the_buffer_is_the_stable_order():
    """Past :data:`BUFFERED_TOP` tokens ``top_tokens`` sorts: the same order, ties to the
    lower id, on a rising row (the buffer's worst case) and on ties."""
    from otbound.drafts.tokens import BUFFERED_TOP, top_tokens

    rising = np.linspace(0.0, 1.0, 300)
    tied = np.round(np.random.default_rng(93).random((2, 300)), 1)
    for rows in (rising[None, :], tied):
        for k in (BUFFERED_TOP, BUFFERED_TOP + 1, 300):
            got = top_tokens(rows, k)
            for r in range(rows.shape[0]):
                assert got[r].tolist() == oracles.top_tokens(rows[r].tolist(), k)
    with pytest.raises(ValueError, match="NaN"):
        top_tokens(np.append(rising, np.nan), 200)


def test_top_tokens_refuses_nan_and_k_beyond_the_vocabulary():
    from otbound.drafts.tokens import top_tokens

    with pytest.raises(ValueError, match="NaN"):
        top_tokens(np.array([0.5, np.nan, 0.5]), 2)
    with pytest.raises(ValueError, match=r"k must be in \[0, 3\]"):
        top_tokens(np.array([0.5, 0.25, 0.25]), 4)


def test_fixed_plus_sampled_closed_form_is_the_numpy_one_bit_for_bit():
    """The compiled closed form of ``greedy`` (fixed drafts plus one sampled) gives the numpy
    lines it replaced, bit for bit: the gap and the certificate, on rows with ties and zeros."""
    from otbound.drafts.fixed import _fixed_plus_sampled
    from otbound.drafts.tokens import top_tokens

    def by_numpy(p, q, fixed):
        rows = np.arange(p.shape[0])[:, None]
        inside = np.zeros(p.shape, dtype=bool)
        inside[rows, fixed] = True
        rest = np.where(inside, 0.0, q)
        r = rest / rest.sum(axis=-1, keepdims=True)
        sampled = np.where(inside, 0.0, np.minimum(p, r)).sum(axis=-1)
        kept = np.where(inside, p, 0.0).sum(axis=-1)
        return kept + sampled - 1.0, inside | (p < r)

    rng = np.random.default_rng(92)
    for case in range(40):
        vocab = int(rng.integers(3, 3_000 if case % 4 == 0 else 60))
        p = rng.dirichlet(np.full(vocab, 0.4), size=4)
        q = rng.dirichlet(np.full(vocab, 0.4), size=4)
        if case % 3 == 0:  # ties
            q = np.round(q * 8) / 8 + 1e-3
            q /= q.sum(axis=-1, keepdims=True)
        if case % 2 == 0:  # zeros in both rows
            p[:, rng.random(vocab) < 0.3] = 0.0
            q[:, rng.random(vocab) < 0.3] = 0.0
            q[:, 0] += 1e-3  # something left to sample
            p /= p.sum(axis=-1, keepdims=True)
            q /= q.sum(axis=-1, keepdims=True)
        most = min(int(np.count_nonzero(q, axis=-1).min()) - 1, 8)
        fixed = top_tokens(q, int(rng.integers(0, most + 1)))
        gap, chosen = _fixed_plus_sampled(p, q, fixed)
        want_gap, want_chosen = by_numpy(p, q, fixed)
        assert gap.tobytes() == want_gap.tobytes(), case
        assert np.array_equal(chosen, want_chosen), case
