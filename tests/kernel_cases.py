"""For the tests that hold a compiled or cached path equal to its previous path: seeded hard
(p, q) pairs (Zipf, peaked, ties, extreme masses and zeros) and numpy references shared by
several test files."""

from __future__ import annotations

import numpy as np


def kernel_cases(
    count: int, seed: int, big: tuple[int, ...] = (8_192,)
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``count`` seeded (kind, p, q) pairs: the first ones of the sizes in ``big``, the others
    of 2 to 400 tokens; the kinds cycle through Zipf, peaked (one token holding most of
    ``p``), ties, extreme masses (1e-30 to 1) and zeros (about 30 % of each row)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        vocab = big[i] if i < len(big) else int(rng.integers(2, 400))
        kind = ["zipf", "peaked", "ties", "extreme", "zeros"][i % 5]
        ranks = np.arange(1, vocab + 1, dtype=float)
        if kind == "zipf":
            p, q = ranks ** -rng.uniform(0.8, 1.5), rng.permutation(ranks) ** -1.1
        elif kind == "peaked":
            base = rng.normal(0, 3, vocab)
            p, q = np.exp(base + rng.normal(0, 1, vocab)), np.exp(base + rng.normal(0, 1, vocab))
            p[rng.integers(vocab)] += 50 * p.sum()
        elif kind == "ties":
            p, q = rng.integers(1, 4, vocab).astype(float), rng.integers(1, 4, vocab).astype(float)
        elif kind == "extreme":
            p, q = 10.0 ** rng.uniform(-30, 0, vocab), 10.0 ** rng.uniform(-30, 0, vocab)
        else:
            p, q = rng.random(vocab), rng.random(vocab)
            p[rng.random(vocab) < 0.3] = 0.0
            q[rng.random(vocab) < 0.3] = 0.0
            p[0] = q[0] = 1.0
        out.append((kind, p / p.sum(), q / q.sum()))
    return out


def coincidence_terms(
    chosen: np.ndarray, accept: np.ndarray, rest: np.ndarray, drafts: np.ndarray
) -> np.ndarray:
    """The numpy reference of importance sampling's coincidence term, per draft tuple: the
    selected draft is rejected (``Σ_k chosen_k (1 − accept[x_k])``) and the residual ``rest``
    lands on one of the tuple's distinct drafts."""
    fail = np.sum(chosen * (1.0 - accept[drafts]), axis=1)
    ordered = np.sort(drafts, axis=1)
    first = np.ones_like(ordered, dtype=bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return fail * np.sum(rest[ordered] * first, axis=1)


def numpy_accept_rest(p: np.ndarray, induced: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Importance sampling's per-step pieces as numpy computes them: ``min(1, p / p_I)`` (0
    off ``p_I``'s support), the residual ``res(p, p_I)`` and ``Σ min(p, p_I)``."""
    from otbound.verifiers.base import residual

    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(induced > 0, np.minimum(1.0, p / induced), 0.0)
    return accept, residual(p, induced), np.minimum(p, induced).sum()
