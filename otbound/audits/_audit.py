r"""The audit of one rule on rows of ``(p, q)``: lossless or not, how far from the target, and
its acceptance beside the design's ``α*``.

Per step, with ``P`` the target law (the target after the request's processing) and ``D``
the law the drafts are drawn from:

* **exact** where the rule's output law ``L`` is known (engine rules in closed form; a rule
  with ``conditional_law`` by enumeration of the drafts at small ``V``): ``TV(L, P)`` and the
  acceptance ``P(Y ∈ x̄)`` exactly; the step is lossless iff ``TV ≤``
  :data:`EXACT_TOLERANCE` (rounding);
* **Monte Carlo** otherwise: :func:`otbound.check_lossless`'s chi-square test of the output
  tokens against ``P`` (pooled bins), its plug-in ``TV`` with confidence bounds, and the
  smallest total variation the test detects with probability ``power``
  (:func:`~otbound.audits._power.detectable_tv`); the acceptance with a Wilson interval.

Over the steps: the mean and largest ``TV``, a pooled chi-square (statistics and degrees of
freedom added), and the verdict: lossless iff every exact step is, the pooled p-value is at
least ``significance`` and every Monte Carlo step's p-value at least ``significance / S``
(Bonferroni over the ``S`` Monte Carlo steps). ``α*`` is
:func:`otbound.optimal_acceptance` of ``(P, D)`` for the rule's design and ``n``: no lossless
rule exceeds it, so a rule whose acceptance does is a rule that cheats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from otbound.audits._power import detectable_tv
from otbound.audits._rules import Audited
from otbound.bounds import optimal_acceptance
from otbound.engines import Sides
from otbound.evaluate import SIGNIFICANCE, check_lossless
from otbound.stats import wilson_interval

__all__ = [
    "DEFAULT_TRIALS",
    "EXACT_TOLERANCE",
    "STEP_COLUMNS",
    "AuditResult",
    "audit_step",
    "step_row",
    "summarise",
]

#: A step whose exact ``TV`` is at most this is lossless (the rounding of sums over ``V``).
EXACT_TOLERANCE = 1e-9
#: Monte Carlo trials per step by default: at 20 bins the test detects a ``TV`` of 0.01
#: with probability 0.99 at significance 1e-5.
DEFAULT_TRIALS = 200_000
#: Confidence of the lower end of a Monte Carlo acceptance that must exceed ``α*`` for the
#: step to count as above it (the tests' level: a lossless rule is flagged at a step with
#: probability about 1e-5, not the 2.5 % of a 95 % interval).
ABOVE_CONFIDENCE = 1.0 - 2e-5
#: Steps listed as deviating most.
WORST = 5

#: Columns of :attr:`AuditResult.steps`.
STEP_COLUMNS = (
    "step",
    "method",
    "tv",
    "tv_lower",
    "tv_upper",
    "tv_detectable",
    "p_value",
    "statistic",
    "dof",
    "trials",
    "acceptance",
    "acceptance_low",
    "acceptance_high",
    "alpha_star",
    "above_alpha_star",
)


@dataclass(frozen=True)
class AuditResult:
    """The audit of one rule over a set of steps.

    Attributes
    ----------
    rule : str
    kind : {"engine", "chain", "verifier", "function"}
    design : str
    n : int
    processing : str
        ``"T=0.6, top-k 50, top-p 0.9"``.
    method : {"exact", "monte_carlo", "mixed"}
    declared : bool or None
        What the rule claims (engine rules).
    lossless : bool
        The verdict (module docstring).
    tv : float
        Mean over the steps of ``TV(L, P)`` (exact), or of its plug-in estimate.
    tv_max : float
    tv_bounds : (float, float)
        Mean over the steps of the 95 % bounds on each step's ``TV`` (both ``tv`` where exact;
        Bretagnolle–Huber–Carol bounds over the test's bins where Monte Carlo, the plug-in
        ``tv`` being biased upwards by sampling noise).
    tv_detectable : float
        ``0`` when every step is exact; else the mean ``TV`` the pooled test detects with
        probability :attr:`power`.
    p_value : float
        The pooled chi-square p-value (``nan`` when every step is exact).
    acceptance : float
        Mean ``P(Y ∈ x̄)``.
    alpha_star : float
        Mean ``α*`` of the design.
    above_alpha_star : int
        Steps whose acceptance exceeds ``α*``: beyond rounding where exact, by the lower end of
        a Wilson interval at :data:`ABOVE_CONFIDENCE` where Monte Carlo.
    steps : pandas.DataFrame
        One row per step (:data:`STEP_COLUMNS`).
    significance, power : float
    """

    rule: str
    kind: str
    design: str
    n: int
    processing: str
    method: str
    declared: bool | None
    lossless: bool
    tv: float
    tv_max: float
    tv_bounds: tuple[float, float]
    tv_detectable: float
    p_value: float
    acceptance: float
    alpha_star: float
    above_alpha_star: int
    steps: pd.DataFrame
    significance: float
    power: float

    @property
    def worst(self) -> pd.DataFrame:
        """The steps that deviate most (largest ``TV``), at most :data:`WORST`."""
        return self.steps.sort_values("tv", ascending=False, kind="stable").head(WORST)

    @property
    def message(self) -> str:
        """One line: the verdict and its numbers."""
        verdict = "lossless" if self.lossless else "LOSSY"
        power = (
            "exact"
            if self.method == "exact"
            else f"p-value {self.p_value:.3g}, detects TV >= {self.tv_detectable:.3g} "
            f"with probability {self.power:g}"
        )
        cheat = f"; above α* at {self.above_alpha_star} step(s)" if self.above_alpha_star else ""
        return (
            f"{self.rule} ({self.processing}, {self.design}, n={self.n}): {verdict} over "
            f"{len(self.steps)} step(s), TV {self.tv:.4g} (max {self.tv_max:.4g}; {power}); "
            f"acceptance {self.acceptance:.4f}, α* {self.alpha_star:.4f}{cheat}"
        )

    def summary(self) -> dict[str, Any]:
        """One row of a table of rules."""
        return {
            "rule": self.rule,
            "kind": self.kind,
            "processing": self.processing,
            "design": self.design,
            "n": self.n,
            "steps": len(self.steps),
            "method": self.method,
            "declared_lossless": self.declared,
            "lossless": self.lossless,
            "tv": self.tv,
            "tv_max": self.tv_max,
            "tv_lower": self.tv_bounds[0],
            "tv_upper": self.tv_bounds[1],
            "tv_detectable": self.tv_detectable,
            "p_value": self.p_value,
            "acceptance": self.acceptance,
            "alpha_star": self.alpha_star,
            "above_alpha_star": self.above_alpha_star,
        }


class AlphaCache:
    """``α*`` of the steps' ``(P, D)`` pairs, computed once per pair, design and ``n``."""

    def __init__(self) -> None:
        self._values: dict[tuple[int, int, str, int], float] = {}

    def get(self, target: np.ndarray, draft: np.ndarray, n: int, design: str) -> float:
        key = (id(target), id(draft), design, n)
        if key not in self._values:
            self._values[key] = float(optimal_acceptance(target, draft, n=n, design=design))  # type: ignore[arg-type]
        return self._values[key]


def audit_step(
    audited: Audited,
    sides: Sides,
    step: int,
    *,
    trials: int,
    seed: object,
    exact: bool,
    alphas: AlphaCache,
) -> dict[str, Any]:
    """One step's row (:data:`STEP_COLUMNS`; the Monte Carlo power is filled in by
    :func:`summarise`)."""
    audited.check(sides)
    target, draft = audited.target(sides), audited.draft_law(sides)
    alpha = alphas.get(target, draft, audited.n, audited.design)
    law = audited.exact_law(sides) if exact else None
    if law is not None:
        tv = 0.5 * float(np.abs(law[0] - target).sum())
        acceptance = law[1]
        above = acceptance > alpha + EXACT_TOLERANCE
        return step_row(
            step,
            "exact",
            (tv, tv, tv, 0.0),
            (math.nan, 0.0, 0, 0),
            acceptance,
            (acceptance, acceptance),
            alpha,
            above,
        )
    result = check_lossless(
        target, draft, n=audited.n, trials=trials, seed=seed, verifier=audited.runner(sides)
    )
    if len(audited.records) != trials:
        raise ValueError(
            f"rule {audited.name!r} gave {len(audited.records)} outcomes for {trials} trials"
        )
    hits = int(np.count_nonzero(audited.records))
    low, high = wilson_interval(hits, trials, 0.95)
    return step_row(
        step,
        "monte_carlo",
        (result.tv_distance, result.tv_lower, result.tv_upper, math.nan),
        (result.p_value, result.statistic, result.dof, trials),
        hits / trials,
        (low, high),
        alpha,
        wilson_interval(hits, trials, ABOVE_CONFIDENCE)[0] > alpha,
    )


def step_row(
    step: int,
    method: str,
    tvs: tuple[float, float, float, float],
    test: tuple[float, float, int, int],
    acceptance: float,
    interval: tuple[float, float],
    alpha: float,
    above: bool,
) -> dict[str, Any]:
    """One row of the steps table (:data:`STEP_COLUMNS`) from the audit of one step."""
    values = (step, method, *tvs, *test, acceptance, *interval, alpha, bool(above))
    return dict(zip(STEP_COLUMNS, values, strict=True))


def summarise(
    rows: list[dict[str, Any]],
    audited: Audited,
    *,
    significance: float = SIGNIFICANCE,
    power: float = 0.99,
) -> AuditResult:
    """The verdict and the means over the steps (module docstring)."""
    if not rows:
        raise ValueError(f"rule {audited.name!r}: no step to audit")
    steps = pd.DataFrame(rows, columns=list(STEP_COLUMNS))
    mc = steps["method"] == "monte_carlo"
    lossless = bool((steps.loc[~mc, "tv"] <= EXACT_TOLERANCE).all())
    p_value, tv_detectable = math.nan, 0.0
    if mc.any():
        part = steps.loc[mc]
        per_step = significance / int(mc.sum())
        steps.loc[mc, "tv_detectable"] = [
            detectable_tv(int(d), int(t), per_step, power)
            for d, t in zip(part["dof"], part["trials"], strict=True)
        ]
        dof, statistic = int(part["dof"].sum()), float(part["statistic"].sum())
        from scipy.special import chdtrc  # chi-square survival

        # a step with an output outside the target's support failed outright (statistic inf)
        if not math.isfinite(statistic):
            p_value = 0.0
        else:
            p_value = float(chdtrc(dof, statistic)) if dof > 0 else 1.0
        tv_detectable = detectable_tv(dof, int(part["trials"].sum()), significance, power)
        lossless = (
            lossless and p_value >= significance and bool((part["p_value"] >= per_step).all())
        )
    method = "exact" if not mc.any() else ("monte_carlo" if mc.all() else "mixed")
    return AuditResult(
        rule=audited.name,
        kind=audited.kind,
        design=audited.design,
        n=audited.n,
        processing=audited.processing.describe(),
        method=method,
        declared=audited.declared,
        lossless=lossless,
        tv=float(steps["tv"].mean()),
        tv_max=float(steps["tv"].max()),
        tv_bounds=(float(steps["tv_lower"].mean()), float(steps["tv_upper"].mean())),
        tv_detectable=tv_detectable,
        p_value=p_value,
        acceptance=float(steps["acceptance"].mean()),
        alpha_star=float(steps["alpha_star"].mean()),
        above_alpha_star=int(steps["above_alpha_star"].sum()),
        steps=steps,
        significance=significance,
        power=power,
    )


def audit_rows(
    audited: list[Audited],
    rows: Iterable[tuple[int, Sides]],
    *,
    trials: int,
    seed: object,
    exact: bool,
) -> list[list[dict[str, Any]]]:
    """Every rule's step rows over ``rows`` of ``(step id, Sides)``; each rule's steps get
    their own seeds (the same for every rule, so that the rules see the same draws)."""
    out: list[list[dict[str, Any]]] = [[] for _ in audited]
    root = np.random.SeedSequence(seed)  # type: ignore[arg-type]
    for step, sides in rows:
        alphas = AlphaCache()
        (step_seed,) = np.random.SeedSequence(root.entropy, spawn_key=(int(step),)).spawn(1)
        for rule, rule_rows in zip(audited, out, strict=True):
            rule_rows.append(
                audit_step(
                    rule, sides, step, trials=trials, seed=step_seed, exact=exact, alphas=alphas
                )
            )
    return out
