r"""K-SEQ (SpecTr, Sun et al. 2023): sequential acceptance with a common slack ``ρ``.

Drafts ``x_1..x_n`` are i.i.d. from ``q``. Each draft in turn is accepted with probability
``min(1, p(x) / (ρ q(x)))``. With ``β(ρ) = Σ_x min(q_x, p_x / ρ)`` one try accepts (and outputs
``y``) with probability ``min(q_y, p_y/ρ)``, so after ``n`` tries the accepted output has mass
``min(q, p/ρ) · c`` with ``c = (1 − (1 − β)^n) / β = Σ_{i<n} (1 − β)^i``, and the residual

.. math::

    r ∝ p − \min(q, p/ρ) \cdot c, \qquad \text{mass } (1 − β(ρ))^n,

is a distribution exactly when ``ρ ≥ c``, i.e. ``f(ρ) = ρ β(ρ) − 1 + (1 − β(ρ))^n ≥ 0``
(``f = β (ρ − c)``; the bisection evaluates the sign of ``ρ − c``, which has no cancellation).
``f`` is non-decreasing on ``[1, n]`` (``ρβ(ρ) = Σ min(ρ q, p)`` grows, ``β(ρ)`` shrinks),
``f(n) ≥ 0`` (Bernoulli), and acceptance ``α = 1 − (1 − β(ρ))^n`` falls with ``ρ``; so

.. math::

    ρ^* = \min\{ρ ∈ [1, n] : f(ρ) ≥ 0\},\qquad α = 1 − (1 − β(ρ^*))^n ≥ (1 − 1/e)\, α^*_{iid}.

``ρ*`` is found by bisection to the last floating-point digit, keeping the end where
``f ≥ 0`` (a lossless residual). At ``ρ*`` the residual vanishes on every draft that can be
rejected, so the acceptance event is ``Y ∈ x̄``. Which draft the output is (the first equal to
it) has a closed form too: :meth:`KSequential.positional`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from otbound._checks import clip_rounding
from otbound._pairwise import pairwise_sum
from otbound.problem import Step
from otbound.verifiers._step_cache import ratio_order
from otbound.verifiers.base import BaseVerifier, sample_tokens

__all__ = ["KSequential", "kseq_rho"]


@numba.njit(cache=True)
def _sign(ratio, cum_p, cum_q, tail_q, rho, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """A function with the sign of ``f(ρ) = ρβ(ρ) − 1 + (1 − β(ρ))^n``, accurate near its root.

    Tokens sorted by ``p/q``: the first ``j`` (``p/q < ρ``) give ``min(q, p/ρ) = p/ρ``, the rest
    ``q``. ``f = β (ρ − c)`` with ``c = Σ_{i<n} (1 − β)^i``, so for ``β > 0`` the sign is that of
    ``ρ − c`` with ``1 − β = Σ_{p/q<ρ} (q − p/ρ)``; ``β = 0`` gives ``f = 0`` (feasible).
    """
    lo = 0
    hi = ratio.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if ratio[mid] < rho:
            lo = mid + 1
        else:
            hi = mid
    beta = cum_p[lo] / rho + tail_q[lo]
    if beta <= 0.0:
        return 0.0
    miss = cum_q[lo] - cum_p[lo] / rho
    if miss < 0.0:
        miss = 0.0
    c = 0.0
    term = 1.0
    for _ in range(n):
        c += term
        term *= miss
    return rho - c


@numba.njit(cache=True)
def _bisect(ratio, cum_p, cum_q, tail_q, n):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    lo = 1.0
    if _sign(ratio, cum_p, cum_q, tail_q, lo, n) >= 0.0:
        return lo
    hi = float(n)
    if _sign(ratio, cum_p, cum_q, tail_q, hi, n) < 0.0:  # only by rounding: f(n) >= 0
        return hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _sign(ratio, cum_p, cum_q, tail_q, mid, n) >= 0.0:
            hi = mid
        else:
            lo = mid
    return hi


@numba.njit(cache=True)
def _sorted_sums(p, q, tokens):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Ratios ``p/q`` of ``tokens`` (in their order) with the prefix sums of ``p``, ``q`` and
    suffix sums of ``q``."""
    count = tokens.shape[0]
    ratio = np.empty(count)
    cum_p = np.zeros(count + 1)
    cum_q = np.zeros(count + 1)
    tail_q = np.zeros(count + 1)
    for i in range(count):
        y = tokens[i]
        ratio[i] = p[y] / q[y]
        cum_p[i + 1] = cum_p[i] + p[y]
        cum_q[i + 1] = cum_q[i] + q[y]
    for i in range(count - 1, -1, -1):
        tail_q[i] = tail_q[i + 1] + q[tokens[i]]
    return ratio, cum_p, cum_q, tail_q


def kseq_rho(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """``ρ* = min{ρ ∈ [1, n] : ρβ(ρ) ≥ 1 − (1 − β(ρ))^n}`` by bisection (validated inputs).

    One sort of ``p/q`` (tokens with ``q = 0`` add nothing to ``β`` or ``1 − β``), shared by
    every ``n`` of a step and with ``gls`` and ``rrs_without_replacement``
    (:func:`~otbound.verifiers._step_cache.ratio_order`), and prefix sums make each bisection
    step ``O(log V)``.
    """
    tokens = ratio_order(p, q)
    sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = _sorted_sums(p, q, tokens)
    return float(_bisect(*sums, int(n)))


def _acceptances(
    p: np.ndarray, q: np.ndarray, tokens: np.ndarray, ns: Sequence[int]
) -> dict[int, float | None]:
    """``1 − (1 − β(ρ*))^n`` for each ``n``, from one sort (``tokens``: :func:`kseq_rho`'s)
    and one set of prefix sums."""
    sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = _sorted_sums(p, q, tokens)
    out: dict[int, float | None] = {}
    for n in ns:
        rho = float(_bisect(*sums, int(n)))
        miss = float(_rejection_mass(p, q, rho))
        out[n] = 1.0 - miss**n
    return out


@numba.njit(cache=True)
def _rejection_mass(p, q, rho):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``1 − β(ρ) = np.maximum(q − p / ρ, 0).sum()``, bit for bit (numpy's pairwise sum)."""
    excess = np.empty(p.shape[0])
    for y in range(p.shape[0]):
        excess[y] = max(q[y] - p[y] / rho, 0.0)
    return pairwise_sum(excess, 0, p.shape[0])


def _plan(p: np.ndarray, q: np.ndarray, n: int) -> tuple[float, float, np.ndarray]:
    """``ρ*``, the rejection rate ``1 − β(ρ*)`` and the residual distribution."""
    rho = kseq_rho(p, q, n)
    capped = np.minimum(q, p / rho)
    miss = float(_rejection_mass(p, q, rho))  # 1 − β(ρ)
    scale = float(np.sum(miss ** np.arange(n)))  # c = Σ_{i<n} (1 − β)^i
    # ρ* is the feasible end of the bisection, where the residual is ≥ 0 up to rounding
    rest = clip_rounding(p - capped * scale, 0.0, 1.0, "K-SEQ residual p − min(q, p/ρ*)·c")
    total = rest.sum()
    rest = rest / total if total > 0 else p.copy()
    return rho, miss, rest


class KSequential(BaseVerifier):
    """SpecTr's K-SEQ with ``ρ*`` by bisection: ``α = 1 − (1 − β(ρ*))^n``.

    Examples
    --------
    >>> from otbound.verifiers import get_verifier
    >>> v = get_verifier("kseq")
    >>> round(v.acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=1), 6)
    0.7
    """

    name = "kseq"
    default_design = "iid"

    def rho(self, p: object, q: object, n: int = 2) -> float:
        """The slack ``ρ*`` K-SEQ uses for these inputs."""
        p_arr, q_arr, n = self._validate(p, q, n)
        return kseq_rho(p_arr, q_arr, n)

    def positional(self, p: object, q: object, n: int = 2) -> np.ndarray:
        r"""Exact positional vector: ``a_k = P(Y = x_{k+1}, Y ∉ {x_1..x_k})``, ``k = 0..n−1``.

        The output is attributed to the first draft equal to it, so ``Σ_k a_k = α``.

        With ``t_y = min(q_y, p_y/ρ*)`` (a draft is ``y`` and accepted), ``d_y = q_y − t_y``
        (a draft is ``y`` and rejected), ``m = Σ_y d_y = 1 − β(ρ*)`` and ``s_y = m − d_y`` (a
        draft is rejected and is not ``y``),

        .. math::

            a_k = \sum_y s_y^{\,k}\, t_y \Bigl(1 + d_y \sum_{i=0}^{n-k-2} m^i\Bigr):

        the first ``k`` drafts are rejected and differ from ``y``; draft ``k + 1`` is ``y`` and
        is accepted, or is rejected and a later draft ``y`` is accepted, any drafts in between
        rejected. The residual adds no term: it is drawn only after all ``n`` drafts were
        rejected, and at ``ρ*`` it vanishes on every token that can be rejected (there it is
        ``p_y (1 − c/ρ*)``, and ``ρ* = c`` unless ``β ∈ {0, 1}``, where ``p_y = 0`` or nothing
        is rejected; the bisection's rounding leaves mass of order ``1e-16``). So
        ``Σ_k a_k = 1 − m^n``. ``O(n V)``; the vector depends on ``n`` through ``ρ*``.

        Parameters
        ----------
        p, q : array_like, shape (V,)
            Target and draft distributions.
        n : int, default 2
            Number of drafts.

        Returns
        -------
        numpy.ndarray, shape (n,)

        Examples
        --------
        >>> from otbound.verifiers import get_verifier
        >>> a = get_verifier("kseq").positional([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2)
        >>> [round(float(x), 4) for x in a]  # α(2) = 0.84
        [0.6867, 0.1533]
        """
        p, q, n = self._validate(p, q, n)
        rho = kseq_rho(p, q, n)
        take = np.minimum(q, p / rho)
        drop = np.maximum(q - p / rho, 0.0)  # q − take
        miss = float(drop.sum())
        other = clip_rounding(miss - drop, 0.0, 1.0, "K-SEQ rejection mass of the other tokens")
        out = np.empty(n)
        power = np.ones_like(p)  # s_y^k
        for k in range(n):
            later = float(np.sum(miss ** np.arange(n - k - 1)))  # Σ_{i ≤ n−k−2} m^i
            out[k] = float(np.sum(power * take * (1.0 + drop * later)))
            power *= other
        return out

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return _acceptances(p, q, ratio_order(p, q), [n])[n]

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        return _acceptances(step.p, step.q, step.ratio_order, ns)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        rho, _, rest = self._memo("plan", p, q, len(drafts), lambda: _plan(p, q, len(drafts)))
        for x in drafts:
            if rng.random() < min(1.0, p[x] / (rho * q[x])):
                return int(x)
        return int(sample_tokens(rest, rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials, n = drafts.shape
        rho, _, rest = _plan(p, q, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(q > 0, np.minimum(1.0, p / (rho * q)), 0.0)
        u = rng.random((n, trials))
        tokens = sample_tokens(rest, rng.random(trials))
        done = np.zeros(trials, dtype=bool)
        for k in range(n):
            x = drafts[:, k]
            accept = ~done & (u[k] < ratio[x])
            tokens[accept] = x[accept]
            done |= accept
        return tokens
