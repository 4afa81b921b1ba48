"""The audit's entry points: rows of ``(p, q)`` (:func:`audit`) or a dump (:func:`audit_dump`,
:func:`audit_rules`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from otbound._checks import as_distribution_pair
from otbound.audits._audit import DEFAULT_TRIALS, AuditResult, audit_rows, summarise
from otbound.audits._chains import audit_chain_rows
from otbound.audits._rules import as_audited
from otbound.dumps import Dump, ShardData, StepDistributions, open_dump
from otbound.engines import CHAIN_RULES, ChainRule, Processing, Sides
from otbound.evaluate import SIGNIFICANCE
from otbound.verifiers.base import as_trials

__all__ = ["SAMPLE_DUMP", "audit", "audit_dump", "audit_rules", "open_audit_dump"]

#: The sample dump shipped with the source tree.
SAMPLE_DUMP = Path(__file__).resolve().parents[2] / "data" / "sample"


def audit(
    rule: object,
    p: object,
    q: object,
    n: int | None = None,
    design: str | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    trials: int = DEFAULT_TRIALS,
    seed: object = 0,
    significance: float = SIGNIFICANCE,
    power: float = 0.99,
    exact: bool = True,
) -> AuditResult:
    r"""Audit a verification rule: is its output distributed as the target, how far from it,
    and how its acceptance compares with ``α*``.

    Parameters
    ----------
    rule : str, EngineRule, verifier or callable
        An engine rule (a name in :data:`otbound.engines.ENGINE_RULES` or an
        :class:`~otbound.engines.EngineRule`), a verifier (a name in
        :data:`otbound.VERIFIERS` or an object with the verifier protocol), or a plain
        function ``verify(drafts, p, q, rng) -> token``.
    p, q : array_like, shape (V,) or (steps, V)
        The target's and the draft's distributions before processing (the softmax of the
        raw logits). For a block rule, a chain: ``p`` of shape ``(γ + 1, V)`` and ``q`` of
        shape ``(γ, V)`` (the on-path laws), or ``(chains, γ + 1, V)`` and ``(chains, γ, V)``.
    n : int, optional
        Number of drafts (default: the rule's own, else 1).
    design : str, optional
        The draft design (default: the rule's own, else ``"iid"``).
    temperature, top_k, top_p
        The request's processing. An engine rule applies it its own way; any other rule gets
        both sides processed alike. The target law is ``p`` processed.
    trials : int, default 200,000
        Monte Carlo trials per step where the law is not exact.
    seed : int, default 0
    significance : float, default 1e-5
        Level of the chi-square tests (module :mod:`otbound.audits._audit`).
    power : float, default 0.99
        The power at which :attr:`AuditResult.tv_detectable` is stated.
    exact : bool, default True
        Use the exact law where one exists (False: Monte Carlo for every rule).

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        Invalid rows or settings; a function with the wrong signature, or that returns
        anything but a token id in ``[0, V)`` (one line naming the rule and what was wrong).

    Examples
    --------
    >>> import otbound as ob
    >>> p, q = [0.5, 0.3, 0.2], [0.4, 0.4, 0.2]
    >>> ob.audit("hf_raw_q", p, q, top_k=2).lossless
    False
    >>> ob.audit("hf_assisted", p, q, top_k=2).lossless
    True
    """
    processing = Processing(temperature, top_k, top_p)
    audited = as_audited(rule, processing=processing, n=n, design=design)
    p_arr, q_arr = as_distribution_pair(p, q)
    trials = as_trials(trials)
    if audited.chain is not None:
        steps = audit_chain_rows(
            audited.chain, _chains(p_arr, q_arr), processing, trials=trials, seed=seed, exact=exact
        )
    else:
        if p_arr.shape != q_arr.shape or p_arr.ndim > 2:
            raise ValueError(
                "p and q must have one shape, (V,) or (steps, V), got "
                f"{p_arr.shape} and {q_arr.shape}"
            )
        p_rows, q_rows = np.atleast_2d(p_arr), np.atleast_2d(q_arr)
        rows = ((s, Sides(p_rows[s], q_rows[s], audited.processing)) for s in range(len(p_rows)))
        (steps,) = audit_rows([audited], rows, trials=trials, seed=seed, exact=exact)
    return summarise(steps, audited, significance=significance, power=power)


def _chains(p: np.ndarray, q: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Chains from ``p`` (γ + 1, V) and ``q`` (γ, V), or batches of them (chains, ., V)."""
    if p.ndim == 2:
        p, q = p[None], q[None]
    if p.ndim != 3 or q.ndim != 3 or p.shape[0] != q.shape[0] or p.shape[1] != q.shape[1] + 1:
        raise ValueError(
            "a block rule audits chains: p of shape (γ + 1, V) and q of shape (γ, V) (or "
            f"(chains, γ + 1, V) and (chains, γ, V)), got {p.shape} and {q.shape}"
        )
    return [(c, p[c], q[c]) for c in range(p.shape[0])]


def _read(dump: Dump, max_steps: int | None) -> Iterator[tuple[ShardData, StepDistributions]]:
    """Each shard of the dump's first ``max_steps`` steps and its rows at temperature 1."""
    left = dump.num_steps if max_steps is None else max_steps
    for key in range(len(dump)):
        if left <= 0:
            return
        shard = dump.read_shard(key).head(left)
        yield shard, shard.distributions(1.0)
        left -= shard.num_steps


def dump_rows(
    dump: Dump,
    processing: Processing,
    max_steps: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> Iterator[tuple[int, Sides]]:
    """``(step id, Sides)`` for the dump's first ``max_steps`` steps (default: all), read at
    temperature 1 without filters; ``progress(1)`` after each step."""
    for _, rows in _read(dump, max_steps):
        for step, p_row, q_row in zip(rows.step, rows.target, rows.draft, strict=True):
            yield int(step), Sides(p_row, q_row, processing)
            if progress is not None:
                progress(1)


def audit_rules(
    rules: Sequence[object],
    dump: object = None,
    n: int | None = None,
    design: str | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_steps: int | None = None,
    trials: int = DEFAULT_TRIALS,
    seed: object = 0,
    significance: float = SIGNIFICANCE,
    power: float = 0.99,
    exact: bool = True,
    progress: Callable[[int], object] | None = None,
    gamma: int = 3,
) -> list[AuditResult]:
    """:func:`audit_dump` of several rules, each step read and processed once for all.

    Block rules (:data:`otbound.engines.CHAIN_RULES`) are audited on chains of ``gamma + 1``
    consecutive steps of one prompt (:func:`dump_chains`; ``n`` and ``design`` are the other
    rules'), the others on every step.

    Returns
    -------
    list of AuditResult
        In the order of ``rules``.
    """
    processing = Processing(temperature, top_k, top_p)
    audited = [
        as_audited(r, processing=processing)
        if isinstance(r, ChainRule) or r in CHAIN_RULES  # one chain: no n or design
        else as_audited(r, processing=processing, n=n, design=design)
        for r in rules
    ]
    source = open_audit_dump(dump)
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    trials = as_trials(trials)
    single = [a for a in audited if a.chain is None]
    rows: dict[str, list[dict[str, Any]]] = {}
    if single:
        found = dump_rows(source, processing, max_steps, progress)
        per_rule = audit_rows(single, found, trials=trials, seed=seed, exact=exact)
        rows.update((a.name, r) for a, r in zip(single, per_rule, strict=True))
    for a in audited:
        if a.chain is not None:
            chains = dump_chains(source, gamma, max_steps)
            rows[a.name] = audit_chain_rows(
                a.chain, chains, processing, trials=trials, seed=seed, exact=exact
            )
    return [summarise(rows[a.name], a, significance=significance, power=power) for a in audited]


def dump_chains(
    dump: Dump, gamma: int, max_steps: int | None = None
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Chains of ``γ + 1`` consecutive steps of one prompt from the dump's first ``max_steps``
    steps, not overlapping: ``(first step, P rows (γ + 1, V), Q rows (γ, V))``, read at
    temperature 1 without filters (the on-path laws of a context-independent model)."""
    if gamma < 1:
        raise ValueError(f"gamma must be at least 1, got {gamma}")
    for shard, rows in _read(dump, max_steps):
        prompt = shard.metadata["prompt_id"].to_numpy()[rows.kept]
        start = 0
        while start + gamma + 1 <= len(rows.step):
            span = slice(start, start + gamma + 1)
            if (prompt[span] == prompt[start]).all():
                yield int(rows.step[start]), rows.target[span], rows.draft[start : start + gamma]
                start += gamma + 1
            else:
                start += 1


def audit_dump(rule: object, dump: object = None, *args: Any, **kwargs: Any) -> AuditResult:
    """Audit a rule on every step of a dump (default: the sample in ``data/sample``).

    Parameters
    ----------
    rule : str, EngineRule, verifier or callable
        As in :func:`audit`.
    dump : str, path or Dump, optional
        A dump (directory or single file), or an open :class:`~otbound.dumps.Dump`.
    *args, **kwargs
        ``n``, ``design``, ``temperature``, ``top_k``, ``top_p``, ``max_steps``, ``trials``,
        ``seed``, ``significance``, ``power``, ``exact``, ``progress``, ``gamma`` as in
        :func:`audit_rules`.

    Returns
    -------
    AuditResult
    """
    (result,) = audit_rules([rule], dump, *args, **kwargs)
    return result


def open_audit_dump(dump: object) -> Dump:
    """``dump`` as a :class:`~otbound.dumps.Dump`: kept if it is one, opened if it is a path,
    the sample (:data:`SAMPLE_DUMP`) if it is ``None``."""
    if isinstance(dump, Dump):
        return dump
    if dump is None:
        if not SAMPLE_DUMP.exists():
            raise ValueError(
                f"no dump given and the sample is missing ({SAMPLE_DUMP}): it ships with the "
                "source tree, not the installed package"
            )
        return open_dump(SAMPLE_DUMP)
    return open_dump(dump)  # type: ignore[arg-type]
