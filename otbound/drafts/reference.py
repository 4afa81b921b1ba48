r"""Each draft design's optimal acceptance rate ``α*``, written as its formula reads.

Plain numpy, one step ``(p, q)`` at a time, no compiled code and no torch. These functions are
where a reader finds *the formula* of a design, and they are the oracle the tests hold the
speed layer to: the compiled sweeps behind :func:`otbound.optimal_acceptance` and the torch
sweeps of :func:`otbound.bounds.torch_sweep.optimal_acceptance_torch` must equal them to
rounding (``tests/test_design_reference.py``), and they must equal the brute-force minimum over
every subset of the enumerated draft tuples. ``docs/mathematics.md`` derives each formula.

Every design has the same shape (max-flow/min-cut of the membership-cost transport):

.. math::

    α^* = 1 + \min_{H ⊆ V} \bigl[p(H) − Q(H)\bigr],\qquad Q(H) = P(\text{all drafts lie in } H).

Where ``Q`` is convex along every token order (``iid``, ``without_replacement``,
``conditional_poisson``) the minimum is attained on a prefix ``H_i`` of the tokens sorted by
``p/q`` ascending (:func:`sweep_order`), so ``α* = 1 + min(0, min_i [p(H_i) − Q(H_i)])``
(:func:`prefix_alpha_star`); tokens tied in ``p/q`` change nothing, since ``p(H) − Q(H)`` is
concave along a run of them and its minimum lies at the run's ends.

=======================  ==========================================================  =============
design                   ``α*``, or ``Q(H)`` minimised over the sorted prefixes      cost
=======================  ==========================================================  =============
``iid``                  ``Q(H) = q(H)^n``                                           V log V
``without_replacement``  ``Q(H) = ∫_0^∞ λ e^{−λt} P[N_H(t) ≥ n] dt``                  nV · nodes
``conditional_poisson``  ``Q(H) = e_n(q_H) / e_n(q)``                                 nV + V log V
``greedy``               ``p(T) + Σ_{x∉T} min(p_x, q_x / q(V∖T))``, T: top n − 1     V log V
``topk``                 ``p(T)``, T: the top n                                      V log V
``hub``                  ``p_a + Σ_{x≠a} min(p_x, q_x / q(V∖a))``, a = argmax q      V
``per_slot``             ``Q(H) = Π_j q_j(H)`` along several orders (an upper bound)  nV log V
=======================  ==========================================================  =============

:func:`reference_alpha_star` dispatches on the design's name (:data:`REFERENCES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from otbound._checks import as_distribution, as_num_drafts, clip_rounding

__all__ = [
    "LOG_TIME_STEP",
    "REFERENCES",
    "conditional_poisson_alpha_star",
    "conditional_poisson_prefix_mass",
    "greedy_alpha_star",
    "hub_alpha_star",
    "iid_alpha_star",
    "per_slot_alpha_star",
    "prefix_alpha_star",
    "prefix_sums",
    "reference_alpha_star",
    "sweep_order",
    "topk_alpha_star",
    "without_replacement_alpha_star",
    "without_replacement_prefix_mass",
]

#: The trapezoid step of the without-replacement integral, in ``ln t``.
LOG_TIME_STEP = 0.1
#: The integral's nodes start where ``t^{n+1} / n!`` is this small (the left truncation).
LEFT_TOLERANCE = 1e-18
#: The nodes end where ``λ t`` reaches this for the smallest ``λ`` (the right truncation).
RIGHT_TAIL = 40.0


# -- the sweep shared by the designs ----------------------------------------------------------


def sweep_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The tokens sorted by ``p/q`` ascending: ``p = 0 < q`` first, ``q = 0`` last (such a
    token adds to ``p(H)`` and never to ``Q(H)``).

    The key is ``ln p − ln q``, the order of ``p/q`` with no overflow for masses down to the
    subnormals; the sort is stable (ties in token-id order).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.log(p) - np.log(q)
    key[q == 0] = np.inf
    return np.argsort(key, kind="stable")


def prefix_sums(x: np.ndarray) -> np.ndarray:
    """``x(H_i)`` for the prefixes ``H_0 = ∅, …, H_V``: shape (V + 1,)."""
    return np.concatenate([[0.0], np.cumsum(x)])


def prefix_alpha_star(p_sorted: np.ndarray, mass: np.ndarray) -> float:
    """``α* = 1 + min(0, min_i [p(H_i) − Q(H_i)])`` from ``p`` in sweep order and the prefix
    masses ``Q(H_0..H_V)``; a NaN raises, and ``α*`` outside ``[0, 1]`` by more than
    rounding raises (:func:`otbound._checks.clip_rounding`)."""
    gap = prefix_sums(p_sorted) - mass
    if np.isnan(gap).any():
        raise ValueError(f"NaN in p(H) − Q(H) at prefix {int(np.argmax(np.isnan(gap)))}")
    return float(clip_rounding(1.0 + min(0.0, float(gap.min())), 0.0, 1.0, "reference α*"))


def top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens, most likely first, ties to the lower token id."""
    return np.argsort(-q, kind="stable")[:k]


# -- iid ---------------------------------------------------------------------------------------


def iid_alpha_star(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """``n`` independent drafts from ``q``: ``Q(H) = q(H)^n``, minimised over the sorted
    prefixes. ``O(V log V)``."""
    order = sweep_order(p, q)
    return prefix_alpha_star(p[order], prefix_sums(q[order]) ** n)


# -- without_replacement -----------------------------------------------------------------------


def log_time_nodes(n: int, smallest_rate: float, step: float) -> np.ndarray:
    """The nodes ``s_j = ln t_j`` of the without-replacement integral, ``step`` apart, from
    ``t_lo`` with ``t_lo^{n+1} / n! = LEFT_TOLERANCE`` to ``t_hi = RIGHT_TAIL / smallest_rate``
    (``smallest_rate`` the least ``λ`` of a prefix that needs the integral)."""
    low = (math.log(LEFT_TOLERANCE) + math.lgamma(n + 1)) / (n + 1)
    high = math.log(RIGHT_TAIL) - math.log(smallest_rate)
    return low + step * np.arange(math.ceil((high - low) / step) + 1)


def clock_weight(rate: float, log_t: np.ndarray) -> np.ndarray:
    """``λ t e^{−λ t}`` at ``t = e^s``: the density of the first clock outside ``H`` in
    ``ln t``, as ``exp(x − e^x)`` with ``x = ln λ + s`` (no overflow at any ``t``)."""
    x = math.log(rate) + log_t
    with np.errstate(over="ignore"):
        return np.exp(x - np.exp(x))


def without_replacement_prefix_mass(
    q_sorted: np.ndarray, n: int, step: float = LOG_TIME_STEP
) -> np.ndarray:
    r"""``Q(H_i)`` of every prefix of ``q_sorted`` for ``n`` sequential draws without
    replacement: shape (V + 1,).

    Drafts drawn one after another without replacement are the firing order of independent
    clocks ``T_x ~ Exp(q_x)``. All ``n`` drafts lie in ``H`` when ``n`` clocks of ``H`` fire
    before the first clock outside it, which fires at rate ``λ = q(V∖H)``; with ``N_H(t)`` the
    number of ``H``'s clocks fired by ``t`` (Poisson-binomial, probabilities
    ``1 − e^{−q_x t}``)

    .. math::

        Q(H) = \int_0^\infty λ e^{−λt} P[N_H(t) ≥ n]\,dt
             = \int_{−\infty}^{\infty} λ t e^{−λt} P[N_H(t) ≥ n]\,ds,\qquad t = e^s,

    taken by the trapezoid rule in ``s = ln t`` (one relative resolution for every time scale,
    ``1/max q`` to ``1/λ`` and beyond 1e300). Along the sweep the count ``N`` truncated at
    ``n`` (``P[N = k]`` for ``k < n`` and ``P[N ≥ n]``) is updated at every node when a token
    joins ``H``: ``P[N ≥ n] += P[N = n−1] f``, ``P[N = k] ← P[N = k] (1 − f) + P[N = k−1] f``,
    ``f = 1 − e^{−q_x t}``; every term is non-negative, so nothing cancels.

    Errors (absolute, every prefix; the integrand lies in ``[0, λ t e^{−λ t}]``):

    * left truncation: ``P[N ≥ n] ≤ (q(H) t)^n / n!`` and ``λ ≤ 1``, so the integrand is at
      most ``t^{n+1} / n!``; below ``t_lo`` (``t_lo^{n+1}/n! = 1e-18``) both the integral and
      the trapezoid nodes left out add less than ``1e-18``;
    * right truncation: beyond ``t_hi`` (``λ t_hi ≥ 40`` for every prefix) the integral adds
      at most ``e^{−40} < 5e-18`` and the nodes left out less than ``1e-18``;
    * discretisation: the integrand is analytic in ``s`` near the real axis, so the error of
      the infinite trapezoid sum falls geometrically in ``1/h``; it has no closed bound for
      every ``q`` here and is measured instead: halving the step moves no ``Q`` by more
      than 1e-14 on the test rows (masses down to 1e-300, ``V`` up to 4096, ``n ≤ 8``), and
      the sum agrees with tuple enumeration and with the ``n = 2`` closed form
      ``q(H) Σ_{x∈H} q_x/(1 − q_x) − Σ_{x∈H} q_x²/(1 − q_x)`` to 1e-14
      (``tests/test_design_reference.py``).

    Prefixes with fewer than ``n`` tokens of positive mass have ``Q = 0``, and those holding
    all of ``q``'s mass (``λ = 0``) ``Q = 1``, exactly. Cost: ``O(nV · nodes)``, nodes
    ``≈ ln(t_hi / t_lo) / step`` (about 7,000 with masses of 1e-300).
    """
    q = np.asarray(q_sorted, dtype=np.float64)
    outside = np.concatenate([np.cumsum(q[::-1])[::-1], [0.0]])  # λ_i = q(V∖H_i), summed
    enough = prefix_sums(q > 0) >= n
    mass = np.where(enough & (outside == 0), 1.0, 0.0)
    live = enough & (outside > 0)
    if not live.any():
        return mass
    log_t = log_time_nodes(n, float(outside[live].min()), step)
    exactly = np.zeros((n, log_t.size))  # P[N_H(t) = k], k < n, at every node
    exactly[0] = 1.0
    at_least = np.zeros(log_t.size)  # P[N_H(t) ≥ n]
    for i, rate in enumerate(q):
        if rate > 0:  # token i joins H
            with np.errstate(over="ignore"):
                rate_t = np.exp(math.log(rate) + log_t)  # q_x t (inf: fired for sure)
            stay, fire = np.exp(-rate_t), -np.expm1(-rate_t)
            at_least += exactly[n - 1] * fire
            exactly[1:] = exactly[1:] * stay + exactly[:-1] * fire
            exactly[0] *= stay
        if live[i + 1]:
            mass[i + 1] = step * np.sum(clock_weight(outside[i + 1], log_t) * at_least)
    return mass


def without_replacement_alpha_star(
    p: np.ndarray, q: np.ndarray, n: int, step: float = LOG_TIME_STEP
) -> float:
    """Sequential draws without replacement, ``P(x̄) = Π_j q(x_j) / (1 − Σ_{k<j} q(x_k))``:
    the exponential-clock ``Q(H)`` (:func:`without_replacement_prefix_mass`) minimised over
    the sorted prefixes. ``O(nV · nodes)``."""
    order = sweep_order(p, q)
    return prefix_alpha_star(p[order], without_replacement_prefix_mass(q[order], n, step))


# -- conditional_poisson -----------------------------------------------------------------------

#: The exponent that stands for ``e_k = 0`` (below every exponent a product of masses has).
ZERO_EXPONENT = -(2**62)


def scaled_sum(
    a_mant: np.ndarray, a_exp: np.ndarray, b_mant: np.ndarray, b_exp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``a + b`` for non-negative numbers given as ``mantissa · 2^exponent``, returned with
    mantissas in ``[1/2, 1)`` (0 and :data:`ZERO_EXPONENT` for zero)."""
    top = np.maximum(a_exp, b_exp)
    total = np.ldexp(a_mant, np.maximum(a_exp - top, -2000)) + np.ldexp(
        b_mant, np.maximum(b_exp - top, -2000)
    )  # a shift past -1100 leaves nothing of a float: the term is below rounding
    mant, shift = np.frexp(total)
    return mant, np.where(mant > 0, top + shift, ZERO_EXPONENT)


def conditional_poisson_prefix_mass(q_sorted: np.ndarray, n: int) -> np.ndarray:
    r"""``Q(H_i) = e_n(q_{H_i}) / e_n(q)`` for every prefix of ``q_sorted``: shape (V + 1,).

    The elementary symmetric polynomials grow token by token,
    ``e_k(q_{≤i}) = e_k(q_{<i}) + q_i e_{k−1}(q_{<i})`` with ``e_0 = 1``: sums of
    non-negative terms, so each ``e_k`` keeps its relative precision (``2Vε`` at most). They
    are kept scaled: each ``e_k`` as a mantissa in ``[1/2, 1)`` and its own integer exponent
    of two, renormalised after every token (:func:`scaled_sum`), so nothing under- or
    overflows however small the masses (``n = 8`` masses of 1e-300 give
    ``e_8 ≈ 2^{−7973}``: the mantissa and the integer ``−7973``). The ratio is the ratio of
    mantissas times two to the difference of exponents, exact to ``4Vε`` relative, and 0
    only where it is below the smallest float. ``O(nV)``.
    """
    q = np.asarray(q_sorted, dtype=np.float64)
    mant = np.zeros(n + 1)
    expo = np.full(n + 1, ZERO_EXPONENT, dtype=np.int64)
    mant[0], expo[0] = 0.5, 1  # e_0 = 1
    top_mant, top_exp = np.zeros(q.size + 1), np.full(q.size + 1, ZERO_EXPONENT)
    for i, rate in enumerate(q):
        if rate > 0:  # e_k += q_i e_{k−1}, every k at once from the values before token i
            rate_mant, rate_exp = np.frexp(rate)
            mant[1:], expo[1:] = scaled_sum(
                mant[1:], expo[1:], mant[:-1] * rate_mant, expo[:-1] + int(rate_exp)
            )
        top_mant[i + 1], top_exp[i + 1] = mant[n], expo[n]
    shift = np.maximum(top_exp - top_exp[-1], -2000)
    ratio: np.ndarray = np.ldexp(top_mant / top_mant[-1], shift)
    return ratio


def conditional_poisson_alpha_star(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """A set of ``n`` distinct tokens with ``P(S) ∝ Π_{x∈S} q_x``: ``Q(H) = e_n(q_H) / e_n(q)``
    (:func:`conditional_poisson_prefix_mass`) minimised over the sorted prefixes."""
    order = sweep_order(p, q)
    return prefix_alpha_star(p[order], conditional_poisson_prefix_mass(q[order], n))


# -- designs with deterministic drafts: closed forms ------------------------------------------


def greedy_alpha_star(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """The top ``n − 1`` tokens ``T`` of ``q``, then one draft from ``r = q`` off ``T``,
    renormalised: ``α* = p(T) + Σ_{x∉T} min(p_x, r_x)``, ``r_x = q_x / q(V∖T)`` (the mass
    off ``T`` summed over its tokens, never ``1 − q(T)``)."""
    rest = np.ones(q.size, dtype=bool)
    rest[top_tokens(q, n - 1)] = False
    r = q[rest] / q[rest].sum()
    return float(p[~rest].sum() + np.minimum(p[rest], r).sum())


def topk_alpha_star(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """The ``n`` most likely tokens ``T`` of ``q``, deterministic: ``α* = p(T)``."""
    return float(p[top_tokens(q, n)].sum())


def hub_alpha_star(p: np.ndarray, q: np.ndarray, n: int = 2) -> float:
    """SpecHub's pairs around the hub ``a = argmax q`` (``n = 2``):
    ``α* = p_a + Σ_{x≠a} min(p_x, q_x / q(V∖a))`` (equal to greedy's at ``n = 2``)."""
    if n != 2:
        raise ValueError(f"design 'hub' is defined for n=2 only, got n={n}")
    hub = int(top_tokens(q, 1)[0])
    others = np.arange(q.size) != hub
    return float(p[hub] + np.minimum(p[others], q[others] / q[others].sum()).sum())


# -- per_slot ----------------------------------------------------------------------------------


def per_slot_alpha_star(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """Slot ``j`` drawn from its own ``q_j`` (``q`` of shape (n, V)): ``Q(H) = Π_j q_j(H)``.

    No one token order is known to be exact here, so this is an **upper bound** on ``α*``:
    the least ``1 + p(H_i) − Q(H_i)`` over the prefixes of the orders by ``p/q_j`` for each
    slot and by ``p`` over the slots' arithmetic and geometric means (exact when every slot
    has the same ``q``, or ``n = 1``). ``O(nV log V)``.
    """
    with np.errstate(divide="ignore"):
        geometric = np.exp(np.log(q).mean(axis=0))
    candidates = [*q, q.mean(axis=0), geometric]
    best = 1.0
    for key in candidates:
        order = sweep_order(p, key)
        mass = np.prod([prefix_sums(slot[order]) for slot in q], axis=0)
        best = min(best, prefix_alpha_star(p[order], mass))
    return best


# -- dispatch ----------------------------------------------------------------------------------

#: The reference of each registered design, by name.
REFERENCES: dict[str, Callable[[np.ndarray, np.ndarray, int], float]] = {
    "iid": iid_alpha_star,
    "without_replacement": without_replacement_alpha_star,
    "conditional_poisson": conditional_poisson_alpha_star,
    "greedy": greedy_alpha_star,
    "topk": topk_alpha_star,
    "hub": hub_alpha_star,
    "per_slot": per_slot_alpha_star,
}


def reference_alpha_star(p: object, q: object, n: int, design: object = "iid") -> float:
    """``α*`` of one step by the design's reference formula (:data:`REFERENCES`).

    Parameters
    ----------
    p : array_like, shape (V,)
        The target distribution.
    q : array_like, shape (V,), or (n, V) for ``per_slot``
        The draft distribution (one per slot for ``per_slot``).
    n : int
        The number of drafts.
    design : str or DraftDesign, default "iid"
        A name in :data:`REFERENCES` (every design of :data:`otbound.DESIGNS`), or a design
        object with such a name.

    Returns
    -------
    float
        ``α*`` (``per_slot``: the upper bound of :func:`per_slot_alpha_star`).

    Raises
    ------
    ValueError
        A design without a reference; ``p`` or ``q`` not one step of probabilities over the
        same vocabulary; an ``n`` the design cannot draw (the design's own check).

    Examples
    --------
    >>> from otbound.drafts.reference import reference_alpha_star
    >>> round(reference_alpha_star([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], 2, "without_replacement"), 5)
    0.99286
    >>> round(reference_alpha_star([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], 2, "conditional_poisson"), 5)
    1.0
    """
    from otbound.drafts.registry import get_design

    name = getattr(design, "name", design)
    if not isinstance(name, str) or name not in REFERENCES:
        raise ValueError(
            f"design {design!r} has no reference formula; references: {', '.join(REFERENCES)}"
        )
    spec = get_design(name)
    n = as_num_drafts(n)
    p_arr = as_distribution(p, "p")
    q_arr = as_distribution(q, "q", min_ndim=2 if spec.slot_axis else 1)
    if p_arr.ndim != 1 or q_arr.ndim != (2 if spec.slot_axis else 1):
        raise ValueError(
            f"the reference takes one step: p of shape (V,) and q of shape "
            f"{'(n, V)' if spec.slot_axis else '(V,)'}, got {p_arr.shape} and {q_arr.shape}"
        )
    if p_arr.shape[-1] != q_arr.shape[-1]:
        raise ValueError(
            f"p and q must have the same vocabulary size, got {p_arr.size} and {q_arr.shape[-1]}"
        )
    spec.check(q_arr, n)
    return REFERENCES[name](p_arr, q_arr, n)
