r"""Recursive rejection sampling without replacement (RSD, MCSD, Sequoia, EAGLE).

Drafts are drawn sequentially without replacement: ``x_k ~ q_k``, where ``q_1 = q`` and
``q_{k+1}`` is ``q_k`` with ``x_k`` removed and renormalised. Starting from ``p_1 = p``, draft
``x_k`` is accepted with probability ``min(1, p_k(x_k) / q_k(x_k))``; on rejection
``p_{k+1} = res(p_k, q_k)``. After ``n`` rejections ``Y ~ p_{n+1}``. Given the history, each round
is single-draft speculative sampling of ``p_k`` against ``q_k``, so ``Y ~ p``.

Exact acceptance:

* ``n = 1``: ``β(p, q)``.
* ``n = 2``:

  .. math::

      α = β(p, q) + \sum_{x_1} (q_{x_1} − p_{x_1})^+ \, β\bigl(p_2, q^{(−x_1)}\bigr),
      \qquad p_2 = res(p, q),

  with ``q^{(−x_1)} = q`` without ``x_1``, renormalised. Since ``p_2(x_1) = 0`` for every
  rejectable ``x_1``, ``β(p_2, q^{(−x_1)}) = g(1 / (1 − q_{x_1}))`` with
  ``g(s) = Σ_y min(p_2(y), s q_y)``, which one sort of ``p_2 / q`` evaluates for every ``x_1``:
  ``O(V log V)``.
* ``n ≥ 3``: ``p_{k+1}`` depends on the earlier drafts through ``q_k``, so the exact value is
  a sum over draft prefixes, ``O(V^n)``; it is computed when ``V^n ≤`` :data:`MAX_TUPLES`
  (``V`` counts the tokens with ``q > 0``) and is ``None`` above (use :meth:`simulate`).

A rejected draft has ``p_k(x) < q_k(x)``, hence ``p_{k+1}(x) = 0``: the acceptance event is
exactly ``Y ∈ x̄``.
"""

from __future__ import annotations

import numba
import numpy as np

from otbound.verifiers.base import BaseVerifier, residual, sample_tokens

__all__ = ["MAX_TUPLES", "RecursiveRejectionWithoutReplacement"]

#: Largest ``V^n`` for which the exact acceptance is enumerated at ``n ≥ 3``.
MAX_TUPLES = 200_000


@numba.njit(cache=True)
def _two_prepare(p, q):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``1 − β``, and ``p_2 = res(p, q)``, ``q`` and ``p_2 / q`` on the tokens with ``p > q``."""
    vocab = p.shape[0]
    miss = 0.0
    count = 0
    for y in range(vocab):
        d = p[y] - q[y]
        if d > 0.0:
            miss += d  # 1 − β(p, q), summed without cancellation
            count += 1
    ratio = np.empty(count)
    mass = np.empty(count)
    draft = np.empty(count)
    k = 0
    for y in range(vocab):
        d = p[y] - q[y]
        if d > 0.0:
            mass[k] = d / miss
            draft[k] = q[y]
            ratio[k] = mass[k] / q[y] if q[y] > 0.0 else np.inf
            k += 1
    return miss, ratio, mass, draft


@numba.njit(cache=True)
def _two_sum(p, q, miss, ratio, mass, draft, order):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``β + Σ_{x_1} (q − p)⁺_{x_1} g(1 / (1 − q_{x_1}))`` given the sort ``order`` of ``ratio``."""
    vocab = p.shape[0]
    count = ratio.shape[0]
    cum_p = np.zeros(count + 1)
    tail_q = np.zeros(count + 1)
    sorted_ratio = np.empty(count)
    for i in range(count):
        cum_p[i + 1] = cum_p[i] + mass[order[i]]
        sorted_ratio[i] = ratio[order[i]]
    for i in range(count - 1, -1, -1):
        tail_q[i] = tail_q[i + 1] + draft[order[i]]
    total = 0.0
    for y in range(vocab):
        total += q[y]
    alpha = 1.0 - miss
    for x in range(vocab):
        reject = q[x] - p[x]  # P(x_1 = x and rejected)
        if reject <= 0.0:
            continue
        if q[x] <= 0.5:
            rest = total - q[x]
        else:  # 1 − q_x by summing the others: no cancellation
            rest = 0.0
            for y in range(vocab):
                if y != x:
                    rest += q[y]
        scale = 1.0 / rest
        lo = 0
        hi = count
        while lo < hi:  # tokens with ratio <= scale give p_2, the others scale * q
            mid = (lo + hi) // 2
            if sorted_ratio[mid] <= scale:
                lo = mid + 1
            else:
                hi = mid
        alpha += reject * (cum_p[lo] + scale * tail_q[lo])
    return alpha


def _acceptance_two(p: np.ndarray, q: np.ndarray) -> float:
    """The ``n = 2`` closed form in ``O(V log V)``.

    ``g(s) = Σ_y min(p_2(y), s q_y)`` needs only the tokens with ``p_2 > 0`` (``p > q``): sorted
    by ``p_2 / q``, those at or below ``s`` give ``p_2``, the others ``s q``.
    """
    miss, ratio, mass, draft = _two_prepare(p, q)
    if miss <= 0.0:
        return 1.0
    return float(_two_sum(p, q, miss, ratio, mass, draft, np.argsort(ratio)))


def _acceptance_enumerated(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """Exact acceptance by expanding every draft prefix (vectorised level by level)."""
    targets = p[None, :]  # p_k for each live prefix
    drafts = q[None, :]  # q_k for each live prefix
    reach = np.ones(1)  # P(prefix drawn and every draft in it rejected)
    alpha = 0.0
    for k in range(n):
        alpha += float(np.sum(reach * np.minimum(targets, drafts).sum(axis=1)))
        if k == n - 1:
            break
        reject = np.maximum(drafts - targets, 0.0)  # (m, V): x_k drawn and rejected
        miss = np.maximum(targets - drafts, 0.0)
        norm = miss.sum(axis=1, keepdims=True)
        nxt = np.divide(miss, norm, out=targets.copy(), where=norm > 0)
        parent, token = np.nonzero(reject > 0)
        reach = reach[parent] * reject[parent, token]
        targets = nxt[parent]
        child = drafts[parent].copy()
        child[np.arange(token.size), token] = 0.0
        child /= child.sum(axis=1, keepdims=True)
        drafts = child
        if reach.size == 0:
            break
    return alpha


@numba.njit(cache=True)
def _next_residual(targets, level, q, drafts, total):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``targets[level + 1] = res(targets[level], q without drafts[:level], renormalised)``.

    An empty residual (the target is covered) keeps the previous target.
    """
    left = total
    for j in range(level):
        left -= q[drafts[j]]
    norm = 0.0
    for y in range(targets.shape[1]):
        d = targets[level, y] - q[y] / left
        d = d if d > 0.0 else 0.0
        targets[level + 1, y] = d
        norm += d
    if norm > 0.0:
        for y in range(targets.shape[1]):
            targets[level + 1, y] /= norm
    else:
        targets[level + 1, :] = targets[level, :]


@numba.njit(cache=True)
def _verify_sorted(p, q, drafts, u, v):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """Per-trial RRS without replacement; trials sorted lexicographically by their drafts.

    ``targets[k]`` (``p_{k+1}`` in the module's 1-based notation) depends on the drafts
    ``x_1..x_{k−1}`` only, so it is recomputed only when that prefix changes between
    consecutive trials. The last level keeps a CDF for the final residual draw.
    """
    trials, n = drafts.shape
    vocab = p.shape[0]
    targets = np.zeros((n + 1, vocab))
    cdf = np.zeros(vocab)
    targets[0, :] = p
    valid = 0  # targets[0..valid] are valid for the current prefix
    cdf_valid = False
    out = np.empty(trials, dtype=np.int64)
    total = 0.0
    for y in range(vocab):
        total += q[y]
    for t in range(trials):
        if t > 0:
            common = 0
            while common < n and drafts[t, common] == drafts[t - 1, common]:
                common += 1
            # targets[k] depends on drafts[0..k-2]; valid while k - 1 <= common
            if valid > common + 1:
                valid = common + 1
                cdf_valid = False
        rem = total
        token = -1
        for k in range(n):
            x = drafts[t, k]
            while valid < k:  # build targets[valid + 1] = res(targets[valid], q_valid)
                _next_residual(targets, valid, q, drafts[t], total)
                valid += 1
                cdf_valid = False
            qx = q[x] / rem
            ratio = targets[k, x] / qx
            if u[t, k] < ratio:
                token = x
                break
            rem -= q[x]
        if token < 0:
            while valid < n:
                _next_residual(targets, valid, q, drafts[t], total)
                valid += 1
                cdf_valid = False
            if not cdf_valid:
                acc = 0.0
                for y in range(vocab):
                    acc += targets[n, y]
                    cdf[y] = acc
                cdf_valid = True
            w = v[t] * cdf[vocab - 1]
            lo = 0
            hi = vocab - 1
            while lo < hi:  # first y with cdf[y] > w
                mid = (lo + hi) // 2
                if cdf[mid] > w:
                    hi = mid
                else:
                    lo = mid + 1
            while lo > 0 and targets[n, lo] <= 0.0:  # never return a zero (rounding at the top)
                lo -= 1
            token = lo
        out[t] = token
    return out


class RecursiveRejectionWithoutReplacement(BaseVerifier):
    """RRS without replacement: each round is speculative sampling of ``p_k`` against ``q_k``.

    ``α = β(p, q) + Σ_{x_1} (q_{x_1} − p_{x_1})⁺ β(res(p, q), q^{(−x_1)})`` at ``n = 2``;
    exact enumeration for ``n ≥ 3`` when ``V^n ≤ 200,000``, else ``None``.
    """

    name = "rrs_without_replacement"
    default_design = "without_replacement"

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        if n == 1:
            return float(np.minimum(p, q).sum())
        if n == 2:
            return _acceptance_two(p, q)
        support = int(np.count_nonzero(q > 0))
        if float(support) ** n > MAX_TUPLES:
            return None
        return _acceptance_enumerated(p, q, n)

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        target, draft = p, q.copy()
        for x in drafts:
            if rng.random() < min(1.0, target[x] / draft[x]):
                return int(x)
            target = residual(target, draft)
            draft[x] = 0.0  # sample the next draft without x
            draft = draft / draft.sum()
        return int(sample_tokens(target, rng.random()))

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials: int
        n: int
        trials, n = drafts.shape
        u = rng.random((trials, n))
        v = rng.random(trials)
        order = np.lexsort(drafts.T[::-1])
        tokens = np.empty(trials, dtype=np.int64)
        tokens[order] = _verify_sorted(
            p, q, np.ascontiguousarray(drafts[order]), u[order], v[order]
        )
        return tokens
