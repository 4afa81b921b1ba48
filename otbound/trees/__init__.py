r"""Draft trees: block efficiency (tokens per target call) predicted from acceptance rates.

A *draft tree* is given EAGLE-style, as the list of its nodes, each node the path of child
indices from the root (0-based): ``[[0], [1], [0, 0], [0, 1], [1, 0]]`` has two children of
the root, two children under ``[0]`` and one under ``[1]``. The root (the last verified token)
is not listed. Valid trees have non-empty paths of non-negative integers, no duplicates, every
prefix of a path among the nodes, and contiguous siblings (child ``k`` implies child ``k − 1``).

*The model* (Sequoia; Chen et al. 2024). One target call verifies the whole tree; the accepted
tokens form a path from the root, and the call also yields one token from the target (the
bonus token, or the correction after a rejection). With the **positional acceptance vector**

.. math::

    a = (a_0, a_1, …),\qquad a_i = P(\text{child } i \text{ of an accepted node is accepted}),

(sibling events are exclusive, so ``Σ a_i ≤ 1``), and acceptance at a node independent of the
path that led to it, the expected number of tokens per target call (the *block efficiency*) is

.. math::

    E = 1 + \sum_{v ∈ \text{tree}} \prod_{j=1}^{|v|} a_{v_j}

(a node is reached iff every node on its path is accepted, each with the factor of its child
index). A per-depth matrix ``a[d, i]`` (row ``d`` for the children of the nodes at depth ``d``,
the root at depth 0) models acceptance that changes with depth. The rates are means over
decoding steps: this is the i.i.d. approximation under which a chain of ``γ`` drafts gives
``(1 − α^{γ+1}) / (1 − α)``.

What this package offers (one module a job: ``_shapes`` the trees, ``_efficiency`` block
efficiency, the best tree and the bound, ``_positional`` positional vectors of verifiers,
``_predict`` the per-table prediction):

* :func:`block_efficiency`, and the builders :func:`chain`, :func:`kary_tree` and
  :func:`best_tree` (Sequoia's dynamic programme: the tree of at most ``budget`` nodes with the
  largest ``E``, exact for any non-negative vector);
* :func:`positional_acceptance`: the vector ``a`` of a verifier on given ``(p, q)``, exact where
  the verifier allows it, else by Monte Carlo;
* :func:`bound_block_efficiency`: the counterpart of ``α*``: an upper bound on ``E`` for every
  verifier of a draft design, from the design's optimal acceptance rates ``α*(k)``;
* :func:`beam_block_efficiency`: tokens per call of an RSD-S beam tree (Monte Carlo);
* :func:`predict_tokens_per_call`: tokens per call of k-ary trees for every verifier of a
  per-step table (:func:`otbound.compare`, or ``steps.parquet`` of ``compute-bounds``).

Examples
--------
>>> from otbound.trees import block_efficiency, best_tree, chain, kary_tree
>>> round(block_efficiency([0.8], chain(3)), 6)  # 1 + .8 + .64 + .512
2.952
>>> round(block_efficiency([0.5, 0.2], kary_tree([2, 2])), 4)  # 1 + .7 + .7²
2.19
>>> best_tree([0.6, 0.2, 0.1], budget=4)
[[0], [1], [0, 0], [0, 0, 0]]
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.trees._beam import beam_block_efficiency
    from otbound.trees._efficiency import best_tree, block_efficiency, bound_block_efficiency
    from otbound.trees._positional import (
        EXACT_POSITIONAL,
        PositionalAcceptance,
        positional_acceptance,
    )
    from otbound.trees._predict import PREDICT_COLUMNS, predict_tokens_per_call
    from otbound.trees._shapes import Tree, canonical_tree, chain, clean_tree, kary_tree
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.trees._beam": ("beam_block_efficiency",),
            "otbound.trees._efficiency": (
                "best_tree",
                "block_efficiency",
                "bound_block_efficiency",
            ),
            "otbound.trees._positional": (
                "EXACT_POSITIONAL",
                "PositionalAcceptance",
                "positional_acceptance",
            ),
            "otbound.trees._predict": ("PREDICT_COLUMNS", "predict_tokens_per_call"),
            "otbound.trees._shapes": ("Tree", "canonical_tree", "chain", "clean_tree", "kary_tree"),
        },
    )

__all__ = [
    "EXACT_POSITIONAL",
    "PREDICT_COLUMNS",
    "PositionalAcceptance",
    "Tree",
    "beam_block_efficiency",
    "best_tree",
    "block_efficiency",
    "bound_block_efficiency",
    "canonical_tree",
    "chain",
    "clean_tree",
    "kary_tree",
    "positional_acceptance",
    "predict_tokens_per_call",
]
