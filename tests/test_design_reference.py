"""Each design's reference formula (:mod:`otbound.drafts.reference`) against brute force, and
the speed layer (the compiled sweep of ``optimal_acceptance``, the torch sweep) against the
reference.

Tolerances, and why:

* against enumeration with plain floats (``oracles.brute_alpha``), 1e-13: both sides sum at
  most a few hundred terms, each to rounding;
* against enumeration in log space (masses down to 1e-300), 1e-12: the oracle sums logs near
  −690 with ``math.fsum`` and exponentiates, which leaves about 1e-13 of its own;
* speed layer against reference, 1e-12 at ``V`` up to 4096: both take sums of up to ``V``
  non-negative terms of total at most 1 in different orders (``V ε ≈ 9e-13`` apart at
  worst, about ``√V ε`` in practice), and the compiled without-replacement integral's own
  error is below 1e-12 (:mod:`otbound.drafts._sequential_mass`); the reference's integral
  is within 1e-14 (checked here).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import oracles
import pytest

import otbound as ob
from otbound.drafts import DESIGNS, get_design
from otbound.drafts.reference import (
    REFERENCES,
    conditional_poisson_prefix_mass,
    iid_alpha_star,
    reference_alpha_star,
    without_replacement_prefix_mass,
)

BRUTE_TOL = 1e-13
LOG_BRUTE_TOL = 1e-12
TOL = 1e-12

#: The designs whose sweep gives the exact α* (the others: an upper bound).
EXACT = tuple(d for d in DESIGNS if get_design(d).exact_sweep)
#: The designs with one draft distribution (the large rows below).
SINGLE = tuple(d for d in DESIGNS if not get_design(d).slot_axis)


def _normalised(x: np.ndarray) -> np.ndarray:
    return x / x.sum(axis=-1, keepdims=True)


def _small_cases(design: str, count: int, seed: int, smallest: float = 1e-3):
    """``count`` (p, q, n) with ``V ≤ 7`` that the design accepts; masses log-uniform down to
    ``smallest`` on every third row, Dirichlet (flat, then spiky) on the others."""
    spec = get_design(design)
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        vocab = int(rng.integers(2, 8))
        n = spec.fixed_n or int(rng.integers(1, min(vocab, 4) + 1))
        shape = (n, vocab) if spec.slot_axis else (vocab,)
        if len(out) % 3 == 0:
            p = _normalised(10.0 ** rng.uniform(np.log10(smallest), 0, vocab))
            q = _normalised(10.0 ** rng.uniform(np.log10(smallest), 0, shape))
        else:
            alpha = [1.0, 0.2][len(out) % 2]
            p = _normalised(rng.dirichlet(np.full(vocab, alpha)))
            q = _normalised(rng.dirichlet(np.full(vocab, alpha), size=shape[:-1] or None))
        if np.all(spec.unusable(q, n) == ""):
            out.append((p, q, n))
    return out


def _agrees_with_brute(design: str, reference: float, brute: float, tol: float) -> bool:
    """Equal for an exact design; for ``per_slot`` (an upper bound) not below the minimum."""
    if get_design(design).exact_sweep:
        return abs(reference - brute) < tol
    return reference >= brute - tol


# -- the reference against enumeration -------------------------------------------------------


def test_every_design_has_a_reference():
    assert set(REFERENCES) == set(DESIGNS)


@pytest.mark.parametrize("design", DESIGNS)
def test_reference_equals_brute_force_enumeration(design):
    """``1 + min over all 2^V subsets of [p(H) − Q(H)]``, ``Q`` summed over the tuples of
    ``tests/oracles.py`` (written from the definitions)."""
    for p, q, n in _small_cases(design, 40, seed=11):
        brute, _ = oracles.brute_alpha(p, oracles.tuple_probs(design, q, n))
        got = reference_alpha_star(p, q, n, design)
        assert _agrees_with_brute(design, got, brute, BRUTE_TOL), (design, p, q, n, got, brute)


@pytest.mark.parametrize("design", DESIGNS)
def test_reference_equals_log_space_enumeration_down_to_1e300(design):
    """Masses down to 1e-300, where products of masses underflow: the oracle in log space."""
    for p, q, n in _small_cases(design, 20, seed=12, smallest=1e-300):
        brute, _ = oracles.log_brute_alpha(p, oracles.log_tuple_probs(design, q, n))
        got = reference_alpha_star(p, q, n, design)
        assert _agrees_with_brute(design, got, brute, LOG_BRUTE_TOL), (design, q, n, got, brute)


def test_per_slot_reference_is_exact_where_the_slots_agree():
    """Every slot with the same ``q`` is the iid design: the bound is then α* itself."""
    for p, q, n in _small_cases("iid", 20, seed=13):
        slots = np.tile(q, (n, 1))
        brute, _ = oracles.brute_alpha(p, oracles.tuple_probs("per_slot", slots, n))
        assert abs(reference_alpha_star(p, slots, n, "per_slot") - brute) < BRUTE_TOL
        assert abs(iid_alpha_star(p, q, n) - brute) < BRUTE_TOL


def test_without_replacement_integral_meets_the_pair_formula_and_converges():
    """At ``V = 4096``, out of enumeration's reach: ``n = 2`` has the closed form
    ``Q(H) = q(H) Σ_{x∈H} q_x/(1−q_x) − Σ_{x∈H} q_x²/(1−q_x)``, and halving the step moves no
    ``Q`` (the discretisation error) for any ``n``."""
    rng = np.random.default_rng(14)
    rows = [
        _normalised(rng.dirichlet(np.ones(4096))),
        _normalised(10.0 ** rng.uniform(-300, 0, 4096)),
        _normalised(rng.dirichlet(np.full(512, 0.05))),
    ]
    for q in rows:  # Q along any order: the rows as drawn
        if q.max() < 0.5:  # the closed form cancels where some 1 − q_x is small
            held = np.cumsum(q)
            pair = held * np.cumsum(q / (1 - q)) - np.cumsum(q * q / (1 - q))
            got = without_replacement_prefix_mass(q, 2)
            np.testing.assert_allclose(got, np.concatenate([[0.0], pair]), rtol=0, atol=1e-14)
        for n in (2, 5, 8):
            coarse = without_replacement_prefix_mass(q, n)
            fine = without_replacement_prefix_mass(q, n, step=0.05)
            np.testing.assert_allclose(coarse, fine, rtol=0, atol=1e-14)


def _exact_elementary(q: list[Fraction], n: int) -> Fraction:
    """``e_n`` of exact fractions by the same recursion, no rounding."""
    e = [Fraction(1)] + [Fraction(0)] * n
    for x in q:
        for k in range(n, 0, -1):
            e[k] += x * e[k - 1]
    return e[n]


def test_conditional_poisson_scaled_recursion_keeps_masses_down_to_1e300():
    """``e_8`` of masses near 1e-300 is near 1e-2400, far below the smallest float: the scaled
    recursion still gives every prefix's ratio to a relative 1e-13 (exact fractions)."""
    rng = np.random.default_rng(15)
    q = _normalised(np.concatenate([[1.0, 0.5], 10.0 ** rng.uniform(-300, -290, 10)]))
    for n in (3, 8):
        got = conditional_poisson_prefix_mass(q, n)
        exact = [Fraction(float(x)) for x in q]
        whole = _exact_elementary(exact, n)
        for i in range(q.size + 1):
            want = float(_exact_elementary(exact[:i], n) / whole)
            assert abs(got[i] - want) <= 1e-13 * want, (n, i, got[i], want)
        assert np.all(got[n:] > 0)  # no prefix of n positive masses rounds to 0


# -- the speed layer against the reference ---------------------------------------------------


def _large_rows(vocab: int, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Random and extreme (kind, p, q) rows: flat, spiky, masses down to 1e-300, p = q,
    disjoint supports, ties (masses in {1, 2, 3} before normalising)."""
    rng = np.random.default_rng(seed)
    half = np.arange(vocab) < vocab // 2
    same = _normalised(rng.dirichlet(np.ones(vocab)))
    draws = {
        "flat": lambda: rng.dirichlet(np.ones(vocab)),
        "spiky": lambda: rng.dirichlet(np.full(vocab, 0.1)),
        "extreme": lambda: 10.0 ** rng.uniform(-300, 0, vocab),
        "ties": lambda: rng.integers(1, 4, vocab).astype(float),
    }
    rows = [(kind, _normalised(draw()), _normalised(draw())) for kind, draw in draws.items()]
    apart = _normalised(np.where(half, rng.random(vocab), 0.0))
    return [*rows, ("equal", same, same.copy()), ("disjoint", apart, apart[::-1].copy())]


def _speed_cases(design: str) -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """(kind, p, q, n) at ``V`` = 9, 300 and 4096 for every kind, ``n`` in {1, 2, 3, 8} (2 for
    ``hub``), where the design can draw them."""
    spec = get_design(design)
    out = []
    for vocab, seed in ((9, 21), (300, 22), (4096, 23)):
        for kind, p, q in _large_rows(vocab, seed):
            for n in (spec.fixed_n,) if spec.fixed_n else (1, 2, 3, 8):
                if np.all(spec.unusable(q, n) == ""):
                    out.append((f"{kind} V={vocab} n={n}", p, q, n))
    return out


@functools.cache
def _references(design: str) -> tuple[float, ...]:
    """The reference of every speed case (computed once for the two speed layers)."""
    return tuple(reference_alpha_star(p, q, n, design) for _, p, q, n in _speed_cases(design))


@pytest.mark.parametrize("design", SINGLE)
def test_compiled_sweep_equals_the_reference(design):
    cases = _speed_cases(design)
    for (label, p, q, n), want in zip(cases, _references(design), strict=True):
        got = ob.optimal_acceptance(p, q, n=n, design=design)
        assert abs(got - want) < TOL, (design, label, got, want)


@pytest.mark.parametrize("design", SINGLE)
def test_torch_sweep_equals_the_reference(design):
    torch_sweep = pytest.importorskip("otbound.bounds.torch_sweep")
    cases = _speed_cases(design)
    for (label, p, q, n), want in zip(cases, _references(design), strict=True):
        got = float(torch_sweep.optimal_acceptance_torch(p, q, n=n, design=design))
        assert abs(got - want) < TOL, (design, label, got, want)


def test_per_slot_sweep_equals_the_reference():
    """``per_slot``'s sweep (numpy, no torch sweep) returns the same upper bound, on rows
    without ties (tied ratios leave the order among them, hence the bound, open)."""
    rng = np.random.default_rng(24)
    for vocab in (9, 300, 2048):
        for n in (1, 2, 3):
            p = _normalised(rng.dirichlet(np.ones(vocab)))
            q = _normalised(10.0 ** rng.uniform(-300, 0, (n, vocab)))
            want = reference_alpha_star(p, q, n, "per_slot")
            got = ob.optimal_acceptance(p, q, n=n, design="per_slot")
            assert abs(got - want) < TOL, (vocab, n, got, want)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([0.5, 0.5], [0.5, 0.5], 2, "nope"), "has no reference formula"),
        (([0.5, 0.5], [1.0, 0.0], 2, "without_replacement"), "larger than the support"),
        (([0.5, 0.5], [0.5, 0.5], 3, "hub"), "n=2 only"),
        (([[0.5, 0.5]], [0.5, 0.5], 1, "iid"), "one step"),
        (([0.5, 0.5], [0.2, 0.3, 0.5], 1, "iid"), "same vocabulary"),
        (([0.5, 0.5], [0.5, 0.5], 0, "iid"), "n must be"),
        (([0.5, 0.6], [0.5, 0.5], 1, "iid"), "p"),
    ],
)
def test_reference_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        reference_alpha_star(*args)


def test_reference_takes_a_design_object():
    p, q = np.array([0.3, 0.4, 0.3]), np.array([0.6, 0.3, 0.1])
    assert reference_alpha_star(p, q, 2, get_design("greedy")) == reference_alpha_star(
        p, q, 2, "greedy"
    )
    assert round(reference_alpha_star(p, q, 2, "without_replacement"), 5) == 0.99286


@pytest.mark.parametrize("n", [16, 30, 60])
def test_without_replacement_keeps_its_accuracy_at_many_drafts(n):
    """The clock integral's peak narrows as ``1/√n``: the compiled sweep (one ``n`` and
    several at once) and the torch sweep equal the reference at a fine step (0.05, converged)
    to 1e-12 (a fixed step of 0.2 was off by 2e-12, 3e-9 and 4e-7 at these ``n``)."""
    from otbound.bounds.sweep import optimal_acceptance_by_n
    from otbound.drafts.reference import without_replacement_alpha_star

    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.full(200, 0.3)), rng.dirichlet(np.full(200, 0.3))
    want = without_replacement_alpha_star(p, q, n, 0.05)
    got = ob.optimal_acceptance(p, q, n=n, design="without_replacement")
    assert abs(got - want) < 1e-12
    together = optimal_acceptance_by_n(p, q, [2, n], "without_replacement")
    assert abs(float(together[-1]) - want) < 1e-12
    torch_sweep = pytest.importorskip("otbound.bounds.torch_sweep")
    on_torch = torch_sweep.optimal_acceptance_torch(p, q, n=n, design="without_replacement")
    assert abs(float(on_torch) - want) < 1e-12
