r"""SGLang: tree speculative sampling with the target's probabilities only.

Read ``sgl-kernel/csrc/speculative/speculative_sampling.cuh`` at commit
``120affb9613cc3f5bcd055ec09c7621d3ced0ebc`` (``TreeSpeculativeSamplingTargetOnly``) and its
caller, the EAGLE worker's verify step (``python/sglang/srt/speculative/eagle_info.py``, read
in the stored index without a commit): the target's probabilities get temperature, top-k and
top-p; ``draft_probs`` is all zeros; the siblings ``x_1, x_2, …`` of a node (the draft's
most likely tokens, deterministic) are tried in order with **one** coin ``u`` per depth:

* ``prob_acc += P(x_j)``; ``x_j`` is kept if ``u <= prob_acc / threshold_acc`` or
  ``P(x_j) >= threshold_single``;
* a rejected sibling gets ``draft_probs[x_j] = P(x_j)``, so the final draw, from
  ``relu(P − draft_probs)`` with a fresh coin, is ``P`` restricted to the untried tokens.

With both thresholds at 1 (the server's defaults, ``--speculative-accept-threshold-single``
and ``--speculative-accept-threshold-acc``) this is inverse-CDF sampling of ``P`` with the
siblings first: lossless, ``α = P(T)``, the ``topk`` design's ``α*``. Thresholds below 1
accept more and are lossy.
"""

from __future__ import annotations

import numpy as np

from otbound.drafts.tokens import top_tokens
from otbound.engines._base import EngineRule, Processing, Sides, in_unit_interval
from otbound.verifiers.base import sample_tokens

__all__ = ["SglangTargetOnly"]


class SglangTargetOnly(EngineRule):
    r"""``sglang_target_only`` (thresholds 1) and ``sglang_relaxed`` (``threshold_acc``
    below 1): siblings ``x_1..x_n``, cumulative target masses ``c_j = Σ_{i≤j} P(x_i)``.

    With ``j_s`` the first sibling with ``P(x_j) ≥ threshold_single``, sibling ``j`` is kept
    with probability ``min(1, c_j/t) − min(1, c_{j−1}/t)`` for ``j < j_s`` and
    ``1 − min(1, c_{j−1}/t)`` at ``j = j_s`` (``t = threshold_acc``); otherwise the output
    is drawn from ``P`` on ``V ∖ T``.

    Parameters
    ----------
    processing : Processing, optional
    design : str, optional
        ``topk`` only.
    threshold_single, threshold_acc : float, default 1.0
        In ``(0, 1]``.
    """

    name = "sglang_target_only"
    engine = "sglang"
    default_design = "topk"
    fixed_n = None

    def __init__(
        self,
        processing: Processing | None = None,
        *,
        design: str | None = None,
        threshold_single: float = 1.0,
        threshold_acc: float = 1.0,
    ) -> None:
        super().__init__(processing, design=design)
        in_unit_interval(threshold_single=threshold_single, threshold_acc=threshold_acc)
        self.threshold_single = float(threshold_single)
        self.threshold_acc = float(threshold_acc)

    @property
    def lossless(self) -> bool | None:
        return self.threshold_single == 1.0 and self.threshold_acc == 1.0

    def drafts_from(self, sides: Sides) -> np.ndarray:
        return sides.tempered_draft

    def _kept(self, siblings: np.ndarray, target: np.ndarray) -> np.ndarray:
        """The probability each sibling is the one kept (n,)."""
        masses = target[siblings]
        reach = np.minimum(1.0, np.cumsum(masses) / self.threshold_acc)
        before = np.concatenate(([0.0], reach[:-1]))
        kept = reach - before
        single = np.flatnonzero(masses >= self.threshold_single)
        if single.size:
            j = int(single[0])
            kept[j] = 1.0 - before[j]
            kept[j + 1 :] = 0.0
        out: np.ndarray = np.maximum(kept, 0.0)
        return out

    def _rest(self, siblings: np.ndarray, target: np.ndarray) -> np.ndarray | None:
        rest = target.copy()
        rest[siblings] = 0.0
        total = float(rest.sum())
        return None if total <= 0.0 else rest / total

    def _conditional(self, drafts: np.ndarray, sides: Sides) -> np.ndarray:
        target = sides.target
        kept = self._kept(drafts, target)
        reject = 1.0 - float(kept.sum())
        rest = self._rest(drafts, target)
        if rest is None and reject > 1e-12:
            raise ValueError(
                f"{self.name}: every token is a sibling yet the siblings are rejected with "
                f"probability {reject:.3g}"
            )
        law = np.zeros_like(target) if rest is None else max(reject, 0.0) * rest
        np.add.at(law, drafts, kept)
        return law

    def _law(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        siblings = np.asarray(top_tokens(self.drafts_from(sides), n), dtype=np.int64)
        law = self._conditional(siblings, sides)
        return law, float(law[siblings].sum())

    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        target = sides.target
        trials, n = drafts.shape
        masses = target[drafts]
        reach = np.minimum(1.0, np.cumsum(masses, axis=1) / self.threshold_acc)
        single = masses >= self.threshold_single
        hit = (rng.random((trials, 1)) <= reach) | single
        first = np.where(hit.any(axis=1), hit.argmax(axis=1), n)
        tokens = np.empty(trials, dtype=np.int64)
        done = first < n
        tokens[done] = drafts[done, first[done]]
        sets, which = np.unique(drafts[~done], axis=0, return_inverse=True)
        rows = np.flatnonzero(~done)
        for k, siblings in enumerate(sets):  # every sibling rejected: P off the siblings
            rest = self._rest(siblings, target)
            if rest is None:
                raise ValueError(f"{self.name}: the siblings cover every token yet were rejected")
            mine = rows[which.ravel() == k]
            tokens[mine] = sample_tokens(rest, rng.random(mine.size))
        return tokens
