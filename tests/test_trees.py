"""Draft trees: block efficiency, tree builders, Sequoia's DP, positional vectors, the bound."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from otbound.bounds import optimal_acceptance
from otbound.evaluate import compare
from otbound.trees import (
    EXACT_POSITIONAL,
    best_tree,
    block_efficiency,
    bound_block_efficiency,
    canonical_tree,
    chain,
    kary_tree,
    positional_acceptance,
    predict_tokens_per_call,
)
from otbound.verifiers import VERIFIERS, get_verifier

# -- helpers -----------------------------------------------------------------------------------


def all_trees(max_nodes: int, width: int, max_depth: int | None = None) -> list[frozenset]:
    """Every valid tree (sets of paths) with at most ``max_nodes`` nodes, by growth."""
    start: frozenset = frozenset()
    seen = {start}
    frontier = [start]
    for _ in range(max_nodes):
        nxt = []
        for tree in frontier:
            for parent in [(), *tree]:
                if max_depth is not None and len(parent) >= max_depth:
                    continue
                k = sum(1 for v in tree if len(v) == len(parent) + 1 and v[:-1] == parent)
                if k < width:
                    grown = tree | {(*parent, k)}
                    if grown not in seen:
                        seen.add(grown)
                        nxt.append(grown)
        frontier = nxt
    return list(seen)


def random_tree(rng: np.random.Generator, nodes: int, width: int) -> list[list[int]]:
    """A random valid tree grown node by node (child index < width)."""
    tree: list[tuple[int, ...]] = []
    while len(tree) < nodes:
        parent = [(), *tree][int(rng.integers(len(tree) + 1))]
        k = sum(1 for v in tree if len(v) == len(parent) + 1 and v[:-1] == parent)
        if k < width:
            tree.append((*parent, k))
    return [list(v) for v in tree]


def random_vector(rng: np.random.Generator, width: int, rows: int | None = None) -> np.ndarray:
    """Positional vectors: Dirichlet over width + 1 outcomes (the last one: no child accepted)."""
    shape = (rows,) if rows is not None else ()
    draw = rng.dirichlet(np.full(width + 1, 0.7), size=shape or None)
    return np.asarray(draw)[..., :width]


def small_pair(rng: np.random.Generator, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.dirichlet(np.ones(vocab)), rng.dirichlet(np.ones(vocab))


# -- trees and validation ------------------------------------------------------------------------


def test_builders() -> None:
    assert chain(0) == []
    assert chain(3) == [[0], [0, 0], [0, 0, 0]]
    binary = kary_tree([2, 2, 2])
    assert len(binary) == 14
    assert binary == kary_tree(2, depth=3)
    assert kary_tree([1, 1, 1]) == chain(3)
    assert kary_tree([3, 2]) == canonical_tree(kary_tree([3, 2]))
    assert len(kary_tree([3, 2])) == 3 + 6
    assert canonical_tree([[1], [0, 0], (0,)]) == [[0], [1], [0, 0]]
    assert canonical_tree(np.array([[0], [1]])) == [[0], [1]]


@pytest.mark.parametrize(
    ("tree", "match"),
    [
        (5, "list of paths"),
        ("abc", "list of paths"),
        ([[0], []], r"tree\[1\] is empty"),
        ([[0], [0, -1]], r"tree\[1\] = \[0, -1\]: child indices must be non-negative"),
        ([[0], [0.5]], "non-negative integers"),
        ([[True]], "non-negative integers"),
        ([[0], [1], [0]], r"the node \[0\] twice \(tree\[0\] and tree\[2\]\)"),
        ([[0], [0, 0, 0]], r"node \[0, 0, 0\] but not its parent \[0, 0\]"),
        ([[0], [2]], r"node \[2\] but not its sibling \[1\]"),
        ([[0], [0, 1]], r"node \[0, 1\] but not its sibling \[0, 0\]"),
        ([[1]], r"node \[1\] but not its sibling \[0\]"),
    ],
)
def test_tree_validation(tree, match) -> None:
    with pytest.raises(ValueError, match=match):
        block_efficiency([0.5, 0.3, 0.1], tree)
    with pytest.raises(ValueError, match=match):
        bound_block_efficiency([0.5, 0.6, 0.7], tree)


def test_vector_validation() -> None:
    tree = [[0], [1], [2], [0, 0]]
    with pytest.raises(ValueError, match=r"has 2 entries .* node \[2\], child 2 .* at least 3"):
        block_efficiency([0.5, 0.3], tree)
    with pytest.raises(ValueError, match=r"has 1 rows .* node \[0, 0\] at depth 2"):
        block_efficiency([[0.3, 0.2, 0.1]], tree)
    with pytest.raises(ValueError, match=r"sums to 1\.2"):
        block_efficiency([0.7, 0.5], [[0]])
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        block_efficiency([-0.1], [[0]])
    with pytest.raises(ValueError, match="NaN"):
        block_efficiency([np.nan], [[0]])
    with pytest.raises(ValueError, match="vector"):
        block_efficiency(np.zeros((1, 1, 1)), [[0]])
    with pytest.raises(ValueError, match=r"has 2 entries .* root has 3 children"):
        bound_block_efficiency([0.5, 0.6], tree)
    with pytest.raises(ValueError, match=r"1 rows .* node \[0\] at depth 1 has children"):
        bound_block_efficiency([[0.5, 0.6, 0.7]], tree)
    with pytest.raises(ValueError, match="budget"):
        best_tree([0.5], budget=-1)
    with pytest.raises(ValueError, match="needs a depth"):
        kary_tree(2)
    with pytest.raises(ValueError, match="branching factor"):
        kary_tree([2, 0])


# -- closed forms --------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.99, 1.0])
@pytest.mark.parametrize("gamma", [0, 1, 4, 9])
def test_chain_closed_form(alpha: float, gamma: int) -> None:
    expected = gamma + 1.0 if alpha == 1.0 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    assert block_efficiency([alpha], chain(gamma)) == pytest.approx(expected, rel=1e-12)


def test_kary_closed_form() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        a = random_vector(rng, 4)
        factors = [int(b) for b in rng.integers(1, 4, size=int(rng.integers(1, 4)))]
        sums = [a[:b].sum() for b in factors]
        expected = 1.0 + sum(np.prod(sums[: d + 1]) for d in range(len(factors)))
        assert block_efficiency(a, kary_tree(factors)) == pytest.approx(expected, rel=1e-12)
        k, depth = factors[0], len(factors)
        s = a[:k].sum()
        geometric = (1 - s ** (depth + 1)) / (1 - s)
        assert block_efficiency(a, kary_tree(k, depth)) == pytest.approx(geometric, rel=1e-12)
        # per-depth rows: row d for the children of depth-d nodes
        rows = random_vector(rng, 4, rows=len(factors))
        sums = [rows[d, :b].sum() for d, b in enumerate(factors)]
        expected = 1.0 + sum(np.prod(sums[: d + 1]) for d in range(len(factors)))
        assert block_efficiency(rows, kary_tree(factors)) == pytest.approx(expected, rel=1e-12)


# -- Sequoia's DP against brute force ------------------------------------------------------------


def test_best_tree_brute_force() -> None:
    rng = np.random.default_rng(7)
    width = 3
    trees = {d: all_trees(7, width, d) for d in (None, 2)}
    sized = {d: [(len(t), [list(v) for v in t]) for t in ts] for d, ts in trees.items()}
    for case in range(12):
        if case % 3 == 0:
            a = np.sort(random_vector(rng, width))  # increasing: the DP must not assume order
        elif case % 3 == 1:
            a = random_vector(rng, width, rows=7)  # per depth
        else:
            a = random_vector(rng, width)
        for depth in (None, 2):
            for budget in range(8):
                tree = best_tree(a, budget, max_depth=depth)
                assert len(tree) <= budget
                assert tree == canonical_tree(tree)
                if depth is not None:
                    assert all(len(v) <= depth for v in tree)
                got = block_efficiency(a, tree)
                best = max(block_efficiency(a, t) for n, t in sized[depth] if n <= budget)
                assert got == pytest.approx(best, rel=1e-12, abs=1e-12), (a, budget, depth)


def test_best_tree_limits() -> None:
    assert best_tree([0.5, 0.3], 0) == []
    assert best_tree([0.5, 0.3], 5, max_depth=0) == []
    assert best_tree([0.9, 0.05], 4) == chain(4)
    assert best_tree([0.5, 0.0], 6) == chain(6)  # a zero entry never earns a node
    # depth and width limits: at most 2 + 4 nodes fit
    assert best_tree([0.4, 0.4], 10, max_depth=2) == kary_tree([2, 2])
    assert best_tree([[0.4, 0.4], [0.4, 0.4]], 10) == kary_tree([2, 2])
    a = [0.6, 0.2, 0.1]
    values = [block_efficiency(a, best_tree(a, b)) for b in range(30)]
    assert np.all(np.diff(values) >= -1e-12)
    big = best_tree(a, 128)
    assert len(big) == 128
    # the depth-independent programme agrees with the layered one (same rows at every depth)
    for budget in (20, 60):
        layered = best_tree(np.tile(a, (budget, 1)), budget)
        assert block_efficiency(a, layered) == pytest.approx(
            block_efficiency(a, best_tree(a, budget)), rel=1e-12
        )


# -- monotonicity and the bound ------------------------------------------------------------------


def test_adding_a_node_never_lowers_block_efficiency() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        width = int(rng.integers(1, 4))
        a = random_vector(rng, width) if rng.random() < 0.5 else random_vector(rng, width, 8)
        tree = random_tree(rng, int(rng.integers(0, 7)), width)
        base = block_efficiency(a, tree)
        nodes = {tuple(v) for v in tree}
        for parent in [(), *nodes]:
            k = sum(1 for v in nodes if len(v) == len(parent) + 1 and v[:-1] == parent)
            if k < width and len(parent) < 7:
                grown = [*tree, [*parent, k]]
                assert block_efficiency(a, grown) >= base - 1e-15


def test_bound_dominates_every_positional_vector() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        width = int(rng.integers(1, 5))
        tree = random_tree(rng, int(rng.integers(0, 12)), width)
        per_depth = rng.random() < 0.5
        a = random_vector(rng, width, rows=12) if per_depth else random_vector(rng, width)
        prefix = np.cumsum(np.atleast_2d(a), axis=-1)
        # any α*(k) >= Σ_{i<k} a_i, capped at 1
        stars = np.minimum(1.0, prefix + rng.random(prefix.shape) * 0.3 * (rng.random() < 0.7))
        stars = stars if per_depth else stars[0]
        assert bound_block_efficiency(stars, tree) >= block_efficiency(a, tree) - 1e-12
        # the tightest stars, α*(k) = Σ_{i<k} a_i (no slack), still bound the vector
        if not per_depth:
            exact = bound_block_efficiency(prefix[0], tree)
            assert exact >= block_efficiency(a, tree) - 1e-12


def test_bound_on_complete_trees_is_tight() -> None:
    rng = np.random.default_rng(5)
    for _ in range(20):
        a = random_vector(rng, 3)
        factors = [int(b) for b in rng.integers(1, 4, size=3)]
        tree = kary_tree(factors)
        stars = np.cumsum(a)
        assert bound_block_efficiency(stars, tree) == pytest.approx(block_efficiency(a, tree))


def test_bound_concentrates_on_the_largest_subtree() -> None:
    # root: 2 children (α*(2) = .9); [1] has the deeper subtree (chain of 2 under it)
    tree = [[0], [1], [1, 0], [1, 0, 0]]
    stars = [0.5, 0.9]
    expected = 1 + 0.9 * (1 + 0.5 * (1 + 0.5))
    assert bound_block_efficiency(stars, tree) == pytest.approx(expected)
    assert bound_block_efficiency(stars, []) == 1.0


# -- positional vectors of verifiers -------------------------------------------------------------


POSITIONAL_EXACT = ["rrs", "rrs_without_replacement", "single", "topk"]


@pytest.mark.parametrize("name", POSITIONAL_EXACT)
def test_exact_positional_matches_monte_carlo(name: str) -> None:
    # a fixed seed per verifier: str hashes change from process to process
    rng = np.random.default_rng([11, POSITIONAL_EXACT.index(name)])
    trials = 40_000
    for case in range(3):
        vocab = int(rng.integers(3, 7))
        p, q = small_pair(rng, vocab)
        width = min(3, vocab)
        exact = positional_acceptance(p, q, width, verifier=name)
        assert exact.method == "exact"
        v = get_verifier(name)
        assert exact.values.sum() == pytest.approx(v.acceptance(p, q, width), abs=1e-12)
        mc = positional_acceptance(
            p, q, width, trials=trials, seed=case, method="monte_carlo", verifier=name
        )
        assert mc.method == "monte_carlo"
        se = np.sqrt(np.maximum(exact.values * (1 - exact.values), 1e-6) / trials)
        assert np.all(np.abs(mc.values - exact.values) <= 4 * se), (mc.values, exact.values)
        # width-independent: the first entries at a larger width are the same
        if width < vocab:
            wider = positional_acceptance(p, q, width + 1, verifier=name)
            np.testing.assert_allclose(wider.values[:width], exact.values, atol=1e-12)


def kseq_positional_oracle(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """``P(the first draft equal to Y is draft k)`` for K-SEQ, by enumerating every draft tuple.

    From the definition: drafts i.i.d. from ``q``; each in turn accepted with probability
    ``min(1, p/(ρ q))``; after ``n`` rejections ``Y`` is drawn from ``∝ (p − min(q, p/ρ) c)⁺``.
    """
    rho = get_verifier("kseq").rho(p, q, n)
    take = np.minimum(q, p / rho)
    c = sum((1.0 - take.sum()) ** i for i in range(n))
    left = np.maximum(p - take * c, 0.0)
    left = left / left.sum() if left.sum() > 0 else p
    out = np.zeros(n)
    for x in itertools.product(np.flatnonzero(q > 0).tolist(), repeat=n):
        first = {y: x.index(y) for y in x}
        reach = float(np.prod(q[list(x)]))
        for y in x:
            accept = min(1.0, p[y] / (rho * q[y]))
            out[first[y]] += reach * accept
            reach *= 1.0 - accept
        for y, j in first.items():  # the residual lands on a draft
            out[j] += reach * left[y]
    return out


def spechub_positional_oracle(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``(P(Y = x_1), P(Y = x_2))`` for SpecHub, by enumerating the hub pairs (module steps 1-3)."""
    hub = int(np.argmax(q))
    off = np.arange(p.size) != hub
    r = np.where(off, q, 0.0) / q[off].sum()
    slack = np.maximum(r - p, 0.0)[off].sum()
    theta = p[hub] / slack if slack > 0 else 0.0
    left = np.where(off, np.maximum(p - r, 0.0), 0.0)
    left = left / left.sum() if left.sum() > 0 else left
    out = np.zeros(2)
    for i in np.flatnonzero(off & (q > 0)):
        keep = min(1.0, p[i] / r[i])
        to_i = keep + (1.0 - keep) * (1.0 - theta) * left[i]
        to_hub = (1.0 - keep) * theta
        out += q[i] * np.array([to_i, to_hub])  # drafts (i, hub)
        out += q[hub] * r[i] * np.array([to_hub, to_i])  # drafts (hub, i)
    return out


def oracle_pairs(rng: np.random.Generator, cases: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Small pairs: flat and spiky Dirichlet, zeros in p and q, p = q, disjoint supports."""
    pairs = [
        (np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])),
        (np.array([0.2, 0.5, 0.3]), np.array([0.2, 0.5, 0.3])),  # p = q: nothing rejected
        (np.array([0.0, 0.0, 0.6, 0.4]), np.array([0.7, 0.3, 0.0, 0.0])),  # β = 0
    ]
    for case in range(cases):
        vocab = int(rng.integers(2, 6))
        alpha = (1.0, 0.2)[case % 2]
        p, q = rng.dirichlet(np.full(vocab, alpha)), rng.dirichlet(np.full(vocab, alpha))
        if case % 3 == 0:
            p[int(rng.integers(vocab))] = 0.0
        if case % 4 == 1 and vocab > 2:
            q[int(rng.integers(vocab))] = 0.0
        pairs.append((p / p.sum(), q / q.sum()))
    return pairs


def test_kseq_positional_matches_enumeration() -> None:
    v = get_verifier("kseq")
    for p, q in oracle_pairs(np.random.default_rng(21), 30):
        for width in range(1, 5):
            exact = positional_acceptance(p, q, width, verifier="kseq")
            assert exact.method == "exact" and exact.trials == 0
            assert np.all(exact.stderr == 0.0)
            np.testing.assert_allclose(
                exact.values, kseq_positional_oracle(p, q, width), rtol=0, atol=1e-12
            )
            assert exact.values.sum() == pytest.approx(v.acceptance(p, q, width), abs=1e-12)


def test_spechub_positional_matches_enumeration() -> None:
    v = get_verifier("spechub")
    for p, q in oracle_pairs(np.random.default_rng(22), 30):
        if np.count_nonzero(q) < 2:
            continue
        exact = positional_acceptance(p, q, 2, verifier="spechub")
        assert exact.method == "exact" and exact.trials == 0
        np.testing.assert_allclose(exact.values, spechub_positional_oracle(p, q), atol=1e-12)
        assert exact.values.sum() == pytest.approx(v.acceptance(p, q, 2), abs=1e-12)


@pytest.mark.parametrize("name", ["kseq", "spechub"])
def test_own_positional_matches_monte_carlo(name: str) -> None:
    rng = np.random.default_rng([12, ("kseq", "spechub").index(name)])
    trials = 40_000
    widths = (2,) if name == "spechub" else (1, 2, 3, 4)
    for case in range(4):
        vocab = int(rng.integers(3, 9))
        alpha = (1.0, 0.2)[case % 2]  # flat and spiky
        p, q = rng.dirichlet(np.full(vocab, alpha)), rng.dirichlet(np.full(vocab, alpha))
        for width in widths:
            exact = positional_acceptance(p, q, width, method="exact", verifier=name)
            mc = positional_acceptance(
                p, q, width, trials=trials, seed=case, method="monte_carlo", verifier=name
            )
            assert mc.method == "monte_carlo"
            se = np.sqrt(np.maximum(exact.values * (1 - exact.values), 1e-6) / trials)
            assert np.all(np.abs(mc.values - exact.values) <= 4 * se), (mc.values, exact.values)


def test_kseq_positional_depends_on_width() -> None:
    # ρ* depends on n: the vector is not a prefix of the wider one, unlike rrs
    p, q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])
    two = positional_acceptance(p, q, 2, verifier="kseq").values
    three = positional_acceptance(p, q, 3, verifier="kseq").values
    assert np.abs(three[:2] - two).max() > 1e-3
    alphas = [get_verifier("kseq").acceptance(p, q, k) for k in (1, 2)]
    assert np.abs(np.diff([0.0, *alphas]) - two).max() > 1e-3  # differences of α are wrong


def test_positional_batch_is_the_mean_of_steps() -> None:
    rng = np.random.default_rng(2)
    pairs = [small_pair(rng, 5) for _ in range(4)]
    p = np.stack([a for a, _ in pairs])
    q = np.stack([b for _, b in pairs])
    batch = positional_acceptance(p, q, 3, verifier="rrs")
    each = [positional_acceptance(a, b, 3, verifier="rrs").values for a, b in pairs]
    np.testing.assert_allclose(batch.values, np.mean(each, axis=0), atol=1e-14)
    assert batch.steps == 4
    mc = positional_acceptance(p, q, 2, trials=20_000, seed=1, verifier="importance")
    assert mc.method == "monte_carlo" and mc.trials == 20_000
    assert mc.stderr.shape == (2,) and np.all(mc.stderr > 0)
    for name in ("kseq", "spechub"):  # width-dependent closed forms
        own = positional_acceptance(p, q, 2, verifier=name)
        assert own.method == "exact" and own.trials == 0
        steps = [positional_acceptance(a, b, 2, verifier=name).values for a, b in pairs]
        np.testing.assert_allclose(own.values, np.mean(steps, axis=0), atol=1e-14)
    # per-depth widths give a padded matrix
    rows = positional_acceptance(p, q, [3, 1], verifier="rrs")
    assert rows.values.shape == (2, 3)
    np.testing.assert_allclose(rows.values[0], batch.values)
    assert rows.values[1, 1:].sum() == 0.0


def test_greedy_exact_matches_monte_carlo() -> None:
    rng = np.random.default_rng(4)
    p, q = small_pair(rng, 6)
    exact = positional_acceptance(p, q, 3, verifier="greedy")
    assert exact.method == "exact"
    assert exact.values.sum() == pytest.approx(get_verifier("greedy").acceptance(p, q, 3))
    trials = 40_000
    mc = positional_acceptance(p, q, 3, trials=trials, method="monte_carlo", verifier="greedy")
    se = np.sqrt(np.maximum(exact.values * (1 - exact.values), 1e-6) / trials)
    assert np.all(np.abs(mc.values - exact.values) <= 4 * se)


def test_positional_errors() -> None:
    p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    with pytest.raises(ValueError, match="no exact positional"):
        positional_acceptance(p, q, 2, method="exact", verifier="importance")
    with pytest.raises(ValueError, match="method"):
        positional_acceptance(p, q, 2, method="fast", verifier="rrs")
    with pytest.raises(ValueError, match="n=2 only"):
        positional_acceptance(p, q, 3, trials=100, verifier="spechub")
    with pytest.raises(ValueError, match="support"):
        positional_acceptance(p, [0.5, 0.5, 0.0], 3, verifier="rrs_without_replacement")
    with pytest.raises(ValueError, match="width"):
        positional_acceptance(p, q, 0, verifier="rrs")
    with pytest.raises(ValueError, match="vocabulary size"):
        positional_acceptance(p, q, 4, verifier=get_verifier("optimal", design="topk"))
    assert "rrs" in EXACT_POSITIONAL and "kseq" not in EXACT_POSITIONAL


def test_bound_dominates_every_verifier() -> None:
    """Per-depth positional matrices on k-ary trees, every verifier, vs the design's α*."""
    rng = np.random.default_rng(9)
    p, q = small_pair(rng, 5)
    trials = 20_000
    for name in VERIFIERS:
        v = get_verifier(name)
        for factors in ([2, 2, 2], [3, 1], [1, 1, 1, 1]):
            if v.fixed_n is not None and any(b != v.fixed_n for b in factors):
                continue
            pa = positional_acceptance(p, q, factors, trials=trials, seed=3, verifier=v)
            tree = kary_tree(factors)
            widths = range(1, max(factors) + 1)
            stars = [
                optimal_acceptance(p, q, k, v.design) if (v.fixed_n in (None, k)) else 0.0
                for k in widths
            ]
            tokens = block_efficiency(pa, tree)
            bound = bound_block_efficiency(stars, tree)
            # Monte Carlo noise: 4 standard errors of each row sum, propagated to first order
            slack = 4 * float(np.sqrt((pa.stderr**2).sum())) * len(factors) * bound
            assert tokens <= bound + slack + 1e-12, (name, factors, tokens, bound)
            if pa.method == "exact" and name in ("greedy", "topk", "spechub"):
                assert tokens == pytest.approx(bound, rel=1e-9)  # they reach α*


# -- tables --------------------------------------------------------------------------------------


def test_predict_tokens_per_call() -> None:
    rng = np.random.default_rng(8)
    pairs = [small_pair(rng, 6) for _ in range(3)]
    p = np.stack([a for a, _ in pairs])
    q = np.stack([b for _, b in pairs])
    table = compare(p, q, n=[1, 2, 3], verifiers=["rrs", "rrs_without_replacement", "spechub"])
    trees = {"chain4": [1, 1, 1, 1], "binary3": [2, 2, 2], "wide": [3, 3]}
    out = predict_tokens_per_call(table, trees)
    assert list(out.columns[:2]) == ["design", "verifier"]
    assert len(out) == 3 * len(table[["design", "verifier"]].drop_duplicates())
    for _, row in out.iterrows():
        if row.design == "hub" and row.tree != "binary3":
            assert math.isnan(row.tokens_per_call)  # spechub has n = 2 only
            continue
        assert row.tokens_per_call <= row.bound_tokens_per_call + 1e-12
        if row.verifier == "bound":
            assert row.tokens_per_call == pytest.approx(row.bound_tokens_per_call)
    # the k-ary formula agrees with block_efficiency of the exact positional vectors
    rrs = out[(out.verifier == "rrs") & (out.tree == "binary3")].iloc[0]
    pa = positional_acceptance(p, q, 3, verifier="rrs")
    assert rrs.tokens_per_call == pytest.approx(block_efficiency(pa, kary_tree([2, 2, 2])))
    assert rrs.nodes == 14 and rrs.depth == 3 and rrs.steps == 3
    chain_row = out[(out.verifier == "rrs") & (out.tree == "chain4")].iloc[0]
    alpha = table[(table.verifier == "rrs") & (table.n == 1)].acceptance.mean()
    assert chain_row.tokens_per_call == pytest.approx((1 - alpha**5) / (1 - alpha))
    # a steps.parquet-like table: grouped by temperature as well
    t2 = pd.concat([table.assign(temperature=1.0), table.assign(temperature=0.5)])
    out2 = predict_tokens_per_call(t2, [[2, 2]])
    assert list(out2.columns[:3]) == ["temperature", "design", "verifier"]
    assert out2.tree.iloc[0] == "2x2"
    with pytest.raises(ValueError, match="per-depth branching"):
        predict_tokens_per_call(table, [2])
    with pytest.raises(ValueError, match="lacks the column"):
        predict_tokens_per_call(table.drop(columns="alpha_star"), [[2]])


def test_positional_acceptance_sums_to_the_verifiers_acceptance():
    """``.acceptance`` is the acceptance rate ``Σ_k a_k``: kseq's own positional closed form
    sums to its exact ``acceptance``, per depth for per-depth widths."""
    p, q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])
    kseq = get_verifier("kseq")
    one = positional_acceptance(p, q, 2, verifier=kseq)
    assert isinstance(one.acceptance, float)
    assert one.acceptance == pytest.approx(kseq.acceptance(p, q, 2), abs=1e-12)
    per_depth = positional_acceptance(p, q, [2, 1], verifier=kseq)
    want = [kseq.acceptance(p, q, 2), kseq.acceptance(p, q, 1)]
    np.testing.assert_allclose(per_depth.acceptance, want, rtol=0, atol=1e-12)
