"""Real tree speculative decoding with a draft and a target model, measured against prediction.

The draft model grows a draft tree with the verifier's draft design, the target scores every
node in one forward pass with a tree attention mask, and the verifier walks the tree from the
root; the tokens appended per target call are measured, with a 95% interval clustered over
prompts, beside :func:`otbound.trees.block_efficiency` of the positional acceptance on the same
contexts and :func:`otbound.trees.bound_block_efficiency` of the design's ``α*``.

=================  ==============================================================
module             job
=================  ==============================================================
``_layout``        a path list as arrays: parents, depths, children
``_mask``          token ids, tree attention and position ids of prefix + tree
``_scoring``       one forward pass of a Hugging Face causal LM: per-node logits
``_scorer``        per-node logits across calls, reusing the key/value cache
``_grow``          the draft model grows the tree with a draft design
``_walk``          the verifier walks the tree (pure numpy); sequence-level verifiers
``_specs``         named trees and the ``binary:1-5,ternary:1-3`` syntax
``_config``        the settings of a run (:class:`TreeDecodingConfig`)
``_run``           the decoding loop over prompts, verifiers and trees
``_jobs``          a run's inputs, checkpoint and loop over (verifier, tree) jobs
``_systems``       a dynamic run's systems, their checkpoint keys and predictions
``_prediction``    the prediction's inputs at each call's root
``_result``        what a run returns: the per-call columns, the result
``_resume``        checkpoints: one file per finished (verifier, tree) pair, fingerprinted
``_summary``       tokens per call with intervals, prediction and bound
``_differences``   pairs of runs on the same prompts: the difference and its paired interval
``_streams``       common random numbers: the streams of each (prompt, call)
``_dynamic``       dynamic drafting: RSD-S beam trees, target roots, per-row layouts
``_stopping``      stopping policies (fixed, confidence, learned decision models)
``_budget``        systems at a fixed target budget: summary columns, cost model
``_beam_predict``  the per-call prediction of beam trees
=================  ==============================================================

    python scripts/simulate_trees.py --trees binary:1-5,ternary:1-3 --out out/trees

torch and transformers are imported only when a model is run: ``import otbound`` does not
import this package, and the layout, mask, walk and summary work without torch.
"""

from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports

if TYPE_CHECKING:
    from otbound.tree_decoding._budget import (
        SYSTEM_COLUMNS,
        depth_acceptance,
        measured_costs,
        speedup,
        summarise_systems,
    )
    from otbound.tree_decoding._differences import DIFFERENCE_COLUMNS, tree_differences
    from otbound.tree_decoding._dynamic import (
        ROOTS,
        RowsLayout,
        System,
        capacity_nodes,
        decode_system,
        largest_depth,
        system_not_applicable,
        walk_rows,
    )
    from otbound.tree_decoding._grow import DraftTree, grow_tree
    from otbound.tree_decoding._layout import TreeLayout
    from otbound.tree_decoding._mask import TreeInputs, tree_inputs
    from otbound.tree_decoding._resume import (
        CheckpointMismatch,
        PartStore,
        checkpoint_settings,
        clear_parts,
        model_fingerprint,
    )
    from otbound.tree_decoding._run import (
        DYNAMIC_STEP_COLUMNS,
        STEP_COLUMNS,
        TREE_VERIFIERS,
        TreeDecodingConfig,
        TreeDecodingResult,
        decode_tree,
        not_applicable_reason,
        run_tree_decoding,
    )
    from otbound.tree_decoding._scoring import NodeDistributions, tree_logits
    from otbound.tree_decoding._specs import FAMILIES, TreeSpec, kary_spec, parse_trees
    from otbound.tree_decoding._stopping import (
        FEATURES,
        StoppingPolicy,
        load_decision_model,
        parse_stopping,
        save_decision_model,
    )
    from otbound.tree_decoding._streams import CallStreams
    from otbound.tree_decoding._summary import TREE_SUMMARY_COLUMNS, summarise_tree_steps
    from otbound.tree_decoding._walk import (
        SEQUENCE_TREE_VERIFIERS,
        SequenceTreeVerifier,
        WalkResult,
        tree_verifier,
        walk_tree,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "otbound.tree_decoding._budget": (
                "SYSTEM_COLUMNS",
                "depth_acceptance",
                "measured_costs",
                "speedup",
                "summarise_systems",
            ),
            "otbound.tree_decoding._differences": ("DIFFERENCE_COLUMNS", "tree_differences"),
            "otbound.tree_decoding._dynamic": (
                "ROOTS",
                "RowsLayout",
                "System",
                "capacity_nodes",
                "decode_system",
                "largest_depth",
                "system_not_applicable",
                "walk_rows",
            ),
            "otbound.tree_decoding._grow": ("DraftTree", "grow_tree"),
            "otbound.tree_decoding._layout": ("TreeLayout",),
            "otbound.tree_decoding._mask": ("TreeInputs", "tree_inputs"),
            "otbound.tree_decoding._resume": (
                "CheckpointMismatch",
                "PartStore",
                "checkpoint_settings",
                "clear_parts",
                "model_fingerprint",
            ),
            "otbound.tree_decoding._run": (
                "DYNAMIC_STEP_COLUMNS",
                "STEP_COLUMNS",
                "TREE_VERIFIERS",
                "TreeDecodingConfig",
                "TreeDecodingResult",
                "decode_tree",
                "not_applicable_reason",
                "run_tree_decoding",
            ),
            "otbound.tree_decoding._scoring": ("NodeDistributions", "tree_logits"),
            "otbound.tree_decoding._specs": ("FAMILIES", "TreeSpec", "kary_spec", "parse_trees"),
            "otbound.tree_decoding._stopping": (
                "FEATURES",
                "StoppingPolicy",
                "load_decision_model",
                "parse_stopping",
                "save_decision_model",
            ),
            "otbound.tree_decoding._streams": ("CallStreams",),
            "otbound.tree_decoding._summary": ("TREE_SUMMARY_COLUMNS", "summarise_tree_steps"),
            "otbound.tree_decoding._walk": (
                "SEQUENCE_TREE_VERIFIERS",
                "SequenceTreeVerifier",
                "WalkResult",
                "tree_verifier",
                "walk_tree",
            ),
        },
    )

__all__ = [
    "DIFFERENCE_COLUMNS",
    "DYNAMIC_STEP_COLUMNS",
    "FAMILIES",
    "FEATURES",
    "ROOTS",
    "SEQUENCE_TREE_VERIFIERS",
    "STEP_COLUMNS",
    "SYSTEM_COLUMNS",
    "TREE_SUMMARY_COLUMNS",
    "TREE_VERIFIERS",
    "CallStreams",
    "CheckpointMismatch",
    "DraftTree",
    "NodeDistributions",
    "PartStore",
    "RowsLayout",
    "SequenceTreeVerifier",
    "StoppingPolicy",
    "System",
    "TreeDecodingConfig",
    "TreeDecodingResult",
    "TreeInputs",
    "TreeLayout",
    "TreeSpec",
    "WalkResult",
    "capacity_nodes",
    "checkpoint_settings",
    "clear_parts",
    "decode_system",
    "decode_tree",
    "depth_acceptance",
    "grow_tree",
    "kary_spec",
    "largest_depth",
    "load_decision_model",
    "measured_costs",
    "model_fingerprint",
    "not_applicable_reason",
    "parse_stopping",
    "parse_trees",
    "run_tree_decoding",
    "save_decision_model",
    "speedup",
    "summarise_systems",
    "summarise_tree_steps",
    "system_not_applicable",
    "tree_differences",
    "tree_inputs",
    "tree_logits",
    "tree_verifier",
    "walk_rows",
    "walk_tree",
]
