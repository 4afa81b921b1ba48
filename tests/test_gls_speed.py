"""The fused GLS quadrature (:func:`otbound.verifiers.gls._gls_quadrature_fused`, its own
vectorised ``expm1``) against the previous path (:func:`_gls_quadrature_many`, one node at a
time with libm's ``expm1``), kept in the module as the reference: equal to 1e-13 on seeded
sweeps."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np
import pytest
from kernel_cases import kernel_cases

from otbound.verifiers import gls as gls_module

#: The numbers of drafts asked for, alone and together.
N_SETS = [[n] for n in range(1, 9)] + [[2, 4, 8], list(range(1, 9)), [3, 5], [2, 3, 4, 5, 6, 7]]


def _largest_difference(
    cases: Iterable[tuple[str, np.ndarray, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> tuple[float, int]:
    """``max |new − old|`` of :func:`gls_acceptances` over ``cases`` and :data:`N_SETS`,
    ``old`` with the one-loop quadrature in place of the fused one; and the values compared."""
    fused = gls_module._gls_quadrature_fused
    worst = 0.0
    compared = 0
    for kind, p, q in cases:
        for ns in N_SETS:
            monkeypatch.setattr(gls_module, "_gls_quadrature_fused", fused)
            new = gls_module.gls_acceptances(p, q, ns)
            monkeypatch.setattr(
                gls_module, "_gls_quadrature_fused", gls_module._gls_quadrature_many
            )
            old = gls_module.gls_acceptances(p, q, ns)
            assert new.keys() == old.keys(), kind
            for k in ns:
                assert math.isfinite(new[k]), (kind, k)
                worst = max(worst, abs(new[k] - old[k]))
                compared += 1
    monkeypatch.setattr(gls_module, "_gls_quadrature_fused", fused)
    return worst, compared


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_fused_acceptances_equal_the_one_loop_ones(monkeypatch, seed):
    """Zipf, peaked, ties, extreme masses (1e-30..1) and zeros, V from 2 to 50,000."""
    cases = kernel_cases(40, seed, big=(2, 3, 50_000, 32_000, 8_192, 1_000))
    worst, compared = _largest_difference(cases, monkeypatch)
    assert worst <= 1e-13
    assert compared >= 40 * 20


def test_the_comparison_catches_a_perturbed_value(monkeypatch):
    """The sweep's check fails when the new path is off by 2e-13 on one ``n``."""
    fused = gls_module._gls_quadrature_fused

    def perturbed(ns: np.ndarray, *args: object) -> np.ndarray:
        totals: np.ndarray = fused(ns, *args).copy()
        totals[-1] += 2e-13
        return totals

    monkeypatch.setattr(gls_module, "_gls_quadrature_fused", perturbed)
    cases = kernel_cases(5, 24, big=(300,))
    worst, _ = _largest_difference(cases, monkeypatch)
    assert worst > 1e-13


def test_fused_quadrature_equals_the_one_loop_kernel():
    """The kernels' raw sums, the fused one against :func:`_gls_quadrature_many`."""
    checked = 0
    for kind, p, q in kernel_cases(25, seed=25, big=(8_192, 2, 5)):
        _, ps, qs, rho, g, slope, spread = gls_module._gls_prepare(p, q)
        if spread <= 0.0:
            continue
        for ns in ([1], [2, 4, 8], list(range(1, 9))):
            step = gls_module.QUADRATURE_STEP
            first = np.array(
                [math.floor(gls_module._start(k, spread) / step) for k in ns], dtype=np.int64
            )
            last = np.array([math.ceil(math.log(45.0 / k) / step) for k in ns], dtype=np.int64)
            args = (np.array(ns, dtype=np.int64), first, last, step, ps, qs, rho, g, slope)
            want = gls_module._gls_quadrature_many(*args)
            got = gls_module._gls_quadrature_fused(*args)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-13, err_msg=kind)
            checked += 1
    assert checked >= 60


def test_expm1_neg_is_within_a_few_ulp_of_expm1():
    """:func:`_expm1_neg` on ``[0, ∞]`` and :func:`_expm1_neg_small` below
    ``EXPM1_SMALL``, against numpy's ``expm1``: relative error at most 4 ulp."""
    rng = np.random.default_rng(26)
    xs = np.concatenate(
        (
            10.0 ** rng.uniform(-300, 3, 3_000),
            rng.uniform(0, 60, 2_000),
            np.arange(60) * math.log(2.0),  # the reduction's boundaries
            np.nextafter(np.arange(1, 60) * math.log(2.0), 0),
            [0.0, 1e-320, 37.0, 40.0, 41.0, 745.0, 1e300, math.inf],
        )
    )
    for x in xs:
        want = np.expm1(-x)
        got = gls_module._expm1_neg(x)
        assert abs(got - want) <= 4 * np.spacing(abs(want)) + 1e-320, x
        if x < gls_module.EXPM1_SMALL:
            small = gls_module._expm1_neg_small(x)
            assert abs(small - want) <= 4 * np.spacing(abs(want)) + 1e-320, x


def test_the_nodes_split_over_threads_give_one_pass_bit_for_bit(monkeypatch):
    """:func:`_gls_fused_parallel` (runs of nodes starting at multiples of 8, one a thread)
    equals one serial pass exactly, with two runs and with many (forced by a low threshold)."""
    checked = 0
    for kind, p, q in kernel_cases(12, seed=21, big=(32_000, 8_192, 50_000, 3_000)):
        monkeypatch.setattr(gls_module, "PARALLEL_WORK", 10**18)
        serial = gls_module.gls_acceptances(p, q, [1, 2, 3, 4, 8])
        monkeypatch.setattr(gls_module, "PARALLEL_WORK", 0)
        for threads in (2, 5):
            monkeypatch.setattr(gls_module.numba, "get_num_threads", lambda t=threads: t)
            split = gls_module.gls_acceptances(p, q, [1, 2, 3, 4, 8])
            assert split == serial, (kind, threads)
            checked += 1
    assert checked == 24


def test_node_splits_are_multiples_of_eight_and_balance_the_work():
    cuts = np.repeat([32_000, 20_000, 5_000, 100], [30, 20, 20, 9])
    splits = gls_module._node_splits(cuts, 2)
    assert splits[0] == 0 and splits[-1] == cuts.size and np.all(splits[1:-1] % 8 == 0)
    work = [cuts[a:b].sum() for a, b in itertools.pairwise(splits)]
    assert len(work) == 2 and max(work) < 0.6 * sum(work)
    assert gls_module._node_splits(cuts, 1).tolist() == [0, cuts.size]
    assert gls_module._node_splits(cuts[:10], 2).tolist() == [0, 10]  # too few nodes


def test_the_compiled_preparation_is_the_numpy_lines_bit_for_bit():
    """:func:`_prepare_pass` and :func:`_fused_inputs` against the numpy expressions they
    replaced (pairwise sums for ``p(q = 0)`` and ``K``, sequential cumulative sums)."""
    from otbound.verifiers._step_cache import ratio_order

    for kind, p, q in kernel_cases(20, seed=24, big=(32_000, 3, 2)):
        ids = ratio_order(p, q)
        never, ps, qs, rho, g, slope, gap, spread = gls_module._prepare_pass(p, q, ids)
        assert never == float(p[q <= 0].sum()), kind
        np.testing.assert_array_equal(ps, p[ids])
        np.testing.assert_array_equal(qs, q[ids])
        np.testing.assert_array_equal(rho, p[ids] / q[ids])
        np.testing.assert_array_equal(slope, np.cumsum(q[ids]))
        np.testing.assert_array_equal(gap, slope[:-1] * np.diff(rho))
        np.testing.assert_array_equal(g, np.concatenate(([0.0], np.cumsum(gap))))
        assert spread == float(np.sum(ps * g)), kind
        tail_p, gap2, inv_slope = gls_module._fused_inputs(ps, rho, slope)
        np.testing.assert_array_equal(tail_p, np.concatenate((np.cumsum(ps[::-1])[::-1], [0])))
        np.testing.assert_array_equal(gap2, gap)
        np.testing.assert_array_equal(inv_slope, 1.0 / slope)


def _integrand(
    p: np.ndarray, q: np.ndarray, ns: np.ndarray, ts: np.ndarray, reuse: bool = True
) -> np.ndarray:
    """``miss_w(t) = Σ_i p_i (1 − a_i)(1 − b_i)^w`` at the nodes ``ts`` (one row per ``n``),
    from the one-node loop's arithmetic (:func:`_gls_fused` on those nodes)."""
    _, ps, qs, rho, g, slope, gap, _ = gls_module._prepare_pass(p, q, gls_module.ratio_order(p, q))
    tail_p, gap, inv_slope = gls_module._fused_inputs(ps, rho, slope)
    cuts = gls_module._node_cuts(g, ts)
    slots = np.full(int(ns[-1]), -1, dtype=np.int64)
    slots[ns - 1] = np.arange(ns.size)
    acc = np.empty((ns.size, ts.size))
    acc[:] = tail_p[cuts]
    padded = np.concatenate((ts, np.full(-ts.size % 8, ts[-1])))
    gls_module._gls_fused(padded, cuts, ps, qs, g, gap, inv_slope, acc, slots, reuse)
    return acc


def test_the_left_end_is_first_order_within_its_bound(monkeypatch):
    """Near ``t = 0`` the integrand is ``c_w t`` within ``C_w t²`` (:func:`_left_coefficients`),
    on cases with ratios up to 1e30, and the split moves each value by at most
    ``LEFT_TOLERANCE`` (plus a few ulp of the ``expm1`` branches) against the pass over every
    node."""
    ns = np.array([1, 2, 4, 8])
    ts = np.exp(np.arange(-70, -5) * gls_module.QUADRATURE_STEP)
    split_used = 0
    for kind, p, q in kernel_cases(20, seed=27, big=(32_000, 1_000)):
        _, ps, qs, rho, g, slope, spread = gls_module._gls_prepare(p, q)
        if spread <= 0.0:
            continue
        c, bound = gls_module._left_coefficients(ns, ps, qs, rho, g, slope)
        miss = _integrand(p, q, ns, ts)
        for r in range(ns.size):
            assert np.all(np.abs(miss[r] - c[r] * ts) <= bound[r] * ts**2 + 1e-15 * miss[r]), (
                kind,
                ns[r],
            )
        first = np.array([math.floor(gls_module._start(int(n), spread) / 0.3) for n in ns])
        last = np.array([math.ceil(math.log(45.0 / n) / 0.3) for n in ns])
        split = gls_module._left_split(ns, first, last, 0.3, bound)
        split_used += int(np.sum(split > first))
        with monkeypatch.context() as patch:
            patch.setattr(gls_module, "_left_split", lambda ns, first, *a: first.copy())
            every_node = gls_module.gls_acceptances(p, q, ns)
        split_values = gls_module.gls_acceptances(p, q, ns)
        for n in ns:
            assert abs(split_values[n] - every_node[n]) <= 5e-16, (kind, n)
    assert split_used > 20


def test_long_runs_of_tied_ratios_equal_the_one_loop_values(monkeypatch):
    """Rows of 32,000 tokens with a few thousand distinct ratios, as logits rounded to
    float16 give (the pass reuses ``expm1(−t G)`` along each run of ties and skips their zero
    gaps), against the one-node loop, to 1e-13."""
    rng = np.random.default_rng(28)
    cases = []
    for top in (3, 20, 60):
        p = rng.integers(1, top + 1, 32_000) * rng.choice([1.0, 1e-6], 32_000)
        q = rng.integers(1, top + 1, 32_000) * rng.choice([1.0, 1e-6], 32_000)
        p, q = p / p.sum(), q / q.sum()
        cases.append((f"ties of {top}", p, q))
        assert np.unique(p / q).size < 0.5 * p.size  # long runs of ties
    worst, compared = _largest_difference(cases, monkeypatch)
    assert worst <= 1e-13 and compared >= 3 * 20
    ns = np.array([1, 2, 4, 8])
    ts = np.exp(np.arange(-60, 12) * gls_module.QUADRATURE_STEP)
    for _, p, q in cases:  # the reuse along ties is exact: the same sums as computing them
        assert np.array_equal(_integrand(p, q, ns, ts), _integrand(p, q, ns, ts, reuse=False))


def test_the_left_split_computes_every_node_where_its_bound_overflows(monkeypatch):
    """A bound of 0 (no rest) takes the first-order form up to the last node; an infinite or
    NaN bound, or one whose room underflows, computes every node; and a row whose ratios
    reach 1e300 keeps the value of the pass over every node."""
    ns, first, last = np.array([2, 4, 8]), np.array([-60, -61, -62]), np.array([11, 9, 6])
    split = gls_module._left_split(ns, first, last, 0.3, np.array([0.0, np.inf, np.nan]))
    assert split.tolist() == [11, -61, -62]
    assert gls_module._left_split(ns, first, last, 0.3, np.full(3, 1e300)).tolist() == [
        -60,
        -61,
        -62,
    ]
    p = np.array([0.5, 0.5 - 1e-300, 1e-300])
    q = np.array([1e-300, 0.5, 0.5 - 1e-300])
    new = gls_module.gls_acceptances(p, q, [2, 4, 8])
    monkeypatch.setattr(gls_module, "_left_split", lambda ns, first, *a: first.copy())
    every_node = gls_module.gls_acceptances(p, q, [2, 4, 8])
    for n in (2, 4, 8):
        assert math.isfinite(new[n])
        assert abs(new[n] - every_node[n]) <= 5e-16
