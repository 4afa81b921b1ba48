r"""The optimal verifier: a verifier whose acceptance is ``α*``, at any vocabulary where it can.

Three constructions, all lossless by construction:

* **the level rule** (:mod:`otbound.selection`), for i.i.d. drafts at any ``n``: a rule selects
  one draft with an exactly known marginal ``r``, then single-draft speculative sampling
  tests it against ``p`` with ``r`` as the draft; the rule is built so that
  ``Σ min(p, r) = α*``, in ``O(V log V)`` per step (no LP, no enumeration);
* **the round rule** (:func:`otbound.selection.round_rule`), for draft sets
  (``conditional_poisson``, ``without_replacement``) at any ``n`` and vocabulary: the same two
  stages with a rule whose marginal is exact for any of its shares, fitted towards ``α*``
  (reached on most rows measured, not all; the rule reports the gap it leaves);
* **the plan of the set LP**, for every design at small vocabularies: for any draft design,
  :func:`otbound.bounds.primal.solve_primal` returns an optimal membership plan
  ``C[S, y]`` (``y ∈ S``) of

  .. math::

      α^* = \max_{C ≥ 0} \sum_S \sum_{y ∈ S} C[S, y]
      \quad\text{s.t.}\quad \sum_{y∈S} C[S, y] ≤ Q(S),\quad \sum_{S ∋ y} C[S, y] ≤ p(y),

  over the sets ``S`` of distinct drafts. Given drafts ``x̄`` with set ``S``, the verifier
  outputs ``y ∈ S`` with probability ``C[S, y] / Q(S)`` and otherwise (probability
  ``ℓ_S = 1 − Σ_y C[S, y] / Q(S)``) samples the residual ``r ∝ p − Σ_S C[S, ·]``. The output
  is ``Σ_S C[S, ·] + (1 − ΣC) r = p`` exactly, and ``α = ΣC + Σ_S Q(S) ℓ_S r(S) = α*``,
  since at an optimum a set with leftover mass has ``r = 0`` on its tokens (otherwise the
  plan could be augmented). The draft tuples are enumerated, so this construction applies
  when the design has at most :data:`MAX_TUPLES` tuples (``V^n`` for ``iid``; ``O(V)`` for
  ``greedy``, ``topk``, ``hub``).

``OptimalTransport(design, method="auto")`` takes the level rule for ``iid``, the round rule for
draft sets, and the LP plan otherwise; ``method="levels"``, ``"rounds"`` or ``"lp"`` asks for one
of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otbound._checks import clip_rounding
from otbound.drafts import DESIGNS, DraftDesign, Greedy, Hub, TopK, num_tuples
from otbound.selection import (
    RoundRule,
    SelectionRule,
    has_level_rule,
    has_round_rule,
    level_rule,
    level_rule_acceptance,
    round_rule,
)
from otbound.verifiers.base import BaseVerifier, sample_tokens

__all__ = ["MAX_TUPLES", "METHODS", "OptimalPlan", "OptimalTransport"]

#: The constructions of :class:`OptimalTransport`.
METHODS: tuple[str, ...] = ("auto", "levels", "rounds", "lp")

#: Largest number of draft tuples (``V^n`` for ``iid``) the optimal verifier enumerates.
MAX_TUPLES = 200_000


@dataclass(frozen=True)
class OptimalPlan:
    """The sampling tables of the optimal verifier for one step.

    Attributes
    ----------
    sets : numpy.ndarray of int, shape (m, n)
        Draft sets, sorted token ids padded with ``-1``.
    set_probs : numpy.ndarray, shape (m,)
        ``Q(S)``.
    inside : numpy.ndarray, shape (m, n)
        ``P(Y = sets[S, j] | S) = C[S, y] / Q(S)`` (zero on padding).
    residual : numpy.ndarray, shape (V,)
        ``r``, sampled with the leftover probability ``1 − Σ_j inside[S, j]``.
    keys : numpy.ndarray of int64, shape (m,)
        Sorted codes of the sets (for looking tuples up).
    """

    sets: np.ndarray
    set_probs: np.ndarray
    inside: np.ndarray
    residual: np.ndarray
    keys: np.ndarray

    def conditional(self, vocab: int) -> np.ndarray:
        """``P(Y = y | S)`` as a dense (m, V) array."""
        n = self.sets.shape[1]
        out = np.outer(1.0 - self.inside.sum(axis=1), self.residual)
        for j in range(n):
            valid = self.sets[:, j] >= 0
            np.add.at(out, (np.flatnonzero(valid), self.sets[valid, j]), self.inside[valid, j])
        return out

    def lookup(self, drafts: np.ndarray, vocab: int) -> np.ndarray:
        """Row of the set of each draft tuple (trials, n)."""
        codes = _set_codes(_canonical(drafts, vocab), vocab)
        idx = np.searchsorted(self.keys, codes)
        idx = np.minimum(idx, self.keys.size - 1)
        if np.any(self.keys[idx] != codes):
            raise ValueError("drafts contain a tuple the design cannot produce")
        return idx


def _canonical(tuples: np.ndarray, vocab: int) -> np.ndarray:
    """Sorted distinct tokens of each tuple, padded with ``-1`` (as ``tuples_to_sets`` does)."""
    s = np.sort(tuples, axis=1)
    dup = np.zeros_like(s, dtype=bool)
    dup[:, 1:] = s[:, 1:] == s[:, :-1]
    s = np.sort(np.where(dup, vocab, s), axis=1)
    s[s == vocab] = -1
    return s


def _set_codes(sets: np.ndarray, vocab: int) -> np.ndarray:
    base = np.int64(vocab + 1)
    codes = np.zeros(sets.shape[0], dtype=np.int64)
    for j in range(sets.shape[1]):
        codes = codes * base + (sets[:, j].astype(np.int64) + 1)
    return codes


def _tuple_count(design: DraftDesign, q: np.ndarray, n: int) -> float:
    if isinstance(design, Greedy | Hub | TopK):
        return float(q.shape[-1])
    support = q.shape[-1] if design.slot_axis else int(np.count_nonzero(q > 0))
    return float(num_tuples(support, n))


class OptimalTransport(BaseVerifier):
    """The optimal verifier for any design: acceptance ``α*``, lossless by construction.

    Parameters
    ----------
    design : str, default "iid"
        Any of :data:`otbound.DESIGNS`.
    method : {"auto", "levels", "rounds", "lp"}, default "auto"
        ``"levels"``: the level rule (:func:`otbound.selection.level_rule`; i.i.d. drafts,
        any vocabulary); ``"rounds"``: the round rule (:func:`otbound.selection.round_rule`;
        ``conditional_poisson`` and ``without_replacement``, any vocabulary); ``"lp"``: a
        draft from the set LP's plan (any design, at most :data:`MAX_TUPLES` draft tuples);
        ``"auto"``: the level or the round rule where one exists, else the LP plan.
    """

    name = "optimal"
    default_design = "iid"
    designs = DESIGNS

    def __init__(self, design: str | DraftDesign | None = None, method: str = "auto") -> None:
        super().__init__(design)
        if method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
        self.method = method

    def __repr__(self) -> str:
        return f"<verifier {self.name!r} design={self.design!r} method={self.method!r}>"

    def has_default_settings(self) -> bool:
        return self.method == "auto"

    def uses_levels(self, n: int) -> bool:
        """Whether this verifier runs the level rule at ``n`` drafts."""
        return self.method in ("auto", "levels") and has_level_rule(self.design, n)

    def uses_rounds(self, n: int) -> bool:
        """Whether this verifier runs the round rule at ``n`` drafts."""
        return self.method in ("auto", "rounds") and has_round_rule(self.design, n)

    def uses_rule(self, n: int) -> bool:
        """Whether this verifier selects by a rule at ``n`` drafts (else the LP plan)."""
        return self.uses_levels(n) or self.uses_rounds(n)

    def _applies(self, p: np.ndarray, q: np.ndarray, n: int) -> bool:
        if self.uses_rule(n):
            return True
        return self.method in ("auto", "lp") and _tuple_count(self._spec, q, n) <= MAX_TUPLES

    def _not_applicable_message(self, p: np.ndarray, q: np.ndarray, n: int) -> str:
        if self.method in ("levels", "rounds"):
            covers = "i.i.d. drafts" if self.method == "levels" else "draft sets"
            return (
                f"the optimal verifier's method={self.method!r} covers {covers}; design "
                f"{self.design!r} at n={n} needs method='auto' (the rule that serves it, "
                f"if any) or method='lp' (small vocabularies)"
            )
        return (
            f"the optimal verifier's LP plan enumerates the draft tuples: V={p.shape[-1]}, "
            f"n={n} (design {self.design!r}) gives {_tuple_count(self._spec, q, n):.3g} "
            f"tuples, above otbound.verifiers.optimal.MAX_TUPLES={MAX_TUPLES}"
        )

    def rule(self, p: np.ndarray, q: np.ndarray, n: int) -> SelectionRule | RoundRule:
        """The level or round rule of a step (validated inputs), built once per step."""
        build = level_rule if self.uses_levels(n) else round_rule
        return self._memo("rule", p, q, n, lambda: build(p, q, n, self.design))

    def plan(self, p: np.ndarray, q: np.ndarray, n: int) -> OptimalPlan:
        """Solve the set LP and build the sampling tables (validated inputs)."""
        return self._memo("plan", p, q, n, lambda: self._build_plan(p, q, n))

    def _build_plan(self, p: np.ndarray, q: np.ndarray, n: int) -> OptimalPlan:
        from otbound.bounds.primal import solve_primal

        res = solve_primal(p, q, n, self._spec)
        dense = res.plan.toarray()  # (m, V) membership part
        sets, probs = np.asarray(res.sets), np.asarray(res.set_probs)
        vocab = p.size
        inside = np.zeros(sets.shape)
        for j in range(sets.shape[1]):
            valid = sets[:, j] >= 0
            rows = np.flatnonzero(valid)
            inside[rows, j] = dense[rows, sets[rows, j]]
        with np.errstate(divide="ignore", invalid="ignore"):
            inside = np.where(probs[:, None] > 0, inside / probs[:, None], 0.0)
        # the plan is exactly feasible (solve_primal shrinks the solver's slack), so a row of
        # conditional acceptances exceeds 1 and a column's received mass p(y) by rounding only
        total = inside.sum(axis=1)
        clip_rounding(total, 0.0, 1.0, "optimal: P(Y ∈ S | S)")  # raises beyond rounding
        inside /= np.maximum(total, 1.0)[:, None]
        left = clip_rounding(p - dense.sum(axis=0), 0.0, 1.0, "optimal: p(y) − received mass")
        rest = left / left.sum() if left.sum() > 0 else p.copy()
        codes = _set_codes(sets, vocab)
        order = np.argsort(codes)
        return OptimalPlan(
            sets=sets[order],
            set_probs=probs[order],
            inside=inside[order],
            residual=rest,
            keys=codes[order],
        )

    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        if self.uses_levels(n):  # Σ min(p, r) of the rule, from its slots (no swaps)
            return level_rule_acceptance(p, q, n, self.design)
        if self.uses_rounds(n):  # exact where the fit left no violation, else estimated
            rule = self.rule(p, q, n)
            return rule.exact_acceptance() if isinstance(rule, RoundRule) else None
        plan = self.plan(p, q, n)
        valid = plan.sets >= 0
        on_set = np.where(valid, plan.residual[np.where(valid, plan.sets, 0)], 0.0).sum(axis=1)
        left = 1.0 - plan.inside.sum(axis=1)
        return float(np.sum(plan.set_probs * (plan.inside.sum(axis=1) + left * on_set)))

    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        if self.uses_rule(len(drafts)):  # select, then single-draft sampling (as ``single``)
            rule = self.rule(p, q, len(drafts))
            chosen, mass = rule.select(drafts[None, :], rng)
            z = int(chosen[0])
            if rng.random() < min(1.0, p[z] / mass[0]):
                return z
            return int(sample_tokens(rule.residual(), rng.random()))
        plan = self.plan(p, q, len(drafts))
        row = int(plan.lookup(drafts[None, :], p.size)[0])  # the set S of the drafts
        u = rng.random()
        for token, prob in zip(plan.sets[row], plan.inside[row], strict=True):
            if token >= 0 and u < prob:  # output y ∈ S with probability C[S, y] / Q(S)
                return int(token)
            u -= prob
        return int(sample_tokens(plan.residual, rng.random()))  # leftover: the residual

    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        trials: int
        n: int
        trials, n = drafts.shape
        if self.uses_rule(n):
            return self.rule(p, q, n).verify(drafts, rng)
        plan = self.plan(p, q, n)
        rows = plan.lookup(drafts, p.size)
        cum = np.cumsum(plan.inside[rows], axis=1)
        u = rng.random(trials)
        slot = np.sum(u[:, None] >= cum, axis=1)  # first slot whose cumulative exceeds u
        tokens = sample_tokens(plan.residual, rng.random(trials))
        hit = slot < n
        tokens[hit] = plan.sets[rows[hit], slot[hit]]
        return tokens
