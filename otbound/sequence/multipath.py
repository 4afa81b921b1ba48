r"""Multi-path block verification on ``K`` independent paths: otbound's *reconstruction* of greedy
multi-path block verification (Thomas and Pal, *Greedy Multi-Path Block Verification for Faster
Decoding in Speculative Sampling*, arXiv 2602.16961, GBV).

**What this is, and is not.** The paper's text beyond its abstract was not available; the
algorithm below is rebuilt from the authors' reference implementation as its README describes
it and from a third-party replication (see *Source* below). It is lossless (tested by exact
enumeration), but it is not checked to be the authors' algorithm, and it disagrees with what
they report: the paper reports gains over block verification, while this rule can accept
less than block verification on a single path (the pinned case below: 0.666 against 0.95,
``tests/test_sequence.py``). Read its numbers as those of this reconstruction.

**Drafting.** ``K`` draft paths of length ``L`` drawn independently from the draft model (the
tree is ``K`` chains from the root, :func:`paths_tree`; two paths may share tokens). Under
:class:`~otbound.sequence.SequenceModel` this is ``drafting = "iid"``.

**Selecting a path (the greedy rule).** Every context ``u`` orders the vocabulary by the local
ratio ``r_u(x) = min(1, p_u(x) / q_u(x))``, ties broken by the token id (larger last). The paths
are compared lexicographically, position by position, each position under the order of the
shared context before it; the verifier takes the largest path ``X*`` (walk from the root,
always to the largest child). ``X*`` is the maximum of ``K`` i.i.d. draws, so its law is

.. math::

    Q^*(x_{1:L}) = F(x)^K − F(x^-)^K,

``F(x)`` (``F(x^-)``) the draft mass of the paths ``≤ x`` (``< x``). Along ``X*``, with
``Q_u = Q(u)`` the draft mass of the prefix ``u`` and ``A_u`` the mass of the paths below
``u``'s subtree (``A_{()} = 0``, ``A_{uc} = A_u + Q_u F_u^-(c)``, ``F_u^-(c) = Σ_{x < c} q_u(x)``),
its conditional laws — the *skewed* draft rows — are

.. math::

    q^*_u(c) = \frac{(A_u + Q_u (F_u^-(c) + q_u(c)))^K − (A_u + Q_u F_u^-(c))^K}
                    {(A_u + Q_u)^K − A_u^K}.

**Verifying it.** Block verification (:func:`otbound.sequence.block.block_verify`, Sun et al.)
on the chain ``X*`` with target rows ``p_u`` and draft rows ``q^*_u``: it is lossless for any
draft law of the chain, and ``X*`` follows ``Q*`` exactly, so the emitted tokens follow the
target (tested by exact enumeration, :func:`otbound.sequence.lossless_gap`). ``K = 1`` is block
verification. Only the rows on ``X*``'s path are read, so the same code runs on a real model's
drafted tree (:meth:`~otbound.sequence.SequenceVerifier.verify_rows`).

Source. The paper's text beyond its abstract (an LP view of block verification, extended to
several paths; a greedy member of that class; "over 30% more block efficiency than BV") was not
readable here. The algorithm above follows the authors' reference implementation as described
in its README (``K`` i.i.d. paths of length ``L``, one tree-masked target pass, a verified
prefix of one drafted path plus one residual token) and a third-party replication of its
``gbv_verify``/``compute_skew`` (greedy walk on the capped ratio ``min(1, p/q)``, the skewed
law above, block verification with it). The lossless argument and ``Q*`` are derived here.

*Not a theorem:* with the capped-ratio order the selected path's law can overshoot the target.
With ``p = (0.5, 0.5)``, ``q = (0.45, 0.55)``, ``L = 1``, ``K = 3`` the rule takes token 0
unless all three paths drew token 1, so ``q* = (1 − 0.55³, 0.55³) = (0.834, 0.166)`` and the
accepted drafts per call are ``Σ min(p, q*) = 0.5 + 0.55³ = 0.666``, against
``Σ min(p, q) = 0.95`` for block verification of one path: three paths accept less than one.
It is always below the block-level bounds of its i.i.d. tree
(:func:`~otbound.sequence.optimal_verification_acceptance` with ``drafting="iid"``). Both are
tested, against enumeration oracles written from the definitions.
"""

from __future__ import annotations

import numpy as np

from otbound.sequence._choices import Chooser
from otbound.sequence._models import Node, SequenceModel
from otbound.sequence._protocol import Drafts, Emitted, SequenceVerifier
from otbound.sequence.block import block_verify

__all__ = ["MultiPathVerifier", "paths_tree", "ratio_order", "skewed_row"]


def paths_tree(k: int, depth: int) -> list[list[int]]:
    """``k`` chains of ``depth`` nodes from the root (a path list).

    Examples
    --------
    >>> paths_tree(2, 2)
    [[0], [1], [0, 0], [1, 0]]
    """
    if k < 1 or depth < 1:
        raise ValueError(f"paths_tree needs k >= 1 paths of depth >= 1, got k={k}, depth={depth}")
    return [[i] + [0] * j for j in range(depth) for i in range(k)]


def ratio_order(target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """Rank of every token under the local order (``min(1, p/q)``, then the token id).

    Returns
    -------
    numpy.ndarray of int64, shape (V,)
        ``rank[x]``: 0 for the smallest token, ``V − 1`` for the largest.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(draft > 0, np.minimum(1.0, target / np.where(draft > 0, draft, 1.0)), 1.0)
    order = np.lexsort((np.arange(ratio.size), ratio))  # by ratio, then token id
    rank: np.ndarray = np.empty(ratio.size, dtype=np.int64)
    rank[order] = np.arange(ratio.size)
    return rank


def skewed_row(
    draft: np.ndarray, rank: np.ndarray, below: float, mass: float, k: int
) -> np.ndarray:
    r"""``q^*_u``: the law of the next token of the largest of ``k`` i.i.d. paths through ``u``.

    Parameters
    ----------
    draft : numpy.ndarray, shape (V,)
        ``q_u``.
    rank : numpy.ndarray of int64
        :func:`ratio_order` at ``u``.
    below, mass : float
        ``A_u`` (draft mass of the paths ordered below ``u``'s subtree) and ``Q_u``.
    k : int
        Number of paths.

    Returns
    -------
    numpy.ndarray
        ``((a + z)^k − a^k)`` normalised, with ``a = A_u + Q_u F_u^-(c)``, ``z = Q_u q_u(c)``,
        computed as ``z Σ_{i<k} (a + z)^i a^{k−1−i}`` after dividing by ``A_u + Q_u``.
    """
    if k == 1:
        same: np.ndarray = draft.copy()
        return same
    order = np.argsort(rank)
    cdf_before = np.empty_like(draft)
    cdf_before[order] = np.concatenate(([0.0], np.cumsum(draft[order])[:-1]))
    scale = below + mass
    a = (below + mass * cdf_before) / scale
    z = mass * draft / scale
    total = np.zeros_like(draft)
    for i in range(k):
        total += (a + z) ** i * a ** (k - 1 - i)
    weights: np.ndarray = np.maximum(z * total, 0.0)
    skewed: np.ndarray = weights / weights.sum()
    return skewed


class MultiPathVerifier(SequenceVerifier):
    """Multi-path block verification on ``K`` independent draft paths: a reconstruction of GBV
    (Thomas and Pal) that can accept less than block verification of one path (see the module
    docstring).

    Examples
    --------
    >>> v = MultiPathVerifier()
    >>> round(v.acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], paths_tree(1, 2)) * 9, 9)  # = BV
    11.0
    >>> round(v.acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], paths_tree(2, 2)) * 81, 6)
    131.0
    """

    name = "multipath"
    drafting = "iid"

    def tree_problem(self, model: SequenceModel) -> str | None:
        """The tree must be ``K`` chains from the root, all of the same depth."""
        inner = [kids for node, kids in model.children.items() if node != ()]
        leaves = {len(node) for node in model.nodes if not model.children[node]}
        if any(len(kids) > 1 for kids in inner) or len(leaves) != 1:
            return (
                f"verifier {self.name!r} verifies independent draft paths: K chains of equal "
                "depth from the root (paths_tree(K, depth), tree family pathsK); got a tree "
                "that branches below the root or has paths of different depths"
            )
        return None

    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        starts = model.children[()]
        depth = model.depth
        chains: list[list[Node]] = []
        for start in starts:
            chain = [start]
            while model.children[chain[-1]]:
                chain.append(model.children[chain[-1]][0])
            chains.append(chain)
        # The largest path: compare position by position under the shared context's order.
        best = chains[0]
        for chain in chains[1:]:
            for d in range(depth):
                x, y = drafts[model.index[chain[d]]], drafts[model.index[best[d]]]
                if x != y:
                    context = () if d == 0 else best[d - 1]  # the same tokens as chain[d - 1]'s
                    rank = ratio_order(model.target_row(context), model.draft_row(context))
                    if rank[x] > rank[y]:
                        best = chain
                    break
        tokens = tuple(drafts[model.index[node]] for node in best)
        rows = self._skewed_rows(best, tokens, model, len(chains))
        return block_verify(tokens, rows, chooser)

    def _skewed_rows(
        self, chain: list[Node], tokens: tuple[int, ...], model: SequenceModel, k: int
    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """``(p_u, q^*_u)`` along the selected path (``q^*`` None after the last token)."""
        contexts: list[Node] = [(), *chain[:-1]]
        rows: list[tuple[np.ndarray, np.ndarray | None]] = []
        below, mass = 0.0, 1.0
        for context, x in zip(contexts, tokens, strict=True):
            target, draft = model.target_row(context), model.draft_row(context)
            rank = ratio_order(target, draft)
            rows.append((target, skewed_row(draft, rank, below, mass, k)))
            below += mass * float(draft[rank < rank[x]].sum())
            mass *= float(draft[x])
        rows.append((model.target_row(chain[-1]), None))
        return rows
