r"""The audit of a block rule on drafted chains (:mod:`otbound.engines.blocks`).

A chain is a context-independent model (:mod:`otbound.sequence`): target rows
``P_1..P_{γ+1}`` and draft rows ``Q_1..Q_γ``, after the request's processing (both sides
alike). One iteration emits the accepted prefix and a token from the target side; completed by
fresh target draws to ``γ + 1`` tokens, its law must be the product ``Π_d P_d`` (lossless,
:mod:`otbound.sequence._protocol`).

* **exact** for a rule whose choices enumerate (``vllm_block``) at small ``V``:
  :func:`otbound.sequence.sequence_law`, its total variation from the product, and the exact
  expected accepted drafts ``E[τ]``;
* **Monte Carlo** otherwise: the rule's vectorised iterations on the union of the rows'
  supports; the emitted sequences are binned by the top :data:`CELL_TOKENS` tokens of each
  ``P_d`` (the rest of a depth one class), the product law gives each cell its probability, and
  :func:`otbound.check_lossless`'s chi-square tests the cells (binning keeps the test valid;
  its power is stated over the cells).

Beside ``E[τ]``: block verification's own ``E[τ]`` on the same chain, the most a lossless
verifier that emits one target token can accept on chains (Sun et al.; checked against
:func:`otbound.sequence.optimal_verification_acceptance` in otbound's tests), exact where
enumerable, else estimated with the same draws' budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from otbound.audits._audit import ABOVE_CONFIDENCE, EXACT_TOLERANCE, step_row
from otbound.engines import Processing
from otbound.engines.blocks import ChainRule, VllmBlock
from otbound.evaluate import check_lossless

__all__ = ["CELL_TOKENS", "MAX_ENUMERATED_RUNS", "audit_chain_rows", "chain_step"]

#: Tokens of each depth's target kept as cells of their own by the Monte Carlo test.
CELL_TOKENS = 7
#: The most runs an exact audit's enumeration may cost: draft chains × the ``2^γ`` coins × the
#: tokens of the last draw (each run replays the rule's code, tens of microseconds).
MAX_ENUMERATED_RUNS = 4_000
#: Entries of one (trials, V) block of the vectorised simulation.
_CHUNK = 1 << 22


def compact(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows restricted to the union of their supports, and those tokens."""
    support = np.flatnonzero((p > 0).any(axis=0) | (q > 0).any(axis=0))
    return p[:, support], q[:, support], support


def cells(sequences: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cell ids of the sequences and the product law over the cells (module docstring)."""
    depth = p.shape[0]
    ids = np.zeros(sequences.shape[0], dtype=np.int64)
    law = np.ones(1)
    for d in range(depth):
        top = np.argsort(-p[d], kind="stable")[:CELL_TOKENS]
        classes = np.full(p.shape[1], top.size, dtype=np.int64)
        classes[top] = np.arange(top.size)
        mass = np.append(p[d, top], max(0.0, 1.0 - float(p[d, top].sum())))
        ids = ids * mass.size + classes[sequences[:, d]]
        law = np.outer(law, mass).ravel()
    return ids, law / law.sum()


class _Cells:
    """What :func:`otbound.check_lossless` runs: precomputed cell ids."""

    design = "iid"
    name = "cells"

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids

    def acceptance(self, p: object, q: object, n: int = 1) -> None:
        return None

    def simulate(
        self, p: object, q: object, n: int, trials: int, seed: object
    ) -> tuple[np.ndarray, None]:
        return self.ids, None


def simulate(
    rule: ChainRule, p: np.ndarray, q: np.ndarray, trials: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``rule.simulate_rows`` in blocks of trials bounding the memory."""
    chunk = max(1, _CHUNK // p.shape[1])
    parts = [
        rule.simulate_rows(p, q, min(chunk, trials - start), rng)
        for start in range(0, trials, chunk)
    ]
    return np.concatenate([s for s, _ in parts]), np.concatenate([t for _, t in parts])


def chain_step(
    rule: ChainRule,
    p_rows: np.ndarray,
    q_rows: np.ndarray,
    processing: Processing,
    step: int,
    *,
    trials: int,
    seed: object,
    exact: bool,
) -> dict[str, Any]:
    """One chain's row (:data:`~otbound.audits._audit.STEP_COLUMNS`; ``acceptance`` and
    ``alpha_star`` are expected accepted drafts per iteration)."""
    from scipy.special import ndtri  # the normal quantile

    from otbound.sequence import block_acceptance, lossless_gap

    p, q, _ = compact(processing.apply(p_rows), processing.apply(q_rows))
    gamma = q.shape[0]
    runs = np.count_nonzero(q, axis=1).prod() * 2**gamma * np.count_nonzero(p, axis=1).max()
    small = runs <= MAX_ENUMERATED_RUNS
    if exact and rule.enumerable and small:
        tv = lossless_gap(p, q, gamma, verifier=rule)
        accepted = rule.acceptance(p, q, gamma)
        best = block_acceptance(p, q, gamma, verifier="block")
        return step_row(step, "exact", (tv, tv, tv, 0.0), (math.nan, 0.0, 0, 0), accepted,
                    (accepted, accepted), best, accepted > best + EXACT_TOLERANCE)  # fmt: skip
    rng = np.random.default_rng(seed)  # type: ignore[arg-type]
    sequences, tau = simulate(rule, p, q, trials, rng)
    ids, law = cells(sequences, p)
    result = check_lossless(law, law, n=1, trials=trials, seed=0, verifier=_Cells(ids))
    best_tau = tau if isinstance(rule, VllmBlock) else simulate(VllmBlock(), p, q, trials, rng)[1]
    mean, best = float(tau.mean()), float(best_tau.mean())
    half = 1.96 * float(tau.std(ddof=1)) / math.sqrt(trials) if trials > 1 else math.inf
    # the difference from block verification's, two independent samples
    spread = math.sqrt((float(tau.var(ddof=1)) + float(best_tau.var(ddof=1))) / trials)
    return step_row(
        step,
        "monte_carlo",
        (result.tv_distance, result.tv_lower, result.tv_upper, math.nan),
        (result.p_value, result.statistic, result.dof, trials),
        mean,
        (mean - half, mean + half),
        best,
        mean - best > float(ndtri(ABOVE_CONFIDENCE)) * spread,
    )


def audit_chain_rows(
    rule: ChainRule,
    chains: Iterable[tuple[int, np.ndarray, np.ndarray]],
    processing: Processing,
    *,
    trials: int,
    seed: object,
    exact: bool,
) -> list[dict[str, Any]]:
    """Rows of :func:`chain_step` over ``(start step, P rows, Q rows)``, one seed each."""
    root = np.random.SeedSequence(seed)  # type: ignore[arg-type]
    out = []
    for step, p_rows, q_rows in chains:
        (chain_seed,) = np.random.SeedSequence(root.entropy, spawn_key=(int(step),)).spawn(1)
        out.append(
            chain_step(
                rule, p_rows, q_rows, processing, step, trials=trials, seed=chain_seed, exact=exact
            )
        )
    return out
