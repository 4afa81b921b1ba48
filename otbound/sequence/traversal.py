r"""Traversal verification (Weng et al., *Traversal Verification for Speculative Tree Decoding*,
NeurIPS 2025, arXiv 2505.12398, the traversal verification algorithm) on draft trees and chains.

Every node ``v`` carries a target law ``P_v``, a draft law ``Q_v`` for its children (initially
``p_{d+1}`` and ``q_{d+1}`` at depth ``d``) and a *sequence-level* acceptance weight

.. math::

    w_{\text{root}} = 1,\qquad
    w_v = \min\Bigl(1,\ w_u\,\frac{P_u(x_v)}{Q_u(x_v)}\Bigr)\quad(u \text{ the parent of } v),

the probability mass of the whole path ``root → v`` rather than of its last token. The
traversal goes from the leaves to the root: take the first leaf ``v`` in depth-first order
(follow the first remaining child from the root). If ``v`` is the root, emit a token of
``P_{\text{root}}`` (``τ = 0``). Otherwise accept ``v`` with probability ``w_v``: emit the path to
``v`` and a token of ``P_v``. On rejection delete ``v`` and update its parent ``u``:

.. math::

    ρ = \sum_x (w_u P_u(x) − Q_u(x))^+,\quad
    P_u ← \frac{(w_u P_u − Q_u)^+}{ρ},\quad
    w_u ← \frac{ρ}{ρ + 1 − w_u},\quad
    Q_u ← Q_u \text{ without } x_v,\ \text{renormalised},

then recompute the weights of ``u``'s remaining descendants from the formula above (``u``
becomes a leaf when its last child is deleted). The draft tree's siblings are drawn without
replacement, in the order the traversal visits them. On a chain this is block verification
step for step (``w_u`` after the rejection of ``u``'s child is Sun et al.'s ``h``), the optimum
of Weng et al.'s optimality result on chains.
"""

from __future__ import annotations

import numpy as np

from otbound.sequence._choices import Chooser
from otbound.sequence._models import SequenceModel
from otbound.sequence._protocol import Drafts, Emitted, SequenceVerifier, positive_part

_Node = tuple[int, ...]

__all__ = ["TraversalVerifier"]


class TraversalVerifier(SequenceVerifier):
    """Traversal verification, leaves to root (Weng et al. 2025).

    Examples
    --------
    >>> v = TraversalVerifier()
    >>> round(v.acceptance([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2) * 9, 9)  # = block verification
    11.0
    >>> round(v.acceptance([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [[0], [1], [0, 0]]), 6)
    1.37
    """

    name = "traversal"

    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        token = {node: drafts[i] for i, node in enumerate(model.nodes)}
        children = {node: list(kids) for node, kids in model.children.items()}
        target = {node: model.target_row(node).copy() for node in children}
        draft = {node: model.draft_row(node).copy() for node in children if children[node]}
        weight: dict[tuple[int, ...], float] = {(): 1.0}
        self._reweigh((), children, token, target, draft, weight)
        while True:
            leaf: tuple[int, ...] = ()
            while children[leaf]:
                leaf = children[leaf][0]
            if leaf == ():
                return (chooser.categorical(target[leaf]),)
            if chooser.bernoulli(weight[leaf]):
                path = tuple(token[leaf[:k]] for k in range(1, len(leaf) + 1))
                return (*path, chooser.categorical(target[leaf]))
            parent = leaf[:-1]
            children[parent].remove(leaf)
            self._reject_child(parent, token[leaf], target, draft, weight)
            self._reweigh(parent, children, token, target, draft, weight)

    def _reject_child(
        self,
        parent: _Node,
        x: int,
        target: dict[_Node, np.ndarray],
        draft: dict[_Node, np.ndarray],
        weight: dict[_Node, float],
    ) -> None:
        """Residual target and weight of ``parent``, and its draft law without ``x``."""
        excess = positive_part(weight[parent], target[parent], draft[parent])
        mass = float(excess.sum())
        denominator = mass + 1.0 - weight[parent]
        if mass > 0.0:
            target[parent] = excess / mass
        weight[parent] = 1.0 if denominator <= 0.0 else mass / denominator
        remaining = draft[parent].copy()
        remaining[x] = 0.0
        total = remaining.sum()
        draft[parent] = remaining / total if total > 0 else remaining

    @staticmethod
    def _reweigh(
        top: _Node,
        children: dict[_Node, list[_Node]],
        token: dict[_Node, int],
        target: dict[_Node, np.ndarray],
        draft: dict[_Node, np.ndarray],
        weight: dict[_Node, float],
    ) -> None:
        """``w_v = min(1, w_u P_u(x_v) / Q_u(x_v))`` below ``top``, parents first."""
        stack = [top]
        while stack:
            u = stack.pop()
            for v in children[u]:
                x = token[v]
                q = draft[u][x]
                weight[v] = min(1.0, weight[u] * target[u][x] / q) if q > 0 else 0.0
                stack.append(v)
