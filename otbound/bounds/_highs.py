r"""The one wrapper around HiGHS (``highspy``) that every otbound linear program goes through.

It solves

.. math::

    \max \text{ or } \min\; c^\top x \quad\text{s.t.}\quad
    r_\ell ≤ A x ≤ r_u,\qquad x_\ell ≤ x ≤ x_u

with the dual simplex method, **presolve off** (HiGHS presolve has reported feasible transport
LPs with tiny marginals "Infeasible") and output silenced. The model status is always
checked: anything but ``Optimal`` raises :class:`LPError`; no value from a non-optimal solve
is ever returned.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import highspy
import numpy as np
import scipy.sparse as sp

from otbound.bounds._lp_status import FEASIBILITY_TOLERANCE, LPError

_banner_shown = False


@contextlib.contextmanager
def _stdout_silenced() -> Iterator[None]:
    """Point file descriptor 1 at ``/dev/null`` (HiGHS prints its banner from C++)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _new_highs() -> highspy.Highs:
    """A ``Highs`` instance; the first one's copyright banner (printed by HiGHS's C++ on
    construction, whatever ``output_flag`` says) is kept off the user's terminal."""
    global _banner_shown
    if _banner_shown:
        return highspy.Highs()  # type: ignore[no-untyped-call]
    with _stdout_silenced():
        highs = highspy.Highs()  # type: ignore[no-untyped-call]
    _banner_shown = True
    return highs


_solvers = threading.local()


def _solver(tolerance: float) -> highspy.Highs:
    """This thread's ``Highs`` instance with :func:`solve_lp`'s options and no model.

    Building one costs about as much as solving a small LP (the importance-sampling stages
    solve thousands), so each thread keeps one: ``clearModel`` drops the previous model,
    its solution and its basis, so a solve starts cold as on a new instance."""
    highs = getattr(_solvers, "highs", None)
    if highs is None:
        highs = _new_highs()
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("presolve", "off")
        highs.setOptionValue("solver", "simplex")
        _solvers.highs = highs
    else:
        highs.clearModel()
    if getattr(_solvers, "tolerance", None) != tolerance:
        highs.setOptionValue("primal_feasibility_tolerance", tolerance)
        highs.setOptionValue("dual_feasibility_tolerance", tolerance)
        _solvers.tolerance = tolerance
    return highs


@dataclass(frozen=True)
class LPSolution:
    """An optimal solution of :func:`solve_lp`.

    Attributes
    ----------
    x : numpy.ndarray, shape (num_cols,)
        Optimal primal values.
    row_dual : numpy.ndarray, shape (num_rows,)
        Row duals as HiGHS reports them.
    objective : float
        ``c @ x`` at the optimum.
    status : str
        HiGHS's model status string (always ``"Optimal"``).
    message : str
        Solver, version, status and iteration count, for logs.
    """

    x: np.ndarray
    row_dual: np.ndarray
    objective: float
    status: str
    message: str


#: Whether HiGHS's infinity is ``inf`` itself (then a bound needs no clipping to it).
_HIGHS_INF_IS_INF = highspy.kHighsInf == math.inf


def _bounds(values: object, size: int, name: str) -> np.ndarray:
    """A float64 bound vector of length ``size`` (``±inf`` become HiGHS's infinity)."""
    if isinstance(values, float | int) and not isinstance(values, bool):
        value = float(values)
        if math.isnan(value):
            raise ValueError(f"{name} contains NaN")
        if not _HIGHS_INF_IS_INF:
            value = min(max(value, -highspy.kHighsInf), highspy.kHighsInf)
        return np.full(size, value)
    if isinstance(values, np.ndarray) and values.shape == (size,):
        arr = values.astype(np.float64)  # a copy of its own
    else:
        arr = np.array(np.broadcast_to(np.asarray(values, dtype=np.float64), (size,)))
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if not _HIGHS_INF_IS_INF:
        arr = np.clip(arr, -highspy.kHighsInf, highspy.kHighsInf)
    return arr


@dataclass(frozen=True, eq=False)
class ColumnMatrix:
    """A constraint matrix in the column-wise form HiGHS takes (CSC without duplicates), for
    :func:`solve_lp` without a scipy object to build and convert (for a caller that solves
    many small LPs of one fixed pattern; :func:`solve_lp` turns a scipy matrix into one).

    Attributes
    ----------
    start : numpy.ndarray of int32, shape (num_cols + 1,)
        Where each column's entries start in ``index`` and ``value``.
    index : numpy.ndarray of int32
        The row of each entry, increasing within a column.
    value : numpy.ndarray of float64
        The entries.
    num_rows : int
    """

    start: np.ndarray
    index: np.ndarray
    value: np.ndarray
    num_rows: int

    @classmethod
    def of(cls, matrix: sp.sparray | sp.spmatrix) -> ColumnMatrix:
        """The column-wise form of a scipy sparse matrix (duplicates summed)."""
        csc = sp.csc_array(matrix)
        csc.sum_duplicates()
        return cls(
            start=csc.indptr.astype(np.int32),
            index=csc.indices.astype(np.int32),
            value=csc.data.astype(np.float64),
            num_rows=csc.shape[0],
        )


def _check_columns(A: ColumnMatrix) -> None:
    """Raise ``ValueError``, in words, where ``A`` is not a column-wise matrix HiGHS takes."""
    if A.start.dtype != np.int32 or A.index.dtype != np.int32 or A.value.dtype != np.float64:
        raise ValueError(
            "the column-wise matrix must hold int32 starts and indices and float64 values"
        )
    if A.start.ndim != 1 or A.start.size == 0 or A.start[0] != 0:
        raise ValueError("the column-wise matrix's starts must begin with 0 (one per column + 1)")
    if A.index.size != A.value.size or A.start[-1] != A.value.size:
        raise ValueError(
            f"the column-wise matrix has {A.index.size} indices and {A.value.size} values for "
            f"{int(A.start[-1])} entries"
        )
    lengths = np.diff(A.start)
    if np.any(lengths < 0):
        raise ValueError("the column-wise matrix's starts must not decrease")
    if A.index.size and (A.index.min() < 0 or A.index.max() >= A.num_rows):
        raise ValueError(f"the column-wise matrix has a row index outside [0, {A.num_rows})")
    column = np.repeat(np.arange(lengths.size), lengths)
    rising = (np.diff(A.index) > 0) | (np.diff(column) > 0)
    if not rising.all():
        raise ValueError(
            "the column-wise matrix's row indices must increase within each column (no duplicates)"
        )


def solve_lp(
    cost: object,
    A: sp.sparray | sp.spmatrix | ColumnMatrix,
    row_lower: object,
    row_upper: object,
    col_lower: object = 0.0,
    col_upper: object = np.inf,
    *,
    maximize: bool = False,
    tolerance: float = FEASIBILITY_TOLERANCE,
) -> LPSolution:
    """Solve one LP with HiGHS (dual simplex, presolve off) and check its status.

    Parameters
    ----------
    cost : array_like, shape (num_cols,)
        Objective coefficients ``c``.
    A : scipy.sparse array or matrix, or ColumnMatrix, shape (num_rows, num_cols)
        Constraint matrix; passed to HiGHS column-wise (CSC; a :class:`ColumnMatrix` as it is).
    row_lower, row_upper : array_like or float
        Row bounds (broadcast to ``num_rows``); ``±numpy.inf`` for a free side.
    col_lower, col_upper : array_like or float, default 0 and inf
        Variable bounds (broadcast to ``num_cols``).
    maximize : bool, default False
        Maximise instead of minimise.
    tolerance : float, default :data:`FEASIBILITY_TOLERANCE`
        HiGHS's primal and dual feasibility tolerances (HiGHS accepts 1e-10 and above).

    Returns
    -------
    LPSolution

    Raises
    ------
    LPError
        The model status is not ``Optimal`` (infeasible, unbounded, a solver error, ...).
    ValueError
        A malformed :class:`ColumnMatrix`, a cost of the wrong shape, a NaN bound.
    """
    if not isinstance(A, ColumnMatrix):
        A = ColumnMatrix.of(A)
    num_rows = A.num_rows
    num_cols = A.start.size - 1
    _check_columns(A)
    c = np.asarray(cost, dtype=np.float64)
    if c.shape != (num_cols,):
        raise ValueError(f"cost must have shape ({num_cols},), got {c.shape}")

    lp = highspy.HighsLp()
    lp.num_col_ = num_cols
    lp.num_row_ = num_rows
    lp.col_cost_ = c
    lp.col_lower_ = _bounds(col_lower, num_cols, "col_lower")
    lp.col_upper_ = _bounds(col_upper, num_cols, "col_upper")
    lp.row_lower_ = _bounds(row_lower, num_rows, "row_lower")
    lp.row_upper_ = _bounds(row_upper, num_rows, "row_upper")
    lp.sense_ = highspy.ObjSense.kMaximize if maximize else highspy.ObjSense.kMinimize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = num_cols
    lp.a_matrix_.num_row_ = num_rows
    lp.a_matrix_.start_ = A.start
    lp.a_matrix_.index_ = A.index
    lp.a_matrix_.value_ = A.value

    highs = _solver(tolerance)
    pass_status = highs.passModel(lp)
    if pass_status == highspy.HighsStatus.kError:
        raise LPError("HiGHS rejected the model (passModel returned an error)")
    highs.run()
    model_status = highs.getModelStatus()
    status = highs.modelStatusToString(model_status)
    if model_status != highspy.HighsModelStatus.kOptimal:
        raise LPError(
            f"HiGHS did not solve the LP to optimality: model status {status!r} "
            f"({num_rows} rows, {num_cols} columns)"
        )
    solution = highs.getSolution()
    info = highs.getInfo()
    x = np.asarray(solution.col_value, dtype=np.float64).copy()
    row_dual = np.asarray(solution.row_dual, dtype=np.float64).copy()
    message = (
        f"HiGHS {highs.version()}: {status} after {info.simplex_iteration_count} "
        "simplex iterations (presolve off)"
    )
    return LPSolution(
        x=x,
        row_dual=row_dual,
        objective=float(info.objective_function_value),
        status=status,
        message=message,
    )
