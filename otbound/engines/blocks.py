r"""Block verification of a drafted chain, as vLLM merged it and as a port got it wrong.

Both are sequence verifiers (:mod:`otbound.sequence`): one iteration drafts a chain
``x_1..x_γ`` (``x_i ~ Q_i``), and emits the accepted prefix and one token from the target side.
Rows are the on-path laws: ``P_i`` the target after ``x_{<i}`` (``P_{γ+1}`` the bonus law),
``Q_i`` the draft's.

* ``vllm_block`` (lossless): ``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py`` at
  commit ``02e318bde2ccdff60271df55b2898c839410616f`` (from
  https://github.com/vllm-project/vllm/pull/46781, Sun et al., arXiv 2403.10444).
  ``_compute_cumulative_log_p_kernel`` keeps ``log w_i = min(log w_{i−1} + log P_i(x_i) −
  log Q_i(x_i), 0)``; ``_rejection_kernel`` draws one uniform per position and sets the
  accepted length to the last ``i`` with ``u_i ≤ h_i``, ``h_i = ρ_i / (ρ_i + 1 − w_i)``,
  ``ρ_i = Σ_x (w_i P_{i+1}(x) − Q_{i+1}(x))⁺`` for ``i < γ`` and ``h_γ = w_γ``;
  ``_resample_kernel`` draws the token after ``τ`` accepted from
  ``(w_τ P_{τ+1} − Q_{τ+1})⁺`` (``w_0 = 1``), or the bonus from ``P_{γ+1}``.
* ``ascend_block`` (lossy): ``vllm_ascend/sample/rejection_sampler.py`` of vllm-ascend at
  commit ``66d966b0d0ab0c774a7c548ea536aa19f6a006a9``, the parent of the fix
  https://github.com/vllm-project/vllm-ascend/pull/7808 (report:
  https://github.com/vllm-project/vllm-ascend/issues/7807), used for ``γ ≥ 3`` with draft
  probabilities. ``rejection_random_sample_block_verify_pytorch`` takes
  ``π_i = Π_{j≤i} min(1, P_j(x_j) / Q_j(x_j))`` and ``U_i = Π_{j≤i} u_j``, accepts the longest
  prefix with ``π_i ≥ U_i``, and after it a token from the token-wise residual
  ``(P_{τ+1} − Q_{τ+1})⁺`` (``sample_recovered_tokens``); the bonus after a full chain. Its
  continuous coins give no law to enumerate: it is audited by Monte Carlo.

Each rule has its per-trial ``_verify`` (read against the source) and a vectorised
``simulate_rows`` over many trials of one chain, on the union of the rows' supports.
"""

from __future__ import annotations

import numpy as np
from numpy.random import Generator

from otbound.sequence._choices import Chooser, RandomChooser
from otbound.sequence._models import SequenceModel
from otbound.sequence._protocol import Drafts, Emitted, SequenceVerifier, positive_part

__all__ = ["AscendBlock", "ChainRule", "VllmBlock"]

#: The on-path rows of a chain: target ``(γ + 1, V)`` and draft ``(γ, V)``.
Rows = tuple[np.ndarray, np.ndarray]


class ChainRule(SequenceVerifier):
    """A block rule on chains, with its engine and claim (as :class:`EngineRule`'s)."""

    chains_only = True
    drafting = "iid"
    engine = "vllm"
    lossless = True
    #: Whether :func:`otbound.sequence.sequence_law` can enumerate its random choices.
    enumerable = True

    @staticmethod
    def chain_rows(model: SequenceModel) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """``(P_i, Q_i)`` for ``i = 1..γ+1`` (``Q_{γ+1}`` None)."""
        gamma = model.depth
        return [
            (model.target_row((0,) * i), model.draft_row((0,) * i) if i < gamma else None)
            for i in range(gamma + 1)
        ]

    def simulate_rows(
        self, p: np.ndarray, q: np.ndarray, trials: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised iterations of one chain: ``(sequences (trials, γ + 1), τ (trials,))``,
        each sequence the emitted tokens completed by fresh target draws."""
        gamma = q.shape[0]
        drafts = np.stack([_draw(q[i], rng, trials) for i in range(gamma)], axis=1)
        ratio = _ratios(p[:gamma], q, drafts)
        tau = self._accepted((p, q), ratio, rng)
        weights = self._weights_at(ratio, tau)
        out = np.empty((trials, gamma + 1), dtype=np.int64)
        for i in range(gamma + 1):
            at = tau == i
            out[:, i] = np.where(tau > i, drafts[:, min(i, gamma - 1)], 0)
            if at.any():
                out[at, i] = self._correction(p, q, i, weights[at], rng)
            later = tau < i
            if later.any():
                out[later, i] = _draw(p[i], rng, int(later.sum()))
        return out, tau

    def _weights_at(self, ratio: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """The weight the correction after ``τ`` scales the target by (1 by default)."""
        return np.ones(tau.size)

    def _accepted(self, rows: Rows, ratio: np.ndarray, rng: Generator) -> np.ndarray:
        """``τ``, the accepted drafts of each trial (trials,), from the rows ``(P, Q)`` and the
        drafts' ratios ``P_i(x_i) / Q_i(x_i)``."""
        raise NotImplementedError

    def _correction(
        self, p: np.ndarray, q: np.ndarray, i: int, weight: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Tokens after ``i`` accepted drafts (the bonus at ``i = γ``)."""
        gamma = q.shape[0]
        if i == gamma:
            return _draw(p[gamma], rng, weight.size)
        return _draw(np.maximum(p[i] - q[i], 0.0), rng, weight.size)


def _draw(weights: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` tokens from the unnormalised ``weights`` (never a zero)."""
    cdf = np.cumsum(weights)
    idx = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
    out: np.ndarray = np.minimum(idx, int(np.flatnonzero(weights > 0)[-1]))
    return out


def _draw_rows(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token from each row of unnormalised ``weights`` (rows, V) (never a zero)."""
    cdf = np.cumsum(weights, axis=1)
    below = cdf < rng.random((weights.shape[0], 1)) * cdf[:, -1:]
    idx = below.sum(axis=1)
    last = weights.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    out: np.ndarray = np.minimum(idx, last)
    return out


def _ratios(p: np.ndarray, q: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """``P_i(x_i) / Q_i(x_i)`` per trial and position (trials, γ)."""
    cols = np.arange(drafts.shape[1])
    out: np.ndarray = p[cols, drafts] / q[cols, drafts]
    return out


class VllmBlock(ChainRule):
    """``vllm_block``: vLLM's block verification (the module docstring), lossless."""

    name = "vllm_block"

    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        rows = self.chain_rows(model)
        gamma = len(drafts)
        weights = [1.0]
        for i, x in enumerate(drafts):
            target, draft = rows[i]
            assert draft is not None
            weights.append(min(1.0, weights[-1] * float(target[x]) / float(draft[x])))
        tau = 0
        for i in range(1, gamma + 1):  # one coin per position; the last success counts
            if chooser.bernoulli(self._threshold(weights[i], rows, i, gamma)):
                tau = i
        target, draft = rows[tau]
        if tau == gamma:
            return (*drafts, chooser.categorical(target))
        assert draft is not None
        return (*drafts[:tau], chooser.categorical(positive_part(weights[tau], target, draft)))

    @staticmethod
    def _threshold(
        weight: float, rows: list[tuple[np.ndarray, np.ndarray | None]], i: int, gamma: int
    ) -> float:
        """``h_i = ρ_i / (ρ_i + 1 − w_i)`` (``i < γ``; 1 where the denominator is 0), ``w_γ``."""
        if i == gamma:
            return weight
        target, draft = rows[i]
        assert draft is not None
        mass = float(positive_part(weight, target, draft).sum())
        denominator = mass + 1.0 - weight
        return mass / denominator if denominator > 0.0 else 1.0

    def _accepted(self, rows: Rows, ratio: np.ndarray, rng: Generator) -> np.ndarray:
        p, q = rows
        gamma = q.shape[0]
        weights = _running_weights(ratio)
        tau = np.zeros(ratio.shape[0], dtype=np.int64)
        for i in range(1, gamma + 1):
            w = weights[:, i]
            if i == gamma:
                h = w
            else:
                mass = np.maximum(w[:, None] * p[i] - q[i], 0.0).sum(axis=1)
                denominator = mass + 1.0 - w
                with np.errstate(divide="ignore", invalid="ignore"):
                    h = np.where(denominator > 0.0, mass / denominator, 1.0)
            tau[rng.random(tau.size) <= h] = i
        return tau

    def _weights_at(self, ratio: np.ndarray, tau: np.ndarray) -> np.ndarray:
        weights = _running_weights(ratio)
        out: np.ndarray = weights[np.arange(tau.size), tau]
        return out

    def _correction(
        self, p: np.ndarray, q: np.ndarray, i: int, weight: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        if i == q.shape[0]:
            return super()._correction(p, q, i, weight, rng)
        return _draw_rows(np.maximum(weight[:, None] * p[i] - q[i], 0.0), rng)


def _running_weights(ratio: np.ndarray) -> np.ndarray:
    """``w_0 = 1``, ``w_i = min(1, w_{i−1} r_i)`` per trial (trials, γ + 1)."""
    weights = np.ones((ratio.shape[0], ratio.shape[1] + 1))
    for i in range(ratio.shape[1]):
        weights[:, i + 1] = np.minimum(1.0, weights[:, i] * ratio[:, i])
    return weights


class AscendBlock(ChainRule):
    """``ascend_block``: vllm-ascend's block verification before its fix (the module
    docstring), lossy."""

    name = "ascend_block"
    engine = "vllm-ascend"
    lossless = False
    enumerable = False

    def _verify(self, drafts: Drafts, model: SequenceModel, chooser: Chooser) -> Emitted:
        if not isinstance(chooser, RandomChooser):
            raise ValueError(
                "ascend_block draws continuous coins: its law is not enumerable (simulate it)"
            )
        rows = self.chain_rows(model)
        gamma = len(drafts)
        pi, coin, tau = 1.0, 1.0, 0
        for i, x in enumerate(drafts, start=1):
            target, draft = rows[i - 1]
            assert draft is not None
            pi *= min(1.0, float(target[x]) / float(draft[x]))
            coin *= float(chooser.rng.random())
            if pi >= coin:
                tau = i
        target, draft = rows[tau]
        if tau == gamma:
            return (*drafts, chooser.categorical(target))
        assert draft is not None
        return (*drafts[:tau], chooser.categorical(np.maximum(target - draft, 0.0)))

    def _accepted(self, rows: Rows, ratio: np.ndarray, rng: Generator) -> np.ndarray:
        pi = np.cumprod(np.minimum(1.0, ratio), axis=1)
        coins = np.cumprod(rng.random(ratio.shape), axis=1)
        legal = pi >= coins
        last = ratio.shape[1] - np.argmax(legal[:, ::-1], axis=1)
        out: np.ndarray = np.where(legal.any(axis=1), last, 0)
        return out
