r"""Sequence-level verification: blocks and trees, their exact acceptance, and block-level bounds.

otbound's ``α*`` bounds token-level verifiers, one draft position at a time. This package
treats one whole *iteration* of speculative decoding: a drafted chain or tree, one target
call, the accepted path plus one target token. For **context-independent** models (the same
``p``, ``q`` at every position, or one row per depth; :func:`sequence_model`) everything is
exact, by enumeration (small vocabularies and trees).

Verifiers (:data:`SEQUENCE_VERIFIERS`; exact law, seeded simulation, one-trial ``verify``, as
the token-level verifiers; the protocol and what *lossless* compares are in
:mod:`otbound.sequence._protocol`):

* ``token`` - token verification top-down (recursive rejection sampling on trees);
* ``block`` - block verification on chains (Sun et al., arXiv 2403.10444);
* ``traversal`` - traversal verification, leaves to root, on trees and chains (Weng et al.,
  arXiv 2505.12398);
* ``multipath`` - multi-path block verification on ``K`` independent draft paths
  (:func:`paths_tree`): a reconstruction of Thomas and Pal's greedy multi-path block
  verification (arXiv 2602.16961) from the authors' reference README and a third-party
  replication, not checked against the paper; it can accept less than block verification of
  one path (0.666 against 0.95 on a pinned case), where the paper reports gains.

Every verifier reads only the target's law after each node and the draft's law of each
internal node's children, so :meth:`SequenceVerifier.verify_rows` runs it on one drafted tree
of a context-dependent (real) model (:func:`rows_model`; :mod:`otbound.tree_decoding`).

Exact acceptance: :func:`block_acceptance` (chains), :func:`tree_acceptance`,
:func:`token_acceptance` (``Σ_k Π_{d≤k} α_d``), :func:`sequence_law`, :func:`lossless_gap`.

Bounds (HiGHS LPs with dual certificates): :func:`optimal_block_acceptance` (the coupling
bound; on chains ``Σ_k (1 − TV(P_{1:k}, Q_{1:k}))``, proved attained), its tree analogue
:func:`optimal_tree_acceptance` (the per-depth sum is *not* attained on trees), and
:func:`optimal_verification_acceptance` (the best verifier that emits one target token;
block verification attains it on chains).

Examples
--------
Sun et al.'s motivating example: ``p = (1/3, 2/3)``, ``q = (2/3, 1/3)``, ``γ = 2``.

>>> from otbound.sequence import (block_acceptance, optimal_block_acceptance,
...     optimal_verification_acceptance)
>>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
>>> [round(9 * block_acceptance(p, q, 2, verifier=v), 6) for v in ("token", "block", "traversal")]
[10.0, 11.0, 11.0]
>>> round(9 * optimal_verification_acceptance(p, q, 2).acceptance, 6)
11.0
>>> round(9 * optimal_block_acceptance(p, q, 2).acceptance, 6)
12.0
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.sequence._models import (
        DRAFTINGS,
        SequenceModel,
        block_law,
        prefix_overlaps,
        rows_model,
        sequence_model,
    )
    from otbound.sequence._protocol import SequenceSimulation, SequenceVerifier
    from otbound.sequence.block import BlockVerifier, block_verify
    from otbound.sequence.block_acceptance import (
        SEQUENCE_VERIFIERS,
        block_acceptance,
        get_sequence_verifier,
        lossless_gap,
        sequence_law,
        token_acceptance,
        tree_acceptance,
    )
    from otbound.sequence.block_bound import (
        SequenceBound,
        optimal_block_acceptance,
        optimal_tree_acceptance,
        optimal_verification_acceptance,
    )
    from otbound.sequence.multipath import MultiPathVerifier, paths_tree
    from otbound.sequence.token import TokenVerifier
    from otbound.sequence.traversal import TraversalVerifier
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.sequence._protocol": ("SequenceSimulation", "SequenceVerifier"),
            "otbound.sequence._models": (
                "DRAFTINGS",
                "SequenceModel",
                "block_law",
                "prefix_overlaps",
                "rows_model",
                "sequence_model",
            ),
            "otbound.sequence.block": ("BlockVerifier", "block_verify"),
            "otbound.sequence.block_acceptance": (
                "SEQUENCE_VERIFIERS",
                "block_acceptance",
                "get_sequence_verifier",
                "lossless_gap",
                "sequence_law",
                "token_acceptance",
                "tree_acceptance",
            ),
            "otbound.sequence.block_bound": (
                "SequenceBound",
                "optimal_block_acceptance",
                "optimal_tree_acceptance",
                "optimal_verification_acceptance",
            ),
            "otbound.sequence.multipath": ("MultiPathVerifier", "paths_tree"),
            "otbound.sequence.token": ("TokenVerifier",),
            "otbound.sequence.traversal": ("TraversalVerifier",),
        },
    )
    # The function shares its module's name: bound now, an import of the module
    # (otbound.sequence.block_acceptance) cannot put the module in its place later.
    block_acceptance = __getattr__("block_acceptance")

__all__ = [
    "DRAFTINGS",
    "SEQUENCE_VERIFIERS",
    "BlockVerifier",
    "MultiPathVerifier",
    "SequenceBound",
    "SequenceModel",
    "SequenceSimulation",
    "SequenceVerifier",
    "TokenVerifier",
    "TraversalVerifier",
    "block_acceptance",
    "block_law",
    "block_verify",
    "get_sequence_verifier",
    "lossless_gap",
    "optimal_block_acceptance",
    "optimal_tree_acceptance",
    "optimal_verification_acceptance",
    "paths_tree",
    "prefix_overlaps",
    "rows_model",
    "sequence_law",
    "sequence_model",
    "token_acceptance",
    "tree_acceptance",
]
