r"""The set LP written in cvxpy: the reference formulation for the docs, and a test oracle.

.. math::

    α^* = \max_{C ≥ 0} \sum_{S}\sum_{y∈S} C[S, y]
    \quad\text{s.t.}\quad \sum_{y∈S} C[S, y] ≤ Q(S),\qquad \sum_{S∋y} C[S, y] ≤ p(y).

:func:`otbound.solve_primal` solves the same LP through the HiGHS wrapper directly (faster,
and it returns the plan); this version is for reading and cross-checking. cvxpy is imported
when the function runs: it takes about half a second to import, which ``import otbound``
does not pay.
"""

from __future__ import annotations

from otbound._checks import clip_rounding
from otbound.bounds._lp_status import LP_SLACK, LPError
from otbound.bounds.primal import set_problem
from otbound.drafts import DraftDesign


def solve_primal_cvxpy(
    p: object, q: object, n: int = 2, design: str | DraftDesign = "iid"
) -> float:
    """``α*`` by the set LP in cvxpy (HiGHS backend, presolve off).

    Parameters
    ----------
    p : array_like, shape (V,)
    q : array_like, shape (V,), or (n, V) for ``design="per_slot"``
    n : int, default 2
    design : str or DraftDesign, default "iid"

    Returns
    -------
    float
        The optimal acceptance rate.

    Raises
    ------
    ValueError
        Invalid inputs (as :func:`otbound.solve_primal`).
    otbound.LPError
        cvxpy did not report an optimal solution.

    Examples
    --------
    >>> from otbound.bounds.reference import solve_primal_cvxpy
    >>> round(solve_primal_cvxpy([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=1), 6)
    0.7
    """
    import cvxpy as cp

    prob = set_problem(p, q, n, design, caller="solve_primal_cvxpy")
    m = prob.sets.shape[0]
    incidence = prob.incidence()  # rows: the m sets, then the V tokens; columns: cells y ∈ S
    plan = cp.Variable(prob.cell_set.size, nonneg=True)  # C[S, y] for the cells y ∈ S
    problem = cp.Problem(
        cp.Maximize(cp.sum(plan)),  # type: ignore[attr-defined]
        [
            incidence[:m] @ plan <= prob.set_probs,  # each set S sends at most Q(S)
            incidence[m:] @ plan <= prob.p,  # each token y receives at most p(y)
        ],
    )
    problem.solve(solver=cp.HIGHS, presolve="off")  # type: ignore[no-untyped-call]
    if problem.status != cp.OPTIMAL:
        raise LPError(f"solve_primal_cvxpy: cvxpy status {problem.status!r}, not optimal")
    return float(clip_rounding(problem.value, 0.0, 1.0, "solve_primal_cvxpy: α*", tol=LP_SLACK))
