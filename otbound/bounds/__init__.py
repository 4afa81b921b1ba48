"""Optimal acceptance rates: the exact sweep and the HiGHS linear programs."""

from otbound.bounds.sweep import SweepResult, optimal_acceptance

__all__ = ["SweepResult", "optimal_acceptance"]
