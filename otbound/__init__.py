"""otbound: how far each multi-draft speculative-decoding verifier is from the best possible.

The public API is re-exported here; see the README and ``help(otbound.optimal_acceptance)``.
"""

from otbound import dumps
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
    "check_lossless",
    "compare",
    "dumps",
    "get_design",
    "get_verifier",
    "open_dump",
    "optimal_acceptance",
    "softmax",
    "solve_dual",
    "solve_primal",
    "solve_spechub_lp",
]
__version__ = "0.1.0"
