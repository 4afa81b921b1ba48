"""The HiGHS linear programs (primal, dual, compact SpecHub) and the cvxpy reference.

Oracles (tests/oracles.py, independent of otbound): brute force over every subset ``H``
(``α* = 1 + min_H [p(H) − Q(H)]``, ``Q(H)`` summed from ordered draft tuples written from the
definitions) and POT's network simplex on the full tuple-by-token coupling; plus the closed
forms in docs/mathematics.md and the exact sweep.
"""

from __future__ import annotations

import threading

import highspy
import numpy as np
import oracles
import pytest
import scipy.sparse as sp

import otbound as ob
from otbound.bounds import _highs
from otbound.bounds import dual as dual_module
from otbound.bounds._highs import LPSolution, solve_lp
from otbound.bounds._lp_status import LPError
from otbound.bounds.dual import solve_dual
from otbound.bounds.primal import MAX_VARIABLES, solve_primal
from otbound.bounds.reference import solve_primal_cvxpy
from otbound.bounds.spechub import solve_spechub_lp

TOL = 1e-7  # LP values vs oracles (HiGHS's tolerances)
CASES_PER_DESIGN = 1000
KINDS = ("flat", "spiky", "disjoint", "tiny")


def _cases(gen, design: str, count: int, seed: int):
    return gen.cases(design, count, seed=seed + ob.DESIGNS.index(design), kinds=KINDS)


def _gap(case, design: str) -> np.ndarray:
    """``p(H) − Q(H)`` for every subset ``H`` (indexed by bit mask), from the oracle tuples."""
    probs = oracles.tuple_probs(design, case.q, case.n)
    vocab = case.p.size
    return oracles.subset_sum(case.p, vocab) - oracles.subset_mass(probs, vocab)


def _sweep_values(design: str, cases) -> np.ndarray:
    """The sweep for every case, batched over cases of equal (V, n)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault((case.p.size, case.n), []).append(i)
    out = np.empty(len(cases))
    for (_, n), index in groups.items():
        p = np.stack([cases[i].p for i in index])
        q = np.stack([cases[i].q for i in index])
        out[index] = ob.optimal_acceptance(p, q, n, design)
    return out


def _hub_closed_form(p, q) -> float:
    """``p_a + Σ_{i≠a} min(p_i, q_i / (1 − q_a))`` with ``a`` the first maximum of ``q``."""
    p, q = np.asarray(p), np.asarray(q)
    a = int(np.argmax(q))
    others = np.arange(p.size) != a
    return float(p[a] + np.minimum(p[others], q[others] / q[others].sum()).sum())


def _report(failures: list[str], total: int) -> str:
    return f"{len(failures)} of {total} cases failed; first ones:\n" + "\n".join(failures[:5])


# -- the main sweep: every design, 1,000 cases each ----------------------------------------------
@pytest.mark.parametrize("design", ob.DESIGNS)
def test_primal_and_dual_match_brute_force_and_sweep(design, gen):
    """Primal = dual = brute force; the dual's H certifies; the sweep agrees (per_slot: ≥)."""
    exact_sweep = ob.get_design(design).exact_sweep
    cases = _cases(gen, design, CASES_PER_DESIGN, seed=300)
    sweep = _sweep_values(design, cases)
    failures = []
    for case, swept in zip(cases, sweep, strict=True):
        gap = _gap(case, design)
        truth = 1.0 + float(gap.min())
        primal = solve_primal(case.p, case.q, case.n, design)
        dual = solve_dual(case.p, case.q, case.n, design)
        certified = 1.0 + float(gap[oracles.mask_of(np.flatnonzero(dual.H))])
        problems = []
        if primal.status != "Optimal" or dual.status != "Optimal":
            problems.append(f"status {primal.status}/{dual.status}")
        if not abs(primal.acceptance - truth) <= TOL:
            problems.append(f"primal {primal.acceptance!r} != brute force {truth!r}")
        if not abs(dual.acceptance - truth) <= TOL:
            problems.append(f"dual {dual.acceptance!r} != brute force {truth!r}")
        if not abs(certified - dual.acceptance) <= TOL:
            problems.append(f"dual H={np.flatnonzero(dual.H).tolist()} certifies {certified!r}")
        if exact_sweep and not abs(swept - primal.acceptance) <= TOL:
            problems.append(f"sweep {swept!r} != LP {primal.acceptance!r}")
        if not exact_sweep and not swept >= primal.acceptance - 1e-9:
            problems.append(f"sweep upper bound {swept!r} < LP {primal.acceptance!r}")
        if problems:
            failures.append(f"design={design} {case}: " + "; ".join(problems))
    assert not failures, _report(failures, len(cases))


@pytest.mark.parametrize("design", ob.DESIGNS)
def test_primal_plan_is_a_feasible_optimal_coupling(design, gen):
    cases = _cases(gen, design, 150, seed=700)
    failures = []
    for case in cases:
        p = case.p
        res = solve_primal(p, case.q, case.n, design)
        plan = res.plan.toarray()
        member = np.zeros(plan.shape, dtype=bool)
        rows, slots = np.nonzero(res.sets >= 0)
        member[rows, res.sets[rows, slots]] = True
        full = res.full_plan()
        checks = {
            "plan shape (m, V)": plan.shape == (res.sets.shape[0], p.size),
            "set_probs sum to one": abs(res.set_probs.sum() - 1.0) < 1e-12,
            "plan is non-negative": plan.min() >= 0.0,
            "plan lives on cells y ∈ S": not np.any(plan[~member]),
            "rows ≤ Q(S)": np.all(plan.sum(axis=1) <= res.set_probs + 1e-9),
            "columns ≤ p(y)": np.all(plan.sum(axis=0) <= p + 1e-9),
            "plan mass = acceptance": abs(plan.sum() - res.acceptance) < TOL,
            "full plan is non-negative": full.min() >= 0.0,
            "full plan rows = Q(S)": np.allclose(
                full.sum(axis=1), res.set_probs, rtol=0, atol=1e-9
            ),
            "full plan columns = p": np.allclose(full.sum(axis=0), p, rtol=0, atol=1e-9),
            "full plan membership mass = acceptance": abs(full[member].sum() - res.acceptance)
            < TOL,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            failures.append(f"design={design} {case}: {bad}")
    assert not failures, _report(failures, len(cases))


def test_primal_matches_pot(gen):
    """POT's exact OT optimum on the full tuple-by-token coupling (a different formulation)."""
    for design in ob.DESIGNS:
        for case in _cases(gen, design, 15, seed=1100):
            pot = oracles.pot_alpha(case.p, oracles.tuple_probs(design, case.q, case.n))
            got = solve_primal(case.p, case.q, case.n, design).acceptance
            assert got == pytest.approx(pot, abs=TOL), f"design={design} {case}"


def test_cvxpy_reference_matches_brute_force(gen):
    for design in ob.DESIGNS:
        for case in _cases(gen, design, 15, seed=1500):
            truth = 1.0 + float(_gap(case, design).min())
            got = solve_primal_cvxpy(case.p, case.q, case.n, design)
            assert got == pytest.approx(truth, abs=TOL), f"design={design} {case}"


def test_known_values():
    """docs/mathematics.md's example: sequential 0.99286, conditional Poisson 1.0, one draft
    1 − TV = 0.7."""
    p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    seq = solve_primal(p, q, 2, "without_replacement").acceptance
    assert seq == pytest.approx(0.99285714285714, abs=1e-10)
    assert solve_dual(p, q, 2, "conditional_poisson").acceptance == pytest.approx(1.0, abs=1e-12)
    one = solve_dual(p, q, 1)
    assert one.acceptance == pytest.approx(0.7, abs=1e-12)
    assert one.H.tolist() == [True, False, False]
    assert solve_primal_cvxpy(p, q, 1) == pytest.approx(0.7, abs=TOL)


def test_per_slot_lp_is_exact_where_the_sweep_is_only_an_upper_bound():
    """A per_slot case (found by random search) where no tried order finds the optimal H."""
    p = [0.564546055450597, 0.3713970536890572, 0.04283358587420909, 0.021223304986136563]
    q = [
        [0.49548728368138234, 0.5007956192852541, 0.00020547552292071361, 0.003511621510442789],
        [0.002465200447349759, 0.0021251409513072593, 0.0729009973631148, 0.9225086612382282],
    ]
    truth, _ = oracles.brute_alpha(p, oracles.tuple_probs("per_slot", q, 2))
    primal = solve_primal(p, q, 2, "per_slot")
    dual = solve_dual(p, q, 2, "per_slot")
    assert primal.acceptance == pytest.approx(truth, abs=TOL)
    assert dual.acceptance == pytest.approx(truth, abs=TOL)
    assert dual.H.tolist() == [False, True, False, True]
    assert ob.optimal_acceptance(p, q, 2, "per_slot") > primal.acceptance + 5e-3


# -- dual rounding -------------------------------------------------------------------------------
def test_dual_raises_when_the_rounded_set_misses_the_lp_value(monkeypatch):
    def off_by_a_bit(*args, **kwargs):
        sol = solve_lp(*args, **kwargs)
        return LPSolution(sol.x, sol.row_dual, sol.objective - 1e-3, sol.status, sol.message)

    monkeypatch.setattr(dual_module, "solve_lp", off_by_a_bit)
    with pytest.raises(LPError, match="threshold set"):
        solve_dual([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2)


def test_dual_rounds_a_fractional_u_by_thresholds(monkeypatch):
    """Rounding does not assume a 0/1 vertex: u = 0.8 / 0.1 still gives the optimal set."""
    p = np.array([0.3, 0.4, 0.3])

    def fractional(*args, **kwargs):
        sol = solve_lp(*args, **kwargs)
        x = sol.x.copy()
        u = x[x.size - p.size :]
        x[x.size - p.size :] = np.where(u > 0.5, 0.8, 0.1)
        return LPSolution(x, sol.row_dual, sol.objective, sol.status, sol.message)

    monkeypatch.setattr(dual_module, "solve_lp", fractional)
    res = solve_dual(p, [0.6, 0.3, 0.1], n=1)
    assert res.H.tolist() == [True, False, False]
    assert res.acceptance == pytest.approx(0.7, abs=1e-12)


# -- SpecHub -------------------------------------------------------------------------------------
def test_spechub_lp_matches_closed_form_and_set_lp(gen):
    cases = gen.cases("hub", 300, seed=1700, kinds=(*KINDS, "onehot", "near_uniform"))
    failures = []
    for case in cases:
        p, q = case.p, case.q
        res = solve_spechub_lp(p, q)
        closed = _hub_closed_form(p, q)
        set_lp = solve_primal(p, q, 2, "hub").acceptance
        a = res.hub
        pi = q / np.delete(q, a).sum()  # q_i / (1 − q_a) without cancellation
        flows = res.to_hub + res.to_other
        checks = {
            "optimal": res.status == "Optimal",
            "hub = first argmax": a == int(np.argmax(q)),
            "= closed form": abs(res.acceptance - closed) <= TOL,
            "= set LP": abs(res.acceptance - set_lp) <= TOL,
            "nothing at the hub": res.to_hub[a] == 0.0 and res.to_other[a] == 0.0,
            "non-negative": min(res.to_hub.min(), res.to_other.min()) >= 0.0,
            "pairs ≤ π": np.all(np.delete(flows - pi, a) <= 1e-9),
            "hub ≤ p_a": res.to_hub.sum() <= p[a] + 1e-9,
            "others ≤ p": np.all(res.to_other <= p + 1e-9),
            "flow = acceptance": abs(flows.sum() - res.acceptance) <= TOL,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            failures.append(f"{case}: {bad} ({res.acceptance!r}, {closed!r}, {set_lp!r})")
    assert not failures, _report(failures, len(cases))


def test_spechub_hub_ties_go_to_the_lower_id():
    p, q = [0.1, 0.2, 0.7], [0.2, 0.4, 0.4]
    res = solve_spechub_lp(p, q)
    assert res.hub == 1
    # Hub 1: 0.2 + min(0.1, 0.2/0.6) + min(0.7, 0.4/0.6); hub 2 would give 0.7 + 0.1 + 0.2 = 1.
    assert res.acceptance == pytest.approx(0.3 + 2 / 3, abs=1e-12)
    assert solve_primal(p, q, 2, "hub").acceptance == pytest.approx(0.3 + 2 / 3, abs=TOL)


def test_spechub_lp_at_a_large_vocabulary():
    rng = np.random.default_rng(0)
    vocab = 5000
    p, q = rng.dirichlet(np.full(vocab, 0.3)), rng.dirichlet(np.full(vocab, 0.3))
    res = solve_spechub_lp(p, q)  # its speed: benchmarks/bench_bounds.py
    assert res.status == "Optimal"
    assert res.acceptance == pytest.approx(_hub_closed_form(p, q), abs=TOL)
    assert res.acceptance == pytest.approx(ob.optimal_acceptance(p, q, 2, "hub"), abs=TOL)
    assert res.to_hub.shape == res.to_other.shape == (vocab,)


# -- tiny masses and the HiGHS wrapper -----------------------------------------------------------
@pytest.mark.parametrize("design", ["iid", "without_replacement", "per_slot"])
def test_tiny_marginals_solve_to_optimality(design):
    p = np.array([1e-12, 1e-12, 0.5, 0.3, 1e-12, 0.2 - 3e-12])
    q1 = np.array([0.4, 1e-12, 1e-12, 0.3, 0.3 - 3e-12, 1e-12])
    q = np.stack([q1, q1[::-1]]) if design == "per_slot" else q1
    truth, _ = oracles.brute_alpha(p, oracles.tuple_probs(design, q, 2))
    primal, dual = solve_primal(p, q, 2, design), solve_dual(p, q, 2, design)
    assert primal.status == dual.status == "Optimal"
    assert primal.acceptance == pytest.approx(truth, abs=TOL)
    assert dual.acceptance == pytest.approx(truth, abs=TOL)


def test_highs_runs_silent_without_presolve(monkeypatch):
    options = {}

    class Spy(highspy.Highs):
        def setOptionValue(self, name, value):
            options[name] = value
            return super().setOptionValue(name, value)

    monkeypatch.setattr(_highs.highspy, "Highs", Spy)
    monkeypatch.setattr(_highs, "_solvers", threading.local())  # build this thread's anew
    assert solve_primal([0.5, 0.5], [0.9, 0.1], n=1).acceptance == pytest.approx(0.6)
    assert options.get("presolve") == "off"
    assert options.get("output_flag") is False


def test_solve_lp_raises_on_every_non_optimal_status():
    A = sp.csr_array(np.array([[1.0, 1.0], [1.0, 0.0]]))
    assert issubclass(LPError, RuntimeError)
    with pytest.raises(LPError, match="Infeasible"):
        solve_lp([1.0, 1.0], A, [2.0, -np.inf], [1.0, 0.3])
    with pytest.raises(LPError, match="Unbounded"):
        solve_lp([1.0, 1.0], A, -np.inf, np.inf, maximize=True)
    sol = solve_lp([1.0, 2.0], A, -np.inf, [1.0, 0.3], maximize=True)
    assert sol.status == "Optimal"
    assert sol.objective == pytest.approx(2.0)
    np.testing.assert_allclose(sol.x, [0.0, 1.0], atol=1e-12)


# -- bad input -----------------------------------------------------------------------------------
SET_SOLVERS = [solve_primal, solve_dual, solve_primal_cvxpy]


@pytest.mark.parametrize("solver", [*SET_SOLVERS, solve_spechub_lp])
def test_nan_in_p_is_rejected(solver):
    with pytest.raises(ValueError, match=r"^p contains NaN"):
        solver([np.nan, 0.5, 0.5], [0.2, 0.3, 0.5])


@pytest.mark.parametrize("solver", SET_SOLVERS)
def test_unknown_design_lists_valid_designs(solver):
    with pytest.raises(ValueError, match="unknown design 'iidd'") as info:
        solver([0.5, 0.5], [0.5, 0.5], 2, "iidd")
    for name in ob.DESIGNS:
        assert name in str(info.value)


@pytest.mark.parametrize("solver", [solve_primal, solve_dual])
def test_batched_input_is_rejected(solver):
    with pytest.raises(ValueError, match="one step"):
        solver([[0.5, 0.5], [0.1, 0.9]], [0.5, 0.5])
    with pytest.raises(ValueError, match="one step"):
        solver([0.5, 0.5], [[[0.5, 0.5], [0.1, 0.9]]], 2, "per_slot")


def test_spechub_batched_input_is_rejected():
    with pytest.raises(ValueError, match="one step"):
        solve_spechub_lp([[0.5, 0.5]], [0.5, 0.5])


@pytest.mark.parametrize("solver", [solve_primal, solve_dual])
def test_size_guard_names_vocabulary_and_n(solver, monkeypatch):
    vocab = 3000
    assert 2 * vocab**2 > MAX_VARIABLES
    p = np.full(vocab, 1.0 / vocab)
    iid = type(ob.get_design("iid"))

    def enumerate_tuples(*args, **kwargs):
        raise AssertionError("the 9e6 draft tuples were enumerated before the size was refused")

    with monkeypatch.context() as patch:  # refused before any draft tuple is enumerated
        patch.setattr(iid, "set_support", enumerate_tuples)
        patch.setattr(iid, "tuple_support", enumerate_tuples)
        with pytest.raises(ValueError, match=r"V=3000, n=2.*optimal_acceptance"):
            solver(p, p, 2, "iid")
    # The designs with O(V) draft tuples are not refused at that size.
    assert solver(p, p, 2, "greedy").acceptance == pytest.approx(1.0, abs=TOL)


def test_design_constraints_and_normalize():
    with pytest.raises(ValueError, match="n=2 only"):
        solve_primal([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 3, "hub")
    with pytest.raises(ValueError, match="support of q"):
        solve_dual([0.5, 0.3, 0.2], [1.0, 0.0, 0.0], 2, "without_replacement")
    with pytest.raises(ValueError, match="one draft distribution per slot"):
        solve_primal([0.5, 0.5], [[0.5, 0.5]] * 3, 2, "per_slot")
    with pytest.raises(ValueError, match="support of q"):
        solve_spechub_lp([0.5, 0.5], [1.0, 0.0])
    with pytest.raises(ValueError, match="sum to 1"):
        solve_primal([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(ValueError, match="n must be an integer"):
        solve_dual([0.5, 0.5], [0.5, 0.5], 0)
    got = solve_primal([1.0, 1.0], [3.0, 1.0], 1, normalize=True).acceptance
    assert got == pytest.approx(0.75, abs=TOL)


# -- every LP goes through the wrapper -----------------------------------------------------------


def test_no_linear_program_bypasses_the_highs_wrapper():
    """``linprog`` (HiGHS's default 1e-7 tolerances, its status left to the caller) or a
    direct ``highspy`` model anywhere but ``otbound/bounds/_highs.py`` is a bypass."""
    import pathlib
    import re

    root = pathlib.Path(ob.__file__).parent
    pattern = re.compile(r"\blinprog\b|\bmilp\b|^\s*(import highspy|from highspy)", re.MULTILINE)
    offenders = [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if path.name != "_highs.py" and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"LPs solved outside otbound/bounds/_highs.py: {offenders}"


def test_column_matrix_entry_gives_the_scipy_entry_bits():
    """An LP passed as a :class:`ColumnMatrix` is the one passed as a scipy array, bit for
    bit (``solve_lp`` turns the latter into the former)."""
    from otbound.bounds._highs import ColumnMatrix

    rng = np.random.default_rng(41)
    dense = rng.random((6, 14)) * (rng.random((6, 14)) < 0.5)
    cost, upper = rng.random(14), rng.random(6) + 0.5
    matrix = sp.csc_array(dense)
    columns = solve_lp(cost, ColumnMatrix.of(matrix), -np.inf, upper, 0.0, 1.0, maximize=True)
    scipy_entry = solve_lp(cost, matrix, -np.inf, upper, 0.0, 1.0, maximize=True)
    assert np.array_equal(columns.x, scipy_entry.x)
    assert columns.objective == scipy_entry.objective > 0.0


def test_solve_lp_names_a_malformed_column_matrix():
    from otbound.bounds._highs import ColumnMatrix

    start = np.array([0, 1, 2], dtype=np.int32)
    index = np.array([0, 0], dtype=np.int32)
    good = ColumnMatrix(start, index, np.array([1.0, 1.0]), 1)
    assert solve_lp([1.0, 1.0], good, -np.inf, 1.0, maximize=True).objective == 1.0
    with pytest.raises(ValueError, match="int32 starts and indices"):
        wide = ColumnMatrix(start.astype(np.int64), index, good.value, 1)
        solve_lp([1.0, 1.0], wide, 0.0, 1.0)
    with pytest.raises(ValueError, match="begin with 0"):
        solve_lp([1.0, 1.0], ColumnMatrix(start[:0], index, good.value, 1), 0.0, 1.0)
    with pytest.raises(ValueError, match=r"row index outside \[0, 1\)"):
        solve_lp([1.0, 1.0], ColumnMatrix(start, index + 1, good.value, 1), 0.0, 1.0)
    twice = ColumnMatrix(np.array([0, 2], dtype=np.int32), index, good.value, 1)
    with pytest.raises(ValueError, match="increase within each column"):
        solve_lp([1.0], twice, 0.0, 1.0)
    with pytest.raises(ValueError, match="2 indices and 1 values"):
        solve_lp([1.0, 1.0], ColumnMatrix(start, index, np.array([1.0]), 1), 0.0, 1.0)
    with pytest.raises(ValueError, match="cost must have shape"):
        solve_lp([1.0], good, 0.0, 1.0)


def test_the_kept_highs_instance_solves_as_a_new_one(monkeypatch):
    """:func:`solve_lp` reuses one ``Highs`` a thread: an LP solved after others (of other
    sizes and tolerances) gives the bits a fresh instance gives, and another thread gets its
    own instance."""
    rng = np.random.default_rng(3)
    problems = []
    for size in (3, 7, 4):
        a = sp.csr_array(rng.random((size, size + 2)))
        problems.append((-rng.random(size + 2), a, np.zeros(size), np.ones(size)))
    first = [solve_lp(*lp, col_upper=1.0) for lp in problems]
    solve_lp(*problems[1], col_upper=1.0, tolerance=1e-9)
    assert _highs._solver(1e-9).getOptionValue("primal_feasibility_tolerance")[1] == 1e-9
    again = [solve_lp(*lp, col_upper=1.0) for lp in problems]
    for option in ("primal_feasibility_tolerance", "dual_feasibility_tolerance"):
        value = _highs._solver(_highs.FEASIBILITY_TOLERANCE).getOptionValue(option)[1]
        assert value == _highs.FEASIBILITY_TOLERANCE, option  # set back after the 1e-9 solve
    monkeypatch.setattr(_highs, "_solvers", threading.local())
    fresh = [solve_lp(*lp, col_upper=1.0) for lp in problems]
    for x, y, z in zip(first, again, fresh, strict=True):
        assert np.array_equal(x.x, y.x) and np.array_equal(x.x, z.x)
        assert x.objective == y.objective == z.objective
    seen = []
    worker = threading.Thread(target=lambda: seen.append(_highs._solver(1e-10)))
    worker.start()
    worker.join()
    assert seen[0] is not _highs._solver(1e-10)
