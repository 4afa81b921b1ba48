r"""The verifier walking a draft tree: the tokens one target call appends (pure numpy).

Start at the root. At an accepted node ``u`` with children ``c_1..c_k`` (draft order), run the
verifier once on their tokens with the target's ``p(· | u)`` and the draft's ``q(· | u)``:

.. math::  (Y, \text{accepted}) = v.\text{verify}((x_{c_1}, …, x_{c_k}), p_u, q_u, \text{rng}).

Append ``Y``. If ``Y`` is a child's token, descend into the first such child (i.i.d. siblings
can repeat a token; their subtrees were drawn alike, so the choice does not bias anything);
otherwise ``Y`` is the correction and the walk stops. At an accepted node without children
append a bonus token ``Y ~ p(· | u)`` and stop. Every node's ``Y`` is distributed as ``p_u``
(the verifier is lossless) and the next node's drafts are drawn given the accepted path only, so
the appended tokens are a sample of the target's own sampling, token by token.

Every verification and the bonus draw take fresh numbers from one ``rng`` (reusing them
across nodes or steps, a known flaw of some reference code, is lossy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from otbound.tree_decoding._layout import TreeLayout
from otbound.verifiers.base import sample_tokens

#: Per-row distributions: an array (rows, V), a mapping row -> (V,), or anything indexable so.
Rows = np.ndarray | Mapping[int, np.ndarray] | Sequence[np.ndarray] | Any


@dataclass(frozen=True)
class WalkResult:
    """What one target call appends.

    Attributes
    ----------
    tokens : tuple of int
        The accepted drafts along the path, then the correction or the bonus token.
    nodes : tuple of int
        The accepted nodes (canonical indices), root side first.
    bonus : bool
        Whether the last token is a bonus (the walk reached a leaf), not a correction.
    """

    tokens: tuple[int, ...]
    nodes: tuple[int, ...]
    bonus: bool

    @property
    def accepted(self) -> int:
        """Number of drafts accepted (``len(tokens) − 1``)."""
        return len(self.nodes)


def walk_tree(
    verifier: Any,
    layout: TreeLayout,
    tokens: Sequence[int] | np.ndarray,
    p: Rows,
    q: Rows,
    rng: np.random.Generator,
) -> WalkResult:
    """Verify a draft tree from the root down (see the module docstring).

    Parameters
    ----------
    verifier : verifier object
        Anything with ``verify(drafts, p, q, rng) -> (token, accepted)``
        (:func:`otbound.get_verifier`).
    layout : TreeLayout
        The tree's shape.
    tokens : sequence of int, length N
        The node tokens in canonical order.
    p, q : per-row distributions
        ``p[r]``, ``q[r]``: the target's and the draft's distribution at layout row ``r``
        (0: the root; ``i + 1``: after the path to node ``i``), shape (V,). ``p`` is read on
        the accepted path, ``q`` at its internal nodes only.
    rng : numpy.random.Generator
        Advanced by every verification and the bonus draw.

    Returns
    -------
    WalkResult

    Raises
    ------
    ValueError
        ``tokens`` does not have one entry per node.

    Examples
    --------
    >>> from otbound import get_verifier
    >>> layout = TreeLayout.from_paths([[0], [1]])
    >>> p = q = np.array([[0.5, 0.5, 0.0]] * 3)
    >>> out = walk_tree(get_verifier("rrs"), layout, [0, 1], p, q, np.random.default_rng(0))
    >>> out.accepted, len(out.tokens), out.bonus  # p = q: always accepted, then a bonus
    (1, 2, True)
    """
    tokens = np.asarray(tokens, dtype=np.int64).ravel()
    if tokens.size != layout.size:
        raise ValueError(f"tokens has {tokens.size} entries but the tree has {layout.size} nodes")
    out: list[int] = []
    path: list[int] = []
    row = 0
    while True:
        kids = layout.children[row]
        if not kids:
            out.append(int(sample_tokens(np.asarray(p[row]), rng.random())))
            return WalkResult(tuple(out), tuple(path), True)
        drafts = tokens[list(kids)]
        y, accepted = verifier.verify(drafts, p[row], q[row], rng)
        out.append(int(y))
        hits = np.flatnonzero(drafts == y)
        if not accepted or hits.size == 0:
            return WalkResult(tuple(out), tuple(path), False)
        node = kids[int(hits[0])]
        path.append(node)
        row = node + 1
