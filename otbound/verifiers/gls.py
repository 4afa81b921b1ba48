r"""Gumbel list coupling (GLS; Daliri et al. for ``n = 1``): drafter-invariant, no rejection step.

Shared noise ``E^{(k)}_i = −\ln U^{(k)}_i ~ Exp(1)`` for slots ``k = 1..n`` and tokens ``i``.
Draft ``k`` is ``x_k = argmin_i E^{(k)}_i / q_i`` (an exponential race: ``x_k ~ q``, i.i.d.).
The output is

.. math::

    Y = \arg\min_i \min_k E^{(k)}_i / p_i ,

a race with rates ``n p_i``, so ``Y ~ p`` exactly; it is accepted iff it equals a draft. For
``n = 1`` the match probability is

.. math::

    α = \sum_j \frac{1}{\sum_i \max(p_i / p_j,\ q_i / q_j)} ≥ \frac{1 − TV}{1 + TV},

and for ``n`` drafts ``Σ_j n p_j / (n − 1 + Σ_i max(p_i, p_j q_i / q_j))`` is a lower bound
(:meth:`GumbelListCoupling.lower_bound`); otherwise Monte Carlo (``acceptance`` is ``None``).
Both sums are evaluated with one sort of ``p / q`` (``O(V log V)``).

Simulation without the ``n × V`` noise matrix. Condition on the race of slot ``k``: its winner
``x_k ~ q`` and time ``M_k ~ Exp(1)`` are independent, ``E^{(k)}_{x_k} = M_k q_{x_k}``, and for
``i ≠ x_k`` memorylessness gives ``E^{(k)}_i = M_k q_i + F`` with ``F ~ Exp(1)`` fresh. The
output race then has an atom for each draft at ``D_k = M_k q_{x_k} / p_{x_k}`` and, for every other
(slot, token), a hazard ``p_i`` once ``t > M_k q_i / p_i``, so the cumulative hazard is

.. math::

    Λ(t) = \sum_k \sum_{i ≠ x_k:\ q_i/p_i < t/M_k} (p_i t − M_k q_i),

piecewise linear in ``t`` and evaluated by binary search in the tokens sorted by ``q / p``. The
first continuous arrival is ``Λ^{-1}(Z)``, ``Z ~ Exp(1)``; if it comes after the earliest atom the
output is that draft, else the arriving (slot, token) is drawn ``∝`` its hazard, which only needs
the linear piece of ``Λ`` holding the arrival (found by bisection), not the time itself.
Cost ``O(n log V)`` per bisection step per trial; exact in law.
:meth:`GumbelListCoupling.verify` draws the conditional noise explicitly (``O(nV)``).
"""

from __future__ import annotations

import numba
import numpy as np

from otbound.verifiers.base import BaseVerifier

__all__ = ["GumbelListCoupling", "gls_match_probability"]


def _max_sums(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tokens ``j`` with ``p_j, q_j > 0`` and ``Σ_i max(p_i, (p_j/q_j) q_i)`` for each."""
    both = np.flatnonzero((p > 0) & (q > 0))
    with np.errstate(divide="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)  # q = 0: p/q = ∞
    order = np.argsort(ratio, kind="stable")
    r_sorted = ratio[order]
    cum_q = np.concatenate(([0.0], np.cumsum(q[order])))  # tokens with p/q < ρ give ρ q_i
    tail_p = np.concatenate((np.cumsum(p[order][::-1])[::-1], [0.0]))  # p/q ≥ ρ give p_i
    rho = ratio[both]
    j = np.searchsorted(r_sorted, rho, side="left")
    return both, tail_p[j] + rho * cum_q[j]


def gls_match_probability(p: np.ndarray, q: np.ndarray) -> float:
    """``n = 1``: ``Σ_j 1 / Σ_i max(p_i/p_j, q_i/q_j) = Σ_j p_j / Σ_i max(p_i, p_j q_i / q_j)``."""
    both, sums = _max_sums(p, q)
    return float(np.sum(p[both] / sums))


@numba.njit(cache=True)
def _hazard(t, m, ratio, cum_p, cum_q, idx):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``Λ(t)``, its slope, and the per-slot cut indices (written to ``idx``).

    Slot ``k``'s own draft needs no special case: its hazard would start at its atom
    ``D_k``, and nothing after the earliest atom is ever used.
    """
    n = m.shape[0]
    lam = 0.0
    slope = 0.0
    for k in range(n):
        s = t / m[k]
        lo = 0
        hi = ratio.shape[0]
        while lo < hi:  # number of sorted tokens with ratio < s
            mid = (lo + hi) // 2
            if ratio[mid] < s:
                lo = mid + 1
            else:
                hi = mid
        idx[k] = lo
        slope += cum_p[lo]
        lam += cum_p[lo] * t - m[k] * cum_q[lo]
    return lam, slope


@numba.njit(cache=True)
def _simulate(drafts, m, z, u, p, q, order, ratio, cum_p, cum_q):  # type: ignore[no-untyped-def]  # pragma: no cover
    trials, n = drafts.shape
    out = np.empty(trials, dtype=np.int64)
    idx = np.zeros(n, dtype=np.int64)
    idx_hi = np.zeros(n, dtype=np.int64)
    for t in range(trials):
        mk = m[t]
        row = drafts[t]
        # earliest draft atom
        atom = np.inf
        atom_token = -1
        for k in range(n):
            x = row[k]
            if p[x] > 0.0:
                d = mk[k] * q[x] / p[x]
                if d < atom:
                    atom = d
                    atom_token = x
        target = z[t]
        if atom < np.inf:
            lam_atom, _ = _hazard(atom, mk, ratio, cum_p, cum_q, idx)
            if lam_atom <= target:
                out[t] = atom_token
                continue
            hi = atom
        else:
            hi = 1.0
            while _hazard(hi, mk, ratio, cum_p, cum_q, idx)[0] <= target:
                hi *= 2.0
        lo = 0.0
        # bisect until [lo, hi] lies on one linear piece of Λ, then solve Λ(t) = Z exactly
        for _ in range(4000):
            _hazard(lo, mk, ratio, cum_p, cum_q, idx)
            _hazard(hi, mk, ratio, cum_p, cum_q, idx_hi)
            same = True
            for k in range(n):
                if idx[k] != idx_hi[k]:
                    same = False
                    break
            if same:
                break
            mid = 0.5 * (lo + hi)
            if mid <= lo or mid >= hi:
                break
            if _hazard(mid, mk, ratio, cum_p, cum_q, idx)[0] > target:
                hi = mid
            else:
                lo = mid
        # Λ(lo) <= Z < Λ(hi) on one linear piece: the arrival time Λ^{-1}(Z) lies in (lo, hi],
        # where the hazard sets (the cut indices idx_hi) are constant. The arriving
        # (slot, token) is drawn ∝ its hazard p_i over those sets.
        _hazard(hi, mk, ratio, cum_p, cum_q, idx_hi)
        total = 0.0
        for k in range(n):
            total += cum_p[idx_hi[k]]
        v = u[t] * total
        slot = n - 1
        for k in range(n):
            w = cum_p[idx_hi[k]]
            if v < w:
                slot = k
                break
            v -= w
        cut = idx_hi[slot]
        lo_i = 0
        hi_i = cut - 1
        while lo_i < hi_i:  # first sorted position with cum_p[pos + 1] > v
            mid = (lo_i + hi_i) // 2
            if cum_p[mid + 1] > v:
                hi_i = mid
            else:
                lo_i = mid + 1
        out[t] = order[lo_i]
    return out


class GumbelListCoupling(BaseVerifier):
    """GLS: shared exponential noise couples drafts and output; ``Y ~ p`` with no rejection.

    ``acceptance`` is exact for ``n = 1`` (``Σ_j 1 / Σ_i max(p_i/p_j, q_i/q_j)``) and ``None``
    for ``n > 1``; :meth:`lower_bound` gives Daliri et al.'s ``n``-draft bound.
    """

    name = "gls"
    default_design = "iid"

    def lower_bound(self, p: object, q: object, n: int = 2) -> float:
        """``Σ_j n p_j / (n − 1 + Σ_i max(p_i, p_j q_i / q_j))`` (exact at ``n = 1``)."""
        p_arr, q_arr, n = self._validate(p, q, n)
        both, sums = _max_sums(p_arr, q_arr)
        return float(np.sum(n * p_arr[both] / (n - 1 + sums)))

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        return gls_match_probability(p, q) if n == 1 else None

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        vocab = p.size
        noise = np.empty((len(drafts), vocab))
        for k, x in enumerate(drafts):
            # Slot k's noise conditioned on its race being won by x: E_x = M q_x and
            # E_i = M q_i + Exp(1) for i ≠ x, with M ~ Exp(1) the winning time.
            race_time = rng.exponential()
            noise[k] = race_time * q + rng.exponential(size=vocab)
            noise[k, x] = race_time * q[x]
        with np.errstate(divide="ignore"):
            arrival = np.where(p > 0, noise.min(axis=0) / np.where(p > 0, p, 1.0), np.inf)
        return int(np.argmin(arrival))  # Y = argmin_i min_k E_i^(k) / p_i

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials, n = drafts.shape
        live = np.flatnonzero(p > 0)
        with np.errstate(divide="ignore"):
            key = q[live] / p[live]
        sort = np.argsort(key, kind="stable")
        order = live[sort]
        ratio = key[sort]
        cum_p = np.concatenate(([0.0], np.cumsum(p[order])))
        cum_q = np.concatenate(([0.0], np.cumsum(q[order])))
        m = rng.exponential(size=(trials, n))
        z = rng.exponential(size=trials)
        u = rng.random(trials)
        tokens: np.ndarray = _simulate(drafts, m, z, u, p, q, order, ratio, cum_p, cum_q)
        return tokens
