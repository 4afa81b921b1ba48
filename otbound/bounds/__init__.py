"""Optimal acceptance rates: the exact sweep and the HiGHS linear programs."""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.bounds._highs import solve_lp
    from otbound.bounds._lp_status import LP_SLACK, LPError
    from otbound.bounds.dual import DualResult, solve_dual
    from otbound.bounds.primal import PrimalResult, solve_primal
    from otbound.bounds.reference import solve_primal_cvxpy
    from otbound.bounds.solvers import SWEEP, Solver
    from otbound.bounds.spechub import SpecHubLPResult, solve_spechub_lp
    from otbound.bounds.sweep import SweepResult, optimal_acceptance
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.bounds._highs": ("solve_lp",),
            "otbound.bounds._lp_status": ("LP_SLACK", "LPError"),
            "otbound.bounds.dual": ("DualResult", "solve_dual"),
            "otbound.bounds.primal": ("PrimalResult", "solve_primal"),
            "otbound.bounds.reference": ("solve_primal_cvxpy",),
            "otbound.bounds.solvers": ("SWEEP", "Solver"),
            "otbound.bounds.spechub": ("SpecHubLPResult", "solve_spechub_lp"),
            "otbound.bounds.sweep": ("SweepResult", "optimal_acceptance"),
        },
    )

__all__ = [
    "LP_SLACK",
    "SWEEP",
    "DualResult",
    "LPError",
    "PrimalResult",
    "Solver",
    "SpecHubLPResult",
    "SweepResult",
    "optimal_acceptance",
    "solve_dual",
    "solve_lp",
    "solve_primal",
    "solve_primal_cvxpy",
    "solve_spechub_lp",
]
