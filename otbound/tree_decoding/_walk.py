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

**Sequence-level verifiers** (:data:`SEQUENCE_TREE_VERIFIERS`: ``block`` on chains, Sun et al.;
``traversal`` on chains and trees, Weng et al.; ``multipath`` on ``K`` independent paths,
otbound's reconstruction of Thomas and Pal's algorithm, :mod:`otbound.sequence.multipath`) do
not decide node by node: they see the whole drafted tree. Their walk
(:class:`SequenceTreeVerifier`) feeds the tree's tokens, the target's row after every node and
the draft's row of every internal node to the verifier's one-trial
:meth:`otbound.sequence.SequenceVerifier.verify_rows` (the on-path probabilities these
verifiers are defined by, so they apply to context-dependent models as they are), and appends
its output: the accepted path and one correction or bonus token. The tree is drawn with the
drafting the verifier assumes (its ``design``: i.i.d. draws for ``block`` and ``multipath``,
siblings without replacement for ``traversal``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from otbound.sequence import SequenceVerifier, get_sequence_verifier, rows_model
from otbound.tree_decoding._layout import TreeLayout
from otbound.verifiers.base import sample_tokens
from otbound.verifiers.registry import get_verifier

#: Sequence-level verifiers tree decoding runs, with the draft design that grows their trees.
SEQUENCE_TREE_VERIFIERS: dict[str, str] = {
    "block": "iid",
    "traversal": "without_replacement",
    "multipath": "iid",
}

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
        (:func:`otbound.get_verifier`), or a :class:`SequenceTreeVerifier` (walks the whole
        tree at once, see the module docstring).
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
    if isinstance(verifier, SequenceTreeVerifier):
        return verifier.walk(layout, tokens, p, q, rng)
    return walk_from(verifier, layout.children, tokens, p, q, rng)


def walk_from(
    verifier: Any,
    children: Sequence[Sequence[int]],
    tokens: np.ndarray,
    p: Rows,
    q: Rows,
    rng: np.random.Generator,
    *,
    row: int = 0,
    accepted_tokens: Sequence[int] = (),
    accepted_nodes: Sequence[int] = (),
) -> WalkResult:
    """The token-level walk of :func:`walk_tree` from layout row ``row`` down.

    ``children[r]`` lists the nodes below row ``r`` (canonical indices); ``accepted_tokens``
    and ``accepted_nodes`` are what the walk has already appended above ``row`` (a target
    root's child, :func:`otbound.tree_decoding._dynamic.walk_rows`). At each row the verifier
    sees the children's tokens; an accepted draft moves the walk to its node's row, a
    rejection ends it with the correction, a leaf with a bonus draw from ``p``.
    """
    out = list(accepted_tokens)
    path = list(accepted_nodes)
    while True:
        kids = list(children[row])
        if not kids:
            out.append(int(sample_tokens(np.asarray(p[row]), rng.random())))
            return WalkResult(tuple(out), tuple(path), True)
        drafts = tokens[kids]
        y, accepted = verifier.verify(drafts, p[row], q[row], rng)
        out.append(int(y))
        hits = np.flatnonzero(drafts == y)
        if not accepted or hits.size == 0:
            return WalkResult(tuple(out), tuple(path), False)
        node = kids[int(hits[0])]
        path.append(node)
        row = node + 1


class SequenceTreeVerifier:
    """A sequence-level verifier (:mod:`otbound.sequence`) as a tree-decoding verifier.

    Attributes
    ----------
    name : str
    design : str
        How :func:`otbound.tree_decoding.grow_tree` draws the children of a node.
    sequence : otbound.sequence.SequenceVerifier
    sequence_level : bool
        Always True: :func:`walk_tree` calls :meth:`walk`, and the token-level prediction and
        bound do not apply.
    """

    sequence_level = True
    fixed_n = None

    def __init__(self, verifier: str | SequenceVerifier) -> None:
        self.sequence = get_sequence_verifier(verifier)
        self.name = self.sequence.name
        if self.name not in SEQUENCE_TREE_VERIFIERS:
            raise ValueError(
                f"sequence verifier {self.name!r} has no tree-decoding walk; choose from "
                f"{', '.join(SEQUENCE_TREE_VERIFIERS)}"
            )
        self.design = SEQUENCE_TREE_VERIFIERS[self.name]

    def __repr__(self) -> str:
        return f"<sequence tree verifier {self.name!r}>"

    def not_applicable(self, layout: TreeLayout) -> str | None:
        """Why this verifier cannot walk the tree (one readable sentence), or None."""
        if not layout.size:
            return None
        vocab = 2
        model = rows_model(
            [list(p) for p in layout.paths],
            [np.full(vocab, 1 / vocab)] * (layout.size + 1),
            [np.full(vocab, 1 / vocab)] * (layout.size + 1),
        )
        problem = self.sequence.tree_problem(model)
        if problem is None:
            return None
        shapes = {"block": "chains (chain:D)", "multipath": "independent paths (pathsK:D)"}
        return f"{problem}; {self.name} walks {shapes.get(self.name, 'trees')} only"

    def walk(
        self,
        layout: TreeLayout,
        tokens: np.ndarray,
        p: Rows,
        q: Rows,
        rng: np.random.Generator,
    ) -> WalkResult:
        """One target call: the sequence verifier on the whole drafted tree."""
        if not layout.size:
            return WalkResult((int(sample_tokens(np.asarray(p[0]), rng.random())),), (), True)
        paths = [list(path) for path in layout.paths]
        out = self.sequence.verify_rows(tokens, p, q, paths, rng)
        accepted = out[:-1]
        # the accepted path's nodes: the first tree path with these tokens (independent paths
        # can share a prefix, so follow every candidate until the tokens single one out)
        paths_so_far: list[list[int]] = [[]]
        for token in accepted:
            paths_so_far = [
                [*path, k]
                for path in paths_so_far
                for k in layout.children[path[-1] + 1 if path else 0]
                if int(tokens[k]) == token
            ]
            if not paths_so_far:
                raise AssertionError(f"{self.name} accepted tokens that are not a tree path")
        nodes = paths_so_far[0]
        leaf = not layout.children[nodes[-1] + 1 if nodes else 0]
        return WalkResult(tuple(int(t) for t in out), tuple(nodes), leaf)


def tree_verifier(verifier: object) -> Any:
    """A verifier for tree decoding: a sequence-level one by name, else a token-level one.

    ``"block"``, ``"traversal"`` and ``"multipath"`` (:data:`SEQUENCE_TREE_VERIFIERS`) or a
    :class:`otbound.sequence.SequenceVerifier` give a :class:`SequenceTreeVerifier`; anything
    else goes to :func:`otbound.get_verifier`.
    """
    if isinstance(verifier, SequenceTreeVerifier):
        return verifier
    if isinstance(verifier, SequenceVerifier) or (
        isinstance(verifier, str) and verifier in SEQUENCE_TREE_VERIFIERS
    ):
        return SequenceTreeVerifier(verifier)
    return get_verifier(verifier)
