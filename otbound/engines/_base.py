r"""The engine-rule protocol: a serving engine's verification rule, with the processing it
applies to each side, as an otbound verifier.

An engine holds the target's and the draft's *logits*; before verifying it processes them
(temperature, top-k, top-p), and not always the same way on both sides, nor the same way in
the acceptance test as in the sampling. So an engine rule here takes the two models'
distributions **before processing** (the softmax of the raw logits, temperature 1) and carries
its processing as settings (:class:`Processing`); it then knows

* the *target law* ``P``: the target after the request's processing, the law a lossless run
  outputs (:meth:`EngineRule.target_law`);
* the *draft law* ``D``: what the drafts are drawn from, by the rule's draft design
  (:meth:`EngineRule.draft_law`; for a greedy drafter the design is ``topk`` and the draft is
  the argmax of ``D``);
* the law of its output ``Y`` given the drafts (:meth:`EngineRule.conditional_law`) and, in
  closed form, the law of ``Y`` itself and its acceptance ``P(Y ∈ x̄)``
  (:meth:`EngineRule.output_law`, :meth:`EngineRule.acceptance`).

A rule is lossless when ``Y ~ P`` for every pair of models; :attr:`EngineRule.lossless` says
what the rule claims under its settings, :func:`otbound.audit` measures it.

The rows are processed once per step (:class:`Sides`) and shared by every rule that reads
them.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from otbound._checks import as_distribution_pair, as_num_drafts, clip_rounding
from otbound.drafts import DraftDesign, get_design
from otbound.dumps import to_probabilities
from otbound.verifiers.base import (
    SimulationResult,
    as_seed_rng,
    as_trials,
    membership,
    sample_drafts,
    sample_tokens,
)

__all__ = [
    "EngineRule",
    "Processing",
    "Sides",
    "SingleTest",
    "TargetDraw",
    "accept_or_residual",
    "positive_residual",
]


@dataclass(frozen=True)
class Processing:
    """Temperature, top-k and top-p, in Hugging Face's order (:mod:`otbound.dumps._processing`).

    Attributes
    ----------
    temperature : float, default 1.0
        ``T >= 0`` (``0``: the argmax, one-hot).
    top_k : int, optional
        Keep the tokens at least as likely as the ``k``-th (ties kept).
    top_p : float in (0, 1], optional
        Then the most likely tokens while the mass before them is below ``top_p``.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        t, k, top_p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1, got {k!r}")
        if top_p is not None and not (isinstance(top_p, int | float) and 0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p!r}")

    @property
    def is_identity(self) -> bool:
        """Whether processing leaves every distribution as it is (``T = 1``, no filter)."""
        return self.temperature == 1.0 and self.top_k is None and self.top_p in (None, 1.0)

    def temperature_only(self) -> Processing:
        """The same temperature, no filter."""
        return Processing(self.temperature)

    def apply(self, rows: np.ndarray) -> np.ndarray:
        r"""``softmax(filter(log r / T))`` row by row (``r`` valid distributions, float64).

        Returns an array of ``rows``' shape; ``rows`` itself when :attr:`is_identity`.
        """
        if self.is_identity:
            return rows
        flat = rows.reshape(-1, rows.shape[-1])
        out = to_probabilities(flat, self.temperature, self.top_k, self.top_p, values="probs")
        return out.reshape(rows.shape)

    def describe(self) -> str:
        """``"T=0.6, top-k 50, top-p 0.9"``."""
        words = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            words.append(f"top-k {self.top_k}")
        if self.top_p not in (None, 1.0):
            words.append(f"top-p {self.top_p:g}")
        return ", ".join(words)


class Sides:
    """One step's target ``p`` and draft ``q`` before processing, and their processed forms,
    each computed once on first use.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Valid distributions (the softmax of the raw logits).
    processing : Processing
    """

    def __init__(self, p: np.ndarray, q: np.ndarray, processing: Processing) -> None:
        self.p = p
        self.q = q
        self.processing = processing

    @cached_property
    def target(self) -> np.ndarray:
        """``P``: the target after the request's processing."""
        return self.processing.apply(self.p)

    @cached_property
    def draft(self) -> np.ndarray:
        """The draft after the same processing."""
        return self.processing.apply(self.q)

    @cached_property
    def tempered_target(self) -> np.ndarray:
        """The target at the request's temperature, unfiltered."""
        return self.processing.temperature_only().apply(self.p)

    @cached_property
    def tempered_draft(self) -> np.ndarray:
        """The draft at the request's temperature, unfiltered."""
        return self.processing.temperature_only().apply(self.q)


def in_unit_interval(**values: float) -> None:
    """Raise ``ValueError`` naming the first setting outside ``(0, 1]``."""
    for what, value in values.items():
        if not 0.0 < float(value) <= 1.0:
            raise ValueError(f"{what} must be in (0, 1], got {value!r}")


def positive_residual(target: np.ndarray, subtract: np.ndarray) -> np.ndarray | None:
    """``(target − subtract)⁺`` normalised, or ``None`` where it has no mass."""
    excess = np.maximum(target - subtract, 0.0)
    total = float(excess.sum())
    if total <= 0.0:
        return None
    out: np.ndarray = excess / total
    return out


def accept_or_residual(
    draft: np.ndarray, accept: np.ndarray, residual: np.ndarray | None, what: str
) -> tuple[np.ndarray, float]:
    r"""Law and acceptance of "draw ``x ~ d``; keep it w.p. ``a(x)``; else draw from ``r``".

    .. math::

        L(y) = d_y a_y + R\, r_y,\quad R = 1 − \sum_x d_x a_x,\qquad
        α = \sum_x d_x \bigl(a_x + (1 − a_x) r_x\bigr)

    (``α`` counts a residual draw that lands on the draft: the membership event).

    Raises
    ------
    ValueError
        A rejection of positive probability with no residual to draw from (``what`` names
        the rule).
    """
    kept = draft * accept
    reject = float(clip_rounding(1.0 - kept.sum(), 0.0, 1.0, f"rejection mass of {what}"))
    if residual is None:
        if reject > 1e-12:
            raise ValueError(
                f"{what}: a draft is rejected with probability {reject:.3g} but the residual "
                "has no mass (the engine's draw is undefined there)"
            )
        return kept / kept.sum(), float(kept.sum())
    law = kept + reject * residual
    acceptance = float(kept.sum() + np.dot(draft * (1.0 - accept), residual))
    return law, acceptance


class EngineRule(ABC):
    """Base class of the engine rules (the module docstring says what they model).

    Subclasses set :attr:`name`, :attr:`engine`, :attr:`default_design` (and
    :attr:`designs`), :attr:`default_n` and :attr:`fixed_n`, and implement :meth:`_law`,
    :meth:`_conditional` and :meth:`_sample` on a :class:`Sides`.

    Parameters
    ----------
    processing : Processing, optional
        The request's temperature, top-k and top-p (default: none).
    design : str, optional
        The draft design, among :attr:`designs` (default :attr:`default_design`).

    Attributes
    ----------
    name : str
    engine : str
        The engine whose source the rule follows.
    lossless_by_design : bool
        Whether the rule keeps the target law whatever its processing (see :attr:`lossless`).
    """

    name: ClassVar[str]
    engine: ClassVar[str]
    default_design: ClassVar[str] = "iid"
    designs: ClassVar[tuple[str, ...]] = ()
    default_n: ClassVar[int] = 1
    fixed_n: ClassVar[int | None] = 1
    lossless_by_design: ClassVar[bool] = True

    def __init__(self, processing: Processing | None = None, *, design: str | None = None) -> None:
        self.processing = Processing() if processing is None else processing
        self._spec: DraftDesign = get_design(design or self.default_design)
        self.design: str = self._spec.name
        if self.design not in (self.designs or (self.default_design,)):
            names = ", ".join(self.designs or (self.default_design,))
            raise ValueError(
                f"engine rule {self.name!r} draws with design(s) {names}, not {self.design!r}"
            )

    def __repr__(self) -> str:
        return f"<engine rule {self.name!r} ({self.processing.describe()}, design={self.design!r})>"

    @property
    def lossless(self) -> bool | None:
        """Whether the rule outputs the target law under its settings (what it claims;
        :func:`otbound.audit` measures it)."""
        return self.lossless_by_design

    # -- the laws --------------------------------------------------------------------------
    def target_law(self, p: object) -> np.ndarray:
        """``P``: the target after processing, the law a lossless run outputs."""
        p_arr, _ = as_distribution_pair(p, p)
        return self.processing.apply(p_arr)

    def draft_law(self, q: object) -> np.ndarray:
        """The law the design draws the drafts from."""
        _, q_arr = as_distribution_pair(q, q)
        return self.drafts_from(Sides(q_arr, q_arr, self.processing))

    def drafts_from(self, sides: Sides) -> np.ndarray:
        """:meth:`draft_law` of a prepared step (the processed draft unless a rule says
        otherwise)."""
        return sides.draft

    def single_draft_law(self, sides: Sides) -> np.ndarray:
        """The law of the one draft (``n = 1``): one-hot at the argmax for the ``topk``
        design, the draft law itself otherwise."""
        row = self.drafts_from(sides)
        if self.design != "topk":
            return row
        one_hot = np.zeros_like(row)
        one_hot[argmax_token(row)] = 1.0
        return one_hot

    def sides(self, p: object, q: object) -> Sides:
        """Validate one step (``p``, ``q`` of shape (V,)) and wrap it."""
        p_arr, q_arr = as_distribution_pair(p, q)
        if p_arr.ndim != 1 or q_arr.ndim != 1:
            raise ValueError(
                f"engine rules work on one step: p and q must have shape (V,), got "
                f"{p_arr.shape} and {q_arr.shape}"
            )
        return Sides(p_arr, q_arr, self.processing)

    def check_n(self, sides: Sides, n: object) -> int:
        """Validate ``n`` against the rule and its design on this step."""
        n = self.default_n if n is None else as_num_drafts(n)
        if self.fixed_n is not None and n != self.fixed_n:
            raise ValueError(f"engine rule {self.name!r} is defined for n={self.fixed_n} only")
        self._spec.check(self.drafts_from(sides), n)
        return n

    # -- the protocol ----------------------------------------------------------------------
    def output_law(self, p: object, q: object, n: int | None = None) -> np.ndarray:
        """The exact law of the output ``Y`` (V,)."""
        sides = self.sides(p, q)
        return self.law_of(sides, self.check_n(sides, n))[0]

    def acceptance(self, p: object, q: object, n: int | None = None) -> float:
        """The exact acceptance ``P(Y ∈ x̄)``."""
        sides = self.sides(p, q)
        return self.law_of(sides, self.check_n(sides, n))[1]

    def law_of(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        """``(law of Y, acceptance)`` on a prepared step, the law checked to be one."""
        law, acceptance = self._law(sides, n)
        what = f"output law of engine rule {self.name!r}"
        law = np.asarray(clip_rounding(law, 0.0, 1.0, what), dtype=np.float64)
        clip_rounding(law.sum(), 1.0, 1.0, what, tol=1e-9)
        return law, float(clip_rounding(acceptance, 0.0, 1.0, f"acceptance of {self.name!r}"))

    def conditional_law(self, drafts: object, p: object, q: object) -> np.ndarray:
        """The law of ``Y`` given the drafts (V,): what the audit enumerates at small ``V``."""
        sides = self.sides(p, q)
        arr = self._checked_drafts(drafts, sides)
        return self._conditional(arr, sides)

    def verify(self, drafts: object, p: object, q: object, rng: object = None) -> tuple[int, bool]:
        """One trial: the output token for these drafts, and whether it is one of them."""
        sides = self.sides(p, q)
        arr = self._checked_drafts(drafts, sides)
        token = int(self._sample(arr[None, :], sides, as_seed_rng(rng))[0])
        return token, bool(token in arr)

    def simulate(
        self, p: object, q: object, n: int | None = None, trials: int = 100_000, seed: object = 0
    ) -> SimulationResult:
        """Seeded Monte Carlo: drafts from the design on :meth:`draft_law`, then the rule."""
        sides = self.sides(p, q)
        return self.simulate_sides(sides, self.check_n(sides, n), as_trials(trials), seed)

    def simulate_sides(self, sides: Sides, n: int, trials: int, seed: object) -> SimulationResult:
        """:meth:`simulate` on a prepared step and a checked ``n``."""
        rng = as_seed_rng(seed)
        drafts = sample_drafts(self._spec, self.drafts_from(sides), n, trials, rng)
        tokens = np.asarray(self._sample(drafts, sides, rng), dtype=np.int64)
        accepted = membership(tokens, drafts)
        return SimulationResult(tokens, accepted, drafts, self.name, self.design, n, seed)

    def _checked_drafts(self, drafts: object, sides: Sides) -> np.ndarray:
        arr = np.asarray(drafts)
        vocab = sides.p.shape[0]
        if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"drafts must be a non-empty 1-D sequence of token ids, got {drafts!r}"
            )
        if np.any((arr < 0) | (arr >= vocab)):
            raise ValueError(f"drafts must be token ids in [0, {vocab}), got {arr.tolist()}")
        self.check_n(sides, arr.size)
        return arr.astype(np.int64)

    # -- to implement ----------------------------------------------------------------------
    @abstractmethod
    def _law(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        """Closed-form ``(law of Y, acceptance)``."""

    @abstractmethod
    def _conditional(self, drafts: np.ndarray, sides: Sides) -> np.ndarray:
        """The law of ``Y`` given one draft tuple (n,)."""

    @abstractmethod
    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        """Output tokens (trials,) for draft tuples (trials, n)."""


def sample_accept_or_residual(
    x: np.ndarray, accept: np.ndarray, residual: np.ndarray | None, rng: np.random.Generator
) -> np.ndarray:
    """Tokens of "keep draft ``x`` w.p. ``a(x)``, else draw from ``r``", for drafts (trials,)."""
    u = rng.random(x.size)
    keep = u < accept[x]
    tokens: np.ndarray = x.copy()
    if residual is not None and not keep.all():
        tokens[~keep] = sample_tokens(residual, rng.random(int((~keep).sum())))
    return tokens


def conditional_accept_or_residual(
    x: int, accept: float, residual: np.ndarray | None, vocab: int
) -> np.ndarray:
    """The law of "keep ``x`` w.p. ``a``, else draw from ``r``" (V,)."""
    law = np.zeros(vocab) if residual is None else (1.0 - accept) * residual
    law[x] += accept if residual is not None else 1.0
    return law


def argmax_token(row: np.ndarray) -> int:
    """The most likely token, the lowest id on ties (the ``topk`` design's first draft)."""
    return int(np.argmax(row))


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``min(1, num/den)``, ``0`` where ``den = 0`` (a token never drafted)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.where(den > 0, np.minimum(1.0, num / den), 0.0)
    return out


class SingleTest(EngineRule):
    r"""One draft ``x`` (from :meth:`single_draft_law`), Leviathan et al.'s test between the
    ``P`` of :meth:`_test_target` and the ``q`` of :meth:`_pair` (default: the processed
    target and draft): keep ``x`` w.p. ``min(1, P_x / q_x)``, else draw from ``(P − q)⁺``
    normalised.

    Lossless iff the test's ``q`` is the law the draft was drawn from and its ``P`` the target
    law.
    """

    def _pair(self, sides: Sides) -> np.ndarray:
        """The ``q`` of the test."""
        return sides.draft

    def _test_target(self, sides: Sides) -> np.ndarray:
        """The ``P`` of the test (default: the processed target)."""
        return sides.target

    def _parts(self, sides: Sides) -> tuple[np.ndarray, np.ndarray | None]:
        """The acceptance probability of each token as a draft, and the residual."""
        q_test, target = self._pair(sides), self._test_target(sides)
        return safe_ratio(target, q_test), positive_residual(target, q_test)

    def _law(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        accept, residual = self._parts(sides)
        return accept_or_residual(self.single_draft_law(sides), accept, residual, self.name)

    def _conditional(self, drafts: np.ndarray, sides: Sides) -> np.ndarray:
        accept, residual = self._parts(sides)
        x = int(drafts[0])
        return conditional_accept_or_residual(x, float(accept[x]), residual, sides.p.size)

    def _sample(self, drafts: np.ndarray, sides: Sides, rng: np.random.Generator) -> np.ndarray:
        accept, residual = self._parts(sides)
        return sample_accept_or_residual(drafts[:, 0], accept, residual, rng)


class TargetDraw(EngineRule):
    r"""A rule whose output is ``Y ~ P`` given any draft, accepted iff ``Y`` is the draft: the
    joint law ``P(X = x, Y = y) = d_x P_y``, lossless, ``α = Σ_x d_x P_x``. Subclasses draw
    ``Y`` their engine's way (:meth:`_sample`)."""

    default_design = "topk"
    designs = ("topk", "iid")

    def _law(self, sides: Sides, n: int) -> tuple[np.ndarray, float]:
        draft = self.single_draft_law(sides)
        return sides.target.copy(), float(np.dot(draft, sides.target))

    def _conditional(self, drafts: np.ndarray, sides: Sides) -> np.ndarray:
        out: np.ndarray = sides.target.copy()
        return out
