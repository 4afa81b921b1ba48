"""The fused importance-sampling paths against the previous implementation, kept here.

``_previous_*`` and :class:`PreviousImportance` are a faithful copy of the verifier before its
stage, acceptance and Monte Carlo plan passes were fused into compiled kernels
(:mod:`otbound.verifiers._importance_kernels`): numpy passes, ``np.sum`` and ``np.cumsum``,
the old compiled passes (``stage_key``, ``stage_sorted``, ``stage_scatter``, still in the
kernels module) and no cross-step cache; its stage weights come from the one stage solver
(``importance.stage_weights``, tested against HiGHS and a brute-force cut in
``tests/test_stage_flow.py``). The new path must equal it bit for bit: stages, exact
acceptances, and the Rao-Blackwellised estimates of one seed (the random stream is consumed
as before).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_cases import coincidence_terms, kernel_cases, numpy_accept_rest

from otbound._checks import clip_rounding
from otbound._sorting import stable_argsort
from otbound.bounds import LP_SLACK
from otbound.verifiers import _importance_kernels as kernels
from otbound.verifiers import importance as importance_module
from otbound.verifiers._step_cache import ByteBudgetCache
from otbound.verifiers.base import residual
from otbound.verifiers.importance import ImportanceSampling, SelectionStage, _ConditionalPlan

# -- the previous implementation ------------------------------------------------------------


def _previous_solve_stage(p: np.ndarray, a: np.ndarray, b: np.ndarray, top: int) -> SelectionStage:
    vocab = p.size
    order = stable_argsort(kernels.stage_key(p, a, b))
    s = min(top, vocab)
    rank, a_sorted, b_sorted, p_sorted, induced_sorted = kernels.stage_sorted(order, p, a, b)
    aS, bS, pS = a_sorted[:s], b_sorted[:s], p_sorted[:s]
    tail_a, tail_b = a_sorted[s:].sum(), b_sorted[s:].sum()
    off = ~np.eye(s, dtype=bool)
    base = aS * bS + aS * tail_b + bS * tail_a + bS * (aS.sum() - aS)
    lp = np.stack((aS, bS, pS, base))
    keep = importance_module.stage_weights(lp) if s > 1 else np.ones((s, s))
    gain = (aS[:, None] * bS[None, :] * keep * off).sum(axis=1)
    loss = (aS[:, None] * bS[None, :] * keep * off).sum(axis=0)
    induced_sorted[:s] = base + gain - loss
    induced, within = kernels.stage_scatter(order, induced_sorted, LP_SLACK)
    if not within:
        clip_rounding(induced_sorted, 0.0, 1.0, "importance induced distribution p_I", tol=LP_SLACK)
    total = float(induced.sum())
    if not abs(total - 1.0) <= LP_SLACK:
        clip_rounding(total, 1.0, 1.0, "importance induced distribution's total", tol=LP_SLACK)
    return SelectionStage(rank=rank, top=s, keep_top=keep, induced=induced / total)


def _previous_coincidence_two(
    stage: SelectionStage, a: np.ndarray, b: np.ndarray, accept: np.ndarray, rest: np.ndarray
) -> float:
    order = np.empty_like(stage.rank)
    order[stage.rank] = np.arange(order.size)
    fail = 1.0 - accept
    a_s, b_s, f_s, r_s = a[order], b[order], fail[order], rest[order]
    after_br = np.concatenate((np.cumsum((b_s * r_s)[::-1])[::-1][1:], [0.0]))
    after_ar = np.concatenate((np.cumsum((a_s * r_s)[::-1])[::-1][1:], [0.0]))
    total = float(np.sum(a_s * f_s * after_br) + np.sum(b_s * f_s * after_ar))
    s = stage.top
    aS, bS, fS, rS = a_s[:s], b_s[:s], f_s[:s], r_s[:s]
    off = ~np.eye(s, dtype=bool)
    ranked = np.triu(np.ones((s, s)), 1)
    pair = aS[:, None] * bS[None, :] * off
    keep = stage.keep_top
    total += float(np.sum(pair * (keep - ranked) * fS[:, None] * rS[None, :]))
    total += float(np.sum(pair * ((1.0 - keep) - ranked.T) * fS[None, :] * rS[:, None]))
    return total


class PreviousImportance(ImportanceSampling):
    """The verifier before the fused passes (no cross-call hints or LP cache)."""

    def stages(self, p: np.ndarray, q: np.ndarray, n: int) -> list[SelectionStage]:
        slots = self._slots(q, n)
        chain: list[SelectionStage] = []
        while len(chain) < n - 1:
            current = chain[-1].induced if chain else slots[0]
            chain.append(_previous_solve_stage(p, current, slots[len(chain) + 1], self.top))
        return chain

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        if n >= 3:
            tuples_count = math.prod(float(np.count_nonzero(s > 0)) for s in self._slots(q, n))
            if tuples_count > importance_module.MAX_TUPLES:
                return None
        stages = self.stages(p, q, n)
        induced = self._induced(q, n, stages)
        accept, rest, selected = numpy_accept_rest(p, induced)
        selected = float(selected)
        if n == 1:
            return selected
        if n == 2:
            slots = self._slots(q, n)
            return selected + _previous_coincidence_two(stages[0], slots[0], slots[1], accept, rest)
        tuples, probs = self._spec.tuple_support(q, n)
        chosen = self.selection_probabilities(tuples, stages)
        return selected + float(np.sum(probs * coincidence_terms(chosen, accept, rest, tuples)))

    def _conditional(
        self, p: np.ndarray, q: np.ndarray, n: int, trials: int, rng: np.random.Generator
    ) -> np.ndarray:
        plan = self._conditional_plan(p, q, n)
        u = rng.random((n, trials))
        drafts = np.empty((trials, n), dtype=np.int64)
        if q.ndim == 1:
            cdf, guide, last = plan.cdfs[0]
            kernels.sample_cdf(cdf, guide, last, u, drafts, 0)
        else:
            for k, (cdf, guide, last) in enumerate(plan.cdfs):
                kernels.sample_cdf(cdf, guide, last, u[k : k + 1], drafts, k)
        out: np.ndarray = kernels.coincidence_values(
            drafts, plan.ranks, plan.tops, plan.keep_tops, plan.accept, plan.rest, plan.selected
        )
        return out

    def _conditional_plan(self, p: np.ndarray, q: np.ndarray, n: int) -> _ConditionalPlan:
        stages = self.stages(p, q, n)
        induced = self._induced(q, n, stages)
        accept, rest, selected = numpy_accept_rest(p, induced)
        selected = float(selected)
        slots = self._slots(q, n) if q.ndim == 2 else [q]
        cdfs = []
        for d in slots:
            cdf = np.cumsum(d)
            cdfs.append((cdf, kernels.guide_table(cdf), int(np.flatnonzero(d > 0)[-1])))
        size = max((stage.top for stage in stages), default=1)
        keep_tops = np.zeros((len(stages), size, size))
        for k, stage in enumerate(stages):
            keep_tops[k, : stage.top, : stage.top] = stage.keep_top
        ranks = np.stack([stage.rank for stage in stages]) if stages else np.zeros((0, p.size))
        return _ConditionalPlan(
            ranks=ranks.astype(np.int64),
            tops=np.array([stage.top for stage in stages], dtype=np.int64),
            keep_tops=keep_tops,
            accept=accept,
            rest=rest,
            selected=selected,
            cdfs=cdfs,
        )


# -- helpers --------------------------------------------------------------------------------


@pytest.fixture
def fresh_caches(monkeypatch):
    """Empty cross-step caches (the kept rankings), so that the new path sorts every stage."""
    monkeypatch.setattr(
        importance_module, "_chain_orders", ByteBudgetCache(importance_module.CHAIN_HINT_BYTES)
    )


def _bits(x: float) -> bytes:
    return np.float64(x).tobytes()


def _same_stage(got: SelectionStage, want: SelectionStage) -> bool:
    return (
        got.top == want.top
        and np.array_equal(got.rank, want.rank)
        and got.keep_top.tobytes() == want.keep_top.tobytes()
        and got.induced.tobytes() == want.induced.tobytes()
    )


#: Real vocabulary sizes first (V = 8,192 of every kind), then small ones.
BIG = (8_192, 8_192, 8_192, 8_192, 8_192, 3_000)


# -- the kernels' numpy arithmetic -----------------------------------------------------------


def test_pairwise_sum_is_numpy_sum_bit_for_bit():
    from otbound._pairwise import pairwise_sum

    rng = np.random.default_rng(5)
    for trial in range(600):
        size = int(rng.integers(0, 20_000)) if trial % 2 else int(rng.integers(0, 300))
        x = rng.random(size) ** 8 * 10.0 ** rng.integers(-12, 3, size)
        lo = int(rng.integers(0, min(size, 20) + 1))
        assert _bits(pairwise_sum(x, lo, size - lo)) == _bits(np.sum(x[lo:])), size


def test_the_bit_checks_can_fail():
    """Sums in another order differ in their last bits on these inputs, so the bit-for-bit
    checks here would see a kernel that summed otherwise; and another ``top`` changes the
    stages, so the stage comparison is not vacuous."""
    x = np.random.default_rng(0).random(8_192) ** 8
    sequential = 0.0
    for value in x:
        sequential += value
    assert _bits(sequential) != _bits(np.sum(x))
    _, p, q = kernel_cases(1, 3)[0]
    assert not _same_stage(_previous_solve_stage(p, q, q, 9), _previous_solve_stage(p, q, q, 10))


def test_accept_rest_and_cdf_table_equal_numpy():
    for kind, p, q in kernel_cases(25, seed=7, big=BIG):
        for induced in (q, p, np.where(q > 0.5 / q.size, q, 0.0)):
            accept, rest, selected = kernels.accept_rest(p, induced)
            want_accept, want_rest, want_selected = numpy_accept_rest(p, induced)
            assert accept.tobytes() == want_accept.tobytes(), kind
            assert rest.tobytes() == want_rest.tobytes(), kind
            assert _bits(selected) == _bits(want_selected), kind
        cdf, guide, last = kernels.cdf_table(q)
        assert cdf.tobytes() == np.cumsum(q).tobytes(), kind
        assert np.array_equal(guide, kernels.guide_table(np.cumsum(q))), kind
        assert last == int(np.flatnonzero(q > 0)[-1]), kind


# -- the verifier: stages, exact values, estimates --------------------------------------------


@pytest.mark.parametrize("top", [10, 3])
def test_stages_equal_the_previous_stages(fresh_caches, top):
    """Every stage of the chain to n = 8 (ranks, LP weights, induced ``p_I``), bit for bit,
    built through the new path (hints, fused passes, LP set-up) in compare's order of n."""
    old = PreviousImportance(top=top)
    for kind, p, q in kernel_cases(20, seed=23 + top, big=BIG):
        new = ImportanceSampling(top=top)
        want = old.stages(p, q, 8)
        for n in (2, 3, 4, 8):
            got = new.stages(p, q, n)
            assert len(got) == n - 1
            for k, (g, w) in enumerate(zip(got, want, strict=False)):
                assert _same_stage(g, w), (kind, p.size, n, k)
        # and rebuilt from the kept rankings and cached LPs by a new instance
        again = ImportanceSampling(top=top).stages(p, q, 8)
        assert all(_same_stage(g, w) for g, w in zip(again, want, strict=True)), kind


def _slots(q: np.ndarray, n: int) -> np.ndarray:
    """One draft law per slot: ``q`` moved by three tokens a slot, shape (n, V)."""
    return np.stack([np.roll(q, 3 * k) for k in range(n)])


def test_per_slot_stages_equal_the_previous_stages(fresh_caches):
    old = PreviousImportance(design="per_slot", top=4)
    new = ImportanceSampling(design="per_slot", top=4)
    for kind, p, q in kernel_cases(16, seed=29, big=(8_192, 2_000)):
        for n in (2, 3, 4):
            qs = _slots(q, n)
            got, want = new.stages(p, qs, n), old.stages(p, qs, n)
            assert all(_same_stage(g, w) for g, w in zip(got, want, strict=True)), (kind, n)
            if n == 2:
                assert _bits(new.acceptance(p, qs, n)) == _bits(old.acceptance(p, qs, n)), kind


def test_exact_acceptances_equal_the_previous_ones(fresh_caches):
    """``n = 2`` in closed form at every V (``V = 8,192`` included) and ``n = 3`` enumerated on
    small vocabularies: the same float, bit for bit."""
    old, new = PreviousImportance(), ImportanceSampling()
    checked = 0
    for kind, p, q in kernel_cases(40, seed=31, big=BIG):
        for n in (2, 3, 4):
            want = old.acceptance(p, q, n)
            got = new.acceptance(p, q, n)
            assert (got is None) == (want is None), (kind, p.size, n)
            if want is not None:
                assert _bits(got) == _bits(want), (kind, p.size, n, got, want)
                checked += 1
            assert _bits(new.selection_acceptance(p, q, n)) == _bits(
                old.selection_acceptance(p, q, n)
            ), (kind, p.size, n)
    assert checked >= 40


def test_coincidence_two_equals_the_previous_one(fresh_caches):
    for kind, p, q in kernel_cases(20, seed=37, big=BIG):
        for top in (1, 2, 10):
            a = q
            b = np.roll(q, 1)
            stage = _previous_solve_stage(p, a, b, top)
            accept = np.minimum(1.0, p / np.where(stage.induced > 0, stage.induced, 1.0))
            accept[stage.induced <= 0] = 0.0
            rest = residual(p, stage.induced)
            want = _previous_coincidence_two(stage, a, b, accept, rest)
            got = importance_module._coincidence_two(stage, a, b, accept, rest)
            assert _bits(got) == _bits(want), (kind, p.size, top)


@pytest.mark.parametrize("target_se", [None, 0.005])
def test_estimates_equal_the_previous_ones_with_one_seed(fresh_caches, target_se):
    """Rao-Blackwellised estimates at n = 3, 4, 8 (``V = 8,192`` and small), and with one
    draft model per slot at n = 3, 4 (the drafts sampled slot by slot): the same mean,
    standard error and trial count for the same seed (the random stream consumed as before)."""
    per_slot = {"design": "per_slot", "top": 4}
    runs = [
        (PreviousImportance(), ImportanceSampling(), kernel_cases(12, seed=41, big=BIG), (3, 4, 8)),
        (
            PreviousImportance(**per_slot),
            ImportanceSampling(**per_slot),
            kernel_cases(6, seed=43, big=(8_192, 2_000)),
            (3, 4),
        ),
    ]
    sampled = 0
    for old, new, cases, ns in runs:
        for i, (kind, p, q) in enumerate(cases):
            for n in ns:
                qs = _slots(q, n) if old.design == "per_slot" else q
                want = old.estimate(p, qs, n, trials=3_000, seed=i, target_se=target_se)
                got = new.estimate(p, qs, n, trials=3_000, seed=i, target_se=target_se)
                assert got.method == want.method, (old.design, kind, p.size, n)
                assert _bits(got.acceptance) == _bits(want.acceptance), (kind, p.size, n)
                assert _bits(got.stderr) == _bits(want.stderr), (kind, p.size, n)
                assert got.trials == want.trials, (kind, p.size, n)
                sampled += old.design == "per_slot" and got.method == "rao_blackwell"
    assert sampled > 0  # per-slot rows estimated, not only given in closed form
