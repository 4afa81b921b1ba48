r"""What the audit can audit, behind one interface: engine rules, verifiers, plain functions.

* an :class:`~otbound.engines.EngineRule` (or its name): it processes each side its own way;
  its output law is exact (:meth:`~otbound.engines.EngineRule.law_of`);
* a block rule on chains (:class:`~otbound.engines.ChainRule`, or its name): audited on
  drafted chains (:mod:`otbound.audits._chains`);
* a verifier with the otbound protocol (or a name in :data:`otbound.VERIFIERS`): it gets both
  sides processed alike, and is simulated;
* a plain function ``verify(drafts, p, q, rng) -> token``: likewise, one call per trial; an
  object with ``conditional_law(drafts, p, q)`` (the law of its output given the drafts)
  has its law enumerated exactly over the drafts at small ``V``.

:func:`as_audited` turns any of these into an :class:`Audited`.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otbound._checks import as_num_drafts
from otbound.drafts import DraftDesign, get_design
from otbound.engines import (
    CHAIN_RULES,
    ENGINE_RULES,
    ChainRule,
    EngineRule,
    Processing,
    Sides,
    get_chain_rule,
    get_engine_rule,
)
from otbound.verifiers import VERIFIERS, get_verifier

__all__ = ["MAX_ENUMERATED", "Audited", "as_audited"]

#: The most (draft tuple, token) pairs an exact enumeration of a rule's law may cost.
MAX_ENUMERATED = 1 << 24


@dataclass
class Audited:
    """A rule ready for the audit.

    Attributes
    ----------
    name : str
    kind : {"engine", "chain", "verifier", "function"}
    spec : DraftDesign
        The design its drafts are drawn with.
    n : int
    processing : Processing
    declared : bool or None
        What the rule claims (engine rules; ``None`` otherwise).
    """

    name: str
    kind: str
    spec: DraftDesign
    n: int
    processing: Processing
    declared: bool | None
    engine: EngineRule | None = None
    chain: ChainRule | None = None
    verifier: Any = None
    function: Callable[..., Any] | None = None
    records: list[bool] = field(default_factory=list, repr=False)

    @property
    def design(self) -> str:
        """The design's name."""
        return self.spec.name

    def target(self, sides: Sides) -> np.ndarray:
        """The law a lossless rule outputs on this step."""
        return sides.target

    def draft_law(self, sides: Sides) -> np.ndarray:
        """The law its drafts are drawn from on this step."""
        return self.engine.drafts_from(sides) if self.engine is not None else sides.draft

    def check(self, sides: Sides) -> None:
        """Raise ``ValueError`` where ``n`` drafts cannot be drawn on this step."""
        if self.engine is not None:
            self.engine.check_n(sides, self.n)
        else:
            self.spec.check(sides.draft, self.n)

    def exact_law(self, sides: Sides) -> tuple[np.ndarray, float] | None:
        """``(law of Y, acceptance)`` where it is exact, else ``None``."""
        if self.engine is not None:
            return self.engine.law_of(sides, self.n)
        conditional = getattr(self.verifier, "conditional_law", None)
        if not callable(conditional):
            return None
        draft = sides.draft
        if np.count_nonzero(draft) ** self.n * draft.size > MAX_ENUMERATED:
            return None
        return enumerate_law(
            lambda drafts: np.asarray(conditional(drafts, sides.target, draft), dtype=np.float64),
            self.spec,
            draft,
            self.n,
            self.name,
        )

    def runner(self, sides: Sides) -> Any:
        """A verifier-protocol object that :func:`otbound.check_lossless` runs on this step's
        ``(target, draft)`` (it records the acceptance events in :attr:`records`)."""
        self.records = []
        if self.kind == "function":
            return _VerifyingRunner(self, sides)
        return _SimulatingRunner(self, sides)


def enumerate_law(
    conditional: Callable[[np.ndarray], np.ndarray],
    spec: DraftDesign,
    draft: np.ndarray,
    n: int,
    name: str,
) -> tuple[np.ndarray, float]:
    r"""``L = Σ_x̄ Q(x̄) L(· | x̄)`` and ``α = Σ_x̄ Q(x̄) L(x̄ | x̄)`` over every draft tuple."""
    tuples, probs = spec.tuple_support(draft, n)
    law = np.zeros(draft.size)
    acceptance = 0.0
    for drafts, prob in zip(tuples, probs, strict=True):
        given = conditional(drafts)
        if given.shape != draft.shape or not np.all(np.isfinite(given)):
            raise ValueError(
                f"rule {name!r}: conditional_law must return {draft.size} finite probabilities"
            )
        law += prob * given
        acceptance += prob * float(given[np.unique(drafts)].sum())
    return law, acceptance


class _StepRunner:
    """The protocol :func:`otbound.check_lossless` runs: one prepared step of an audited rule.

    ``check_lossless`` hands it the step's ``(target, draft)``; an engine rule is run on its
    own processed sides of the same step.
    """

    def __init__(self, audited: Audited, sides: Sides) -> None:
        self.audited = audited
        self.sides = sides
        self.design = audited.design
        self.name = audited.name

    def acceptance(self, p: object, q: object, n: int = 1) -> None:
        return None


class _SimulatingRunner(_StepRunner):
    def simulate(
        self, p: object, q: object, n: int, trials: int, seed: object
    ) -> tuple[np.ndarray, np.ndarray | None]:
        audited = self.audited
        if audited.engine is not None:
            result = audited.engine.simulate_sides(self.sides, n, trials, seed)
        else:
            result = audited.verifier.simulate(p, q, n=n, trials=trials, seed=seed)
        tokens = np.asarray(getattr(result, "tokens", result))
        check_tokens(tokens, self.sides.p.size, audited.name, trials)
        accepted = getattr(result, "accepted", None)
        if accepted is not None:
            audited.records.extend(np.asarray(accepted, dtype=bool).tolist())
        return tokens.astype(np.int64), accepted


class _VerifyingRunner(_StepRunner):
    def verify(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: Any
    ) -> tuple[int, bool]:
        audited = self.audited
        assert audited.function is not None
        token = as_token(audited.function(drafts, p, q, rng), p.size, audited.name, drafts)
        accepted = bool(token in drafts)
        audited.records.append(accepted)
        return token, accepted


def as_token(out: object, vocab: int, name: str, drafts: np.ndarray) -> int:
    """A rule's output as a token id in ``[0, vocab)``, or a ``ValueError`` naming the rule."""
    if isinstance(out, tuple) and len(out) == 2:  # (token, accepted), the verifier protocol
        out = out[0]
    if isinstance(out, bool | np.bool_) or not isinstance(out, numbers.Integral):
        if isinstance(out, np.ndarray) and out.ndim == 0 and np.issubdtype(out.dtype, np.integer):
            out = int(out)
        else:
            raise ValueError(
                f"rule {name!r} returned {out!r} for drafts {np.asarray(drafts).tolist()}; "
                "expected a token id (an integer)"
            )
    token = int(out)
    if not 0 <= token < vocab:
        raise ValueError(
            f"rule {name!r} returned token {token} for drafts {np.asarray(drafts).tolist()}, "
            f"outside the vocabulary [0, {vocab})"
        )
    return token


def check_tokens(tokens: np.ndarray, vocab: int, name: str, trials: int) -> None:
    """Raise ``ValueError`` naming the rule unless ``tokens`` are ``trials`` ids in range."""
    if tokens.shape != (trials,) or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"rule {name!r}: simulate returned {tokens.dtype} tokens of shape {tokens.shape}; "
            f"expected {trials} token ids"
        )
    bad = (tokens < 0) | (tokens >= vocab)
    if bad.any():
        raise ValueError(
            f"rule {name!r} returned token {int(tokens[bad][0])}, outside the vocabulary "
            f"[0, {vocab})"
        )


def _check_signature(function: Callable[..., Any], name: str) -> None:
    """A ``ValueError`` unless ``function(drafts, p, q, rng)`` binds."""
    try:
        inspect.signature(function).bind(None, None, None, None)
    except TypeError:
        raise ValueError(
            f"rule {name!r}: verify must take (drafts, p, q, rng); its signature is "
            f"{inspect.signature(function)}"
        ) from None
    except ValueError:  # no signature to inspect (a builtin): calls will tell
        pass


def as_audited(
    rule: object,
    *,
    processing: Processing,
    n: int | None = None,
    design: str | None = None,
) -> Audited:
    """Wrap ``rule`` for the audit (the module docstring lists what it may be).

    Parameters
    ----------
    rule : str, EngineRule, verifier object or callable
    processing : Processing
        The request's processing; an engine rule object must carry the same.
    n : int, optional
        Number of drafts (default: the rule's own, else 1).
    design : str, optional
        The draft design (default: the rule's own, else ``"iid"``).

    Raises
    ------
    ValueError
        An unknown name, a rule that is none of the above, a function with the wrong
        signature, or settings the rule refuses.
    """
    if isinstance(rule, str):
        if rule in ENGINE_RULES:
            options = {} if design is None else {"design": design}
            rule = get_engine_rule(
                rule,
                temperature=processing.temperature,
                top_k=processing.top_k,
                top_p=processing.top_p,
                **options,
            )
        elif rule in CHAIN_RULES:
            rule = get_chain_rule(rule)
        elif rule in VERIFIERS:
            rule = get_verifier(rule, **({} if design is None else {"design": design}))
        else:
            raise ValueError(
                f"unknown rule {rule!r}: an engine rule "
                f"({', '.join(ENGINE_RULES + CHAIN_RULES)}), a verifier "
                f"({', '.join(VERIFIERS)}), or a function verify(drafts, p, q, rng)"
            )
    if isinstance(rule, EngineRule):
        return _engine(rule, processing, n, design)
    if isinstance(rule, ChainRule):
        if design is not None or n is not None:
            raise ValueError(f"block rule {rule.name!r} drafts one chain: no n or design to set")
        spec = get_design("iid")
        return Audited(rule.name, "chain", spec, 1, processing, rule.lossless, chain=rule)
    name = str(getattr(rule, "name", getattr(rule, "__name__", type(rule).__name__)))
    has_protocol = hasattr(rule, "design") and callable(getattr(rule, "simulate", None))
    if has_protocol:
        spec = get_design(design if design is not None else rule.design)  # type: ignore[attr-defined]
        if design is not None and spec.name != get_design(rule.design).name:  # type: ignore[attr-defined]
            raise ValueError(f"rule {name!r} draws its drafts with design {rule.design!r}")  # type: ignore[attr-defined]
        return Audited(name, "verifier", spec, _n(n), processing, None, verifier=rule)
    function = getattr(rule, "verify", rule)
    if not callable(function):
        raise ValueError(
            f"rule {name!r} is not a rule: pass an engine rule, a verifier, or a function "
            "verify(drafts, p, q, rng) -> token"
        )
    _check_signature(function, name)
    spec = get_design(design if design is not None else getattr(rule, "design", "iid"))
    return Audited(
        name, "function", spec, _n(n), processing, None, verifier=rule, function=function
    )


def _n(n: int | None) -> int:
    return 1 if n is None else as_num_drafts(n)


def _engine(rule: EngineRule, processing: Processing, n: int | None, design: str | None) -> Audited:
    if rule.processing != processing and not processing.is_identity:
        raise ValueError(
            f"engine rule {rule.name!r} carries its own processing ({rule.processing.describe()}); "
            f"do not pass another ({processing.describe()})"
        )
    if design is not None and get_design(design).name != rule.design:
        raise ValueError(
            f"engine rule {rule.name!r} draws its drafts with design {rule.design!r}; build it "
            f"with design={design!r} instead"
        )
    n_value = rule.default_n if n is None else as_num_drafts(n)
    spec = get_design(rule.design)
    return Audited(rule.name, "engine", spec, n_value, rule.processing, rule.lossless, engine=rule)
