r"""Growing a draft tree with the draft model and a draft design, one depth at a time.

At a node whose context is ``prefix + path``, its ``k`` children are one draw of ``k`` drafts
from the design (:func:`otbound.get_design`) applied to the draft model's
``q(· | prefix + path)``: i.i.d. for ``rrs``/``kseq``, sequential without replacement for
``rrs_without_replacement``, SpecHub's hub pair, or Hu et al.'s greedy set. Child ``j`` holds
draft ``j``, so sibling order is draft order, as the verifiers expect.

Depth ``d`` needs ``q`` at every node of depth ``d − 1``: one forward pass of the draft model
over the prefix and the nodes of depth ``< d`` with the tree attention of :mod:`._mask` gives
them all, so a tree of depth ``D`` costs ``D`` draft passes (with a key/value cache,
:mod:`._scorer`, each pass feeds only the nodes it adds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otbound.drafts import DraftDesign, get_design
from otbound.tree_decoding._layout import TreeLayout
from otbound.tree_decoding._scorer import PlainScorer
from otbound.tree_decoding._scoring import NodeDistributions
from otbound.verifiers.base import sample_drafts


@dataclass(frozen=True)
class DraftTree:
    """The drafts of a batch of trees and the draft distributions they were drawn from.

    Attributes
    ----------
    tokens : numpy.ndarray of int64, shape (B, N)
        Node ``i``'s token in row ``b`` (canonical node order of the layout).
    q : list of dict
        Per row: ``q[b][r]`` (float64, (V,)) is the draft distribution at layout row ``r``
        (0: the root), for the internal nodes only (leaves need none).
    layout : TreeLayout
    """

    tokens: np.ndarray
    q: list[dict[int, np.ndarray]] = field(repr=False)
    layout: TreeLayout


def grow_tree(
    draft: Any,
    prefixes: Sequence[Sequence[int]],
    layout: TreeLayout,
    design: str | DraftDesign,
    rng: np.random.Generator,
    *,
    temperature: float = 1.0,
    vocab_size: int | None = None,
) -> DraftTree:
    """Draw the drafts of one tree per prefix with the draft model.

    Parameters
    ----------
    draft : transformers.PreTrainedModel
        The draft model.
    prefixes : sequence of sequences of int
    layout : TreeLayout
        The tree's shape.
    design : str or DraftDesign
        How the children of a node are drawn from ``q`` (the verifier's ``design``).
    rng : numpy.random.Generator
        Advanced by every draw (never re-seeded).
    temperature : float, default 1.0
        ``q = softmax(logits / T)``.
    vocab_size : int, optional
        Drafts are drawn among the first ``vocab_size`` ids.

    Returns
    -------
    DraftTree
    """
    scorer = PlainScorer(draft, prefixes, layout, vocab_size)
    return grow_with(scorer, len(prefixes), layout, design, rng, temperature=temperature)


def grow_with(
    scorer: Callable[[np.ndarray, Sequence[int]], np.ndarray],
    rows: int,
    layout: TreeLayout,
    design: str | DraftDesign,
    rng: np.random.Generator | Sequence[np.random.Generator],
    *,
    temperature: float = 1.0,
) -> DraftTree:
    """:func:`grow_tree` with a scorer of the draft model (:mod:`._scorer`), one call per depth.

    ``scorer(tokens[:, :known], parent_rows)`` gives the draft logits at the internal nodes of
    depth ``d`` from the nodes of depth ``<= d``; a cached scorer feeds only the new ones.
    ``rng`` is one generator for every row, or one per row (:mod:`._streams`).
    """
    rngs = [rng] * rows if isinstance(rng, np.random.Generator) else list(rng)
    spec = get_design(design)
    tokens = np.zeros((rows, layout.size), dtype=np.int64)
    q: list[dict[int, np.ndarray]] = [{} for _ in range(rows)]
    for d in range(layout.max_depth):
        known = layout.known(d)  # nodes of depth <= d: their drafts are drawn already
        level = [0] if d == 0 else [i + 1 for i in range(known) if layout.depth[i] == d]
        parents = [r for r in level if layout.children[r]]
        logits = scorer(tokens[:, :known], parents)
        for b in range(rows):
            dists = NodeDistributions(logits[b], temperature)
            for k, r in enumerate(parents):
                kids = layout.children[r]
                dist = q[b][r] = dists[k]
                spec.check(dist, len(kids))
                tokens[b, list(kids)] = sample_drafts(spec, dist, len(kids), 1, rngs[b])[0]
    return DraftTree(tokens, q, layout)
