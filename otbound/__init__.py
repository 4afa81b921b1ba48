"""otbound: how far each multi-draft speculative-decoding verifier is from the best possible.

The public API is re-exported here; see the README and ``help(otbound.optimal_acceptance)``.
"""

import os as _os

# numba's compiled sweeps run on OpenMP threads, which by default spin while they wait for each
# other: on a busy machine (parallel jobs, a notebook beside a training run) that makes them up
# to 10x slower than one thread. Passive waiting costs nothing when the cores are free. Set
# before numba loads OpenMP; a value the user chose is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from otbound import dumps, sequence, trees
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
from otbound.sequence import block_acceptance, optimal_block_acceptance
from otbound.trees import (
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

__all__ = [
    "DESIGNS",
    "VERIFIERS",
    "BaseVerifier",
    "DraftDesign",
    "DualResult",
    "DumpError",
    "DumpWriter",
    "LPError",
    "LosslessResult",
    "PrimalResult",
    "SimulationResult",
    "SpecHubLPResult",
    "SweepResult",
    "Verifier",
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
    "positional_acceptance",
    "predict_tokens_per_call",
    "sequence",
    "softmax",
    "solve_dual",
    "solve_primal",
    "solve_spechub_lp",
    "trees",
]
__version__ = "0.1.0"
