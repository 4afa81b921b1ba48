"""The without-replacement minimum without every prefix's ``Q`` equals the full sweep's.

:func:`otbound.drafts._sequential_sweep.sequential_prefix_minimum` (closed forms for ``n ≤ 2``,
block power series and refinement for ``n ≥ 3``) against the minimum over
:func:`otbound.drafts._sequential_mass.sequential_prefix_masses` (every prefix integrated) and
against brute force on small vocabularies.
"""

from __future__ import annotations

import itertools
import math

import numba
import numpy as np
import oracles
import pytest

from otbound import optimal_acceptance
from otbound.drafts import sweep_key as _sweep_key
from otbound.drafts._sequential_mass import sequential_prefix_masses
from otbound.drafts._sequential_sweep import (
    _closed_form_mass,
    _growth_bound,
    sequential_prefix_minimum,
)

COUNTS = [1, 2, 3, 4, 6, 8]


def _zipf_pair(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Zipf-like target, perturbed and re-tempered draft (as ``benchmarks/bench_bounds.py``)."""
    logits = -rng.uniform(0.8, 2.0) * np.log(rng.permutation(vocab) + 1.0)
    draft = (logits + 1.5 * rng.standard_normal(vocab)) / rng.uniform(0.8, 1.3)
    p, q = np.exp(logits - logits.max()), np.exp(draft - draft.max())
    return p / p.sum(), q / q.sum()


def _full_minimum(p: np.ndarray, q: np.ndarray, counts: list[int]):
    order = np.argsort(_sweep_key(p, q))
    mass = sequential_prefix_masses(q[order], counts)
    gap = np.concatenate(([0.0], np.cumsum(p[order])))[None, :] - mass
    return np.minimum(0.0, gap.min(axis=1)), p[order], q[order], gap


@pytest.mark.parametrize("vocab", [50, 700, 6000])
def test_equals_the_full_sweep_on_zipf_rows(vocab):
    rng = np.random.default_rng(vocab)
    for _ in range(3):
        p, q = _zipf_pair(rng, vocab)
        want, ps, qs, gap = _full_minimum(p, q, COUNTS)
        got, where = sequential_prefix_minimum(ps, qs, COUNTS)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
        for k in range(len(COUNTS)):  # the arg-min attains the minimum
            assert gap[k, where[k]] == pytest.approx(min(0.0, want[k]), abs=1e-12)


def test_equals_the_full_sweep_on_random_logits():
    rng = np.random.default_rng(7)
    for scale in (0.5, 2.0, 6.0):
        p = np.exp(scale * rng.standard_normal(3000))
        q = np.exp(scale * rng.standard_normal(3000))
        want, ps, qs, _ = _full_minimum(p / p.sum(), q / q.sum(), COUNTS)
        got, _ = sequential_prefix_minimum(ps, qs, COUNTS)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_equals_the_full_sweep_on_rows_with_long_runs_of_ties():
    """Rows drawn from a few (p, q) pairs, as logits rounded to float16 give: equal masses
    follow each other in the sweep, and their decay is computed once a run (the full sweep
    computes it for every token)."""
    rng = np.random.default_rng(8)
    for top in (3, 12, 40):
        p = rng.integers(1, top + 1, 4000) * rng.choice([1.0, 1e-4], 4000)
        q = rng.integers(1, top + 1, 4000) * rng.choice([1.0, 1e-4], 4000)
        assert np.unique(p / q).size < 2000
        want, ps, qs, _ = _full_minimum(p / p.sum(), q / q.sum(), COUNTS)
        got, _ = sequential_prefix_minimum(ps, qs, COUNTS)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("smallest", [1e-30, 1e-300, 5e-324])
def test_matches_brute_force_with_extreme_masses(smallest):
    rng = np.random.default_rng(int(-math.log10(smallest)))
    for _ in range(25):
        vocab = int(rng.integers(3, 8))
        q = rng.dirichlet(np.ones(vocab))
        low = rng.random(vocab) < 0.5
        low[0] = False
        q[low] = smallest * rng.integers(1, 4, size=int(low.sum()))
        q /= q.sum()
        p = rng.dirichlet(np.full(vocab, 0.5))
        order = np.argsort(_sweep_key(p, q))
        support = int(np.count_nonzero(q > 0))
        counts = [n for n in (1, 2, 3, 4, 6) if n <= support]
        got, _ = sequential_prefix_minimum(p[order], q[order], counts)
        for k, n in enumerate(counts):
            want, _ = oracles.log_brute_alpha(
                p, oracles.log_tuple_probs("without_replacement", q, n)
            )
            assert 1.0 + got[k] == pytest.approx(want, abs=1e-12)


def test_two_drafts_closed_form_against_the_pair_oracle():
    """``1 − Q(H) = λ (1 + Σ_{x∈H} q_x / (1 − q_x))`` equals the n = 2 formula of the docs."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        q = rng.dirichlet(np.full(9, 0.4))
        suffix = np.append(np.cumsum(q[::-1])[::-1], 0.0)
        mass = _closed_form_mass(q, suffix, 2)
        for i in range(10):
            assert mass[i] == pytest.approx(oracles.sequential_pair_mass(q, range(i)), abs=1e-14)


def test_growth_bound_bounds_the_increase_of_q():
    """``Q(H ∪ D) − Q(H) ≤ K q(D)`` on random prefixes, against the full sweep's masses."""
    rng = np.random.default_rng(5)
    for n in (3, 4, 8):
        q = rng.dirichlet(np.full(40, 0.3))
        mass = sequential_prefix_masses(q, [n])[0]
        cum = np.concatenate(([0.0], np.cumsum(q)))
        growth = _growth_bound(q, n)
        rise = mass[None, :] - mass[:, None]
        room = growth * (cum[None, :] - cum[:, None]) + 1e-13
        assert np.all(np.triu(rise) <= np.triu(room))


# -- the bucketed path: ratio buckets instead of the full sort --------------------------------

from otbound.drafts._poisson_bucketed import poisson_bucketed_minimum  # noqa: E402
from otbound.drafts._ratio_buckets import bucket_row, product_lower_bound  # noqa: E402
from otbound.drafts._sequential_bucketed import bucketed_prefix_minimum  # noqa: E402
from otbound.drafts.conditional_poisson import _conditional_poisson_ratio  # noqa: E402

ALL_COUNTS = [1, 2, 3, 4, 5, 6, 7, 8]


def _row(kind: str, rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """One (p, q) row of the given kind: Zipf, peaked, Dirichlet, tied ratios or extreme."""
    if kind == "zipf":
        return _zipf_pair(rng, vocab)
    if kind == "peaked":  # one token holds nearly all of q (and of p)
        p, q = _zipf_pair(rng, vocab)
        q = q * 1e-6
        q[rng.integers(vocab)] = 1.0
        p = 0.5 * p + 0.5 * q / q.sum()
        return p / p.sum(), q / q.sum()
    if kind == "dirichlet":
        return rng.dirichlet(np.full(vocab, 0.3)), rng.dirichlet(np.full(vocab, 0.3))
    if kind == "ties":  # ratios drawn from a few values: many exact ties inside buckets
        q = rng.dirichlet(np.full(vocab, 0.7))
        p = q * rng.choice([0.5, 1.0, 1.0 + 2.0**-9, 3.0], size=vocab)
        p[rng.random(vocab) < 0.1] = 0.0  # ratio 0
        return p / p.sum(), q
    if kind == "extreme":  # masses down to 1e-300: the bucketed paths decline or stay exact
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        low = rng.random(vocab) < 0.3
        low[0] = False
        q[low] = 10.0 ** -rng.uniform(20, 300, size=int(low.sum()))
        return p, q / q.sum()
    raise ValueError(kind)


def _sorted_minimum(p, q, counts):
    order = np.argsort(_sweep_key(p, q))
    order = order[q[order] > 0]
    return sequential_prefix_minimum(p[order], q[order], counts)[0]


def _poisson_sorted_minimum(p, q, counts):
    order = np.argsort(_sweep_key(p, q))
    ratio = _conditional_poisson_ratio(q[order][None, :], counts)[:, 0]
    cum = np.concatenate(([0.0], np.cumsum(p[order])))
    return np.minimum(0.0, (cum[None, :] - np.clip(ratio, 0.0, 1.0)).min(axis=1))


def _gap_of(p, q, n, order, length, design):
    """``p(H) − Q_n(H)`` of ``H = order[:length]``, by the full masses (a certificate check)."""
    inside = np.zeros(q.size, dtype=bool)
    inside[order[:length]] = True
    rest = np.flatnonzero(~inside & (q > 0))
    arranged = np.concatenate((order[:length], rest))
    if design == "wor":
        mass = sequential_prefix_masses(q[arranged], [n])[0, length]
    else:
        mass = _conditional_poisson_ratio(q[arranged][None, :], [n])[0, 0, length]
    return p[inside].sum() - mass


@pytest.mark.parametrize("kind", ["zipf", "peaked", "dirichlet", "ties", "extreme"])
@pytest.mark.parametrize("vocab", [3, 9, 60, 400, 3000])
def test_bucketed_without_replacement_equals_the_sorted_sweep(kind, vocab):
    rng = np.random.default_rng(vocab * 31 + len(kind))
    for _ in range(4 if vocab < 1000 else 2):
        p, q = _row(kind, rng, vocab)
        counts = [n for n in ALL_COUNTS if n <= np.count_nonzero(q > 0)]
        found = bucketed_prefix_minimum(p, q, counts)
        if found is None:  # declined: only where a ratio leaves the normal range
            assert kind == "extreme"
            continue
        gap, index, order = found
        np.testing.assert_allclose(gap, _sorted_minimum(p, q, counts), rtol=0, atol=1e-12)
        for n in counts[:: max(1, len(counts) // 3)]:
            at = counts.index(n)
            if gap[at] < 0:  # the returned set attains the value
                value = _gap_of(p, q, n, order, int(index[at]), "wor")
                assert value == pytest.approx(gap[at], abs=1e-12)


@pytest.mark.parametrize("kind", ["zipf", "peaked", "dirichlet", "ties", "extreme"])
@pytest.mark.parametrize("vocab", [3, 9, 60, 400, 3000])
def test_bucketed_conditional_poisson_equals_the_scaled_sweep(kind, vocab):
    rng = np.random.default_rng(vocab * 17 + len(kind))
    for _ in range(6):
        p, q = _row(kind, rng, vocab)
        counts = [n for n in ALL_COUNTS if n <= np.count_nonzero(q > 0)]
        found = poisson_bucketed_minimum(p, q, counts)
        if found is None:
            assert kind == "extreme"
            continue
        gap, index, order = found
        np.testing.assert_allclose(gap, _poisson_sorted_minimum(p, q, counts), atol=1e-12)
        for at, n in enumerate(counts):
            if gap[at] < 0:
                value = _gap_of(p, q, n, order, int(index[at]), "cp")
                assert value == pytest.approx(gap[at], abs=1e-12)


@pytest.mark.parametrize("design", ["without_replacement", "conditional_poisson"])
def test_bucketed_paths_match_brute_force_on_small_vocabularies(design):
    rng = np.random.default_rng(11)
    finder = bucketed_prefix_minimum if design == "without_replacement" else None
    for _ in range(40):
        vocab = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.full(vocab, 0.6)), rng.dirichlet(np.full(vocab, 0.6))
        counts = [n for n in (1, 2, 3, 4) if n <= vocab]
        found = (finder or poisson_bucketed_minimum)(p, q, counts)
        assert found is not None
        for k, n in enumerate(counts):
            want, _ = oracles.log_brute_alpha(p, oracles.log_tuple_probs(design, q, n))
            assert 1.0 + found[0][k] == pytest.approx(want, abs=1e-12)


def test_bucketed_paths_at_a_hundred_thousand_tokens():
    rng = np.random.default_rng(100_000)
    p, q = _zipf_pair(rng, 100_000)
    counts = [2, 3, 8]
    gap = bucketed_prefix_minimum(p, q, counts)[0]
    np.testing.assert_allclose(gap, _sorted_minimum(p, q, counts), rtol=0, atol=1e-12)
    gap = poisson_bucketed_minimum(p, q, counts)[0]
    np.testing.assert_allclose(gap, _poisson_sorted_minimum(p, q, counts), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["zipf", "dirichlet", "extreme"])
def test_the_bound_is_the_same_on_any_number_of_threads(kind):
    """The nodes are summed in chunks that do not follow the threads (NODE_CHUNKS): one
    thread and all of them give the same bits (one chunk per thread moved the bound by up to
    4.4e-16 between machines)."""
    threads = numba.config.NUMBA_NUM_THREADS
    if threads < 2:
        pytest.skip("one numba thread on this machine")
    rng = np.random.default_rng(len(kind))
    rows = [_row(kind, rng, vocab) for vocab in (3_000, 8_192, 30_000) for _ in range(2)]
    counts = [2, 3, 4, 8]
    before = numba.get_num_threads()
    try:
        found = {}
        for k in (1, 2, threads):
            numba.set_num_threads(k)
            found[k] = [bucketed_prefix_minimum(p, q, counts)[0] for p, q in rows]
            found[k] += [sequential_prefix_masses(q, counts) for _, q in rows]
    finally:
        numba.set_num_threads(before)
    for k in (2, threads):
        for a, b in zip(found[1], found[k], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ["zipf", "extreme"])
def test_the_serial_builds_give_the_parallel_kernels_bits(kind, monkeypatch):
    """Levels of little work run the kernels' serial builds (no wake-up of the other
    threads, :mod:`otbound._threads`): every level serial, every level parallel and the
    default split give the same bits, and the serial builds are compiled without parallel
    loops."""
    assert "parallel" not in mass_module.segment_mass_serial.targetoptions
    assert "parallel" not in mass_module.segment_power_sums_serial.targetoptions
    assert mass_module.segment_mass.targetoptions["parallel"]
    rng = np.random.default_rng(7 + len(kind))
    rows = [_row(kind, rng, vocab) for vocab in (3_000, 30_000) for _ in range(2)]
    counts = [2, 3, 4, 8]
    found = {}
    default = bucketed_module.SERIAL_WORK
    for work in (-1, default, 1 << 62):  # every level parallel, the default, every level serial
        monkeypatch.setattr(bucketed_module, "SERIAL_WORK", work)
        found[work] = [bucketed_prefix_minimum(p, q, counts)[:2] for p, q in rows]
    for work in (-1, 1 << 62):
        for (gap, index), (want_gap, want_index) in zip(found[work], found[default], strict=True):
            np.testing.assert_array_equal(gap, want_gap)
            np.testing.assert_array_equal(index, want_index)


def _batch(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of every kind, and one that the buckets decline (a ratio below the normal
    range: the sorted sweep takes it)."""
    kinds = ("zipf", "peaked", "dirichlet", "ties", "extreme")
    rows = [_row(kind, rng, vocab) for kind in kinds for _ in range(2)]
    p, q = _zipf_pair(rng, vocab)
    p[0] = 1e-320  # p / q below the smallest normal float
    rows.insert(3, (p / p.sum(), q))
    return np.stack([p for p, _ in rows]), np.stack([q for _, q in rows])


def _row_functions(design: str):
    """A bucketed design's one-row function, its batch and the batch's compiled kernel's
    module and name."""
    from otbound.drafts import _poisson_bucketed as poisson

    if design == "without_replacement":
        return (
            bucketed_module.bucketed_prefix_minimum,
            bucketed_module.bucketed_prefix_minima,
            bucketed_module,
            "bucketed_rows",
        )
    single, minima = poisson.poisson_bucketed_minimum, poisson.poisson_bucketed_minima
    return single, minima, poisson, "poisson_rows"


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one numba thread: no batch")
@pytest.mark.parametrize("design", ["without_replacement", "conditional_poisson"])
@pytest.mark.parametrize("vocab", [600, 20_000])
def test_a_batch_of_rows_on_the_threads_gives_each_rows_own_bits(vocab, design):
    """The rows shared among numba's threads (each row whole on its thread; for
    ``without_replacement`` the kernels' serial builds) give each row's values, arg-min and
    order bit for bit as one row at a time (with the threads inside its levels), and as one
    thread alone; the rows declined alone are declined."""
    single, minima, _, _ = _row_functions(design)
    rng = np.random.default_rng(vocab)
    p, q = _batch(rng, vocab)
    tiny = q[7] * 1e-300  # q_min^8 below the plain floats' range: conditional_poisson declines
    q[7, 5] = tiny[5]
    q[7] /= q[7].sum()
    counts = [1, 2, 3, 4, 8, 4]
    rows = [single(a, b, counts) for a, b in zip(p, q, strict=True)]
    declined = [r for r, row in enumerate(rows) if row is None]
    assert 3 in declined and len(declined) < len(rows) // 2
    if design == "without_replacement":
        assert declined == [3]
    else:  # and the extreme rows' least masses
        assert 7 in declined
    before = numba.get_num_threads()
    try:
        found = {}
        for threads in sorted({1, 2, before}):  # two: each thread runs several rows
            numba.set_num_threads(threads)
            found[threads] = minima(p, q, counts, orders=True)
    finally:
        numba.set_num_threads(before)
    unordered = minima(p, q, counts)
    for batch in found.values():
        for r, (got, want) in enumerate(zip(batch, rows, strict=True)):
            if want is None:
                assert got is None and unordered[r] is None
                continue
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(unordered[r][0], want[0])
            np.testing.assert_array_equal(unordered[r][1], want[1])
            assert unordered[r][2] is None
    assert any(np.any(row[0] < 0) for row in rows if row is not None)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one numba thread: no batch")
@pytest.mark.parametrize("design", ["without_replacement", "conditional_poisson"])
def test_a_batch_row_left_unfinished_or_failing_is_redone_alone(design, monkeypatch):
    """A row the batch reports unfinished (or, for ``without_replacement``, failing its
    checks) is redone on its own and gets its own values; a draft row summing to 1.5 makes
    the without-replacement batch raise (its numpy checks, through the row redone alone)."""
    from otbound.drafts import _row_batch
    from otbound.drafts import _sequential_sweep as sweep

    single, minima, module, name = _row_functions(design)
    rng = np.random.default_rng(3)
    p, q = _batch(rng, 600)
    if design == "without_replacement":
        bad = q.copy()
        bad[5] *= 1.5
        with pytest.raises(ValueError, match="outside"):
            minima(p, bad, [1, 2, 4])
    real = getattr(module, name)
    reports = [_row_batch.UNFINISHED]
    if design == "without_replacement":
        reports.append(sweep.ROW_LEVEL_CHECK)
    calls = []
    for report in reports:

        def reported(*args, report=report):  # row 1 reported (its values left at zero)
            status, gap, index, *rest = real(*args)
            status[1], gap[:, 1] = report, 0.0
            calls.append(report)
            return (status, gap, index, *rest)

        monkeypatch.setattr(module, name, reported)
        found = minima(p, q, [3, 8])
        want = single(p[1], q[1], [3, 8])
        assert np.all(want[0] < 0)  # the test can fail
        np.testing.assert_array_equal(found[1][0], want[0])
    assert calls == reports  # the batch ran


def test_long_excluded_runs_are_cut_at_bucket_boundaries():
    """The first level cuts a run of excluded buckets longer than ``stop / EXCLUDED_PIECES``
    at bucket boundaries only (prefixes of the ``p/q`` order) into blocks of at least that
    length, and the candidate runs into refinable pieces."""
    from otbound.drafts._sequential_bucketed import EXCLUDED_PIECES, first_cuts

    rng = np.random.default_rng(15)
    for _ in range(20):
        buckets = int(rng.integers(1, 80))
        starts = np.concatenate(([0], np.cumsum(rng.integers(1, 400, buckets))))
        chosen = rng.random(buckets) < rng.uniform(0.0, 0.4)
        if not chosen.any():
            continue
        last = int(np.flatnonzero(chosen)[-1])
        stop = int(starts[last + 1])
        cuts, refinable = first_cuts(chosen, starts, stop)
        assert cuts[0] == 0 and cuts[-1] == stop and np.all(np.diff(cuts) > 0)
        piece = -(-stop // EXCLUDED_PIECES)
        bucket_of = np.searchsorted(starts, np.arange(stop), side="right") - 1
        for lo, hi, keep in zip(cuts[:-1], cuts[1:], refinable, strict=True):
            inside = np.unique(bucket_of[lo:hi])
            assert np.all(chosen[inside] == keep)  # a segment lies in one kind of run
            if not keep:
                assert lo in starts and hi in starts  # excluded blocks end on boundaries
                run_start = lo == 0 or chosen[bucket_of[lo - 1]]
                run_end = hi == stop or chosen[bucket_of[hi]]
                assert hi - lo >= piece or (run_start and run_end)
                assert hi - lo < 2 * piece + 400  # else a boundary (buckets < 400) was cut


def test_a_split_excluded_run_keeps_the_sorted_sweeps_values():
    """A Zipf row whose first candidate bucket comes after most tokens: its excluded run is
    cut, and the minimum is the sorted sweep's."""
    from otbound.drafts._sequential_bucketed import (
        _bucket_plan,
        bucketed_prefix_minimum,
        first_cuts,
    )

    rng = np.random.default_rng(16)
    p, q = _zipf_pair(rng, 20_000)
    counts = [2, 3, 4, 8]
    _, order, ratio, starts, edge, sum_p, sum_q, tops = bucket_row(p, q, 8)
    chosen, stop, *_ = _bucket_plan(
        p, q, order, ratio, starts, edge, sum_p, sum_q, tops, np.array(counts)
    )
    _, refinable = first_cuts(chosen, starts, stop)
    assert np.count_nonzero(~refinable[1:] & ~refinable[:-1]) >= 1  # one run, several blocks
    gap = bucketed_prefix_minimum(p, q, counts)[0]
    np.testing.assert_allclose(gap, _sorted_minimum(p, q, counts), rtol=0, atol=1e-12)


def test_ratio_buckets_keep_the_order_and_the_sums():
    rng = np.random.default_rng(4)
    p, q = _row("ties", rng, 2000)
    q[:5] = 0.0
    q /= q.sum()
    buckets, order, _, starts, edge, sum_p, sum_q, tops = bucket_row(p, q, 4)
    assert starts[-1] == np.count_nonzero(q > 0)
    r = p / np.where(q > 0, q, 1.0)
    for b in range(buckets):
        tokens = order[starts[b] : starts[b + 1]]
        assert np.all(r[tokens] >= edge[b])
        if b + 1 < buckets:
            assert np.all(r[tokens] < edge[b + 1])
        assert sum_p[b] == pytest.approx(p[tokens].sum(), rel=1e-12)
        assert sum_q[b] == pytest.approx(q[tokens].sum(), rel=1e-12)
        prefix = order[: starts[b + 1]]
        largest = np.sort(q[prefix])[::-1][:4]
        np.testing.assert_array_equal(tops[b, : largest.size], largest)
        assert np.all(tops[b, largest.size :] == 0.0)


def _numpy_candidates(cum_p, cum_q, edge, mass, tops, n):
    """:func:`bucketed_candidates` as numpy expressions (the reference of the compiled one)."""
    from otbound.drafts._sequential_bucketed import MARGIN

    upper_value = min(0.0, float(np.min(cum_p - product_lower_bound(cum_q, tops, n))))
    top_q = np.minimum(cum_q, 1.0) ** n
    lower = np.minimum(cum_p[:-1] - top_q[:-1], cum_p[:-1] + edge * mass - top_q[1:])
    return lower <= upper_value + MARGIN


def test_the_compiled_bucket_plan_is_the_numpy_candidates_and_sort():
    """:func:`_bucket_plan` picks the union over ``n`` of the buckets numpy's candidate test
    keeps (as does :func:`bucketed_candidates` for each ``n``), sorts those buckets as
    :func:`sort_buckets` does and gathers the rows in the new order."""
    from otbound.drafts._ratio_buckets import sort_buckets
    from otbound.drafts._sequential_bucketed import _bucket_plan, bucketed_candidates

    rng = np.random.default_rng(31)
    picked_any = 0
    for trial in range(24):
        kind = ("zipf", "peaked", "dirichlet", "ties")[trial % 4]
        p, q = _row(kind, rng, int(rng.integers(50, 3000)))
        counts = np.array(sorted({2, int(rng.integers(3, 9)), 8}), dtype=np.int64)
        buckets, order, ratio, starts, edge, sum_p, sum_q, tops = bucket_row(p, q, 8)
        cum_p = np.concatenate(([0.0], np.cumsum(sum_p)))
        cum_q = np.concatenate(([0.0], np.cumsum(sum_q)))
        want = np.zeros(buckets, dtype=bool)
        for n in counts:
            one = _numpy_candidates(cum_p, cum_q, edge, sum_q, tops, int(n))
            np.testing.assert_array_equal(
                bucketed_candidates(cum_p, cum_q, edge, sum_q, tops, int(n)), one
            )
            want |= one
        want_order = order.copy()
        sort_buckets(want_order, ratio, starts, np.flatnonzero(want))
        chosen, stop, p_sorted, q_sorted, columns = _bucket_plan(
            p, q, order, ratio, starts, edge, sum_p, sum_q, tops, counts
        )
        np.testing.assert_array_equal(chosen, want)
        picked = np.flatnonzero(want)
        picked_any += picked.size
        assert stop == (starts[picked[-1] + 1] if picked.size else 0)
        size = starts[-1]
        np.testing.assert_array_equal(order[:size], want_order[:size])
        np.testing.assert_array_equal(p_sorted, p[order[:size]])
        np.testing.assert_array_equal(q_sorted, q[order[:size]])
        np.testing.assert_array_equal(columns, bucket_columns(starts, picked))
    assert picked_any > 0


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_product_lower_bound_bounds_q_from_below(n):
    """``Π_{j<n} (q(H) − M_j)/(1 − M_j) ≤ Q(H) ≤ q(H)^n`` at every bucket boundary."""
    rng = np.random.default_rng(n)
    for kind in ("zipf", "peaked", "dirichlet"):
        p, q = _row(kind, rng, 300)
        _, order, _, starts, _, _, sum_q, tops = bucket_row(p, q, n)
        mass = sequential_prefix_masses(q[order[: starts[-1]]], [n])[0][starts]
        cum_q = np.concatenate(([0.0], np.cumsum(sum_q)))
        lower = product_lower_bound(cum_q, tops, n)
        assert np.all(lower <= mass + 1e-12)
        assert np.all(mass <= np.minimum(cum_q, 1.0) ** n + 1e-12)


# -- the compiled O(V) passes: numpy's values, bit for bit --------------------------------------

from otbound.drafts._sequential_layout import (  # noqa: E402
    CLOSED_CHECK,
    CLOSED_FOUND,
    CLOSED_INTEGRATE,
    bucket_columns,
    closed_minimum,
    largest_masses,
    prefix_sums,
)


def _layout_rows(rng: np.random.Generator):
    """Zipf rows, rows with zeros, one token holding almost all the mass, float32 input."""
    for vocab in (1, 2, 5, 300, 4000):
        p, q = _zipf_pair(rng, vocab)
        yield p, q
        q0 = np.where(rng.random(vocab) < 0.3, 0.0, q)
        if q0.sum() > 0:
            yield p, q0 / q0.sum()
        heavy = np.full(vocab, 1e-13)
        heavy[rng.integers(vocab)] = 1.0
        yield p, heavy / heavy.sum()
        yield p.astype(np.float32), q


def test_prefix_sums_are_numpys_cumulative_sums():
    rng = np.random.default_rng(11)
    for p, q in _layout_rows(rng):
        cum_p, suffix, positives = prefix_sums(p.astype(np.float64), q)
        np.testing.assert_array_equal(cum_p, np.concatenate(([0.0], np.cumsum(p, dtype=float))))
        np.testing.assert_array_equal(suffix[:-1], np.cumsum(q[::-1])[::-1])
        assert suffix[-1] == 0.0
        np.testing.assert_array_equal(positives, np.concatenate(([0], np.cumsum(q > 0))))


def test_bucket_columns_are_the_boundaries_and_the_sorted_buckets_insides():
    """Against the numpy marking the bucketed sweep used before: every boundary, and every
    prefix strictly inside a picked bucket."""
    rng = np.random.default_rng(14)
    for buckets in (1, 2, 7, 60):
        starts = np.concatenate(([0], np.cumsum(rng.integers(1, 9, buckets))))
        for picked in (
            np.arange(0),
            np.arange(buckets),
            np.flatnonzero(rng.random(buckets) < 0.4),
        ):
            inside = np.zeros(starts[-1] + 2, dtype=np.int64)
            np.add.at(inside, starts[picked], 1)
            np.add.at(inside, starts[picked + 1], -1)
            valid = np.cumsum(inside[:-1]) > 0
            valid[starts] = True
            np.testing.assert_array_equal(bucket_columns(starts, picked), np.flatnonzero(valid))


def _numpy_closed_minimum(q, suffix, positives, cum_p, columns, n):
    """The numpy lines the kernel replaces: the closed form, its checks and the minimum."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mass = _closed_form_mass(q, suffix, n)
    mass = np.where(positives >= n, np.where(suffix > 0, mass, 1.0), 0.0)[columns]
    if not np.all(np.isfinite(mass)):
        return CLOSED_INTEGRATE, 0.0, 0
    values = cum_p[columns] - np.clip(mass, 0.0, 1.0)
    where = int(np.argmin(values))
    return (CLOSED_FOUND, values[where], columns[where]) if values[where] < 0 else (0, 0.0, 0)


@pytest.mark.parametrize("n", [1, 2])
def test_closed_minimum_is_the_numpy_closed_form_minimum(n):
    rng = np.random.default_rng(12)
    found = 0
    for p, q in _layout_rows(rng):
        cum_p, suffix, positives = prefix_sums(p.astype(np.float64), q)
        for columns in (np.arange(q.size + 1), np.flatnonzero(rng.random(q.size + 1) < 0.5)):
            if columns.size == 0:
                continue
            got = closed_minimum(q, suffix, positives, cum_p, columns, n)
            want = _numpy_closed_minimum(q, suffix, positives, cum_p, columns, n)
            assert got[0] == want[0]
            assert got[1] == want[1] and got[2] == want[2], (got, want)
            found += got[1] < 0
    assert found > 0  # some minimum is below 0


def test_closed_minimum_hands_overflows_and_bad_masses_back_to_numpy():
    """Odds that overflow (``1 − q_x`` subnormal) ask for the integral; a mass beyond
    rounding outside [0, 1] asks for numpy's check, which raises."""
    q = np.array([1.0, 5e-324, 5e-324])
    cum_p, suffix, positives = prefix_sums(np.array([0.5, 0.25, 0.25]), q)
    assert closed_minimum(q, suffix, positives, cum_p, np.arange(4), 2)[0] == CLOSED_INTEGRATE
    q = np.array([0.4, 0.3, 0.3])
    cum_p, suffix, positives = prefix_sums(np.array([0.2, 0.3, 0.5]), q)
    bad = suffix.copy()
    bad[1] = -0.01  # a corrupted suffix sum: the mass of the first two tokens becomes 12.6
    assert closed_minimum(q, bad, positives, cum_p, np.arange(4), 2)[0] == CLOSED_CHECK
    nan = cum_p.copy()
    nan[2] = np.nan
    assert closed_minimum(q, suffix, positives, nan, np.arange(4), 2)[0] == CLOSED_CHECK
    with pytest.raises(ValueError, match="NaN"):  # the numpy path raises, as before
        sequential_prefix_minimum(np.array([np.nan, 0.5, 0.0]), np.array([0.4, 0.3, 0.3]), [2])


def test_a_mass_that_is_not_finite_integrates_even_after_a_failed_check():
    """numpy's order: the closed form integrates ``n = 2`` when any mass is not finite,
    before it checks the others (corrupted suffix sums: the first two tokens' mass beyond
    rounding, then the first three's infinite)."""
    q = np.array([0.4, 0.3, 0.2, 0.1])
    cum_p, suffix, positives = prefix_sums(np.full(4, 0.25), q)
    bad = suffix.copy()
    bad[1] = -0.01  # Q of the first two tokens becomes 12.6
    assert closed_minimum(q, bad, positives, cum_p, np.arange(3), 2)[0] == CLOSED_CHECK
    bad[3] = 1e308  # and of the first three, infinite
    assert closed_minimum(q, bad, positives, cum_p, np.arange(5), 2)[0] == CLOSED_INTEGRATE


def test_n_two_integrates_where_its_odds_overflow():
    """``1 − q_x`` below the normal range: ``n = 2`` is integrated, and its minimum is the
    full sweep's (with ``n = 1`` and ``n = 3`` beside it)."""
    q = np.array([1.0, 5e-324, 5e-324, 5e-324])
    p = np.array([0.01, 0.01, 0.49, 0.49])
    cum_p, suffix, positives = prefix_sums(p, q)
    assert closed_minimum(q, suffix, positives, cum_p, np.arange(5), 2)[0] == CLOSED_INTEGRATE
    counts = [1, 2, 3]
    full = np.concatenate(([0.0], np.cumsum(p)))[None, :] - sequential_prefix_masses(q, counts)
    gap, index = sequential_prefix_minimum(p, q, counts)
    np.testing.assert_allclose(gap, np.minimum(full.min(axis=1), 0.0), rtol=0, atol=1e-15)
    assert gap[1] < -0.3  # the test can fail
    np.testing.assert_array_equal(index[:2], np.argmin(full[:2], axis=1))


def test_no_live_prefix_settles_every_end_at_zero_or_one():
    """Every prefix up to ``stop`` holds fewer than ``n`` positive masses (or nothing is
    outside): ``Q`` is 0 or 1 there, the minimum needs no integral, and a NaN raises."""
    p, q = np.array([0.05, 0.05, 0.9]), np.array([0.4, 0.3, 0.3])
    gap, index = sequential_prefix_minimum(p, q, [2, 3], stop=1)
    assert gap[1] == 0.0 and index[1] == 0
    gap, index = sequential_prefix_minimum(p, np.array([0.5, 0.5, 0.0]), [2], stop=3)
    assert gap[0] == pytest.approx(0.1 - 1.0) and index[0] == 2  # Q = 1 from two tokens on
    with pytest.raises(ValueError, match="NaN"):
        sequential_prefix_minimum(np.array([np.nan, 0.5, 0.5]), q, [3], stop=1)


def _numpy_growth_bound(q: np.ndarray, n: int) -> float:
    """The growth bound as numpy expressions (the earlier code): ``q.sum()`` less the largest
    masses, or, where that cancels, the others summed without the ``np.argpartition`` top."""
    most = min(n, q.size)
    top = np.sort(q)[::-1][:most]
    rest = q.sum() - np.concatenate(([0.0], np.cumsum(top)))
    if most and rest[most] < sweep_module.RELIABLE_REST:
        tops = np.argpartition(q, q.size - most)[q.size - most :]
        tail = np.delete(q, tops).sum()
        rest = tail + np.concatenate((np.cumsum(top[::-1])[::-1], [0.0]))
    rest = rest * (1.0 - 1e-12)
    with np.errstate(over="ignore", divide="ignore"):
        inverse = 1.0 / rest
    return float(np.sum(inverse[:n])) if rest[min(n, rest.size) - 1] > 0 else math.inf


def test_the_compiled_growth_bound_is_the_numpy_one():
    """Bit for bit where no mass ties the ``n``-th largest (numpy's ``argpartition`` picked
    any of the tied ones, the kernel the first), to rounding where one does; both branches
    (the largest masses hold all but 1e-18, or not)."""
    rng = np.random.default_rng(17)
    branches = set()
    ties = 0
    for trial in range(300):
        vocab, n = int(rng.integers(1, 400)), int(rng.integers(1, 9))
        q = rng.dirichlet(np.full(vocab, 0.3))
        if trial % 3 == 1:  # the largest hold nearly everything
            q = np.where(np.arange(vocab) < n - 1, q, q * 1e-18)
        if trial % 3 == 2:  # ties: masses drawn from a few values
            q = rng.choice([1e-3, 2e-3, 5e-3], vocab) * (1e-18 if trial % 2 else 1.0)
            q[: min(n - 1, vocab)] = rng.dirichlet(np.ones(min(n - 1, vocab))) if n > 1 else []
        q = q / q.sum()
        want = _numpy_growth_bound(q, n)
        got = _growth_bound(q, n)
        top = np.sort(q)[::-1]
        tied = n < vocab and top[n - 1] == top[n]
        if tied:
            assert got == pytest.approx(want, rel=1e-14)
            ties += 1
        else:
            assert got == want
        branches.add(bool(min(n, vocab) and top[: min(n, vocab)].sum() > 1 - 1e-2))
    assert branches == {False, True} and ties > 10


def test_largest_masses_are_the_partitions_top():
    rng = np.random.default_rng(13)
    for _, q in _layout_rows(rng):
        for most in range(1, min(q.size, 9) + 1):
            want = np.sort(np.partition(q, q.size - most)[q.size - most :])[::-1]
            np.testing.assert_array_equal(largest_masses(q, most), want)


# -- one level's bookkeeping, compiled: the numpy lines' values ----------------------------------

from otbound.drafts import _sequential_bucketed as bucketed_module  # noqa: E402
from otbound.drafts import _sequential_mass as mass_module  # noqa: E402
from otbound.drafts import _sequential_sweep as sweep_module  # noqa: E402
from otbound.drafts._sequential_level import (  # noqa: E402
    LEVEL_CHECK,
    LEVEL_SETTLED,
    _inside_lower,
    level_layout,
    settle_level,
)


def _numpy_settle_level(starts, ends, remaining, left, positives, cum_p, suffix, p, q, ns, growth):
    """The numpy lines :func:`settle_level` replaced (exact masses, the minimum, the candidate
    test and the cuts into ``REFINE`` pieces), frozen here as its reference."""
    gap, index = np.zeros(len(ns)), np.zeros(len(ns), dtype=np.int64)
    known = np.zeros((len(ns), suffix.size))
    for k, n in enumerate(ns):
        enough = positives[ends] >= n
        live = enough & (suffix[ends] > 0)
        mass = np.where(live, 1.0 - (remaining[k] + left), np.where(enough, 1.0, 0.0))
        mass = np.clip(mass, 0.0, 1.0)
        values = cum_p[ends] - mass
        where = int(np.argmin(values))
        if values[where] < gap[k]:
            gap[k], index[k] = values[where], ends[where]
        known[k, ends] = mass
    rise = [np.maximum(known[k, ends] - known[k, starts], 0.0) for k in range(len(ns))]
    reach = np.minimum(1.0 - suffix[ends] / suffix[0] + 1e-12, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q[starts] > 0, p[starts] / q[starts], np.inf)
    lower = [
        cum_p[starts]
        - known[k, ends]
        + np.minimum(ratio / (growth[k] * reach ** (n - 1)), 1.0) * rise[k]
        for k, n in enumerate(ns)
    ]
    slack = sweep_module.CANDIDATE_SLACK
    # inside the segment each prefix's own p(H_i), with Q(H_i) ≤ min(Q(H_e), Q(H_s) + K_e m,
    # the chord Q(H_s) + (Q(H_e) − Q(H_s)) m / M), m the suffix difference rounded up and M
    # rounded down; a NaN keeps the segment
    inside = np.full((len(ns), starts.size), np.inf)
    for k, n in enumerate(ns):
        slope = growth[k] * reach ** (n - 1)
        for j, (a, e) in enumerate(zip(starts, ends, strict=True)):
            i = np.arange(a + 1, e)
            if i.size:
                added = (suffix[a] - suffix[i]) * (1.0 + 2.0**-51) + (i - a) * 2.0**-53 * suffix[a]
                span = (suffix[a] - suffix[e]) * (1.0 - 2.0**-51) - (e - a) * 2.0**-53 * suffix[a]
                with np.errstate(invalid="ignore"):
                    cap = np.minimum(known[k, e], known[k, a] + slope[j] * added)
                    if span > 0:
                        rise_k = max(known[k, e] - known[k, a], 0.0)
                        chord = known[k, a] + rise_k * (added / span)
                        cap = np.where((added < span) & (chord < cap), chord, cap)
                values = cum_p[i] - cap
                inside[k, j] = -np.inf if np.isnan(values).any() else np.min(values)
    keep = [~(lo >= gap[k] + slack) for k, lo in enumerate(lower)]
    chosen = np.flatnonzero(
        (ends - starts > 1)
        & np.any([keep[k] & (inside[k] < gap[k] + slack) for k in range(len(ns))], axis=0)
    )
    loose = np.flatnonzero((ends - starts > 1) & np.any(keep, axis=0))  # without the inside test
    lengths = ends[chosen] - starts[chosen]
    step = -(-lengths // sweep_module.REFINE)
    pieces = -(-lengths // step)
    groups = np.concatenate(([0], np.cumsum(pieces)))
    within = np.arange(groups[-1]) - np.repeat(groups[:-1], pieces)
    new_starts = np.repeat(starts[chosen], pieces) + within * np.repeat(step, pieces)
    new_ends = np.minimum(new_starts + np.repeat(step, pieces), np.repeat(ends[chosen], pieces))
    return gap, index, known, chosen, new_starts, new_ends, groups, loose


def _level_inputs(rng: np.random.Generator, vocab: int, ns: list[int], every: int = 7):
    p, q = _zipf_pair(rng, vocab)
    order = np.argsort(_sweep_key(p, q))
    p, q = p[order], q[order]
    cum_p, suffix, positives = prefix_sums(p, q)
    cuts = np.unique(np.concatenate(([0, vocab], rng.integers(1, vocab, vocab // every))))
    starts, ends = cuts[:-1], cuts[1:]
    exact = sequential_prefix_masses(q, ns)[:, ends]
    left = rng.uniform(0.0, 1e-3, ends.size)
    remaining = 1.0 - exact - left[None, :]  # so that Q(H_e) is the exact mass
    growth = np.array([sweep_module._growth_bound(q, n) for n in ns])
    return starts, ends, remaining, left, positives, cum_p, suffix, p, q, growth


def test_settle_level_is_the_numpy_bookkeeping():
    rng = np.random.default_rng(81)
    ns = [3, 4, 8]
    checked = pruned = 0
    for vocab, every in ((40, 7), (300, 7), (2_000, 7), (9_000, 7), (9_000, 60), (20_000, 200)):
        args = _level_inputs(rng, vocab, ns, every)
        starts, ends, remaining, left, positives, cum_p, suffix, p, q, growth = args
        *want, loose = _numpy_settle_level(*args[:9], ns, growth)
        gap, index = np.zeros(3), np.zeros(3, dtype=np.int64)
        known = np.zeros((3, vocab + 1))
        status, chosen, new_starts, new_ends, groups = settle_level(
            starts, ends, remaining, left, positives, cum_p, suffix, p, q,
            np.array(ns), np.arange(3), growth, gap, index, known,
            np.ones(starts.size, dtype=bool), sweep_module.REFINE, sweep_module.CANDIDATE_SLACK,
        )  # fmt: skip
        assert status == LEVEL_SETTLED
        for got, expected in zip(
            (gap, index, known, chosen, new_starts, new_ends, groups), want, strict=True
        ):
            np.testing.assert_array_equal(got, expected)
        checked += chosen.size
        pruned += loose.size - chosen.size
    assert checked > 0  # some segments are candidates
    assert pruned > 0  # and the inside test removed some that the first test kept


def _inside_cases(seed: int):
    """Zipf rows in sweep order (V = 30, 400, 3,000; n = 3, 4, 8) with their prefix sums, the
    exact ``Q`` of every prefix, the growth bound ``K`` and random segments ``[a, e)`` of at
    least two tokens."""
    rng = np.random.default_rng(seed)
    for vocab in (30, 400, 3_000):
        for n in (3, 4, 8):
            p, q = _zipf_pair(rng, vocab)
            order = np.argsort(_sweep_key(p, q))
            p, q = p[order], q[order]
            cum_p, suffix, _ = prefix_sums(p, q)
            exact = sequential_prefix_masses(q, [n])[0]
            slope = sweep_module._growth_bound(q, n)
            cuts = np.unique(np.concatenate(([0, vocab], rng.integers(1, vocab, vocab // 5))))
            segments = [(a, e) for a, e in itertools.pairwise(cuts) if e - a >= 2]
            yield n, cum_p, suffix, exact, slope, segments


def test_the_inside_bound_is_below_every_prefix_inside():
    """``p(H_i) − min(Q(H_e), Q(H_s) + K_e (q(H_i) − q(H_s)), chord)`` never exceeds the exact
    ``p(H_i) − Q(H_i)``, and it is tight somewhere (the test can fail)."""
    closest = np.inf
    for n, cum_p, suffix, exact, slope, segments in _inside_cases(83):
        for a, e in segments:
            reach = min(1.0 - suffix[e] / suffix[0] + 1e-12, 1.0)
            bound = _inside_lower(a, e, cum_p, suffix, exact, slope * reach ** (n - 1))
            truth = np.min(cum_p[a + 1 : e] - exact[a + 1 : e])
            assert bound <= truth + 1e-15
            closest = min(closest, truth - bound)
    assert closest < 1e-3


def _brute_force_q(q: np.ndarray, n: int) -> np.ndarray:
    """``Q(H)`` for every subset ``H`` (bit mask) of a small vocabulary: the probability that
    ``n`` draws without replacement from ``q`` all land in ``H``, by enumerating the sets of
    the first draws (each reached in every order) and summing over subsets."""
    vocab = q.size
    mass = np.zeros(1 << vocab)
    for s in range(1, 1 << vocab):
        low = s & -s
        mass[s] = mass[s ^ low] + q[low.bit_length() - 1]
    first = np.zeros(1 << vocab)  # P(the first |s| draws are the set s)
    first[0] = 1.0
    sizes = np.array([bin(s).count("1") for s in range(1 << vocab)])
    for s in range(1 << vocab):
        if first[s] and sizes[s] < n:
            for x in range(vocab):
                if not s >> x & 1:
                    first[s | 1 << x] += first[s] * q[x] / (1.0 - mass[s])
    out = np.where(sizes == n, first, 0.0)
    for x in range(vocab):  # Q(H) = Σ_{S ⊆ H, |S| = n} P(first draws = S)
        for s in range(1 << vocab):
            if s >> x & 1:
                out[s] += out[s ^ (1 << x)]
    return out


def test_q_is_convex_in_the_mass_along_any_order():
    """The chord of ``_inside_lower``: along any order of the tokens, the rise of ``Q`` per
    unit of mass, ``(Q(H ∪ x) − Q(H)) / q_x``, never falls (checked against brute force on
    flat, peaked and mixed rows, every ``n``; it is not constant, so the check can fail)."""
    rng = np.random.default_rng(97)
    steepest = 0.0
    for trial in range(120):
        vocab = int(rng.integers(4, 9))
        n = int(rng.integers(2, vocab))
        kind = trial % 3
        if kind == 0:
            q = rng.dirichlet(np.full(vocab, 0.2))
        elif kind == 1:
            q = rng.dirichlet(np.full(vocab, 2.0))
        else:
            q = np.full(vocab, 0.01)
            q[rng.integers(vocab)] = 1.0
        q = np.maximum(q, 1e-3)
        q /= q.sum()
        table = _brute_force_q(q, n)
        for _ in range(10):
            held, rates = 0, []
            for x in rng.permutation(vocab):
                rates.append((table[held | 1 << x] - table[held]) / q[x])
                held |= 1 << x
            rates = np.array(rates)
            assert np.all(np.diff(rates) >= -1e-9 * rates.max()), (q, n, rates)
            steepest = max(steepest, float(np.max(np.diff(rates))))
    assert steepest > 0.1


def test_the_chord_alone_is_below_every_prefix_inside():
    """With no slope bound (``K_e = inf``), the chord keeps ``_inside_lower`` below the exact
    ``p(H_i) − Q(H_i)`` of every inside prefix, and it is far tighter than the slope bound."""
    for _, cum_p, suffix, exact, slope, segments in _inside_cases(89):
        chord_gap = slope_gap = 0.0
        for a, e in segments:
            truth = np.min(cum_p[a + 1 : e] - exact[a + 1 : e])
            chord = _inside_lower(a, e, cum_p, suffix, exact, np.inf)
            assert chord <= truth + 1e-15
            chord_gap += truth - chord
            with_slope = exact.copy()
            with_slope[e] = np.inf  # no Q(H_e): the slope bound alone (and no chord)
            slope_gap += truth - _inside_lower(a, e, cum_p, suffix, with_slope, slope)
        assert chord_gap < slope_gap


def test_settle_level_hands_bad_masses_back_to_numpy_which_raises(monkeypatch):
    rng = np.random.default_rng(82)
    args = _level_inputs(rng, 500, [4])
    starts, ends, remaining, left, positives, cum_p, suffix, p, q, growth = args
    middle = ends.size // 2
    for bad in (-left[middle] - 1e-9, np.nan):  # Q(H) = 1 + 1e-9 is beyond rounding
        broken = remaining.copy()
        broken[0, middle] = bad
        status = settle_level(
            starts, ends, broken, left, positives, cum_p, suffix, p, q, np.array([4]),
            np.arange(1), growth, np.zeros(1), np.zeros(1, dtype=np.int64),
            np.zeros((1, 501)), np.ones(starts.size, dtype=bool), 8, 1e-13,
        )[0]  # fmt: skip
        assert status == LEVEL_CHECK
    real = sweep_module.prefix_minimum_kernel

    def skewed(*a):  # the compiled row reporting its last level with every Q(H) above one
        _, gap, index, remaining, left, ends, slots, needed = real(*a)
        assert remaining.size
        status = sweep_module.ROW_LEVEL_CHECK
        return status, gap, index, remaining - 2.0, left, ends, slots, needed

    monkeypatch.setattr(sweep_module, "prefix_minimum_kernel", skewed)
    with pytest.raises(ValueError, match="exponential clocks"):
        sequential_prefix_minimum(p, q, [4])


def test_level_layout_is_the_numpy_layout():
    rng = np.random.default_rng(83)
    for vocab in (1, 17, 300, 5_000):
        p, q = _zipf_pair(rng, vocab)
        _, suffix, _ = prefix_sums(p, q)
        cuts = np.unique(np.concatenate(([0, vocab], rng.integers(0, vocab + 1, 9))))
        chosen = rng.random(cuts.size - 1) < 0.6
        starts, ends = cuts[:-1][chosen], cuts[1:][chosen]
        scale = 4.0
        got = level_layout(q, suffix, starts, ends, scale, 16)
        lengths = ends - starts
        edges = np.concatenate(([0], np.cumsum(lengths)))
        idx = np.repeat(starts - edges[:-1], lengths) + np.arange(edges[-1])
        folded = lengths > 16
        rows = np.where(folded, np.cumsum(folded) - 1, 0)
        want = (edges, q[idx] * scale, suffix[idx + 1] * scale, rows, np.count_nonzero(folded))
        for a, b in zip(got[:5], want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert got[5] == (lengths.max() if lengths.size else 0)
        bare = level_layout(q, suffix, starts, ends, scale, 16, False)  # the caller's views
        assert bare[1].size == bare[2].size == 0
        for a, b in zip((bare[0], *bare[3:]), (got[0], *got[3:]), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_left_weight_stops_where_its_terms_no_longer_change_the_sum():
    """All sixty terms of the series, in plain Python, give the same float bit for bit."""
    from otbound.drafts._sequential_mass import _left_weight, left_weight_inverses

    rng = np.random.default_rng(84)
    lam = np.concatenate([rng.random(300), 10.0 ** rng.uniform(-300, 0, 300), [0.0, 1.0, 5e-324]])
    for t_lo, h in [(9.5e-4, 0.2), (0.05, 0.2), (1.0, 0.2), (1.0, 0.5)]:
        inverse = left_weight_inverses(h)
        want = []
        for value in lam:
            x, total, term, sign = value * t_lo, 0.0, value * t_lo, 1.0
            for m in range(60):
                total += sign * term * inverse[m]
                term = term * x / (m + 1)
                sign = -sign
            want.append(h * total)
        got = _left_weight(lam, t_lo, h)
        assert np.count_nonzero(got) > 500  # the series is not trivially zero
        np.testing.assert_array_equal(got, np.array(want))


def test_the_power_sums_fold_exactly_the_masses_below_each_node_limit():
    """Each node's folded masses are those at most its limit (no sort: a layout by class),
    with their largest and ``σ_r = Σ (q_x / largest)^r``, against numpy."""
    from otbound.drafts._sequential_mass import (
        FOLD_MIN,
        MOST_TERMS,
        fold_limits,
        segment_power_sums,
    )
    from otbound.drafts._sequential_sweep import _balanced_schedule

    rng = np.random.default_rng(85)
    h, nodes = 0.2, 70
    limits = fold_limits(1e-3, h, nodes)
    assert np.all(np.diff(limits) < 0)
    for trial in range(6):
        lengths = rng.integers(1, 400, 5)
        vals = 10.0 ** rng.uniform(-6, 2.5, lengths.sum())
        vals[rng.random(vals.size) < 0.05] = 0.0  # zero masses fold everywhere
        vals[:3] = limits[nodes // 2]  # a mass on a limit is folded there
        if trial == 0:
            vals[:] = limits[0] * 2  # nothing folds anywhere
        edges = np.concatenate(([0], np.cumsum(lengths)))
        folded = lengths > FOLD_MIN
        rows = np.where(folded, np.cumsum(folded) - 1, 0)
        total = int(np.count_nonzero(folded))
        layout = np.full(vals.size, np.nan)
        sigma = np.full((total, nodes, MOST_TERMS), np.nan)
        fold_end = np.full((total, nodes), -1, dtype=np.int64)
        largest = np.full((total, nodes), np.nan)
        schedule, bounds = _balanced_schedule(edges, 1 + trial % 3)  # 1, 2 or 3 shares
        assert sorted(schedule.tolist()) == np.flatnonzero(folded).tolist()
        work = np.full((3, vals.size), np.nan)
        segment_power_sums(
            vals, edges, rows, limits, h, layout, sigma, fold_end, largest, schedule, bounds, work
        )
        for s in np.flatnonzero(folded):
            mine = vals[edges[s] : edges[s + 1]]
            laid = layout[edges[s] : edges[s + 1]]
            np.testing.assert_array_equal(np.sort(laid), np.sort(mine))
            for j in range(nodes):
                b = rows[s]
                count = int(fold_end[b, j])
                want = np.sort(mine[mine <= limits[j]])
                np.testing.assert_array_equal(np.sort(laid[:count]), want)
                top = want.max() if want.size else 0.0
                assert largest[b, j] == top
                sums = [(want / top) ** r for r in range(1, MOST_TERMS + 1)] if top > 0 else []
                expected = np.array([x.sum() for x in sums]) if top > 0 else np.zeros(MOST_TERMS)
                np.testing.assert_allclose(sigma[b, j], expected, rtol=1e-13, atol=0)


def test_sorting_the_chosen_buckets_sorts_each_in_its_own_places():
    """One sort of the chosen buckets' tokens together is each bucket's stable sort."""
    from otbound.drafts._ratio_buckets import sort_buckets

    rng = np.random.default_rng(86)
    for kind in ("ties", "zipf"):
        p, q = _row(kind, rng, 3_000)
        buckets, order, ratio, starts, *_ = bucket_row(p, q, 2)
        chosen = np.flatnonzero(rng.random(buckets) < 0.4)
        want = order.copy()
        for b in chosen:
            tokens = want[starts[b] : starts[b + 1]]
            want[starts[b] : starts[b + 1]] = tokens[np.argsort(ratio[tokens], kind="stable")]
        assert not np.array_equal(want, order)  # something was out of order
        sort_buckets(order, ratio, starts, chosen)
        np.testing.assert_array_equal(order, want)


def test_growth_bound_survives_the_cancellation_of_one_minus_the_largest():
    """The ``n − 1`` largest masses hold all but 1e-18: ``q.sum() − Σ top`` cancelled to about
    2e-16, ``K`` came out near 9e15 where it is at least 1e18, the slope test dropped the
    segment that holds the minimum and α* came out 6.5e-6 too high. The other masses are now
    summed on their own."""
    rng = np.random.default_rng(7)
    vocab, n = 2_000, 8
    tail = vocab - n + 1
    ratio = 10.0 ** rng.uniform(15, 21, tail)
    small = 10.0 ** rng.uniform(-2, 0, tail)
    small *= 1e-18 / small.sum()
    q = np.concatenate((rng.dirichlet(np.ones(n - 1)) * (1 - 1e-18), small))
    p = np.concatenate((np.full(n - 1, 1e-3), small * ratio))
    p, q = p / p.sum(), q / q.sum()
    assert _growth_bound(q, n) >= 1e18
    order = np.argsort(_sweep_key(p, q), kind="stable")
    every = (
        np.concatenate(([0.0], np.cumsum(p[order]))) - sequential_prefix_masses(q[order], [n])[0]
    )
    want = 1.0 + min(0.0, float(np.min(every)))
    got = optimal_acceptance(p, q, n=n, design="without_replacement")
    assert got == pytest.approx(want, abs=1e-12)


def test_an_infinite_growth_bound_keeps_the_segment():
    """``K = inf`` (the two largest masses hold all but 2e-318, whose inverse overflows)
    times a mass that rounds away is NaN: the segment is kept, and the minimum found (it was
    once dropped)."""
    vocab = 200
    q = np.full(vocab, 1e-320)
    q[3] = q[4] = 0.5
    p = np.zeros(vocab)
    p[3:7] = 0.001
    p[7:] = (1 - p.sum()) / (vocab - 7)
    assert _growth_bound(q, 3) == math.inf
    full = np.concatenate(([0.0], np.cumsum(p))) - sequential_prefix_masses(q, [3])[0]
    gap, index = sequential_prefix_minimum(p, q, [3])
    assert gap[0] == pytest.approx(full.min(), abs=1e-15)
    assert index[0] == int(np.argmin(full))


def test_masses_below_the_suffix_sums_last_place_still_count_inside_a_segment():
    """4,000 tokens each below half an ulp of the suffix leave ``suffix`` unchanged; the
    inside bound rounds the mass up, so the minimum inside the segment is still found."""
    n, tail = 3, 2.0**-20 * 1.01
    tiny = 0.45 * np.spacing(tail)  # each below half an ulp of the suffix: absorbed
    before, inside = 2000, 4000
    q = np.concatenate([[0.0, 0.0], np.full(before, tiny), [1e-3 * tail]])
    q = np.concatenate([q, np.full(inside, tiny), [tiny], [tail]])
    q[0] = q[1] = (1 - q[2:].sum()) / 2
    p = np.zeros_like(q)
    a = 2 + before + 1
    e = a + inside + 1
    exact = sequential_prefix_masses(q, [n])[0]
    p[a - 1] = (exact[a] - exact[a - 1]) + 1.5e-13
    p[e - 1] = 0.01
    p[-1] = 1 - p.sum()
    cum_p, suffix, _ = prefix_sums(p, q)
    assert np.all(suffix[a:e] == suffix[a])  # the masses inside are lost to rounding
    full = cum_p - exact
    assert a < int(np.argmin(full)) < e  # the minimum lies inside the segment
    cuts = np.array([0, 2, 2 + before, a, e, q.size])
    gap, _ = sequential_prefix_minimum(p, q, [n], cuts=cuts)
    assert abs(gap[0] - min(0.0, full.min())) < 1e-13


def test_the_bucket_helpers_refuse_what_they_cannot_handle():
    from otbound.drafts._ratio_buckets import sort_buckets

    rng = np.random.default_rng(87)
    p, q = _row("zipf", rng, 500)
    _, order, ratio, starts, _, _, sum_q, tops = bucket_row(p, q, 2)
    with pytest.raises(ValueError, match="strictly increasing"):
        sort_buckets(order, ratio, starts, np.array([3, 1]))
    with pytest.raises(ValueError, match="strictly increasing"):
        sort_buckets(order, ratio, starts, np.array([2, 2]))
    cum_q = np.concatenate(([0.0], np.cumsum(sum_q)))
    with pytest.raises(ValueError, match="columns"):
        product_lower_bound(cum_q, tops, 3)


from otbound.drafts._sequential_mass import (  # noqa: E402
    _bits_log,
    _fold_class,
    _group_power_sums,
    fold_limits,
)


@numba.njit(cache=True)
def _classes(values, limits, h):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_fold_class` of every value (its bits from a view), with its first log."""
    first_log = math.log(limits[0])
    words = values.view(np.uint64)
    out = np.empty(values.shape[0], dtype=np.int64)
    for i in range(values.shape[0]):
        out[i] = _fold_class(values[i], words[i], limits, first_log, h)
    return out


@pytest.mark.parametrize(("t_lo", "nodes"), [(1e-3, 80), (3.7, 1), (2.0**-30, 300), (1e-2, 2)])
def test_the_fold_class_is_the_count_of_limits_at_or_above_the_mass(t_lo, nodes):
    """A mass's class (the nodes that fold it) is the number of ``limits[j] ≥ value``, for
    masses on and one ulp either side of every limit, every power of two (mantissa bits
    zero), subnormals, zero, the largest float and random masses over 630 orders of
    magnitude: the guess from the bits never changes the answer."""
    h = 0.2
    limits = fold_limits(t_lo, h, nodes)
    rng = np.random.default_rng(nodes)
    values = np.concatenate(
        [
            limits,
            np.nextafter(limits, np.inf),
            np.nextafter(limits, 0.0),
            2.0 ** np.arange(-1074, 1024, dtype=np.float64),
            [0.0, 5e-324, 1e-310, 1.0, 0.05, 1e300, np.finfo(np.float64).max],
            10.0 ** rng.uniform(-323, 308, 20_000),
        ]
    )
    want = np.sum(values[:, None] <= limits[None, :], axis=1)
    assert np.array_equal(_classes(values, limits, h), want)


@numba.njit(cache=True)
def _bits_logs(values):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_bits_log` of every value (its bits from a view)."""
    words = values.view(np.uint64)
    out = np.empty(values.shape[0])
    for i in range(values.shape[0]):
        out[i] = _bits_log(words[i])
    return out


def test_the_log_from_the_bits_is_within_its_bound():
    """The guess of a class (its speed, not its answer) rests on ``log x`` from the exponent
    and six mantissa bits being within 0.008 of ``log x`` for every normal float: each
    power of two, the float below it, and random values over the normal range."""
    rng = np.random.default_rng(11)
    powers = 2.0 ** np.arange(-1022, 1024, dtype=np.float64)
    values = np.concatenate(
        [powers, np.nextafter(powers, 0.0)[1:], 10.0 ** rng.uniform(-307, 308, 50_000)]
    )
    error = np.abs(_bits_logs(values) - np.log(values))
    assert error.max() < 0.008


def _one_power_a_pass(masses: np.ndarray, largest: float, terms: int) -> np.ndarray:
    """The power sums as the kernel took them before it paired the powers: one pass over the
    masses a power, four running sums (the same products, the same additions)."""
    ratio = masses / largest
    power = ratio.copy()
    whole = len(masses) - len(masses) % 4
    out = np.empty(terms)
    for r in range(terms):
        sums = [0.0, 0.0, 0.0, 0.0]
        for k in range(len(masses)):
            lane = k % 4 if k < whole else 0
            sums[lane] += power[k]
            power[k] *= ratio[k]
        out[r] = (sums[0] + sums[1]) + (sums[2] + sums[3])
    return out


@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 7, 8, 9, 1000, 1003])
@pytest.mark.parametrize("terms", [1, 2, 17, 18])
def test_group_power_sums_are_the_sums_of_the_powers(count, terms):
    """``Σ (m_x / largest)^r`` for ``r = 1..terms``: every remainder of the four-wide loop
    and an odd number of powers (the last pass's second power unused), bit for bit those of
    one pass a power, and against numpy's powers summed exactly (``math.fsum``) to a
    relative 1e-15 times the count."""
    rng = np.random.default_rng(count * 31 + terms)
    masses = rng.uniform(0.0, 1.0, count) ** 3
    largest = float(masses.max()) if count else 1.0
    out = np.full(terms, np.nan)
    _group_power_sums(masses, largest, out, np.empty(count), np.empty(count))
    assert np.array_equal(out, _one_power_a_pass(masses, largest, terms))
    for r in range(1, terms + 1):
        want = math.fsum((masses / largest) ** r)
        assert out[r - 1] == pytest.approx(want, rel=1e-15 * max(count, 1), abs=1e-300)


from otbound.drafts._sequential_mass import LEFT_TOLERANCE, left_time  # noqa: E402


@pytest.mark.parametrize("h", [0.05, 0.2])
@pytest.mark.parametrize("n", [1, 2, 8, 60, 170, 171, 400, 5000])
def test_the_left_end_of_the_clock_grid_meets_its_tolerance_at_any_n(n, h):
    """``t_lo`` is the largest ``t ≤ 1`` with ``t^{n+1} h / (n! (1 − e^{−h(n+1)})) ≤
    LEFT_TOLERANCE`` (the left-end error), checked in logs: past ``n = 170``, where ``n!``
    leaves the floats, as below it (where it equals the factorial's form)."""
    t_lo = left_time(n, h)
    log_scale = math.lgamma(n + 1) + math.log(-math.expm1(-h * (n + 1))) - math.log(h)
    log_error = (n + 1) * math.log(t_lo) - log_scale
    assert 0.0 < t_lo <= 1.0
    assert log_error <= math.log(LEFT_TOLERANCE) + 1e-9
    assert t_lo == 1.0 or log_error >= math.log(LEFT_TOLERANCE) - 1e-9  # the largest such t
    if n <= 170:
        bound = LEFT_TOLERANCE * math.factorial(n) * (-math.expm1(-h * (n + 1))) / h
        assert t_lo == pytest.approx(min(bound ** (1.0 / (n + 1)), 1.0), rel=1e-12)
