"""The prediction's inputs at each call's root: the verifier's positional acceptance per
depth (:func:`otbound.trees.positional_acceptance`, exact where the verifier allows it, else
Monte Carlo) and the design's ``α*`` (:func:`otbound.optimal_acceptance`) of every width."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from otbound.bounds import optimal_acceptance
from otbound.tree_decoding._layout import TreeLayout
from otbound.trees import positional_acceptance

__all__ = ["RootPrediction"]


class RootPrediction:
    """Per call: the verifier's positional acceptance and the design's α* at the root."""

    def __init__(self, verifier: Any, layout: TreeLayout, trials: int, seed: int) -> None:
        self.verifier = verifier
        self.branching = list(layout.branching)
        self.trials = trials
        self.rng = np.random.default_rng(seed)
        self.widths = [layout.widths_at_depth(d) for d in range(layout.max_depth)]

    def __call__(self, p: np.ndarray, q: np.ndarray) -> list[dict[str, object]]:
        """The prediction's inputs for root contexts ``p``, ``q`` of shape (B, V), per row."""
        star = {  # α* of every width in the tree, for all rows at once
            w: np.atleast_1d(
                cast("np.ndarray", optimal_acceptance(p, q, n=w, design=self.verifier.design))
            )
            for w in sorted({w for widths in self.widths for w in widths})
        }
        out = []
        for b in range(p.shape[0]):
            seed = int(self.rng.integers(2**31))
            pa = positional_acceptance(
                p[b], q[b], self.branching, self.trials, seed, verifier=self.verifier
            )
            values = np.asarray(pa.values, dtype=float)
            stars = np.zeros_like(values)
            for d, widths in enumerate(self.widths):
                for w in widths:
                    stars[d, w - 1] = star[w][b]
            out.append(
                {
                    "root_acceptance": float(values[0].sum()),
                    "root_alpha_star": float(stars[0, self.branching[0] - 1]),
                    "positional": values.tolist(),
                    "alpha_star": stars.tolist(),
                }
            )
        return out
