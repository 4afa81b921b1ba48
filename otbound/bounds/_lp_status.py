"""The tolerance and the error of otbound's linear programs, without HiGHS: what a caller that
checks an LP-like optimum (importance sampling's stage flows) needs, importable without
``highspy`` and ``scipy.sparse`` (:mod:`otbound.bounds._highs` solves with them;
:mod:`otbound.bounds` exports both)."""

from __future__ import annotations

#: HiGHS's primal and dual feasibility tolerances. Its default, 1e-7, lets a solution exceed
#: each bound by up to 1e-7, which over thousands of rows moves the optimum by 1e-6 (seen on the
#: compact SpecHub LP at V = 5,000); 1e-10 is the smallest value HiGHS accepts.
FEASIBILITY_TOLERANCE = 1e-10

#: How far a value taken from an LP solution (a plan cell ``≥ 0``, a row sum ``≤`` its cap, a
#: weight in ``[0, 1]``) may leave its range before it is an error rather than the solver's
#: feasibility tolerance plus rounding: such excesses are clipped, larger ones raise.
LP_SLACK = 10 * FEASIBILITY_TOLERANCE


class LPError(RuntimeError):
    """HiGHS did not report an optimal solution (the message carries its model status), or
    an exact solver's optimum was not certified."""
