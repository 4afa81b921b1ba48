"""otbound: how far each multi-draft speculative-decoding verifier is from the best possible.

The public API is re-exported here; see the README and ``help(otbound.optimal_acceptance)``.

``import otbound`` loads none of the heavy dependencies (pandas, numba, HiGHS, scipy): each name
is imported from its module the first time it is used (PEP 562 module ``__getattr__``; the
subpackages do the same), so ``ob.compare`` loads what :func:`compare` needs and no more.
"""

import os as _os
from typing import TYPE_CHECKING

from otbound._lazy import lazy_exports as _lazy_exports
from otbound._version import __version__ as __version__

# numba's compiled sweeps run on OpenMP threads, which by default spin while they wait for each
# other: on a busy machine (parallel jobs, a notebook beside a training run) that makes them up
# to 10x slower than one thread. Passive waiting costs nothing when the cores are free. Set
# before numba loads OpenMP; a value the user chose is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


if TYPE_CHECKING:
    from otbound import dumps, sequence, trees
    from otbound.analysis import AcceptanceInterval
    from otbound.audits import AuditResult, audit, audit_dump
    from otbound.bounds import (
        DualResult,
        LPError,
        PrimalResult,
        SpecHubLPResult,
        SweepResult,
        optimal_acceptance,
        solve_dual,
        solve_primal,
        solve_spechub_lp,
    )
    from otbound.drafts import DESIGNS, DraftDesign, get_design
    from otbound.dumps import DumpError, DumpWriter, open_dump
    from otbound.evaluate import LosslessResult, check_lossless, compare
    from otbound.logits import softmax
    from otbound.sequence import SequenceBound, optimal_block_acceptance

    # from its module: mypy takes ``otbound.sequence.block_acceptance`` in an ``if`` for the module
    from otbound.sequence.block_acceptance import block_acceptance
    from otbound.stats import PairedDifference, paired_difference
    from otbound.trees import (
        PositionalAcceptance,
        best_tree,
        block_efficiency,
        bound_block_efficiency,
        chain,
        kary_tree,
        positional_acceptance,
        predict_tokens_per_call,
    )
    from otbound.verifiers import (
        VERIFIERS,
        BaseVerifier,
        SimulationResult,
        Verifier,
        get_verifier,
    )
    from otbound.verifiers.base import Estimate
else:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "otbound.analysis": ("AcceptanceInterval",),
            "otbound.audits": ("AuditResult", "audit", "audit_dump"),
            "otbound.bounds": (
                "DualResult",
                "LPError",
                "PrimalResult",
                "SpecHubLPResult",
                "SweepResult",
                "optimal_acceptance",
                "solve_dual",
                "solve_primal",
                "solve_spechub_lp",
            ),
            "otbound.drafts": ("DESIGNS", "DraftDesign", "get_design"),
            "otbound.dumps": ("DumpError", "DumpWriter", "open_dump"),
            "otbound.evaluate": ("LosslessResult", "check_lossless", "compare"),
            "otbound.logits": ("softmax",),
            "otbound.sequence": (
                "SequenceBound",
                "block_acceptance",
                "optimal_block_acceptance",
            ),
            "otbound.stats": ("PairedDifference", "paired_difference"),
            "otbound.trees": (
                "PositionalAcceptance",
                "best_tree",
                "block_efficiency",
                "bound_block_efficiency",
                "chain",
                "kary_tree",
                "positional_acceptance",
                "predict_tokens_per_call",
            ),
            "otbound.verifiers": (
                "VERIFIERS",
                "BaseVerifier",
                "SimulationResult",
                "Verifier",
                "get_verifier",
            ),
            "otbound.verifiers.base": ("Estimate",),
        },
    )

__all__ = [
    "DESIGNS",
    "VERIFIERS",
    "AcceptanceInterval",
    "AuditResult",
    "BaseVerifier",
    "DraftDesign",
    "DualResult",
    "DumpError",
    "DumpWriter",
    "Estimate",
    "LPError",
    "LosslessResult",
    "PairedDifference",
    "PositionalAcceptance",
    "PrimalResult",
    "SequenceBound",
    "SimulationResult",
    "SpecHubLPResult",
    "SweepResult",
    "Verifier",
    "audit",
    "audit_dump",
    "best_tree",
    "block_acceptance",
    "block_efficiency",
    "bound_block_efficiency",
    "chain",
    "check_lossless",
    "compare",
    "dumps",
    "get_design",
    "get_verifier",
    "kary_tree",
    "open_dump",
    "optimal_acceptance",
    "optimal_block_acceptance",
    "paired_difference",
    "positional_acceptance",
    "predict_tokens_per_call",
    "sequence",
    "softmax",
    "solve_dual",
    "solve_primal",
    "solve_spechub_lp",
    "trees",
]
