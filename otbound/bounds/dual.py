r"""The dual of the set LP (a min-cut), solved with HiGHS and rounded to a certifying set ``H``.

.. math::

    α^* = \min_{0 ≤ u, z ≤ 1} \sum_y u_y\, p(y) + \sum_S z_S\, Q(S)
    \quad\text{s.t.}\quad u_y + z_S ≥ 1 \quad (y ∈ S).

The constraint matrix is totally unimodular, so an optimal vertex is 0/1 and
``H = {y : u_y = 1}`` attains ``α* = 1 + p(H) − Q(H)`` with ``Q(H) = P(every draft in H)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otbound._checks import clip_rounding
from otbound.bounds._highs import solve_lp
from otbound.bounds._lp_status import LPError
from otbound.bounds.primal import SetProblem, set_problem
from otbound.drafts import DraftDesign

#: The rounded set's value must match the LP optimum within this absolute tolerance.
ROUNDING_TOLERANCE = 1e-7


@dataclass(frozen=True)
class DualResult:
    """An optimal dual solution and the set ``H`` it certifies.

    Attributes
    ----------
    acceptance : float
        ``1 + p(H) − Q(H)`` for the returned ``H`` (clipped to [0, 1]): a certified upper bound
        on the acceptance of every lossless verifier, equal to the LP optimum within 1e-7.
    H : numpy.ndarray of bool, shape (V,)
        The certifying set (empty when ``α* = 1``).
    u : numpy.ndarray, shape (V,)
        Optimal token duals.
    z : numpy.ndarray, shape (m,)
        Optimal set duals.
    sets : numpy.ndarray of int, shape (m, n)
        The draft sets (sorted token ids, padded with ``-1``).
    set_probs : numpy.ndarray, shape (m,)
        ``Q(S)``.
    status, message : str
        HiGHS's model status (``"Optimal"``) and a log line.
    design : str
    n : int
    """

    acceptance: float
    H: np.ndarray
    u: np.ndarray
    z: np.ndarray
    sets: np.ndarray
    set_probs: np.ndarray
    status: str
    message: str
    design: str
    n: int


def _round_to_set(prob: SetProblem, u: np.ndarray) -> tuple[np.ndarray, float]:
    """The threshold set ``{u ≥ θ}`` (or ``∅``) minimising ``1 + p(H) − Q(H)``, with its value."""
    best_set = np.zeros(prob.vocab, dtype=bool)
    best = 1.0
    for theta in np.unique(u):
        H = u >= theta
        value = 1.0 + float(prob.p[H].sum()) - prob.set_mass_inside(H)
        if value < best:
            best, best_set = value, H
    return best_set, best


def solve_dual(
    p: object,
    q: object,
    n: int = 2,
    design: str | DraftDesign = "iid",
    *,
    normalize: bool = False,
) -> DualResult:
    r"""Optimal acceptance rate with a certificate set ``H``, by the dual LP on HiGHS.

    .. math::

        α^* = \min_{0 ≤ u, z ≤ 1}\ \sum_y u_y\, p(y) + \sum_S z_S\, Q(S)
        \quad\text{s.t.}\quad u_y + z_S ≥ 1\ \text{ for } y ∈ S,

    over the sets ``S`` of distinct draft tokens. The optimal ``u`` is rounded by trying every
    threshold set ``H_θ = {u ≥ θ}`` and keeping the one minimising ``1 + p(H) − Q(H)``;
    its value must equal the LP optimum within :data:`ROUNDING_TOLERANCE`.

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
    DualResult
        ``acceptance``, the set ``H``, the duals ``u`` and ``z``, the sets and ``Q(S)``.

    Raises
    ------
    ValueError
        Invalid inputs (as :func:`otbound.optimal_acceptance`), batched inputs, or an LP above
        :data:`otbound.bounds.primal.MAX_VARIABLES`.
    otbound.LPError
        HiGHS did not report an optimal solution, or no threshold set matches the LP value.
    RuntimeError
        The design's set probabilities are not finite or do not sum to one (a bug in the
        design's ``tuple_support``).

    Examples
    --------
    >>> import otbound as ob
    >>> res = ob.solve_dual([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=1)
    >>> round(res.acceptance, 6), res.H.nonzero()[0].tolist()
    (0.7, [0])
    """
    prob = set_problem(p, q, n, design, normalize=normalize, caller="solve_dual")
    m = prob.sets.shape[0]
    # Columns: z (one per set), then u (one per token); rows: one per cell y ∈ S.
    sol = solve_lp(
        np.concatenate([prob.set_probs, prob.p]),
        prob.incidence().T,
        row_lower=1.0,
        row_upper=np.inf,
        col_lower=0.0,
        col_upper=1.0,
        maximize=False,
    )
    z, u = sol.x[:m], sol.x[m:]
    H, value = _round_to_set(prob, u)
    if abs(value - sol.objective) > ROUNDING_TOLERANCE:
        raise LPError(
            f"solve_dual: the best threshold set of the dual solution gives {value:.12g}, "
            f"but the LP optimum is {sol.objective:.12g} (difference above "
            f"{ROUNDING_TOLERANCE:g})"
        )
    return DualResult(
        acceptance=float(clip_rounding(value, 0.0, 1.0, "solve_dual: 1 + p(H) − Q(H)")),
        H=H,
        u=u,
        z=z,
        sets=prob.sets,
        set_probs=prob.set_probs,
        status=sol.status,
        message=sol.message,
        design=prob.design.name,
        n=prob.n,
    )
