r"""Judging verifiers: a lossless test for any verifier, and a tidy comparison table.

* :func:`check_lossless` runs a verifier many times on one step and tests whether its output
  tokens are distributed as ``p`` (chi-square goodness of fit with pooled bins), with a
  total-variation estimate and confidence bounds.
* :func:`compare` tabulates, per step, ``n``, design and verifier, the acceptance rate (exact,
  or Monte Carlo with a confidence interval), the design's optimal ``α*``, the gap and the
  ratio, plus one ``"bound"`` row per design.

Both accept any object with the verifier protocol (:class:`otbound.verifiers.Verifier`):
``design``, ``acceptance(p, q, n)`` (may return ``None``) and ``simulate(p, q, n, trials,
seed)`` or a single-trial ``verify(drafts, p, q, rng)``. With ``verify`` only, the drafts are
drawn from ``get_design(verifier.design)`` and ``verify`` is called once per trial.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from otbound._checks import as_num_drafts, clip_rounding
from otbound._spellings import method_keyword
from otbound.bounds import optimal_acceptance
from otbound.bounds.solvers import SWEEP, Solver, as_solver
from otbound.bounds.sweep import optimal_acceptance_by_n
from otbound.drafts import ABOVE_SUPPORT, ABOVE_VOCABULARY, NEEDS_SLOTS, get_design
from otbound.problem import Step
from otbound.verifiers.base import (
    MIN_TRIALS,
    BaseVerifier,
    Estimate,
    acceptance_what,
    as_trials,
    sample_drafts,
)
from otbound.verifiers.batched import BatchAcceptance
from otbound.verifiers.registry import VERIFIERS, get_verifier

__all__ = ["LosslessResult", "check_lossless", "compare", "skipped_cells"]

#: Default significance of :func:`check_lossless`: a lossless verifier fails with this
#: probability (chi-square approximation).
SIGNIFICANCE = 1e-5
#: Bins with a smaller expected count are pooled.
MIN_EXPECTED = 5.0


# -- the protocol --------------------------------------------------------------------------


def _require_protocol(verifier: object, caller: str) -> None:
    """Raise ``TypeError`` listing what the object lacks of the verifier protocol."""
    missing = []
    if not hasattr(verifier, "design"):
        missing.append("a 'design' attribute (a draft design name)")
    if not callable(getattr(verifier, "acceptance", None)):
        missing.append("an 'acceptance(p, q, n)' method (it may return None)")
    if not (
        callable(getattr(verifier, "simulate", None)) or callable(getattr(verifier, "verify", None))
    ):
        missing.append("a 'simulate(p, q, n, trials, seed)' or 'verify(drafts, p, q, rng)' method")
    if missing:
        raise TypeError(
            f"{caller} needs a verifier object with the otbound verifier protocol; "
            f"{type(verifier).__name__} lacks " + "; ".join(missing)
        )


def _name(verifier: object) -> str:
    return str(getattr(verifier, "name", type(verifier).__name__))


def _design_name(verifier: object) -> str:
    return get_design(verifier.design).name  # type: ignore[attr-defined]


def _trusts_steps(verifier: object, method: str) -> bool:
    """Whether ``verifier``'s public ``method`` is :class:`BaseVerifier`'s own, so that its
    trusted twin (``applies_to``, ``acceptance_of``, ``simulate_step``) may take a validated
    step instead (a subclass that overrides the public method gets it called)."""
    return isinstance(verifier, BaseVerifier) and getattr(type(verifier), method) is getattr(
        BaseVerifier, method
    )


def _run(
    verifier: object, step: Step, n: int, trials: int, seed: object
) -> tuple[np.ndarray, np.ndarray | None]:
    """Output tokens (and acceptance flags where known) from ``simulate`` or ``verify``; a
    shipped verifier gets the validated step (:meth:`BaseVerifier.simulate_step`)."""
    p, q = step.p, step.q
    simulate = getattr(verifier, "simulate", None)
    if callable(simulate):
        if _trusts_steps(verifier, "simulate"):
            out: Any = verifier.simulate_step(step, n, trials, seed)  # type: ignore[attr-defined]
        else:
            out = simulate(p, q, n=n, trials=trials, seed=seed)
        if isinstance(out, tuple):
            tokens, accepted = out
        else:
            tokens, accepted = getattr(out, "tokens", out), getattr(out, "accepted", None)
        tokens = np.asarray(tokens)
        if tokens.shape != (trials,):
            raise ValueError(
                f"{_name(verifier)}.simulate returned tokens of shape {tokens.shape}, "
                f"expected ({trials},)"
            )
        return tokens, None if accepted is None else np.asarray(accepted, dtype=bool)
    rng = np.random.default_rng(seed)  # type: ignore[arg-type]  # any seed simulate accepts
    drafts = sample_drafts(get_design(verifier.design), q, n, trials, rng)  # type: ignore[attr-defined]
    tokens = np.empty(trials, dtype=np.int64)
    accepted = np.empty(trials, dtype=bool)
    for t in range(trials):
        token, ok = verifier.verify(drafts[t], p, q, rng)  # type: ignore[attr-defined]
        tokens[t] = token
        accepted[t] = ok
    return tokens, accepted


def _validate_step(verifier: object, p: object, q: object, n: object) -> tuple[Step, int]:
    """One validated step for ``verifier``'s design, and ``n``."""
    n = as_num_drafts(n)
    spec = get_design(verifier.design)  # type: ignore[attr-defined]
    step = Step.validate(p, q, slot_axis=spec.slot_axis)
    if step.p.ndim != 1 or step.q.ndim != (2 if spec.slot_axis else 1):
        raise ValueError(
            f"p must have shape (V,) and q shape {'(n, V)' if spec.slot_axis else '(V,)'} for "
            f"one step, got {step.p.shape} and {step.q.shape}"
        )
    spec.check(step.q, n)
    return step, n


# -- the lossless test ---------------------------------------------------------------------


@dataclass(frozen=True)
class LosslessResult:
    """Outcome of :func:`check_lossless`.

    Attributes
    ----------
    passed : bool
        ``p_value >= significance`` (and no token outside the support of ``p``).
    p_value : float
        Chi-square goodness-of-fit p-value of the output tokens against ``p``.
    statistic : float
        ``Σ_b (O_b − E_b)² / E_b`` over the pooled bins.
    dof : int
        Number of pooled bins minus one.
    tv_distance : float
        Plug-in total variation ``½ Σ_y |N_y / N − p_y|`` (biased upwards by sampling noise,
        about ``½ Σ_y sqrt(2 p_y / (π N))`` for a lossless verifier).
    tv_lower, tv_upper : float
        Confidence bounds at level ``confidence`` on the total variation between the
        verifier's output distribution and ``p`` (Bretagnolle–Huber–Carol; ``tv_lower`` from
        the pooled bins, ``tv_upper`` over all ``V`` tokens, conservative for large ``V``).
    trials : int
    bins : int
        Number of pooled bins.
    significance : float
    confidence : float
    observed, expected : numpy.ndarray
        Pooled bin counts and their expectations under ``p``.
    message : str
    """

    passed: bool
    p_value: float
    statistic: float
    dof: int
    tv_distance: float
    tv_lower: float
    tv_upper: float
    trials: int
    bins: int
    significance: float
    confidence: float
    observed: np.ndarray
    expected: np.ndarray
    message: str


def _pooled_bins(expected: np.ndarray, min_expected: float) -> np.ndarray:
    """Bin index of each token with ``p > 0``: tokens with ``E ≥ min_expected`` alone, the others
    grouped in order of decreasing ``E`` until each group reaches ``min_expected``."""
    size = expected.size
    bins = np.empty(size, dtype=np.int64)
    big = expected >= min_expected
    count = int(big.sum())
    bins[big] = np.arange(count)
    small = np.flatnonzero(~big)
    if small.size == 0:
        return bins
    small = small[np.argsort(-expected[small], kind="stable")]
    acc = 0.0
    current = count
    for token in small:
        bins[token] = current
        acc += expected[token]
        if acc >= min_expected:
            current += 1
            acc = 0.0
    if acc > 0.0:  # an underfull last group: merge it with the previous group, or the smallest bin
        if current > count:
            bins[bins == current] = current - 1
        elif count > 0:
            smallest = int(np.argmin(np.where(big, expected, np.inf)))
            bins[bins == current] = bins[smallest]
        else:
            current += 1  # everything is small: one bin
    return bins


def _bhc(k: int, trials: int, confidence: float) -> float:
    """Half the Bretagnolle–Huber–Carol L1 deviation: ``TV(π̂, π) ≤`` this w.p. ``confidence``."""
    return 0.5 * math.sqrt(2.0 * (k * math.log(2.0) + math.log(1.0 / (1.0 - confidence))) / trials)


@method_keyword("verifier")
def check_lossless(
    p: object,
    q: object,
    n: int = 2,
    trials: int = 200_000,
    seed: object = 0,
    *,
    verifier: object,
    significance: float = SIGNIFICANCE,
    confidence: float = 0.95,
) -> LosslessResult:
    r"""Test whether a verifier's output is distributed as ``p`` (is lossless) on one step.

    Runs ``trials`` seeded trials (``simulate``, or ``verify`` in a loop) and applies a
    chi-square goodness-of-fit test of the output tokens against ``p``: tokens with expected
    count ``N p_y ≥ 5`` are bins of their own, the others are pooled (in order of decreasing
    ``p``) into bins of expected count ``≥ 5``;

    .. math::

        χ^2 = \sum_b \frac{(O_b − N p(b))^2}{N p(b)},\qquad
        \text{p-value} = P(χ^2_{B − 1} ≥ χ^2).

    An output token with ``p_y = 0`` fails at once (p-value 0).

    Parameters
    ----------
    p, q : array_like, shape (V,)
        One step (``q`` of shape ``(n, V)`` for the ``per_slot`` design).
    n : int, default 2
    trials : int, default 200_000
    seed : int, default 0
    verifier : str or verifier object
        A name in :data:`otbound.VERIFIERS` or any object with the verifier protocol. (The
        old order, ``check_lossless(verifier, p, q, ...)``, warns and still works.)
    significance : float, default 1e-5
        The test fails when ``p_value < significance``: a lossless verifier fails with this
        probability (the false-failure rate, up to the chi-square approximation). At the
        defaults the test fails, for instance, RRS that skips duplicate drafts without updating
        its residual (total variation 0.027 on ``p = (.1, .2, .3, .4)``, ``q = (.4, .3, .2, .1)``,
        ``n = 2``: p-value below 1e-100); with 200,000 trials on a handful of tokens it detects
        a total variation of a few thousandths.
    confidence : float, default 0.95
        Level of the total-variation bounds.

    Returns
    -------
    LosslessResult

    Raises
    ------
    TypeError
        The object lacks part of the verifier protocol (the message lists what).
    ValueError
        Invalid ``p``, ``q``, ``n``, ``trials``, ``significance`` or ``confidence``, or a
        ``simulate`` that returns the wrong number of tokens.

    Examples
    --------
    >>> from otbound.evaluate import check_lossless
    >>> res = check_lossless([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], n=2, verifier="rrs")
    >>> res.passed
    True
    """
    verifier = get_verifier(verifier)
    _require_protocol(verifier, "check_lossless")
    if not (0.0 < significance < 1.0):
        raise ValueError(f"significance must be in (0, 1), got {significance!r}")
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    trials = as_trials(trials)
    step, n = _validate_step(verifier, p, q, n)
    tokens, _ = _run(verifier, step, n, trials, seed)
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"{_name(verifier)} returned non-integer tokens ({tokens.dtype})")
    return _goodness_of_fit(tokens, step.p, significance, confidence)


def _goodness_of_fit(
    tokens: np.ndarray, p: np.ndarray, significance: float, confidence: float
) -> LosslessResult:
    """:func:`check_lossless`'s test of the output ``tokens`` against ``p``: a failure at
    once for a token outside the vocabulary or with ``p = 0``, else the pooled chi-square
    test and the total-variation bounds."""
    trials, vocab = tokens.size, p.size
    outside = (tokens < 0) | (tokens >= vocab)
    if np.any(outside):
        bad = int(tokens[outside][0])
        return _failed(
            f"token {bad} is outside the vocabulary [0, {vocab})", trials, significance, confidence
        )
    counts = np.bincount(tokens, minlength=vocab).astype(np.float64)
    tv = 0.5 * float(np.abs(counts / trials - p).sum())
    impossible = (p <= 0) & (counts > 0)
    if np.any(impossible):
        bad = int(np.flatnonzero(impossible)[0])
        return _failed(
            f"token {bad} has p = 0 but was output {int(counts[bad])} times",
            trials,
            significance,
            confidence,
            tv=tv,
        )
    observed, expected = _pooled_counts(counts, p, trials)
    bins = observed.size
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    dof = bins - 1
    from scipy.special import chdtrc  # chi-square survival (scipy.stats: 0.3 s more to import)

    p_value = float(chdtrc(dof, statistic)) if dof > 0 else 1.0
    pooled_tv = 0.5 * float(np.abs(observed - expected).sum()) / trials
    tv_lower = max(0.0, pooled_tv - _bhc(bins, trials, confidence))
    tv_upper = min(1.0, tv + _bhc(vocab, trials, confidence))
    passed = p_value >= significance
    message = (
        f"chi-square {statistic:.4g} on {dof} dof, p-value {p_value:.3g} "
        f"({'passed' if passed else 'FAILED'} at significance {significance:g}); "
        f"TV {tv:.4g} (bounds [{tv_lower:.3g}, {tv_upper:.3g}] at {confidence:g})"
    )
    return LosslessResult(
        passed=passed,
        p_value=p_value,
        statistic=statistic,
        dof=dof,
        tv_distance=tv,
        tv_lower=tv_lower,
        tv_upper=tv_upper,
        trials=trials,
        bins=bins,
        significance=significance,
        confidence=confidence,
        observed=observed,
        expected=expected,
        message=message,
    )


def _pooled_counts(counts: np.ndarray, p: np.ndarray, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts of the pooled bins (:func:`_pooled_bins`) of the tokens
    with ``p > 0``."""
    live = np.flatnonzero(p > 0)
    expected_tok = trials * p[live]
    bin_of = _pooled_bins(expected_tok, MIN_EXPECTED)
    bins = int(bin_of.max()) + 1
    observed = np.bincount(bin_of, weights=counts[live], minlength=bins)
    expected = np.bincount(bin_of, weights=expected_tok, minlength=bins)
    return observed, expected


def _failed(
    message: str, trials: int, significance: float, confidence: float, tv: float = 1.0
) -> LosslessResult:
    return LosslessResult(
        passed=False,
        p_value=0.0,
        statistic=math.inf,
        dof=0,
        tv_distance=tv,
        tv_lower=0.0,
        tv_upper=1.0,
        trials=trials,
        bins=0,
        significance=significance,
        confidence=confidence,
        observed=np.zeros(0),
        expected=np.zeros(0),
        message="FAILED: " + message,
    )


# -- the comparison table ------------------------------------------------------------------


#: Columns of :func:`compare`'s table, in order.
COMPARE_COLUMNS = (
    "step",
    "n",
    "design",
    "verifier",
    "acceptance",
    "ci_low",
    "ci_high",
    "exact",
    "alpha_star",
    "gap",
    "ratio",
    "trials",
    "stderr",
)


#: Columns of :func:`skipped_cells`' table, in order.
SKIPPED_COLUMNS = ("step", "n", "design", "verifier", "reason")

#: Reasons a (step, n, design, verifier) cell of :func:`compare` gets no row.
SKIP_SUPPORT = ABOVE_SUPPORT
SKIP_VOCABULARY = ABOVE_VOCABULARY
SKIP_PER_SLOT = NEEDS_SLOTS
SKIP_VERIFIER = "the verifier does not apply"
SKIP_NO_TRIALS = "no exact acceptance and no Monte Carlo trials"


class _SkippedRecord:
    """The skipped cells of one :func:`compare` table, kept in ``table.attrs["skipped"]``.

    Read-only and compared by value, so that pandas can copy a table's ``attrs`` and compare
    those of several tables (``pd.concat``) as it does for plain values.
    """

    __slots__ = ("_frame",)

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame

    @property
    def frame(self) -> pd.DataFrame:
        return self._frame.copy()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SkippedRecord) and self._frame.equals(other._frame)

    __hash__ = None  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, object]) -> _SkippedRecord:
        return self  # never modified: the frame goes out as a copy

    def __repr__(self) -> str:
        return f"<{len(self._frame)} skipped cells>"


def skipped_cells(table: pd.DataFrame) -> pd.DataFrame:
    """The (step, n, design, verifier) cells a :func:`compare` table has no row for, and why.

    Parameters
    ----------
    table : pandas.DataFrame
        A table returned by :func:`compare` (or a selection of its rows: the record goes
        with the table's ``attrs``).

    Returns
    -------
    pandas.DataFrame
        Columns ``step, n, design, verifier, reason`` (:data:`SKIPPED_COLUMNS`), one row per
        cell of the whole grid of ``compare``'s call that got no row; the reasons are
        :data:`SKIP_SUPPORT`, :data:`SKIP_VOCABULARY`, ``"design defined for n=2 only"``,
        :data:`SKIP_PER_SLOT`, :data:`SKIP_VERIFIER` and :data:`SKIP_NO_TRIALS`.

    Raises
    ------
    ValueError
        The table carries no record (not from ``compare``, or a concatenation of tables with
        different records, which pandas drops).

    Examples
    --------
    >>> from otbound.evaluate import compare, skipped_cells
    >>> df = compare([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=3, verifiers=["spechub"])
    >>> print(skipped_cells(df).to_string(index=False))
     step  n design verifier                      reason
        0  3    hub  spechub design defined for n=2 only
        0  3    hub    bound design defined for n=2 only
    """
    record = table.attrs.get("skipped")
    if not isinstance(record, _SkippedRecord):
        raise ValueError(
            "the table carries no record of skipped cells: it comes from otbound.compare "
            "(pd.concat keeps it only when every part has the same record)"
        )
    return record.frame


def _unusable_steps(design: str, q2: np.ndarray, n: int) -> np.ndarray:
    """Per step of ``q2`` (steps, V), why the design cannot draw ``n`` drafts (``""``: it can);
    a design with one ``q`` per slot never can: ``compare``'s rows have no slot axis."""
    spec = get_design(design)
    if spec.slot_axis:
        return np.full(q2.shape[0], NEEDS_SLOTS, dtype=object)
    return spec.unusable(q2, n)


def _alpha_star_rows(
    step: Step, rows: np.ndarray, n: int, design: str, solver: Solver
) -> np.ndarray:
    """``α*`` of the steps in the mask ``rows``, one solver call; its errors propagate. The
    built-in sweep takes the validated rows; any other solver gets arrays."""
    if not rows.any():
        return np.zeros(0)
    part = step.take(rows)
    found: object
    if solver is SWEEP:
        found = optimal_acceptance(part, None, n, design)
    else:
        found = solver.compute(part.p, part.q, n, design)
    values = np.atleast_1d(np.asarray(found, dtype=float))
    if values.shape != (int(rows.sum()),):
        raise ValueError(
            f"the bound returned shape {values.shape} for {int(rows.sum())} steps "
            f"(n={n}, design {design!r}); it must return one α* per step"
        )
    return values


def _alpha_star_table(
    step: Step,
    ns: list[int],
    designs: list[str],
    solver: Solver,
    applies: dict[tuple[int, str], np.ndarray],
) -> dict[tuple[int, str], np.ndarray]:
    """``α*`` per step for every ``(n, design)``: NaN where ``applies`` is False, and an error
    from the bound (a NaN in a sweep, a failed check) is raised, never turned into a skip.

    The designs the solver does not serve, and every design with the built-in sweep
    (:data:`~otbound.bounds.solvers.SWEEP`), are computed by the exact sweep on the validated
    rows; a design with ``shared_sweep`` gets every ``n`` from one sort
    (:func:`otbound.bounds.sweep.optimal_acceptance_by_n`) for the steps where every ``n``
    applies; the others, like every other design, one ``n`` at a time.
    """
    rows = step.rows
    out: dict[tuple[int, str], np.ndarray] = {}
    for d in designs:
        use = solver if solver.serves(d) else SWEEP
        shared = np.zeros(rows, dtype=bool)
        if use is SWEEP and get_design(d).shared_sweep:
            shared = np.logical_and.reduce([applies[k, d] for k in ns])
        by_n = optimal_acceptance_by_n(step.take(shared), None, ns, d) if shared.any() else None
        for j, k in enumerate(ns):
            out[k, d] = np.full(rows, np.nan)
            if by_n is not None:
                out[k, d][shared] = by_n[j]
            rest = applies[k, d] & ~shared
            out[k, d][rest] = _alpha_star_rows(step, rest, k, d, use)
            broken = applies[k, d] & np.isnan(out[k, d])
            if broken.any():
                raise ValueError(
                    f"α* of design {d!r} at n={k} is NaN at {int(broken.sum())} step(s) "
                    f"(row {int(np.flatnonzero(broken)[0])} first): the bound failed"
                )
    return out


def _as_n_list(n: object) -> list[int]:
    if isinstance(n, numbers.Integral) and not isinstance(n, bool):
        return [as_num_drafts(n)]
    if isinstance(n, Iterable) and not isinstance(n, str | bytes):
        values = [as_num_drafts(k) for k in n]
        if not values:
            raise ValueError("n must be an integer >= 1 or a non-empty list of them, got []")
        return values
    raise ValueError(f"n must be an integer >= 1 or a list of them, got {n!r}")


def compare(
    p: object,
    q: object,
    n: int | Iterable[int] = (2, 4),
    verifiers: Iterable[object] | str = VERIFIERS,
    designs: Iterable[str] | None = None,
    trials: int = 100_000,
    seed: int = 0,
    *,
    level: float = 0.95,
    step_ids: object = None,
    bound: Solver | Callable[..., object] | None = None,
    target_se: float | None = None,
    acceptance: BatchAcceptance | None = None,
) -> pd.DataFrame:
    r"""Acceptance of each verifier next to its design's optimum, as a tidy table.

    One row per (step, n, verifier) with

    * ``acceptance``: exact (``exact=True``, ``ci_low = ci_high = acceptance``, ``stderr = 0``)
      when the verifier's ``acceptance`` gives a value, else an estimate (``exact=False``)
      with its ``stderr`` and an interval at ``level``: Rao-Blackwellised with a betting
      interval where a shipped verifier has one, else 0/1 Monte Carlo with a Wilson interval
      (:meth:`otbound.verifiers.BaseVerifier.estimate`);
    * ``alpha_star``: ``α*`` of the verifier's design (:func:`otbound.optimal_acceptance`);
    * ``gap = alpha_star − acceptance`` and ``ratio = acceptance / alpha_star``;

    plus a ``verifier="bound"`` row per (step, n, design): ``acceptance = α*`` (``exact``:
    whether the design's sweep is exact).

    Cells that do not apply (``spechub`` at ``n ≠ 2``, ``n`` above the support of ``q``, ...)
    get **no row**; :func:`skipped_cells` lists them with the reason. Nothing else is
    skipped: an error of the bound or of a verifier is raised.

    Parameters
    ----------
    p, q : array_like, shape (V,) or (steps, V)
        Target and draft distributions; batch shapes broadcast (``step`` is the flat index).
    n : int or iterable of int, default (2, 4)
    verifiers : iterable of names or verifier objects, default :data:`otbound.VERIFIERS`
    designs : iterable of str, optional
        Designs to add ``"bound"`` rows for; default: the designs of the verifiers.
    trials : int, default 100_000
        Monte Carlo trials for verifiers without an exact acceptance (with ``target_se``, the
        most a step may use); ``0``: no Monte Carlo, and such cells get no row.
    seed : int, default 0
        Each Monte Carlo run gets its own seed derived from ``(seed, step, n, verifier)``.
    level : float, default 0.95
        Confidence level of the Monte Carlo intervals.
    step_ids : array_like of int, shape (steps,), optional
        Ids for the steps (default ``0 .. steps − 1``), in the ``step`` column and the seeds:
        a step analysed in any batch gets the same row.
    bound : Solver or callable, optional
        A :class:`otbound.bounds.solvers.Solver` (e.g.
        :data:`otbound.bounds.torch_sweep.TORCH_SWEEP` on a GPU), or a callable
        ``bound(p, q, n, design)`` → ``α*`` per row (for every design, or those of its
        ``designs`` attribute); the others use :func:`otbound.optimal_acceptance` (default).
    target_se : float, optional
        Size each Monte Carlo row for this standard error (a pilot, then a fresh sample of
        ``clip(⌈1.25 s² / target_se²⌉, m_0, trials)`` trials:
        :meth:`otbound.verifiers.BaseVerifier.estimate`); default: exactly ``trials`` trials.
    acceptance : BatchAcceptance, optional
        Exact acceptance for whole batches of steps
        (:class:`otbound.verifiers.batched.BatchAcceptance`, e.g.
        :func:`otbound.verifiers.torch_acceptance.torch_acceptance_on` ``("cuda")``) for the
        shipped verifiers and ``n`` it serves (the same rows); the others go step by step.

    Returns
    -------
    pandas.DataFrame
        Columns ``step, n, design, verifier, acceptance, ci_low, ci_high, exact, alpha_star,
        gap, ratio, trials, stderr`` (0 trials for exact rows); ``attrs["skipped"]`` records
        the cells without a row (:func:`skipped_cells`).

    Raises
    ------
    ValueError
        Invalid arguments; an error of the bound or a NaN ``α*`` where the design applies.

    Examples
    --------
    >>> from otbound.evaluate import compare
    >>> df = compare([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2, verifiers=["rrs", "greedy"])
    >>> cols = ["verifier", "design", "acceptance", "alpha_star"]
    >>> print(df[cols].round(4).to_string(index=False))
    verifier design  acceptance  alpha_star
         rrs    iid        0.82        0.89
      greedy greedy        0.95        0.95
       bound    iid        0.89        0.89
       bound greedy        0.95        0.95
    """
    settings = _CompareSettings.checked(n, trials, level, target_se, seed)
    objs = _verifier_objects(verifiers)
    solver = as_solver(bound)
    batch, ids = _validated_steps(p, q, step_ids)
    grid = _grid(objs, designs, settings.ns, batch, solver)
    plan = _RunPlan(ids, settings.trials, settings.seed, settings.target_se)
    rows, skipped = _verifier_cells(objs, grid, batch, plan, settings, acceptance)
    _bound_cells(grid, ids, settings.ns, rows, skipped)
    return _compare_frame(rows, skipped)


@dataclass(frozen=True)
class _CompareSettings:
    """:func:`compare`'s numbers, checked: the numbers of drafts, the trial cap (0: no Monte
    Carlo), the confidence level, the target standard error and the base seed."""

    ns: list[int]
    trials: int
    level: float
    target_se: float | None
    seed: int

    @classmethod
    def checked(
        cls, n: object, trials: object, level: float, target_se: object, seed: object
    ) -> _CompareSettings:
        """The settings, or a ``ValueError`` naming the first bad one."""
        ns = _as_n_list(n)
        cap = 0 if isinstance(trials, numbers.Integral) and trials == 0 else as_trials(trials)
        if not (0.0 < level < 1.0):
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        if target_se is not None and (
            isinstance(target_se, bool)
            or not isinstance(target_se, numbers.Real)
            or not (0.0 < float(target_se) < math.inf)
        ):
            raise ValueError(f"target_se must be a number > 0, got {target_se!r}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        return cls(ns, cap, level, target_se, int(seed))  # type: ignore[arg-type]


def _verifier_objects(verifiers: Iterable[object] | str) -> list[Any]:
    """The verifiers (names looked up), each checked for the verifier protocol."""
    if isinstance(verifiers, str):
        verifiers = [verifiers]
    objs = [get_verifier(v) for v in verifiers]
    for v in objs:
        _require_protocol(v, "compare")
    return objs


def _validated_steps(p: object, q: object, step_ids: object) -> tuple[Step, np.ndarray]:
    """``p`` and ``q`` validated once (everything after trusts them; the copies made here are
    frozen, so that the verifiers know the rows by object) and the steps' ids."""
    batch = Step.validate(p, q)
    if batch is not p:
        batch.freeze()
    steps = batch.flat[0].shape[0]
    ids = np.arange(steps, dtype=np.int64) if step_ids is None else np.asarray(step_ids)
    if ids.shape != (steps,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(
            f"step_ids must be {steps} integers (one per step), got shape {ids.shape} of "
            f"{ids.dtype}"
        )
    return batch, ids


@dataclass(frozen=True)
class _Grid:
    """The cells of a :func:`compare` table: the design of each verifier, the designs with
    ``"bound"`` rows, why each ``(n, design)`` cannot be drawn at each step (``""``: it can)
    and ``α*`` per step (NaN where it cannot)."""

    verifier_designs: list[str]
    bound_designs: list[str]
    why: dict[tuple[int, str], np.ndarray]
    alpha_star: dict[tuple[int, str], np.ndarray]


def _grid(
    objs: list[Any],
    designs: Iterable[str] | str | None,
    ns: list[int],
    batch: Step,
    solver: Solver,
) -> _Grid:
    """The table's cells and ``α*`` of every ``(n, design)`` on the steps where it applies."""
    vdesigns = [_design_name(v) for v in objs]
    if designs is None:
        bound_designs = list(dict.fromkeys(vdesigns))
    else:
        named = [designs] if isinstance(designs, str) else designs
        bound_designs = [get_design(d).name for d in named]
    designs_all = list(dict.fromkeys(vdesigns + bound_designs))
    q2 = batch.flat[1]
    why = {(k, d): _unusable_steps(d, q2, k) for k in ns for d in designs_all}
    applies = {key: reasons == "" for key, reasons in why.items()}
    star_designs = [d for d in designs_all if not get_design(d).slot_axis]
    table = _alpha_star_table(batch, ns, star_designs, solver, applies)
    return _Grid(vdesigns, bound_designs, why, table)


#: A skipped cell: step id, n, design, verifier, reason.
_Skipped = tuple[int, int, str, str, str]


def _verifier_cells(
    objs: list[Any],
    grid: _Grid,
    batch: Step,
    plan: _RunPlan,
    settings: _CompareSettings,
    acceptance: BatchAcceptance | None,
) -> tuple[list[dict[str, object]], list[_Skipped]]:
    """Each verifier's row at each ``n`` and step, or its skipped cell: from one batch call
    where ``acceptance`` serves it, else step by step (:func:`_step_values`)."""
    ns, ids, why, level = settings.ns, plan.ids, grid.why, settings.level
    pairs = list(enumerate(zip(objs, grid.verifier_designs, strict=True)))
    exacts = {
        (k, vi): _batch_exact(acceptance, v, k, batch, why[k, d])
        for k in ns
        for vi, (v, d) in pairs
    }
    known = _step_values(objs, grid.verifier_designs, ns, batch, why, exacts, plan)
    rows: list[dict[str, object]] = []
    skipped: list[_Skipped] = []
    for k in ns:
        for vi, (v, d) in pairs:
            exact = exacts[k, vi]
            for step in range(batch.rows):
                star = float(grid.alpha_star[k, d][step])
                if why[k, d][step] or exact is None:
                    cell = why[k, d][step] or _verifier_row(
                        v, d, batch.row(step), k, int(ids[step]), star, plan, vi, level,
                        known.get((vi, step)),
                    )  # fmt: skip
                else:
                    cell = _row(v, d, k, int(ids[step]), star, _exact(float(exact[step])), level)
                if isinstance(cell, dict):
                    rows.append(cell)
                else:
                    skipped.append((int(ids[step]), k, d, _name(v), cell))
    return rows, skipped


def _bound_cells(
    grid: _Grid,
    ids: np.ndarray,
    ns: list[int],
    rows: list[dict[str, object]],
    skipped: list[_Skipped],
) -> None:
    """The ``"bound"`` row of each design, ``n`` and step (``acceptance = α*``), or its
    skipped cell, added to ``rows`` and ``skipped``."""
    for k in ns:
        for d in grid.bound_designs:
            exact = get_design(d).exact_sweep
            for step, step_id in enumerate(ids.tolist()):
                if grid.why[k, d][step]:
                    skipped.append((step_id, k, d, "bound", grid.why[k, d][step]))
                    continue
                star = float(grid.alpha_star[k, d][step])
                rows.append(
                    {
                        "step": step_id,
                        "n": k,
                        "design": d,
                        "verifier": "bound",
                        "acceptance": star,
                        "ci_low": star,
                        "ci_high": star,
                        "exact": exact,
                        "alpha_star": star,
                        "gap": 0.0,
                        "ratio": 1.0 if star > 0 else np.nan,
                        "trials": 0,
                        "stderr": 0.0,
                    }
                )


def _compare_frame(rows: list[dict[str, object]], skipped: list[_Skipped]) -> pd.DataFrame:
    """The table of :func:`compare`: by step, then ``n``, the bound rows last; the skipped
    cells recorded in ``attrs["skipped"]``."""
    frame = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    frame = frame.astype({"step": "int64", "n": "int64", "exact": "bool", "trials": "int64"})
    order = {"bound": 1}
    frame["_bound"] = frame["verifier"].map(order).fillna(0)
    frame = frame.sort_values(["step", "n", "_bound"], kind="stable").drop(columns="_bound")
    frame = frame.reset_index(drop=True)
    frame.attrs["skipped"] = _SkippedRecord(_skipped_frame(skipped))
    return frame


def _skipped_frame(records: list[tuple[int, int, str, str, str]]) -> pd.DataFrame:
    """The skipped cells as a table (columns :data:`SKIPPED_COLUMNS`), in table order."""
    frame = pd.DataFrame(records, columns=list(SKIPPED_COLUMNS))
    frame = frame.astype({"step": "int64", "n": "int64"})
    frame["_bound"] = (frame["verifier"] == "bound").astype(int)
    frame = frame.sort_values(["step", "n", "_bound"], kind="stable").drop(columns="_bound")
    return frame.reset_index(drop=True)


@dataclass(frozen=True)
class _RunPlan:
    """What a Monte Carlo row of :func:`compare` needs beside its step: the step ids, the
    trial cap, the base seed and the target standard error."""

    ids: np.ndarray
    trials: int
    seed: int
    target_se: float | None


def _run_seed(seed: int, step: int, n: int, index: int) -> int:
    """The seed of the Monte Carlo row of verifier ``index`` at step id ``step`` and ``n``."""
    return int(np.random.SeedSequence(seed, spawn_key=(step, n, index)).generate_state(1)[0])


def _step_values(
    objs: list[Any],
    designs: list[str],
    ns: list[int],
    batch: Step,
    why: dict[tuple[int, str], np.ndarray],
    exacts: dict[tuple[int, int], np.ndarray | None],
    plan: _RunPlan,
) -> dict[tuple[int, int], dict[int, float | Estimate | None]]:
    """Each shipped verifier's value (``(verifier index, step)`` → ``{n: value}``) at every
    ``n`` of a step where its design applies, the verifier applies and no batch computation
    serves it, a step at a time (the work a step's ``n`` share is done once): the exact values
    from one :meth:`BaseVerifier.acceptances_of` call, and where a value is ``None`` and
    ``plan.trials > 0`` and the verifier keeps the base class's ``estimate``, the
    :class:`Estimate` of :meth:`BaseVerifier.estimate_step` with the row's own seed
    (:func:`_run_seed`; a verifier that overrides ``estimate`` keeps ``None`` here and
    :func:`_verifier_row` runs its Monte Carlo), so the per-step caches of a verifier's
    estimates (the stage chain of ``importance``, the ratio table of
    ``rrs_without_replacement``) serve every ``n`` of the step. A verifier that does not
    apply at an ``n`` has no entry for it."""
    known: dict[tuple[int, int], dict[int, float | Estimate | None]] = {}
    trusted = [
        vi
        for vi, v in enumerate(objs)
        if _trusts_steps(v, "applies") and _trusts_steps(v, "acceptance")
    ]
    if not trusted:
        return known
    for step in range(batch.rows):
        row = batch.row(step)  # one Step a step: its support is counted once
        for vi in trusted:
            v, d = objs[vi], designs[vi]
            ks = [
                k
                for k in ns
                if not why[k, d][step] and exacts[k, vi] is None and v.applies_to(row, k)
            ]
            if not ks:
                continue
            values: dict[int, float | Estimate | None] = dict(v.acceptances_of(row, ks))
            if plan.trials and _trusts_steps(v, "estimate"):
                for k in ks:
                    if values[k] is None:
                        run_seed = _run_seed(plan.seed, int(plan.ids[step]), k, vi)
                        values[k] = v.estimate_step(
                            row, k, plan.trials, run_seed, target_se=plan.target_se
                        )
            known[vi, step] = values
    return known


def _verifier_row(
    v: Any,
    design: str,
    row: Step,
    n: int,
    step: int,
    star: float,
    plan: _RunPlan,
    index: int,
    level: float,
    known: dict[int, float | Estimate | None] | None = None,
) -> dict[str, object] | str:
    """The verifier's row at one step, or the reason it has none (:data:`SKIP_VERIFIER`,
    :data:`SKIP_NO_TRIALS`). A shipped verifier takes the validated ``row`` as it is;
    ``known`` holds its values at the ``n`` where it applies (:func:`_step_values`: exact, or
    an :class:`Estimate`)."""
    if known is not None:
        usable = n in known
    elif _trusts_steps(v, "applies"):
        usable = v.applies_to(row, n)
    else:
        applies = getattr(v, "applies", None)
        usable = not callable(applies) or applies(row.p, row.q, n)
    if not usable:
        return SKIP_VERIFIER
    value: float | Estimate | None
    if known is not None:
        value = known[n]
    elif _trusts_steps(v, "acceptance"):
        value = v.acceptance_of(row, n)
    else:
        value = v.acceptance(row.p, row.q, n)
    if value is None and plan.trials == 0:
        return SKIP_NO_TRIALS
    if isinstance(value, Estimate):
        est = value
    elif value is not None:
        est = _exact(float(value))
    else:
        run_seed = _run_seed(plan.seed, step, n, index)
        if _trusts_steps(v, "estimate") and _trusts_steps(v, "acceptance"):
            est = v.estimate_step(row, n, plan.trials, run_seed, target_se=plan.target_se)
        else:
            est = _monte_carlo(v, row, n, plan.trials, run_seed, plan.target_se)
    return _row(v, design, n, step, star, est, level)


def _exact(value: float) -> Estimate:
    return Estimate(acceptance=value, stderr=0.0, trials=0, method="exact")


def _batch_exact(
    acceptance: BatchAcceptance | None, v: object, n: int, batch: Step, why: np.ndarray
) -> np.ndarray | None:
    """The exact acceptance of ``v`` at ``n`` for every step where the design applies (NaN
    elsewhere), from one call of ``acceptance``; ``None`` where it does not serve ``v``."""
    if acceptance is None or not acceptance.serves(v, n):
        return None
    rows = why == ""
    out = np.full(rows.shape, np.nan)
    if rows.any():
        part = batch.take(rows)
        values = np.asarray(acceptance.compute(_name(v), part.p, part.q, n), dtype=float)
        if values.shape != (int(rows.sum()),):
            raise ValueError(
                f"{acceptance.name} returned shape {values.shape} for {int(rows.sum())} steps "
                f"(verifier {_name(v)!r}, n={n}); it must return one acceptance per step"
            )
        out[rows] = clip_rounding(values, 0.0, 1.0, acceptance_what(_name(v), n))
    return out


def _row(
    v: Any, design: str, n: int, step: int, star: float, est: Estimate, level: float
) -> dict[str, object]:
    """The table row of one (step, n, verifier) from its estimate."""
    lo, hi = est.ci(level)
    acc = est.acceptance
    return {
        "step": step,
        "n": n,
        "design": design,
        "verifier": _name(v),
        "acceptance": acc,
        "ci_low": lo,
        "ci_high": hi,
        "exact": est.exact,
        "alpha_star": star,
        "gap": star - acc,
        "ratio": acc / star if star > 0 else np.nan,
        "trials": est.trials,
        "stderr": est.stderr,
    }


def _monte_carlo(
    v: Any, row: Step, n: int, trials: int, seed: int, target_se: float | None
) -> Estimate:
    """0/1 Monte Carlo of any verifier object (``simulate`` or ``verify``): ``trials`` trials,
    or with ``target_se`` a pilot of ``min(trials, 1000)`` and a fresh sample sized by it."""
    if target_se is not None:
        pilot = _monte_carlo(v, row, n, min(trials, MIN_TRIALS), seed, None)
        spread2 = pilot.acceptance * (1.0 - pilot.acceptance)
        want = math.ceil(1.25 * spread2 / float(target_se) ** 2)
        trials = min(trials, max(MIN_TRIALS, want))
        seed = int(np.random.SeedSequence(seed, spawn_key=(1,)).generate_state(1)[0])
    _, accepted = _run(v, row, n, trials, seed)
    if accepted is None:
        raise ValueError(f"{_name(v)}.simulate must return .accepted for compare")
    hits = int(np.count_nonzero(accepted))
    acc = hits / trials
    return Estimate(
        acceptance=acc,
        stderr=math.sqrt(acc * (1.0 - acc) / trials),
        trials=trials,
        method="monte_carlo",
        successes=hits,
    )
