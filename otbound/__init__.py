"""otbound: how far each multi-draft speculative-decoding verifier is from the best possible.

The public API is re-exported here; see the README and ``help(otbound.optimal_acceptance)``.
"""

from otbound.bounds import SweepResult, optimal_acceptance
from otbound.drafts import DESIGNS, DraftDesign, get_design

__all__ = ["DESIGNS", "DraftDesign", "SweepResult", "get_design", "optimal_acceptance"]
__version__ = "0.1.0"
