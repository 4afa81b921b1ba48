"""The per-call prediction of RSD-S beam trees (:func:`otbound.trees.beam_block_efficiency`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from otbound.trees import beam_block_efficiency


class BeamPrediction:
    """Per call: the context-free beam prediction at the first verified context.

    Each call's ``(p, q)`` there gets ``trials`` simulated beams (a separate generator seeded
    once, as the k-ary prediction's Monte Carlo); the summary averages them over the calls
    (``beam_prediction``). A beam of depth 0 (a target root alone) predicts 1.
    """

    def __init__(self, verifier: Any, width: int, depth: int, trials: int, seed: int) -> None:
        self.verifier = verifier
        self.width = width
        self.depth = depth
        self.trials = trials
        self.rng = np.random.default_rng(seed)

    def __call__(self, p: np.ndarray, q: np.ndarray) -> list[dict[str, object]]:
        """``{"beam_prediction": E}`` per row of ``p``, ``q`` (B, V)."""
        return [
            {
                "beam_prediction": beam_block_efficiency(
                    p[b],
                    q[b],
                    self.width,
                    self.depth,
                    self.trials,
                    self.rng,
                    verifier=self.verifier,
                )
            }
            for b in range(p.shape[0])
        ]
