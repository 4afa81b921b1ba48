"""The compiled and cached paths of the estimated verifiers against their previous paths.

The shared sort of ``p / q``, ``rrs_without_replacement`` (the tables and the
two-level rejection-path kernel) and ``importance`` (the stage passes, the LP's sparsity,
the draft inversion and the per-trial values): each new path equals the previous one, kept
here or in the module as the reference, bit for bit or to rounding, on seeded cases with ties,
zeros, extreme masses and real vocabulary sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import coincidence_terms, kernel_cases, numpy_accept_rest

from otbound.drafts.tokens import inverse_cdf
from otbound.verifiers import _step_cache as step_cache
from otbound.verifiers import get_verifier
from otbound.verifiers import importance as importance_module
from otbound.verifiers import rrs_without_replacement as rrs_module


def _cases(
    count: int, seed: int, big: tuple[int, ...] = (8_192,)
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """:func:`kernel_cases` (Zipf, peaked, ties, extreme masses, zeros)."""
    return kernel_cases(count, seed, big)


# -- gls -----------------------------------------------------------------------------------


# -- the shared sort of p / q ---------------------------------------------------------------


def test_ratio_order_is_the_stable_argsort_and_checks_its_cache(monkeypatch):
    cache = step_cache.ByteBudgetCache(step_cache.RATIO_CACHE_BYTES)
    monkeypatch.setattr(step_cache, "_ratio_orders", cache)
    sorts: list[int] = []
    argsort = step_cache.ratio_argsort
    monkeypatch.setattr(step_cache, "ratio_argsort", lambda p, q: sorts.append(1) or argsort(p, q))
    for kind, p, q in _cases(40, seed=5, big=(70_000, 8_192)):
        live = np.flatnonzero(q > 0)
        want = live[np.argsort(p[live] / q[live], kind="stable")]
        sorts.clear()
        assert np.array_equal(step_cache.ratio_order(p, q), want), kind
        assert np.array_equal(step_cache.ratio_order(p.copy(), q.copy()), want), kind
        assert len(sorts) == 1, kind  # the equal copy is served from the cache
    # an entry that is not this step's sort (a key collision) is recomputed, not used
    kind, p, q = _cases(1, seed=6, big=(500,))[0]
    key = step_cache.step_key(p, q)
    live = np.flatnonzero(q > 0)
    stale = step_cache.compact(live[::-1].copy(), q.size)
    cache.put(key, stale)
    want = live[np.argsort(p[live] / q[live], kind="stable")]
    assert np.array_equal(step_cache.ratio_order(p, q), want)
    assert np.array_equal(cache.entries[key], want)
    # bounded by bytes
    cache.budget = 3_000
    for _, p, q in _cases(12, seed=7, big=()):
        step_cache.ratio_order(p, q)
    assert cache.nbytes == sum(o.nbytes for o in cache.entries.values())
    assert cache.nbytes <= 3_000 or len(cache.entries) == 1


def test_kseq_rho_from_the_shared_order_equals_its_own_sort():
    """K-SEQ's bisection on the shared stable order of ``p / q`` (:func:`ratio_order`) gives
    the ``ρ*`` and acceptance of its former own (unstable) argsort to rounding (ties only
    reorder the prefix sums)."""
    from otbound.verifiers import kseq as kseq_module

    def former_rho(p: np.ndarray, q: np.ndarray, n: int) -> float:
        live = np.flatnonzero(q > 0)
        tokens = live[np.argsort(p[live] / q[live])]
        return float(kseq_module._bisect(*kseq_module._sorted_sums(p, q, tokens), n))

    checked = 0
    for kind, p, q in _cases(30, seed=13, big=(8_192, 32_000)):
        for n in (1, 2, 3, 8):
            want = former_rho(p, q, n)
            got = kseq_module.kseq_rho(p, q, n)
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (kind, n)
            miss = np.maximum(q - p / want, 0.0).sum()
            alpha = get_verifier("kseq").acceptance(p, q, n)
            assert alpha == pytest.approx(1.0 - miss**n, abs=1e-12), (kind, n)
            checked += 1
    assert checked == 120


# -- rrs_without_replacement ----------------------------------------------------------------


def test_rrs_tables_equal_the_numpy_construction():
    for kind, p, q in _cases(25, seed=9):
        tab = rrs_module._Ratios(p, q)
        live = np.flatnonzero(q > 0)
        rho = p[live] / q[live]
        sort = np.argsort(rho, kind="stable")
        order = live[sort]
        ps, qs = p[order], q[order]
        off = float(p[q <= 0].sum())
        want = {
            "order": order,
            "rho": rho[sort],
            "cum_p": np.concatenate(([0.0], np.cumsum(ps))),
            "cum_q": np.concatenate(([0.0], np.cumsum(qs))),
            "tail_p": np.concatenate((np.cumsum(ps[::-1])[::-1], [0.0])) + off,
            "tail_q": np.concatenate((np.cumsum(qs[::-1])[::-1], [0.0])),
            "q_sorted": qs,
        }
        for name, value in want.items():
            assert np.array_equal(getattr(tab, name), value), (kind, name)


def test_rrs_fast_rejection_paths_equal_the_one_level_kernel():
    """Two-level searches, the first level tabled: the one-level kernel's values bit for bit
    (n = 2..8, 500 paths a case)."""
    rng = np.random.default_rng(11)
    for kind, p, q in _cases(30, seed=13, big=(8_192, 1_000)):
        tab = rrs_module._Ratios(p, q)
        tables = (tab.rho, tab.cum_p, tab.cum_q, tab.tail_p, tab.tail_q, tab.q_sorted)
        total_q = float(tab.tail_q[0])
        for n in (2, 3, 5, 8):
            if np.count_nonzero(q > 0) < n:
                continue
            u = rng.random((500, n - 1))
            want = rrs_module._rejection_paths(n, u, *tables, total_q)
            got = rrs_module._rejection_paths_fast(n, u, *tab.path_tables())  # kept a step
            assert np.array_equal(got, want), (kind, n, p.size)


# -- importance -----------------------------------------------------------------------------


def _solve_stage_reference(p, a, b, top):
    """The previous ``_solve_stage``: numpy passes and the LP built as a CSR of triplets."""
    vocab = p.size
    order = np.argsort(-(p - a * b), kind="stable")
    rank = np.empty(vocab, dtype=np.int64)
    rank[order] = np.arange(vocab)
    s = min(top, vocab)
    a_sorted, b_sorted, p_sorted = a[order], b[order], p[order]
    after_a = np.concatenate((np.cumsum(a_sorted[::-1])[::-1][1:], [0.0]))
    after_b = np.concatenate((np.cumsum(b_sorted[::-1])[::-1][1:], [0.0]))
    induced_sorted = a_sorted * (b_sorted + after_b) + b_sorted * after_a
    aS, bS, pS = a_sorted[:s], b_sorted[:s], p_sorted[:s]
    tail_a, tail_b = a_sorted[s:].sum(), b_sorted[s:].sum()
    off = ~np.eye(s, dtype=bool)
    base = aS * bS + aS * tail_b + bS * tail_a + bS * (aS.sum() - aS)
    keep = np.ones((s, s))
    if s > 1:  # the one stage solver (tested on its own in tests/test_stage_flow.py)
        keep = importance_module.stage_weights(np.stack((aS, bS, pS, base)))
    gain = (aS[:, None] * bS[None, :] * keep * off).sum(axis=1)
    loss = (aS[:, None] * bS[None, :] * keep * off).sum(axis=0)
    induced_sorted[:s] = base + gain - loss
    induced = np.empty(vocab)
    induced[order] = np.clip(induced_sorted, 0.0, 1.0)
    return rank, keep, induced / float(induced.sum())


def test_importance_stage_passes_equal_the_numpy_stage():
    """The compiled passes: the previous (numpy) stage bit for bit."""
    for kind, p, q in _cases(20, seed=17):
        current = q
        for _ in range(3):
            stage = importance_module._solve_stage(p, current, q, 6)
            rank, keep, induced = _solve_stage_reference(p, current, q, 6)
            assert np.array_equal(stage.rank, rank), kind
            assert np.array_equal(stage.keep_top, keep), kind
            assert np.array_equal(stage.induced, induced), kind
            current = stage.induced


def test_importance_chain_hints_never_change_a_stage(monkeypatch):
    """Kept rankings are sort hints only: wrong ones (another step's, a reversed order) give
    the same stages as no hint."""
    monkeypatch.setattr(importance_module, "_chain_orders", step_cache.ByteBudgetCache(10**9))
    for kind, p, q in _cases(8, seed=19):
        v = get_verifier("importance")
        want = v._grow(p, [q] * 5, [])
        orders = importance_module._chain_hints(importance_module._hint_key(p, q, v.top))
        for _ in range(4):
            orders.append(np.random.default_rng(1).permutation(p.size).astype(np.uint16))
        got = get_verifier("importance").stages(p, q, 5)
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a.rank, b.rank), kind
            assert np.array_equal(a.keep_top, b.keep_top), kind
            assert np.array_equal(a.induced, b.induced), kind
        again = get_verifier("importance").stages(p, q, 5)  # from the kept (now wrong) hints
        for a, b in zip(again, want, strict=True):
            assert np.array_equal(a.induced, b.induced), kind


def test_sample_cdf_is_inverse_cdf():
    from otbound.verifiers._importance_kernels import guide_table, sample_cdf

    rng = np.random.default_rng(23)
    dists = [q for _, _, q in _cases(20, seed=29)]
    dists += [np.array([0.0, 1.0, 0.0]), np.array([1e-300, 1.0, 1e-300, 0.0]), np.array([1.0])]
    for dist in dists:
        cdf = np.cumsum(dist)
        last = int(np.flatnonzero(dist > 0)[-1])
        u = rng.random((3, 2_000))
        u[0, :3] = [0.0, np.nextafter(1.0, 0.0), 0.5]
        out = np.empty((2_000, 3), dtype=np.int64)
        sample_cdf(cdf, guide_table(cdf), last, u, out, 0)
        for k in range(3):
            assert np.array_equal(out[:, k], inverse_cdf(dist, u[k]))


def _conditional_reference(v, p, q, n, trials, rng):
    """The previous ``ImportanceSampling._conditional``: numpy selection probabilities."""
    stages = v.stages(p, q, n)
    induced = v._induced(q, n, stages)
    accept, rest, selected = numpy_accept_rest(p, induced)
    selected = float(selected)
    slots = v._slots(q, n)
    drafts = np.stack([inverse_cdf(d, rng.random(trials)) for d in slots], axis=1)
    chosen = v.selection_probabilities(drafts, stages)
    return selected + coincidence_terms(chosen, accept, rest, drafts)


@pytest.mark.parametrize("design", ["iid", "per_slot"])
def test_importance_conditional_equals_the_numpy_values(design):
    """Same uniforms, same drafts, same values to rounding (1e-15)."""
    v = get_verifier("importance", design=design, top=4)
    for kind, p, q in _cases(15, seed=37, big=(2_000,)):
        for n in (2, 3, 5):
            qq = q if design == "iid" else np.stack([np.roll(q, k) for k in range(n)])
            got = v._conditional(p, qq, n, 3_000, np.random.default_rng(n))
            want = _conditional_reference(v, p, qq, n, 3_000, np.random.default_rng(n))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-15, err_msg=f"{kind} {n}")


def test_rrs_rejection_rates_are_the_residual_chains_bit_for_bit():
    """The compiled chain of RRS's rejection rates against numpy's ``residual_chain``: Zipf
    rows, rows where the residual empties (``p = q``, a draft on one token) and ``n`` to 16."""
    from otbound.verifiers._rejection_kernels import rejection_rates
    from otbound.verifiers.rrs import residual_chain

    rng = np.random.default_rng(21)
    rows = []
    for vocab in (1, 2, 7, 300, 5000):
        p = rng.dirichlet(np.full(vocab, 0.3))
        q = rng.dirichlet(np.full(vocab, 0.3))
        rows += [(p, q), (p, p.copy()), (p, np.eye(vocab)[0])]
    for p, q in rows:
        for n in (1, 2, 3, 8, 16):
            want = residual_chain(p, q, n)[1]
            got = rejection_rates(p, q, n)
            np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_kseq_rejection_mass_is_numpys_sum_bit_for_bit():
    from otbound.verifiers import kseq as kseq_module

    for kind, p, q in kernel_cases(20, seed=26, big=(32_000, 1_000)):
        for n in (2, 4, 8):
            rho = kseq_module.kseq_rho(p, q, n)
            want = float(np.maximum(q - p / rho, 0.0).sum())
            assert float(kseq_module._rejection_mass(p, q, rho)) == want, (kind, n)


# -- estimates ------------------------------------------------------------------------------


def test_finite_mean_stderr_is_mean_and_stderr_bit_for_bit():
    """The compiled pass of ``_estimate_sample``: numpy's mean and ``std(ddof=1) / √m``."""
    from otbound.verifiers._estimate_kernels import finite_mean_stderr

    def mean_and_stderr(values):  # numpy's, as the estimates took them before the kernel
        m = values.size
        mean = float(np.mean(values))
        return mean, float(np.std(values, ddof=1)) / np.sqrt(m) if m > 1 else np.inf

    rng = np.random.default_rng(31)
    for m in (1, 2, 7, 8, 64, 127, 128, 129, 300, 1_000, 4_097):
        for scale in (1e-6, 0.01, 1.0):
            values = rng.random(m) * scale + rng.random()
            finite, mean, se = finite_mean_stderr(values)
            want = mean_and_stderr(values)
            assert finite, m
            assert np.float64(mean).tobytes() == np.float64(want[0]).tobytes(), m
            assert np.float64(se).tobytes() == np.float64(want[1]).tobytes(), m
    for bad in (np.nan, np.inf, -np.inf):
        assert not finite_mean_stderr(np.array([0.5, bad, 0.25]))[0]
