r"""Predicted tokens per call of an RSD-S beam tree (Jeon et al., arXiv 2402.14160, RSD-S).

Under the model of :mod:`otbound.trees` (every node sees the same ``p``, ``q``: the
context-free, i.i.d. approximation that ``block_efficiency`` makes for k-ary trees), the beam
tree of width ``W`` and depth ``D`` is random: which nodes survive depends on the Gumbel noise
of Stochastic Beam Search (Kool et al., arXiv 1903.06059), so no closed form like
``1 + Σ_v Π a`` exists. :func:`beam_block_efficiency` estimates it by simulation: grow the beam
exactly as :mod:`otbound.tree_decoding._dynamic` does (sequence log-probabilities ``Σ log q``
perturbed with conditional Gumbels, the top ``W`` per level), walk it with the verifier
(RRS without replacement on each node's surviving children, in draw order), and average the
tokens appended, bonus included. With ``W = 1`` the beam is a chain of Gumbel-max draws, i.e. of
i.i.d. draws from ``q``, so the estimate tends to ``(1 − β^{D+1}) / (1 − β)`` with
``β = Σ min(p, q)`` (a test checks it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otbound._spellings import method_keyword
from otbound.verifiers.base import sample_tokens


def _conditional_gumbel(top: float, phi: np.ndarray) -> np.ndarray:
    """``−log(e^{−T} − e^{−Z} + e^{−φ})``, ``Z = max φ`` (stable form; ``−∞`` kept)."""
    out = np.full(phi.shape, -np.inf)
    finite = np.isfinite(phi)
    if not finite.any():
        return out
    f = phi[finite]
    a = np.minimum(f - f.max(), 0.0)
    with np.errstate(divide="ignore"):
        log1mexp = np.where(a > -0.6931471805599453, np.log(-np.expm1(a)), np.log1p(-np.exp(a)))
    u = top - f + log1mexp
    out[finite] = top - np.maximum(u, 0.0) - np.log1p(np.exp(-np.abs(u)))
    return out


def simulate_beam_call(
    verifier: Any,
    p: np.ndarray,
    q: np.ndarray,
    width: int,
    depth: int,
    rng: np.random.Generator,
) -> int:
    """Tokens one call appends on a context-free pair: one beam, one walk."""
    with np.errstate(divide="ignore"):
        logq = np.log(q)
    # per level: each node's parent (index in the previous level, -1: the root) and token
    levels: list[tuple[np.ndarray, np.ndarray]] = []
    g_front, lp_front = np.zeros(1), np.zeros(1)  # the frontier's G and log path probability
    for _ in range(depth):
        g = np.stack(
            [
                _conditional_gumbel(float(gp), lp + logq + rng.gumbel(size=q.size))
                for gp, lp in zip(g_front, lp_front, strict=True)
            ]
        )
        flat = g.ravel()
        finite = int(np.count_nonzero(np.isfinite(flat)))
        keep = min(width, finite)
        top = np.argpartition(-flat, keep - 1)[:keep] if keep < flat.size else np.arange(flat.size)
        top = top[np.argsort(-flat[top], kind="stable")][:keep]
        parent, token = np.divmod(top, q.size)
        levels.append((parent, token))
        g_front, lp_front = flat[top], lp_front[parent] + logq[token]
    tokens, node = 0, -1
    for parent, token in levels:
        kids = [(int(i), int(token[i])) for i in np.flatnonzero(parent == max(node, 0))]
        if not kids:
            break
        drafts = np.array([x for _, x in kids], dtype=np.int64)
        y, accepted = verifier.verify(drafts, p, q, rng)
        tokens += 1
        hits = np.flatnonzero(drafts == y)
        if not accepted or hits.size == 0:
            return tokens
        node = kids[int(hits[0])][0]
    sample_tokens(p, rng.random())  # the bonus draw
    return tokens + 1


@method_keyword("verifier")
def beam_block_efficiency(
    p: np.ndarray,
    q: np.ndarray,
    width: int,
    depth: int,
    trials: int = 2000,
    seed: object = 0,
    *,
    verifier: Any,
) -> float:
    """Mean tokens per call of an RSD-S beam of ``width`` and ``depth`` on one ``(p, q)``.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        The target's and the draft's next-token distributions, the same at every node.
    width, depth : int
        ``W >= 1`` and ``D >= 0`` (``D = 0``: the bonus token only, 1).
    trials : int, default 2000
    seed : int or numpy.random.Generator
    verifier : verifier object
        A verifier of the ``without_replacement`` design (``rrs_without_replacement``). (The
        old order, ``beam_block_efficiency(verifier, p, q, ...)``, warns and still works.)

    Returns
    -------
    float

    Examples
    --------
    >>> from otbound import get_verifier
    >>> p = q = np.array([0.5, 0.5])
    >>> rrs = get_verifier("rrs_without_replacement")
    >>> beam_block_efficiency(p, q, 2, 3, trials=20, verifier=rrs)
    4.0
    """
    if width < 1 or depth < 0 or trials < 1:
        raise ValueError("width and trials must be >= 1 and depth >= 0")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)  # type: ignore[arg-type]
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    return float(
        np.mean([simulate_beam_call(verifier, p, q, width, depth, rng) for _ in range(trials)])
    )
