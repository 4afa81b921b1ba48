"""Tests of otbound.verifiers against independent oracles.

The oracle is a brute-force enumerator written here from the definitions in docs/mathematics.md:
for every ordered draft tuple of ``design.tuple_support`` it computes the verifier's output law
``P(Y | x̄)`` step by step, and sums ``Q(x̄) P(Y | x̄)`` (which must be ``p``) and
``Q(x̄) P(Y ∈ x̄ | x̄)`` (which must be the verifier's exact acceptance). Bounds come from the
exact sweep and the HiGHS set LP; Monte Carlo must agree within 4 standard errors.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from kernel_cases import kernel_cases
from scipy.optimize import brentq

from otbound import optimal_acceptance
from otbound.drafts import get_design
from otbound.verifiers import VERIFIERS, get_verifier
from otbound.verifiers._betting import betting_interval
from otbound.verifiers.base import MIN_RB_TRIALS, MIN_TRIALS, RB_PILOT, WIDE_PILOT, BaseVerifier

# -- random cases ----------------------------------------------------------------------------


def make_case(rng: np.random.Generator, kind: str, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """A (p, q) pair of the given kind."""
    if kind == "dirichlet":
        p, q = rng.dirichlet(np.full(vocab, 0.7)), rng.dirichlet(np.full(vocab, 0.7))
    elif kind == "peaked":
        p, q = rng.dirichlet(np.full(vocab, 0.1)), rng.dirichlet(np.full(vocab, 0.1))
    elif kind == "near_uniform":
        p = np.full(vocab, 1.0 / vocab) + rng.uniform(-0.02, 0.02, vocab) / vocab
        q = np.full(vocab, 1.0 / vocab) + rng.uniform(-0.02, 0.02, vocab) / vocab
    elif kind == "onehot_p":
        p = np.zeros(vocab)
        p[rng.integers(vocab)] = 1.0
        q = rng.dirichlet(np.ones(vocab))
    elif kind == "onehot_q":
        p = rng.dirichlet(np.ones(vocab))
        q = np.zeros(vocab)
        q[rng.integers(vocab)] = 1.0
    elif kind == "disjoint":
        perm = rng.permutation(vocab)
        half = vocab // 2
        p, q = np.zeros(vocab), np.zeros(vocab)
        p[perm[:half]] = rng.dirichlet(np.ones(half))
        q[perm[half:]] = rng.dirichlet(np.ones(vocab - half))
    elif kind == "zeros":
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        p[rng.integers(vocab)] = 0.0
        q[rng.integers(vocab)] = 0.0
    elif kind == "equal":
        p = rng.dirichlet(np.ones(vocab))
        q = p.copy()
    elif kind == "tiny":
        p, q = rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))
        q[rng.integers(vocab)] = 1e-12
        p[rng.integers(vocab)] = 1e-13
    else:  # pragma: no cover
        raise AssertionError(kind)
    return p / p.sum(), q / q.sum()


KINDS = (
    "dirichlet",
    "peaked",
    "near_uniform",
    "onehot_p",
    "onehot_q",
    "disjoint",
    "zeros",
    "equal",
    "tiny",
)


def cases(count: int, seed: int, vocab_range=(2, 6)):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        vocab = int(rng.integers(vocab_range[0], vocab_range[1] + 1))
        out.append((kind, *make_case(rng, kind, vocab)))
    return out


def applicable(v: BaseVerifier, p, q, n) -> bool:
    return v.applies(p, q, n)


# -- the independent brute-force oracle ------------------------------------------------------


def res(p, q):
    d = np.maximum(p - q, 0.0)
    return d / d.sum() if d.sum() > 0 else p.copy()


def onehot(vocab, x):
    e = np.zeros(vocab)
    e[x] = 1.0
    return e


def kseq_rho_oracle(p, q, n):
    """Root of ρβ(ρ) = 1 − (1 − β(ρ))^n, i.e. of ρ − Σ_{i<n} (1 − β(ρ))^i, by brentq."""

    def g(rho):
        beta = np.minimum(q, p / rho).sum()
        if beta <= 0:
            return 0.0
        miss = np.maximum(q - p / rho, 0.0).sum()
        return rho - sum(miss**i for i in range(n))

    if g(1.0) >= 0:
        return 1.0
    if g(float(n)) <= 0:
        return float(n)
    return brentq(g, 1.0, float(n), xtol=1e-15, rtol=1e-15)


def law_given_drafts(name, v, x, p, q, n, aux):
    """``P(Y = · | drafts x)`` from the verifier's definition (docs/mathematics.md)."""
    vocab = p.size
    out = np.zeros(vocab)
    if name == "single":
        a = min(1.0, p[x[0]] / q[x[0]])
        return a * onehot(vocab, x[0]) + (1 - a) * res(p, q)
    if name == "rrs":
        mass, target = 1.0, p
        for xk in x:
            a = min(1.0, target[xk] / q[xk])
            out[xk] += mass * a
            mass *= 1 - a
            target = res(target, q)
        return out + mass * target
    if name == "rrs_without_replacement":
        mass, target, draft = 1.0, p, q.copy()
        for xk in x:
            a = min(1.0, target[xk] / draft[xk])
            out[xk] += mass * a
            mass *= 1 - a
            target = res(target, draft)
            draft = draft.copy()
            draft[xk] = 0.0
            if draft.sum() > 0:
                draft /= draft.sum()
        return out + mass * target
    if name == "kseq":
        rho = aux["rho"]
        beta = np.minimum(q, p / rho).sum()
        c = (1 - (1 - beta) ** n) / beta if beta > 0 else float(n)
        left = np.maximum(p - np.minimum(q, p / rho) * c, 0.0)
        mass = 1.0
        for xk in x:
            a = min(1.0, p[xk] / (rho * q[xk]))
            out[xk] += mass * a
            mass *= 1 - a
        return out + mass * left / left.sum() if left.sum() > 0 else out
    if name in ("spechub", "greedy"):
        if name == "spechub":
            hub = int(np.argmax(q))
            fixed = [hub]
            last = int(x[1] if x[0] == hub else x[0])
        else:
            fixed = list(np.argsort(-q, kind="stable")[: n - 1])
            last = int(x[-1])
        r = q.copy()
        r[fixed] = 0.0
        r /= r.sum()
        outside = np.ones(vocab, bool)
        outside[fixed] = False
        slack = np.maximum(r - p, 0.0)[outside].sum()
        keep = min(1.0, p[last] / r[last])
        out[last] += keep
        theta = p[fixed].sum() / slack if slack > 0 else 0.0
        if p[fixed].sum() > 0:
            out[fixed] += (1 - keep) * theta * p[fixed] / p[fixed].sum()
        rest = np.where(outside, np.maximum(p - r, 0.0), 0.0)
        if rest.sum() > 0:
            out += (1 - keep) * (1 - theta) * rest / rest.sum()
        return out
    if name == "topk":
        mass, target = 1.0, p.copy()
        for xk in x:
            a = target[xk] / target.sum() if target.sum() > 0 else 0.0
            out[xk] += mass * a
            mass *= 1 - a
            target[xk] = 0.0
        if target.sum() > 0:
            out += mass * target / target.sum()
        return out
    if name == "importance":
        chosen = aux["select"](x)
        induced = aux["induced"]
        for j, xj in enumerate(x):
            a = min(1.0, p[xj] / induced[xj])
            out[xj] += chosen[j] * a
            out += chosen[j] * (1 - a) * res(p, induced)
        return out
    if name == "optimal":
        plan = aux["plan"]
        row = plan.lookup(np.asarray(x)[None, :], vocab)[0]
        return plan.conditional(vocab)[row]
    if name in ("optimal_without_replacement", "optimal_conditional_poisson"):
        return round_rule_law(aux["rule"], x, p)
    raise AssertionError(name)  # pragma: no cover


def round_rule_law(rule, x, p):
    """``P(Y = · | drafts x)`` of the round rule, from its definition: each distinct draft
    draws round ``k`` with its share, the highest (block, round, p/q) wins, then the winner
    ``z`` is kept with ``min(1, p_z / r_z)``, else the residual ``(p − r)⁺`` is drawn."""
    members = sorted(set(int(t) for t in x))
    order = list(rule.blocks.order)
    starts = list(rule.blocks.starts)
    rounds = rule.shares.shape[0]
    r, out = rule.selection, np.zeros(p.size)
    pos = [order.index(z) for z in members]
    block = [max(b for b, s in enumerate(starts) if s <= i) for i in pos]
    for ks in itertools.product(range(rounds), repeat=len(members)):
        chance = math.prod(rule.shares[k, i] for k, i in zip(ks, pos, strict=True))
        if chance == 0:
            continue
        win = max(range(len(members)), key=lambda j: (-block[j], ks[j], -pos[j]))
        z = members[win]
        keep = min(1.0, p[z] / r[z])
        out += chance * (keep * onehot(p.size, z) + (1 - keep) * res(p, r))
    return out


def importance_select(stages, n):
    """Selection probabilities over slots by folding, written from the definition."""

    def select(x):
        probs = np.zeros(n)
        probs[0] = 1.0
        for k, stage in enumerate(stages, start=1):
            new = probs.copy()
            for j in range(k):
                i, c = x[j], x[k]
                if i == c:
                    keep = 1.0
                elif stage.rank[i] < stage.top and stage.rank[c] < stage.top:
                    keep = stage.keep_top[stage.rank[i], stage.rank[c]]
                else:
                    keep = 1.0 if stage.rank[i] < stage.rank[c] else 0.0
                new[j] = probs[j] * keep
                new[k] += probs[j] * (1 - keep)
            probs = new
        return probs

    return select


def oracle_tuples(design, q, n):
    """Ordered draft tuples with their probabilities, from the designs of docs/mathematics.md."""
    import itertools

    vocab = q.shape[-1]
    out, probs = [], []
    top = list(np.argsort(-q, kind="stable")) if q.ndim == 1 else None
    for x in itertools.product(range(vocab), repeat=n):
        if design == "iid":
            w = np.prod(q[list(x)])
        elif design == "per_slot":
            w = np.prod([q[k, x[k]] for k in range(n)])
        elif design == "without_replacement":
            if len(set(x)) < n:
                continue
            w = 1.0
            for k in range(n):
                left = sum(q[y] for y in range(vocab) if y not in x[:k])
                w *= q[x[k]] / left
        elif design == "greedy":
            fixed = top[: n - 1]
            if list(x[:-1]) != fixed or x[-1] in fixed:
                continue
            w = q[x[-1]] / sum(q[y] for y in range(vocab) if y not in fixed)
        elif design == "topk":
            w = 1.0 if list(x) == top[:n] else 0.0
        elif design == "hub":
            hub = top[0]
            rest = sum(q[y] for y in range(vocab) if y != hub)
            if x[0] != hub and x[1] == hub:
                w = q[x[0]]
            elif x[0] == hub and x[1] != hub:
                w = q[hub] * q[x[1]] / rest
            else:
                w = 0.0
        elif design == "conditional_poisson":
            if len(set(x)) < n:
                continue
            w = np.prod(q[list(x)])
        else:  # pragma: no cover
            raise AssertionError(design)
        if w > 0:
            out.append(x)
            probs.append(w)
    probs = np.array(probs)
    if design == "conditional_poisson":
        probs /= probs.sum()
    return np.array(out, dtype=np.int64), probs


def enumerate_law(name, v, p, q, n):
    """(output distribution, acceptance, induced p_I or None) by brute force over tuples."""
    tuples, probs = oracle_tuples(v.design, q, n)
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    aux: dict = {}
    if name == "kseq":
        aux["rho"] = kseq_rho_oracle(p, q, n)
    if name == "importance":
        stages = v.stages(p, q, n)
        select = importance_select(stages, n)
        induced = np.zeros(p.size)
        for x, w in zip(tuples, probs, strict=True):
            for j, xj in enumerate(x):
                induced[xj] += w * select(x)[j]
        aux["select"], aux["induced"] = select, induced
    if name == "optimal":
        aux["plan"] = v.plan(p, q, n)
    if name in ("optimal_without_replacement", "optimal_conditional_poisson"):
        aux["rule"] = v.rule(p, q, n)
    law = np.zeros(p.size)
    acc = 0.0
    for x, w in zip(tuples, probs, strict=True):
        cond = law_given_drafts(name, v, list(x), p, q, n, aux)
        law += w * cond
        acc += w * cond[np.unique(x)].sum()
    return law, acc, aux.get("induced")


ENUMERABLE = [name for name in VERIFIERS if name != "gls"]


# -- exact = enumeration, lossless by enumeration --------------------------------------------


@pytest.mark.parametrize("name", ENUMERABLE)
def test_exact_acceptance_equals_enumeration_and_law_is_p(name):
    v = get_verifier(name)
    checked = 0
    for kind, p, q in cases(36, seed=11):
        for n in (1, 2, 3):
            if not applicable(v, p, q, n):
                continue
            exact = v.acceptance(p, q, n)
            law, acc, induced = enumerate_law(name, v, p, q, n)
            assert np.allclose(law, p, atol=1e-10), (kind, n, law, p)
            assert exact is not None
            assert exact == pytest.approx(acc, abs=1e-10), (kind, n)
            if induced is not None:  # the closed-form p_I equals the enumerated one
                stages = v.stages(p, q, n)
                closed = stages[-1].induced if stages else q
                assert np.allclose(closed, induced, atol=1e-12), (kind, n)
            checked += 1
    assert checked >= (20 if name == "spechub" else 40)


def test_kseq_rho_is_the_smallest_lossless_slack():
    v = get_verifier("kseq")
    for _, p, q in cases(30, seed=5):
        for n in (2, 3, 5):
            if n > p.size:
                continue
            rho = v.rho(p, q, n)
            assert rho == pytest.approx(kseq_rho_oracle(p, q, n), rel=1e-9, abs=1e-12)
            assert 1.0 <= rho <= n


def test_rrs_without_replacement_two_draft_formula_large_vocabulary():
    """The O(V log V) n = 2 formula against the prefix enumeration at V = 60."""
    v = get_verifier("rrs_without_replacement")
    rng = np.random.default_rng(3)
    for alpha in (0.05, 0.5, 2.0):
        p, q = rng.dirichlet(np.full(60, alpha)), rng.dirichlet(np.full(60, alpha))
        law, acc, _ = enumerate_law("rrs_without_replacement", v, p, q, 2)
        assert np.allclose(law, p, atol=1e-10)
        assert v.acceptance(p, q, 2) == pytest.approx(acc, abs=1e-11)


def test_rrs_without_replacement_enumeration_limit():
    v = get_verifier("rrs_without_replacement")
    p = np.full(100, 0.01)
    # 100^2 rejected prefixes: exact since the sum over rejection paths (None before)
    assert v.acceptance(p, p[::-1], 3) is not None
    assert v.acceptance(p, p[::-1], 4) is None  # 100^3 > 200,000 prefixes
    assert v.acceptance(p, p, 2) == pytest.approx(1.0)


# -- Monte Carlo = exact ------------------------------------------------------------------------


def assert_within_4se(mc, exact, trials, context):
    se = math.sqrt(max(exact * (1 - exact), 0.0) / trials)
    assert abs(mc - exact) <= 4 * se + 1e-12, (context, mc, exact, se)


@pytest.mark.parametrize("name", VERIFIERS)
def test_simulate_matches_exact_acceptance(name):
    v = get_verifier(name)
    trials = 40_000
    checked = 0
    for i, (kind, p, q) in enumerate(cases(12, seed=21)):
        for n in (1, 2, 3):
            if not applicable(v, p, q, n):
                continue
            exact = v.acceptance(p, q, n)
            if exact is None:
                continue
            res_ = v.simulate(p, q, n, trials=trials, seed=i)
            assert res_.tokens.shape == (trials,) and res_.tokens.dtype == np.int64
            assert res_.accepted.dtype == bool
            assert np.array_equal(res_.accepted, (res_.drafts == res_.tokens[:, None]).any(1))
            assert_within_4se(res_.acceptance, exact, trials, (name, kind, n))
            checked += 1
    assert checked >= 6


class VerifyOnly:
    """Exposes only the one-trial ``verify`` of a shipped verifier."""

    def __init__(self, inner):
        self.inner = inner
        self.design = inner.design
        self.name = inner.name + "-verify"

    def acceptance(self, p, q, n=2):
        return None

    def verify(self, drafts, p, q, rng):
        return self.inner.verify(drafts, p, q, rng)


@pytest.mark.parametrize("name", VERIFIERS)
def test_verify_matches_exact_and_is_lossless(name):
    from otbound.evaluate import check_lossless

    v = get_verifier(name)
    rng = np.random.default_rng(8)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    n = 2
    trials = 6_000
    design = get_design(v.design)
    drafts = design.sample(q, n, trials, np.random.default_rng(1))
    gen = np.random.default_rng(2)
    out = [v.verify(d, p, q, gen) for d in drafts]
    tokens = np.array([t for t, _ in out])
    accepted = np.array([a for _, a in out])
    assert np.array_equal(accepted, (drafts == tokens[:, None]).any(1))
    exact = v.acceptance(p, q, n)
    assert exact is not None, f"{name} has no exact acceptance here: compare with simulate"
    assert_within_4se(accepted.mean(), exact, trials, name)
    result = check_lossless(p, q, n, trials=trials, seed=4, verifier=VerifyOnly(v))
    assert result.passed, result.message


# -- bounds --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VERIFIERS)
def test_acceptance_never_exceeds_alpha_star(name):
    """The exact acceptance (every verifier has one on these small cases) is at most α*."""
    v = get_verifier(name)
    for kind, p, q in cases(27, seed=31):
        for n in (1, 2, 3, 4):
            if not applicable(v, p, q, n):
                continue
            star = optimal_acceptance(p, q, n, v.design)
            exact = v.acceptance(p, q, n)
            assert exact is not None and exact <= star + 1e-9, (kind, n, exact, star)


@pytest.mark.parametrize("name", ["importance", "rrs_without_replacement"])
def test_estimated_acceptance_never_exceeds_alpha_star(name):
    """Where no closed form is computed (V = 300, n = 4), the simulated acceptance is at most
    α* within 4 standard errors (α* is 0.02 to 0.08 above it here, 6 to 20 standard errors)."""
    v = get_verifier(name)
    rng = np.random.default_rng(32)
    for _ in range(3):
        p, q = rng.dirichlet(np.full(300, 0.3)), rng.dirichlet(np.full(300, 0.3))
        assert v.acceptance(p, q, 4) is None  # estimated, not exact
        sim = v.simulate(p, q, 4, trials=20_000, seed=0)
        assert sim.acceptance - 4 * sim.stderr <= optimal_acceptance(p, q, 4, v.design) + 1e-9


@pytest.mark.parametrize("name", ["spechub", "greedy", "topk", "optimal"])
def test_optimal_verifiers_reach_alpha_star(name):
    v = get_verifier(name)
    checked = 0
    for kind, p, q in cases(45, seed=41):
        for n in (1, 2, 3, 4):
            if not applicable(v, p, q, n):
                continue
            star = optimal_acceptance(p, q, n, v.design)
            assert v.acceptance(p, q, n) == pytest.approx(star, abs=1e-9), (kind, n)
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize(
    "design", ["iid", "without_replacement", "conditional_poisson", "greedy", "topk", "hub"]
)
def test_optimal_verifier_reaches_alpha_star_for_every_design(design):
    v = get_verifier("optimal", design=design)
    for kind, p, q in cases(18, seed=43):
        if kind == "tiny" and design == "without_replacement":
            # drafts.WithoutReplacement.tuple_support loses ~1e-5 of mass when one draft
            # holds 1 - 1e-12 of q (its ``total - used`` cancels); solve_primal rejects that.
            continue
        for n in (2, 3) if design != "hub" else (2,):
            if not applicable(v, p, q, n):
                continue
            star = optimal_acceptance(p, q, n, design)
            assert v.acceptance(p, q, n) == pytest.approx(star, abs=1e-9), (kind, n)
            law, acc, _ = enumerate_law("optimal", v, p, q, n)
            assert np.allclose(law, p, atol=1e-10)
            assert acc == pytest.approx(star, abs=1e-9)


def test_optimal_verifier_per_slot_matches_the_lp():
    from otbound.bounds.primal import solve_primal

    v = get_verifier("optimal", design="per_slot")
    rng = np.random.default_rng(4)
    for _ in range(6):
        p = rng.dirichlet(np.ones(4))
        q = rng.dirichlet(np.ones(4), size=2)
        lp = solve_primal(p, q, 2, "per_slot").acceptance
        assert v.acceptance(p, q, 2) == pytest.approx(lp, abs=1e-9)
        law, acc, _ = enumerate_law("optimal", v, p, q, 2)
        assert np.allclose(law, p, atol=1e-10)
        assert acc == pytest.approx(lp, abs=1e-9)
        sim = v.simulate(p, q, 2, trials=30_000, seed=1)
        assert_within_4se(sim.acceptance, lp, 30_000, "per_slot")


def test_kseq_is_within_one_minus_one_over_e_of_alpha_star():
    v = get_verifier("kseq")
    for kind, p, q in cases(60, seed=51, vocab_range=(2, 12)):
        for n in (2, 3, 5, 8):
            if n > p.size:
                continue
            star = optimal_acceptance(p, q, n, "iid")
            assert v.acceptance(p, q, n) >= (1 - 1 / math.e) * star - 1e-12, (kind, n)


def test_kseq_beats_or_ties_single_draft_and_loses_to_alpha_star_somewhere():
    v = get_verifier("kseq")
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    assert v.acceptance(p, q, 2) > v.acceptance(p, q, 1)
    assert v.acceptance(p, q, 2) < optimal_acceptance(p, q, 2) - 1e-3


# -- n = 1 -----------------------------------------------------------------------------------------

SINGLE_AT_ONE = [
    "single",
    "rrs",
    "rrs_without_replacement",
    "kseq",
    "greedy",
    "importance",
    "optimal",
]


@pytest.mark.parametrize("name", SINGLE_AT_ONE)
def test_one_draft_is_speculative_sampling(name):
    """At n = 1 these verifiers accept with 1 − TV and have single-draft sampling's law."""
    v = get_verifier(name)
    single = get_verifier("single")
    for kind, p, q in cases(27, seed=61):
        tv = 0.5 * np.abs(p - q).sum()
        assert v.acceptance(p, q, 1) == pytest.approx(1 - tv, abs=1e-12), kind
        aux = {"rho": 1.0}
        if name == "importance":
            aux = {"select": lambda x: np.ones(1), "induced": q}
        if name == "optimal":
            continue  # any optimal plan is allowed; its law is checked by enumeration above
        for x in np.flatnonzero(q > 0):
            mine = law_given_drafts(name, v, [x], p, q, 1, aux)
            ref = law_given_drafts("single", single, [x], p, q, 1, {})
            assert np.allclose(mine, ref, atol=1e-12)


def test_topk_and_gls_at_one_draft():
    """The two exceptions: top-1 is deterministic (α = p(argmax q)); GLS couples, never rejects."""
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    assert get_verifier("topk").acceptance(p, q, 1) == pytest.approx(p[np.argmax(q)])
    gls = get_verifier("gls").acceptance(p, q, 1)
    tv = 0.5 * np.abs(p - q).sum()
    assert (1 - tv) / (1 + tv) - 1e-12 <= gls <= 1 - tv + 1e-12
    brute = sum(1.0 / np.sum(np.maximum(p / p[j], q / q[j])) for j in range(6))
    assert gls == pytest.approx(brute, rel=1e-12)


# -- GLS against the shared-uniform definition ----------------------------------------------------


def gls_brute_force(p, q, n, trials, rng):
    """The definition: shared uniforms U^(k)_i; drafts and output are argmins."""
    e = -np.log(rng.random((trials, n, p.size)))
    with np.errstate(divide="ignore"):
        drafts = np.argmin(e / q, axis=2)
        tokens = np.argmin(e.min(axis=1) / p, axis=1)
    return drafts, tokens


def joint_codes(drafts, tokens, vocab):
    code = tokens.astype(np.int64)
    for k in range(drafts.shape[1]):
        code = code * vocab + drafts[:, k]
    return code


def two_sample_chi2(a, b, size):
    from scipy.stats import chi2_contingency

    ca, cb = np.bincount(a, minlength=size), np.bincount(b, minlength=size)
    keep = (ca + cb) >= 10
    table = np.stack([ca[keep], cb[keep]])
    return chi2_contingency(table)[1]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_gls_simulation_has_the_joint_law_of_the_definition(n):
    """(drafts, output) from the hazard-based simulation vs the brute-force shared noise."""
    v = get_verifier("gls")
    rng = np.random.default_rng(100 + n)
    for kind in ("dirichlet", "peaked", "zeros", "onehot_p"):
        p, q = make_case(rng, kind, 4)
        trials = 60_000
        d_ref, t_ref = gls_brute_force(p, q, n, trials, np.random.default_rng(n))
        sim = v.simulate(p, q, n, trials=trials, seed=n)
        size = 4 ** (n + 1)
        pval = two_sample_chi2(
            joint_codes(d_ref, t_ref, 4), joint_codes(sim.drafts, sim.tokens, 4), size
        )
        assert pval > 1e-4, (kind, n, pval)
        if n == 1:
            assert_within_4se(sim.acceptance, v.acceptance(p, q, 1), trials, kind)


def test_gls_verify_has_the_conditional_law_of_the_definition():
    v = get_verifier("gls")
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    d_ref, t_ref = gls_brute_force(p, q, 2, 20_000, np.random.default_rng(1))
    gen = np.random.default_rng(2)
    t_mine = np.array([v.verify(d, p, q, gen)[0] for d in d_ref])
    # same drafts, output drawn by verify from the conditional noise
    pval = two_sample_chi2(joint_codes(d_ref, t_ref, 4), joint_codes(d_ref, t_mine, 4), 64)
    assert pval > 1e-4, pval


def test_gls_lower_bound():
    v = get_verifier("gls")
    for i, (kind, p, q) in enumerate(cases(9, seed=71)):
        for n in (1, 2, 4):
            if not applicable(v, p, q, n):
                continue
            bound = v.lower_bound(p, q, n)
            sim = v.simulate(p, q, n, trials=40_000, seed=i)
            assert sim.acceptance + 4 * sim.stderr + 1e-12 >= bound, (kind, n)
            if n == 1:
                assert bound == pytest.approx(v.acceptance(p, q, 1), abs=1e-12)


def test_gls_runs_at_a_real_vocabulary():
    """20,000 trials at V = 32,000, n = 4 (its speed: benchmarks/bench_verifiers.py)."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.full(32_000, 0.05)), rng.dirichlet(np.full(32_000, 0.05))
    sim = get_verifier("gls").simulate(p, q, 4, trials=20_000, seed=0)
    assert sim.tokens.shape == (20_000,) and sim.drafts.shape == (20_000, 4)
    assert 0.0 < sim.acceptance <= optimal_acceptance(p, q, 4) + 0.02


# -- importance sampling ---------------------------------------------------------------------------


def test_importance_with_all_tokens_in_the_lp_reaches_alpha_star_at_two_drafts():
    v = get_verifier("importance")  # top = 10 >= V
    for kind, p, q in cases(27, seed=81, vocab_range=(2, 8)):
        star = optimal_acceptance(p, q, 2)
        assert v.selection_acceptance(p, q, 2) == pytest.approx(star, abs=1e-7), kind
        assert v.acceptance(p, q, 2) == pytest.approx(star, abs=1e-7), kind


def test_importance_tail_rules_and_coincidence_term():
    """With top = 2..4 on V = 6 the tail rules matter; the n = 2 closed form (selection plus
    the residual landing on the other draft) equals the enumeration, and the coincidence term is
    positive."""
    rng = np.random.default_rng(9)
    positive = 0
    for trial in range(60):
        v = get_verifier("importance", top=2 + trial % 3)
        p, q = rng.dirichlet(np.full(6, 0.6)), rng.dirichlet(np.full(6, 0.6))
        for n in (2, 3):
            law, acc, induced = enumerate_law("importance", v, p, q, n)
            assert np.allclose(law, p, atol=1e-10)
            assert v.acceptance(p, q, n) == pytest.approx(acc, abs=1e-10)
            selected = v.selection_acceptance(p, q, n)
            assert selected == pytest.approx(np.minimum(p, induced).sum(), abs=1e-12)
            assert acc >= selected - 1e-12
            positive += acc > selected + 1e-6
    assert positive > 0


def test_importance_stages_are_shared_across_n_in_any_order():
    """The cached chain of stages gives, for each n, what a fresh verifier builds for that n."""
    rng = np.random.default_rng(13)
    p, q = rng.dirichlet(np.full(30, 0.5)), rng.dirichlet(np.full(30, 0.5))
    shared = get_verifier("importance", top=4)
    for n in (3, 2, 5, 4, 1):
        got = shared.stages(p, q, n)
        want = get_verifier("importance", top=4).stages(p, q, n)
        assert len(got) == len(want) == n - 1
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a.rank, b.rank)
            np.testing.assert_array_equal(a.keep_top, b.keep_top)
            np.testing.assert_array_equal(a.induced, b.induced)
    other = rng.dirichlet(np.full(30, 0.5))  # another step does not see this step's chain
    assert shared.stages(other, q, 2)[0].induced is not shared.stages(p, q, 2)[0].induced


def test_importance_fixed_tail_rule_can_fall_below_single_draft():
    """Inherent to the practical scheme (module docstring), not a bug: a top-s token always beats
    a tail token, so p_I(tail) = P(both drafts in the tail) and "keep x_1" is infeasible. With
    p = q uniform on 4 tokens and s = 2: α_sel = p(S) + 1/4 = 3/4 < β = 1; s = V reaches 1."""
    p = np.full(4, 0.25)
    truncated = get_verifier("importance", top=2)
    assert truncated.selection_acceptance(p, p, 1) == pytest.approx(1.0)
    assert truncated.selection_acceptance(p, p, 2) == pytest.approx(0.75, abs=1e-12)
    stage = truncated.stages(p, p, 2)[0]
    assert stage.induced[stage.rank >= 2].sum() == pytest.approx(0.25, abs=1e-12)
    assert get_verifier("importance", top=4).selection_acceptance(p, p, 2) == pytest.approx(1.0)


def test_importance_per_slot_drafts():
    v = get_verifier("importance", design="per_slot", top=3)
    rng = np.random.default_rng(10)
    for _ in range(5):
        p = rng.dirichlet(np.ones(5))
        q = rng.dirichlet(np.ones(5), size=3)
        for n in (2, 3):
            qs = q[:n]
            law, acc, _ = enumerate_law("importance", v, p, qs, n)
            assert np.allclose(law, p, atol=1e-10)
            assert v.acceptance(p, qs, n) == pytest.approx(acc, abs=1e-10)
            sim = v.simulate(p, qs, n, trials=30_000, seed=n)
            assert_within_4se(sim.acceptance, acc, 30_000, n)


def test_importance_large_vocabulary_is_exact_at_two_drafts_only():
    v = get_verifier("importance")
    rng = np.random.default_rng(12)
    p, q = rng.dirichlet(np.full(2_000, 0.1)), rng.dirichlet(np.full(2_000, 0.1))
    a2 = v.acceptance(p, q, 2)
    assert a2 is not None and a2 <= optimal_acceptance(p, q, 2) + 1e-9
    sim = v.simulate(p, q, 2, trials=50_000, seed=0)
    assert_within_4se(sim.acceptance, a2, 50_000, "V=2000")
    assert v.acceptance(p, q, 3) is None
    # V^n beyond int64 (2000^8): the size guard must not overflow into an enumeration
    assert v.acceptance(p, q, 8) is None


# -- single with n > 1 --------------------------------------------------------------------------


def test_single_uses_only_the_first_draft():
    v = get_verifier("single")
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5])
    # first draft 2 is always rejected (p = 0); the residual is token 0
    assert v.verify([2, 1], p, q, np.random.default_rng(0)) == (0, False)
    beta = np.minimum(p, q).sum()
    # residual token 0 never coincides with a draft: q_0 = 0
    assert v.acceptance(p, q, 3) == pytest.approx(beta)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VERIFIERS)
def test_bad_input_raises_value_error_naming_the_argument(name):
    v = get_verifier(name)
    p, q = [0.2, 0.3, 0.5], [0.5, 0.3, 0.2]
    n = 2
    with pytest.raises(ValueError, match="p has a negative"):
        v.acceptance([-0.1, 0.6, 0.5], q, n)
    with pytest.raises(ValueError, match="q"):
        v.acceptance(p, [0.5, 0.5], n)
    with pytest.raises(ValueError, match="n must be"):
        v.acceptance(p, q, 0)
    with pytest.raises(ValueError, match="n must be"):
        v.simulate(p, q, "2")
    with pytest.raises(ValueError, match="trials"):
        v.simulate(p, q, n, trials=0)
    with pytest.raises(ValueError, match="one step"):
        v.acceptance([p, p], [q, q], n)
    with pytest.raises(ValueError, match="drafts"):
        v.verify([0, 7], p, q, np.random.default_rng(0))
    with pytest.raises(ValueError, match="drafts"):
        v.verify([], p, q, np.random.default_rng(0))


def test_verifier_specific_limits():
    with pytest.raises(ValueError, match="n=2 only"):
        get_verifier("spechub").acceptance([0.2, 0.3, 0.5], [0.5, 0.3, 0.2], 3)
    with pytest.raises(ValueError, match="support of q"):
        get_verifier("rrs_without_replacement").acceptance([0.5, 0.5, 0.0], [1.0, 0.0, 0.0], 2)
    with pytest.raises(ValueError, match="unknown verifier 'nope'"):
        get_verifier("nope")
    with pytest.raises(ValueError, match="design"):
        get_verifier("rrs", design="topk")
    with pytest.raises(ValueError, match="top must be"):
        get_verifier("importance", top=0)
    with pytest.raises(ValueError, match="hub"):
        get_verifier("spechub").verify([1, 2], [0.2, 0.3, 0.5], [0.5, 0.3, 0.2])
    with pytest.raises(ValueError, match="top"):
        get_verifier("topk").verify([1, 2], [0.2, 0.3, 0.5], [0.5, 0.3, 0.2])
    opt = get_verifier("optimal", method="lp")
    big = np.full(1_000, 1e-3)
    assert not opt.applies(big, big, 2)
    assert opt.acceptance(big, big, 2) is None
    with pytest.raises(ValueError, match="MAX_TUPLES"):
        opt.simulate(big, big, 2, trials=10)
    assert get_verifier("optimal").applies(big, big, 2)  # the level rule: any vocabulary


def test_simulation_is_reproducible_and_seed_sensitive():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    for name in VERIFIERS:
        v = get_verifier(name)
        a = v.simulate(p, q, 2, trials=2_000, seed=5)
        b = v.simulate(p, q, 2, trials=2_000, seed=5)
        c = v.simulate(p, q, 2, trials=2_000, seed=6)
        assert np.array_equal(a.tokens, b.tokens), name
        assert not np.array_equal(a.tokens, c.tokens), name


def test_registry_and_protocol():
    from otbound.verifiers import Verifier

    assert VERIFIERS == (
        "single",
        "rrs",
        "rrs_without_replacement",
        "kseq",
        "spechub",
        "greedy",
        "topk",
        "importance",
        "gls",
        "optimal",
        "optimal_without_replacement",
        "optimal_conditional_poisson",
    )
    for name in VERIFIERS:
        v = get_verifier(name)
        assert isinstance(v, Verifier)
        assert v.name == name
        assert isinstance(v.design, str) and get_design(v.design).name == v.design
    assert get_verifier("spechub").design == "hub"
    v = get_verifier("rrs")
    assert get_verifier(v) is v


def test_drafts_are_sampled_in_chunks_without_changing_their_law(monkeypatch):
    import otbound.verifiers.base as base

    monkeypatch.setattr(base, "SAMPLE_CHUNK_ENTRIES", 50)  # V = 10: five rows per chunk
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(10)), rng.dirichlet(np.ones(10))
    v = get_verifier("rrs_without_replacement")
    sim = v.simulate(p, q, 3, trials=30_001, seed=2)
    assert sim.drafts.shape == (30_001, 3)
    assert np.all(np.sort(sim.drafts, axis=1)[:, 1:] != np.sort(sim.drafts, axis=1)[:, :-1])
    assert_within_4se(sim.acceptance, v.acceptance(p, q, 3), 30_001, "chunked")
    first = np.bincount(sim.drafts[:, 0], minlength=10) / 30_001
    assert np.abs(first - q).max() < 4 * np.sqrt(0.25 / 30_001)


@pytest.mark.parametrize("name", ENUMERABLE)
def test_shared_cases_with_masses_down_to_1e_30(name, gen):
    """The project's shared generator (tiny = 1e-30 entries, one-hot, disjoint, ...)."""
    v = get_verifier(name)
    for case in gen.cases(v.design, 30, seed=123, max_n=3):
        if not v.applies(case.p, case.q, case.n):
            continue
        law, acc, _ = enumerate_law(name, v, case.p, case.q, case.n)
        assert np.allclose(law, case.p, atol=1e-10), str(case)
        assert v.acceptance(case.p, case.q, case.n) == pytest.approx(acc, abs=1e-10), str(case)
        star = optimal_acceptance(case.p, case.q, case.n, v.design)
        assert acc <= star + 1e-9, str(case)


# -- verifiers without a closed form: exact where it exists, Rao-Blackwellised otherwise ------


def test_rrs_without_replacement_rejection_paths_equal_the_draft_enumeration():
    """The threshold family p_k = (p − t_k q)⁺ / f(t_k): the sum over rejected prefixes
    equals the brute-force expansion of every draft prefix, 1e-12, n = 3..5."""
    from otbound.verifiers.rrs_without_replacement import (
        _acceptance_enumerated,
        _acceptance_paths,
    )

    checked = 0
    for kind, p, q in cases(90, seed=17, vocab_range=(3, 7)):
        for n in (3, 4, 5):
            if np.count_nonzero(q > 0) < n:
                continue
            got = _acceptance_paths(p, q, n)
            assert got == pytest.approx(_acceptance_enumerated(p, q, n), abs=1e-12), (kind, n)
            checked += 1
    assert checked >= 150


def _rb_check(v, p, q, n, trials, seed, slack):
    """Rao-Blackwellised estimate within 4 SE of the exact value; SE below the 0/1 one."""
    exact = v.acceptance(p, q, n)
    est = v._estimate_sample(v.validate_step(p, q), n, trials, np.random.default_rng(seed))
    assert est.method == "rao_blackwell" and est.trials == trials
    assert abs(est.acceptance - exact) <= 4 * est.stderr + slack, (est, exact)
    binary = math.sqrt(max(exact * (1 - exact), 0.0) / trials)
    return est.stderr, binary


@pytest.mark.parametrize("name", ["rrs_without_replacement", "importance"])
def test_rao_blackwell_estimates_are_unbiased_with_a_smaller_standard_error(name):
    """On small cases with an exact value: within 4 SE (plus 1e-7 of rounding in the sampled
    kernels' prefix sums), and the SE strictly below the 0/1 estimator's wherever that is
    not degenerate."""
    v = get_verifier(name) if name != "importance" else get_verifier(name, top=3)
    ratios = []
    for i, (kind, p, q) in enumerate(cases(45, seed=23, vocab_range=(3, 7))):
        for n in (3, 4):
            if not applicable(v, p, q, n):
                continue
            se, binary = _rb_check(v, p, q, n, 20_000, i, 1e-7)
            if binary > 1e-6:
                assert se < binary, (kind, n, se, binary)
                ratios.append(se / binary)
    assert len(ratios) >= 20 and np.median(ratios) < 0.5


def test_the_pilots_of_a_rao_blackwellised_estimate(monkeypatch):
    """A small pilot; a second, larger one only where the first does not show the row clearly
    narrow (or where the verifier fell back to 0/1 events); then the final sample."""
    v = get_verifier("rrs_without_replacement")
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.full(400, 0.3)), rng.dirichlet(np.full(400, 0.3))
    sizes: list[int] = []
    original = BaseVerifier._estimate_sample

    def spy(self, step, n, trials, generator, **final):
        sizes.append(trials)
        return original(self, step, n, trials, generator, **final)

    monkeypatch.setattr(BaseVerifier, "_estimate_sample", spy)
    v.estimate(p, q, 4, trials=50_000, seed=1, target_se=0.5)  # clearly narrow
    assert sizes == [RB_PILOT, MIN_RB_TRIALS]
    sizes.clear()
    tight = v.estimate(p, q, 4, trials=50_000, seed=1, target_se=2e-5)  # wide for this target
    assert sizes == [RB_PILOT, WIDE_PILOT * RB_PILOT, tight.trials]
    assert tight.trials > WIDE_PILOT * RB_PILOT
    sizes.clear()
    v.estimate(p, q, 4, trials=40, seed=1, target_se=1e-4)  # the cap binds every sample
    assert sizes == [40, 40]
    sizes.clear()
    monkeypatch.setattr(type(v), "_conditional", lambda *args: None)  # 0/1 events after all
    assert v._rao_blackwellised()
    events = v.estimate(p, q, 4, trials=50_000, seed=1, target_se=0.05)
    assert events.method == "monte_carlo"
    assert sizes == [RB_PILOT, MIN_TRIALS, events.trials] and events.trials >= MIN_TRIALS


def test_estimate_is_exact_where_acceptance_is_and_sized_by_the_target():
    v = get_verifier("rrs_without_replacement")
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.full(400, 0.3)), rng.dirichlet(np.full(400, 0.3))
    assert v.acceptance(p, q, 4) is None  # 400^3 rejected prefixes
    exact3 = v.estimate(p, q, 2)
    assert exact3.exact and exact3.stderr == 0 and exact3.acceptance == v.acceptance(p, q, 2)
    a = v.estimate(p, q, 4, trials=50_000, seed=1, target_se=0.005)
    b = v.estimate(p, q, 4, trials=50_000, seed=1, target_se=0.005)
    assert a == b and a.method == "rao_blackwell"  # seeded
    assert MIN_RB_TRIALS <= a.trials <= 50_000 and a.stderr < 0.005
    # the pilot's size is the Rao-Blackwellised floor; a target the floor already meets
    # takes exactly the floor, a tighter one grows the final sample past it
    loose = v.estimate(p, q, 4, trials=50_000, seed=1, target_se=0.5)
    assert loose.trials == MIN_RB_TRIALS
    tight = v.estimate(p, q, 4, trials=50_000, seed=1, target_se=loose.stderr / 3)
    assert tight.trials > 4 * MIN_RB_TRIALS and tight.stderr < loose.stderr / 2
    lo, hi = a.ci()  # the betting interval of the final sample's values on their range
    assert lo <= a.acceptance <= hi and (lo, hi) == betting_interval(a.values, *a.value_range, 0.95)
    fixed = v.estimate(p, q, 4, trials=3_000, seed=1)
    assert fixed.trials == 3_000
    capped = v.estimate(p, q, 4, trials=500, seed=1, target_se=1e-6)
    assert capped.trials == 500  # the cap binds
    with pytest.raises(ValueError, match="target_se"):
        v.estimate(p, q, 4, target_se=0.0)
    # the estimate agrees with the 0/1 simulation of the verifier itself
    sim = v.simulate(p, q, 4, trials=40_000, seed=2)
    assert abs(sim.acceptance - a.acceptance) <= 4 * math.hypot(sim.stderr, a.stderr)


def test_gls_exact_acceptance_for_n_drafts():
    """The one-dimensional integral: n = 1 equals the closed form, the trapezoid rule has
    converged (a third of the step changes nothing at 1e-12), and the simulation of the
    definition (brute-force shared noise) agrees within 4 SE for n = 2, 3, 5."""
    from otbound.verifiers.gls import gls_acceptance, gls_match_probability

    v = get_verifier("gls")
    for i, (kind, p, q) in enumerate(cases(36, seed=29, vocab_range=(2, 8))):
        assert gls_acceptance(p, q, 1) == pytest.approx(gls_match_probability(p, q), abs=1e-12)
        for n in (2, 3, 5):
            exact = v.acceptance(p, q, n)
            assert exact == pytest.approx(gls_acceptance(p, q, n, step=0.1), abs=1e-12), kind
        if i < 12:
            n = 2 + i % 2
            d_ref, t_ref = gls_brute_force(p, q, n, 40_000, np.random.default_rng(i))
            hits = (d_ref == t_ref[:, None]).any(axis=1).mean()
            assert_within_4se(hits, v.acceptance(p, q, n), 40_000, (kind, n))


def test_gls_exact_acceptance_at_a_real_vocabulary():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.full(32_000, 0.05)), rng.dirichlet(np.full(32_000, 0.05))
    v = get_verifier("gls")
    exact = v.acceptance(p, q, 4)
    assert v.lower_bound(p, q, 4) - 1e-12 <= exact <= optimal_acceptance(p, q, 4) + 1e-12
    sim = v.simulate(p, q, 4, trials=20_000, seed=0)
    assert_within_4se(sim.acceptance, exact, 20_000, "V=32000")


def test_importance_stages_depend_on_the_step_only():
    """The stage solver keeps no state: a step that repeats (in another verifier, after other
    steps) gets the same weights and ``p_I`` bit for bit."""
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.full(50, 0.3)), rng.dirichlet(np.full(50, 0.3))
    first = get_verifier("importance").stages(p, q, 4)
    other = get_verifier("importance")
    for _ in range(3):
        other.stages(rng.dirichlet(np.full(50, 0.3)), rng.dirichlet(np.full(50, 0.3)), 4)
    again = other.stages(p.copy(), q.copy(), 4)
    for a, b in zip(first, again, strict=True):
        assert a.keep_top.tobytes() == b.keep_top.tobytes()
        assert a.induced.tobytes() == b.induced.tobytes()


def _kernel_cases(count: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Seeded hard (p, q) pairs for kernel-equivalence tests, V from 2 to 50,000."""
    return kernel_cases(count, seed, big=(50_000, 8_192))


def test_gls_shared_quadrature_matches_reference():
    """The one-pass kernel for several n equals the former one-n-a-pass quadrature (within the
    rule's error, 1e-12) for n = 1..8, alone or together, and the cached acceptance too."""
    from otbound.verifiers.gls import (
        _gls_acceptance_reference,
        gls_acceptance,
        gls_acceptances,
        gls_match_probability,
    )

    v = get_verifier("gls")
    for kind, p, q in _kernel_cases(40, seed=41):
        together = gls_acceptances(p, q, range(1, 9))
        assert together[1] == pytest.approx(gls_match_probability(p, q), abs=1e-12), kind
        for n in range(1, 9):
            ref = _gls_acceptance_reference(p, q, n)
            assert together[n] == pytest.approx(ref, abs=1e-12), (kind, n, p.size)
            assert gls_acceptance(p, q, n) == together[n]  # independent of the other n
        for n in (3, 2, 8, 4, 12):  # compare's order of calls, cache hits included
            assert v.acceptance(p, q, n) == pytest.approx(
                min(1.0, max(0.0, _gls_acceptance_reference(p, q, n))), abs=1e-12
            )


def test_importance_ranking_from_hint_is_the_stable_argsort():
    """The hinted sort of the importance stages equals ``np.argsort(kind="stable")`` exactly,
    ties included, and the stage chain is unchanged by the hints."""
    from otbound.verifiers.importance import _ranking, _solve_stage

    rng = np.random.default_rng(7)
    for case in range(600):
        vocab = int(rng.integers(2, 2_000))
        key = rng.random(vocab)
        if case % 4 == 1:
            key = np.round(key * int(rng.integers(1, 20))) / 7
        elif case % 4 == 2:
            key[rng.random(vocab) < 0.5] = 0.0
        elif case % 4 == 3:
            key = np.round(key * 200)
        hint = np.argsort(key + rng.normal(0, 0.05, vocab) * (case % 3), kind="stable")
        if case % 5 == 0:
            hint = rng.permutation(vocab)
        want = np.argsort(key, kind="stable")
        assert np.array_equal(_ranking(key, hint), want)
        assert np.array_equal(_ranking(key), want)
    for kind, p, q in _kernel_cases(12, seed=43):
        v = get_verifier("importance")
        chain = v.stages(p, q, 8)
        current = q
        for stage in chain:  # the reference: every stage sorted from scratch
            ref = _solve_stage(p, current, q, v.top)
            assert np.array_equal(stage.rank, ref.rank), kind
            assert np.array_equal(stage.keep_top, ref.keep_top), kind
            assert np.array_equal(stage.induced, ref.induced), kind
            current = ref.induced


# -- every n of a step in one call (what compare asks) -----------------------------------------


def _several_n_cases(name: str) -> list[tuple[object, np.ndarray, np.ndarray]]:
    """(verifier, p, q) triples for :func:`test_acceptances_of_equals_acceptance_of_per_n`:
    the kernel cases with the shipped design, and ``importance`` with one ``q`` per slot."""
    out: list[tuple[object, np.ndarray, np.ndarray]] = [
        (get_verifier(name), p, q) for _, p, q in kernel_cases(12, seed=61, big=(3_000, 40))
    ]
    if name == "importance":
        rng = np.random.default_rng(62)
        slots = rng.dirichlet(np.ones(5), size=3)
        out.append((get_verifier(name, design="per_slot"), rng.dirichlet(np.ones(5)), slots))
    if name in ("greedy", "topk"):  # ties across the top-n boundaries (the lower id first)
        tied = np.array([0.1, 0.2, 0.1, 0.2, 0.1, 0.05, 0.1, 0.05, 0.1])
        out.append((get_verifier(name), np.full(9, 1 / 9), tied))
    return out


@pytest.mark.parametrize("name", sorted(VERIFIERS))
def test_acceptances_of_equals_acceptance_of_per_n(name):
    """One call for several ``n`` (sharing a step's sort, its quadrature pass or its chain of
    stages) gives each ``n`` the value of :meth:`acceptance_of` alone, bit for bit, and
    ``None`` where that is ``None``; a repeated ``n`` is answered once."""
    compared = 0
    for v, p, q in _several_n_cases(name):
        step = v.validate_step(p, q)
        if v.design == "per_slot":
            ns = [q.shape[0]]
        else:
            ns = [k for k in (1, 2, 3, 4, 8, 2) if v.applies_to(step, k)]
        together = v.acceptances_of(step, ns)
        assert set(together) == set(ns)
        for k in ns:
            alone = v.acceptance_of(v.validate_step(p, q), k)
            assert together[k] == alone, (name, p.size, k)
            compared += alone is not None
    assert compared >= 12


def test_acceptances_of_raises_outside_the_limits_and_gives_none_where_not_defined():
    p, q = np.full(4, 0.25), np.array([0.4, 0.3, 0.2, 0.1])
    hub = get_verifier("spechub")
    with pytest.raises(ValueError, match="n=2 only"):
        hub.acceptances_of(hub.validate_step(p, q), [2, 3])
    optimal = get_verifier("optimal", method="lp")
    wide = np.full(100, 0.01)
    assert optimal.acceptances_of(optimal.validate_step(wide, wide), [4]) == {4: None}


def test_a_step_keeps_its_support_and_ratio_order():
    from otbound.problem import Step

    for _, p, q in kernel_cases(10, seed=63, big=(5_000,)):
        step = Step.validate(p, q)
        live = np.flatnonzero(q > 0)
        want = live[np.argsort(p[live] / q[live], kind="stable")]
        assert np.array_equal(step.ratio_order, want)
        assert step.ratio_order is step.ratio_order  # sorted once
        assert step.support == live.size
    batch = Step.validate(np.full((2, 3), 1 / 3), np.full(3, 1 / 3))
    assert batch.support == 3
    with pytest.raises(ValueError, match="one step"):
        _ = batch.ratio_order


def test_memo_serves_only_inputs_equal_bit_for_bit(monkeypatch):
    """A verifier's per-step cache is keyed on a cheap digest; an entry serves only the
    inputs it was built from, bit for bit: under a digest that collides for every input
    (forced here), a sign of zero or an array changed in place after the build builds anew,
    and an equal copy is served."""
    from otbound.verifiers import base

    v = get_verifier("rrs")
    built = []

    def build(tag):
        built.append(tag)
        return tag

    p = np.array([0.0, 0.25, 0.75])
    q = np.array([0.5, 0.25, 0.25])
    assert v._memo("t", p, q, 2, lambda: build("a")) == "a"
    assert v._memo("t", p.copy(), q.copy(), 2, lambda: build("b")) == "a"  # equal: served
    monkeypatch.setattr(base, "_digest", lambda a: ("same digest",))
    assert v._memo("t", p, q, 2, lambda: build("c")) == "c"
    assert v._memo("t", p.copy(), q, 2, lambda: build("x")) == "c"  # equal: served
    signed = p.copy()
    signed[0] = -0.0
    assert v._memo("t", signed, q, 2, lambda: build("d")) == "d"  # same digest, other bits
    p[1], p[2] = 0.5, 0.5  # changed in place after the build
    assert v._memo("t", p, q, 2, lambda: build("e")) == "e"
    assert built == ["a", "c", "d", "e"]
    monkeypatch.undo()
    slots = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]])  # one q per slot: (n, V)
    assert v._memo("t", p, slots, 2, lambda: build("f")) == "f"
    assert v._memo("t", p, slots.copy(), 2, lambda: build("g")) == "f"
