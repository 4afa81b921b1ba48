r"""The membership-cost transport LP over sets of draft tokens, solved with HiGHS.

Only whether the output token ``y`` is one of the drafts matters, so the draft tuples of a
design are merged into sets ``S`` of distinct tokens with probabilities ``Q(S)``
(:meth:`otbound.DraftDesign.set_support`), and only the cells ``y ∈ S`` carry variables.
The primal is a bipartite b-matching (a max-flow):

.. math::

    α^* = \max_{C ≥ 0} \sum_{S}\sum_{y∈S} C[S, y]
    \quad\text{s.t.}\quad \sum_{y∈S} C[S, y] ≤ Q(S),\qquad \sum_{S∋y} C[S, y] ≤ p(y).

The helpers here (input checks, the set/token incidence matrix) are shared with
:mod:`otbound.bounds.dual` and :mod:`otbound.bounds.reference`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from otbound._checks import as_distribution_pair, as_num_drafts, clip_rounding
from otbound.bounds._highs import solve_lp
from otbound.bounds._lp_status import LP_SLACK
from otbound.drafts import DraftDesign, Greedy, Hub, TopK, get_design, num_tuples

#: Largest LP :func:`solve_primal` and :func:`otbound.solve_dual` build, counted before the
#: draft tuples are enumerated as ``n · V^n`` (``V``: the support of ``q``; the full vocabulary
#: for ``per_slot``), or ``n · V`` for the designs with ``O(V)`` draft tuples (``greedy``,
#: ``topk``, ``hub``). This bounds both the number of LP variables and the enumeration memory.
MAX_VARIABLES = 5_000_000

#: Designs whose support has ``O(V)`` draft tuples.
_LINEAR_SUPPORT = (Greedy, Hub, TopK)


@dataclass(frozen=True)
class SetProblem:
    """A validated single-step problem with its draft sets and the cells ``y ∈ S``.

    Attributes
    ----------
    p : numpy.ndarray, shape (V,)
    q : numpy.ndarray, shape (V,), or (n, V) for ``per_slot``
    n : int
    design : DraftDesign
    sets : numpy.ndarray of int, shape (m, n)
        Sorted token ids of each set, padded with ``-1``.
    set_probs : numpy.ndarray, shape (m,)
        ``Q(S)``.
    cell_set, cell_token : numpy.ndarray of int, shape (k,)
        The ``k`` membership cells ``(S, y)``, ``y ∈ S``: the row of ``S`` in ``sets`` and ``y``.
    """

    p: np.ndarray
    q: np.ndarray
    n: int
    design: DraftDesign
    sets: np.ndarray
    set_probs: np.ndarray
    cell_set: np.ndarray
    cell_token: np.ndarray

    @property
    def vocab(self) -> int:
        vocab: int = self.p.shape[0]
        return vocab

    def incidence(self) -> sp.csc_array:
        """The (m + V, k) matrix with a one in rows ``S`` and ``m + y`` of the column of each cell.

        Its first ``m`` rows sum a plan over each set, its last ``V`` rows over each token: the
        primal's constraint matrix; its transpose is the dual's.
        """
        m, k = self.sets.shape[0], self.cell_set.size
        index = np.stack([self.cell_set, m + self.cell_token], axis=1).ravel()
        indptr = np.arange(0, 2 * k + 1, 2)
        return sp.csc_array((np.ones(2 * k), index, indptr), shape=(m + self.vocab, k))

    def set_mass_inside(self, H: np.ndarray) -> float:
        """``Q(H)``: the total probability of the sets contained in ``H`` (bool, (V,))."""
        inside = np.all((self.sets < 0) | H[self.sets], axis=1)
        return float(self.set_probs[inside].sum())


def _check_size(spec: DraftDesign, q: np.ndarray, n: int, caller: str) -> None:
    """Refuse LPs above :data:`MAX_VARIABLES` before enumerating any draft tuple."""
    vocab = q.shape[-1]
    if isinstance(spec, _LINEAR_SUPPORT):
        bound = n * vocab
    else:
        support = vocab if spec.slot_axis else int(np.count_nonzero(q > 0))
        bound = n * num_tuples(support, n)
    if bound > MAX_VARIABLES:
        hub = "; for the hub design solve_spechub_lp is O(V)" if spec.name == "hub" else ""
        raise ValueError(
            f"{caller}: the set LP for V={vocab}, n={n} (design {spec.name!r}) may need up to "
            f"{bound:.3g} variables, above the limit otbound.bounds.primal.MAX_VARIABLES="
            f"{MAX_VARIABLES:.0e}; use otbound.optimal_acceptance (the exact sweep; an upper "
            f"bound for per_slot) for large vocabularies{hub}"
        )


def set_problem(
    p: object,
    q: object,
    n: int,
    design: str | DraftDesign,
    *,
    normalize: bool = False,
    caller: str = "solve_primal",
) -> SetProblem:
    """Validate one step as :func:`otbound.optimal_acceptance` does and enumerate its sets."""
    spec = get_design(design)
    n = as_num_drafts(n)
    p_arr, q_arr = as_distribution_pair(
        p, q, normalize=normalize, q_min_ndim=2 if spec.slot_axis else 1
    )
    q_ndim = 2 if spec.slot_axis else 1
    if p_arr.ndim != 1 or q_arr.ndim != q_ndim:
        q_shape = "(n, V)" if spec.slot_axis else "(V,)"
        raise ValueError(
            f"{caller} solves one step: p must have shape (V,) and q shape {q_shape}, got "
            f"{p_arr.shape} and {q_arr.shape}; loop over the batch, or use "
            "otbound.optimal_acceptance for batches"
        )
    spec.check(q_arr, n)
    _check_size(spec, q_arr, n, caller)
    sets, set_probs = spec.set_support(q_arr, n)
    total = float(np.sum(set_probs))
    if not (np.all(np.isfinite(set_probs)) and np.all(set_probs >= 0) and abs(total - 1) < 1e-9):
        raise RuntimeError(
            f"{caller}: design {spec.name!r} returned set probabilities that are not a "
            f"distribution (sum {total!r}, finite: {bool(np.all(np.isfinite(set_probs)))}); "
            "this is a bug in the design's set_support/tuple_support"
        )
    cell_set, slot = np.nonzero(sets >= 0)
    return SetProblem(
        p=p_arr,
        q=q_arr,
        n=n,
        design=spec,
        sets=sets,
        set_probs=set_probs,
        cell_set=cell_set,
        cell_token=sets[cell_set, slot],
    )


def _shrink(x: np.ndarray, group: np.ndarray, cap: np.ndarray, what: str) -> np.ndarray:
    """Scale the cells of every group whose sum exceeds its cap down to the cap.

    An excess above :data:`otbound.bounds._lp_status.LP_SLACK` is not the solver's tolerance: it
    raises (naming ``what``) instead of being scaled away.
    """
    total = np.bincount(group, weights=x, minlength=cap.size)
    clip_rounding(total - cap, -np.inf, 0.0, f"solve_primal: {what} minus its cap", tol=LP_SLACK)
    ratio = np.ones_like(cap)
    over = total > cap
    ratio[over] = cap[over] / total[over]
    scaled: np.ndarray = x * ratio[group]
    return scaled


def _feasible_cells(prob: SetProblem, x: np.ndarray) -> np.ndarray:
    """The LP solution made exactly feasible: clip at zero, then shrink rows and columns.

    HiGHS meets the bounds within its tolerance (1e-10); shrinking removes that slack, so the
    plan is a valid partial coupling and its mass a lower bound on ``α*`` to rounding.
    """
    x = clip_rounding(x, 0.0, np.inf, "solve_primal: a plan cell", tol=LP_SLACK)
    x = _shrink(x, prob.cell_set, prob.set_probs, "a draft set's sent mass")
    return _shrink(x, prob.cell_token, prob.p, "a token's received mass")


@dataclass(frozen=True)
class PrimalResult:
    """An optimal plan of the set LP.

    Attributes
    ----------
    acceptance : float
        ``α*``: the mass of :attr:`plan`, the LP optimum made exactly feasible (HiGHS's
        slack within its 1e-10 tolerance removed), so a lower bound on ``α*`` to rounding.
    sets : numpy.ndarray of int, shape (m, n)
        The draft sets (sorted token ids, padded with ``-1``).
    set_probs : numpy.ndarray, shape (m,)
        ``Q(S)``.
    plan : scipy.sparse.csr_array, shape (m, V)
        The membership part ``C[S, y]`` (nonzero only for ``y ∈ S``).
    p : numpy.ndarray, shape (V,)
        The target distribution (validated), used by :meth:`full_plan`.
    status, message : str
        HiGHS's model status (``"Optimal"``) and a log line.
    design : str
    n : int
    """

    acceptance: float
    sets: np.ndarray
    set_probs: np.ndarray
    plan: sp.csr_array
    p: np.ndarray
    status: str
    message: str
    design: str
    n: int

    def full_plan(self) -> np.ndarray:
        r"""A full coupling of ``Q`` (over sets) and ``p``: dense, shape (m, V).

        The membership part plus the product of the residual marginals over the residual
        mass, ``C + r_Q r_p^\top / (1 − α^*)``. At an optimum the residual part puts no mass
        on cells ``y ∈ S`` (else the plan could be augmented), so the membership mass of the
        full plan is still ``α*``; its row sums are ``Q(S)`` and its column sums ``p(y)``.
        """
        dense: np.ndarray = self.plan.toarray()
        row_left = clip_rounding(self.set_probs - dense.sum(axis=1), 0.0, 1.0, "Q(S) − sent")
        col_left = clip_rounding(self.p - dense.sum(axis=0), 0.0, 1.0, "p(y) − received")
        # Both residuals carry 1 − α*; split the rounding difference so both marginals hold.
        total = 0.5 * (row_left.sum() + col_left.sum())
        if total > 0:
            row_left *= total / row_left.sum() if row_left.sum() > 0 else 0.0
            col_left *= total / col_left.sum() if col_left.sum() > 0 else 0.0
            dense += np.outer(row_left, col_left) / total
        return dense


def solve_primal(
    p: object,
    q: object,
    n: int = 2,
    design: str | DraftDesign = "iid",
    *,
    normalize: bool = False,
) -> PrimalResult:
    r"""Optimal acceptance rate and an optimal transport plan, by the set LP on HiGHS.

    .. math::

        α^* = \max_{C ≥ 0} \sum_{S}\sum_{y∈S} C[S, y]
        \quad\text{s.t.}\quad
        \sum_{y∈S} C[S, y] ≤ Q(S)\ \ \forall S,\qquad
        \sum_{S∋y} C[S, y] ≤ p(y)\ \ \forall y,

    over the sets ``S`` of distinct draft tokens of the design (variables only for ``y ∈ S``).
    Exact for every design, ``per_slot`` included (where the sweep gives an upper bound).

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution (one step).
    q : array_like, shape (V,), or (n, V) for ``design="per_slot"``
        Draft distribution(s).
    n : int, default 2
        Number of drafts.
    design : str or DraftDesign, default "iid"
        One of :data:`otbound.DESIGNS`.
    normalize : bool, default False
        Rescale ``p`` and ``q`` to sum to one instead of raising.

    Returns
    -------
    PrimalResult
        ``acceptance``, the sets with ``Q(S)``, the sparse membership ``plan`` and
        :meth:`PrimalResult.full_plan`.

    Raises
    ------
    ValueError
        Invalid inputs (as :func:`otbound.optimal_acceptance`), batched inputs, or an LP above
        :data:`MAX_VARIABLES` (``n · V^n``; ``n · V`` for ``greedy``, ``topk``, ``hub``).
    otbound.LPError
        HiGHS did not report an optimal solution.
    RuntimeError
        The design's set probabilities are not finite or do not sum to one (a bug in the
        design's ``tuple_support``).

    Notes
    -----
    The draft tuples are enumerated (``V^n`` of them for ``iid``/``per_slot``), so this is for
    small vocabularies; :func:`otbound.optimal_acceptance` is the fast exact path. Measured
    with HiGHS 1.15 dual simplex on 2 cores: ``V = 200, n = 2`` (20k sets) 0.6 s;
    ``V = 500, n = 2`` sequential (125k sets) 17 s; ``V = 1000, n = 2`` i.i.d. (500k sets,
    inside :data:`MAX_VARIABLES`) 200 s. The dual LP is 2-4 times faster.

    Examples
    --------
    >>> import otbound as ob
    >>> res = ob.solve_primal([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2, design="without_replacement")
    >>> round(res.acceptance, 5)
    0.99286
    >>> res.full_plan().sum(axis=0).round(6)
    array([0.3, 0.4, 0.3])
    """
    prob = set_problem(p, q, n, design, normalize=normalize, caller="solve_primal")
    m = prob.sets.shape[0]
    k = prob.cell_set.size
    sol = solve_lp(
        np.ones(k),
        prob.incidence(),
        row_lower=-np.inf,
        row_upper=np.concatenate([prob.set_probs, prob.p]),
        col_lower=0.0,
        col_upper=np.inf,
        maximize=True,
    )
    cells = _feasible_cells(prob, sol.x)
    plan = sp.csr_array((cells, (prob.cell_set, prob.cell_token)), shape=(m, prob.vocab))
    return PrimalResult(
        acceptance=float(clip_rounding(cells.sum(), 0.0, 1.0, "solve_primal: α*")),
        sets=prob.sets,
        set_probs=prob.set_probs,
        plan=plan,
        p=prob.p,
        status=sol.status,
        message=sol.message,
        design=prob.design.name,
        n=prob.n,
    )
