"""What a tree-decoding run computes: verifiers, trees, decoding, prediction, dynamic drafting.

:class:`TreeDecodingConfig` holds the settings of :func:`otbound.tree_decoding.run_tree_decoding`
(the models, the prompts, the device, the progress bar and the checkpoint directory are the
run's, not the settings'), validated on construction, with the verifiers, trees and stopping
policies they name resolved once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, cast

from otbound.tree_decoding._dynamic import ROOTS, family_width
from otbound.tree_decoding._specs import TreeSpec, parse_trees
from otbound.tree_decoding._stopping import StoppingPolicy, parse_stopping
from otbound.tree_decoding._walk import tree_verifier

__all__ = ["TREE_VERIFIERS", "TreeDecodingConfig", "resolve_config"]

#: The verifiers a tree run compares by default.
TREE_VERIFIERS: tuple[str, ...] = ("rrs", "rrs_without_replacement", "spechub", "greedy", "kseq")


@dataclass(frozen=True)
class TreeDecodingConfig:
    """The settings of a tree-decoding run, validated on construction.

    Parameters
    ----------
    verifiers : sequence of str or verifier objects, default :data:`TREE_VERIFIERS`
        Names in :data:`otbound.VERIFIERS`, objects with ``design`` and a single-trial
        ``verify(drafts, p, q, rng)``, or the sequence-level ``block`` (chains), ``traversal``
        and ``multipath`` (independent paths, tree family ``pathsK``), which walk the whole
        tree at once (:class:`otbound.tree_decoding.SequenceTreeVerifier`; no prediction). One
        string is one verifier.
    trees : str, TreeSpec(s) or mapping of name to path list, default "binary:1-3"
        ``"binary:1-5,ternary:1-3"`` (:func:`otbound.tree_decoding.parse_trees`) or explicit
        trees; with ``budgets``, tree families (``"binary,beam4"``; depths are ignored).
    max_new_tokens : int, default 32
    temperature : float, default 1.0
        Applied identically to both models; must be ``> 0`` (distinct-draft designs need
        ``k`` tokens with positive mass).
    seed : int, default 0
        The common random numbers (:class:`otbound.tree_decoding.CallStreams`): call ``t`` of
        the ``c``-th prompt draws from streams seeded by ``(seed, c, t)`` in every run.
    batch_size : int, default 8
        Prompts decoded side by side.
    vocab_size : int, optional
        Default: the smaller of the two models' logit widths (with a warning when they differ).
    stop_at_eos : bool, default True
        Stop a prompt after the models' end-of-sequence token.
    predict : bool, default True
        Compute the prediction and the bound (costs a positional vector and ``α*`` per call).
    prediction_trials : int, default 2000
        Monte Carlo trials per call for the prediction of verifiers without an exact
        positional vector (``rrs_without_replacement`` at width ``>= 3`` on large
        vocabularies, ``importance``, ``gls``, verifier objects).
    kv_cache : bool, default True
        Reuse each model's key/value cache between calls
        (:func:`otbound.tree_decoding.decode_tree`).
    root : str or sequence of str, default "draft"
        ``"target"``: target-initialised roots (:mod:`._dynamic`); both: ``("draft", "target")``.
    stopping : str, StoppingPolicy or sequence of them, optional
        Stopping policies (:func:`otbound.tree_decoding.parse_stopping`: ``fixed``,
        ``confidence:τ``, ``confidence-path:τ``, ``learned:MODEL``); a string may list
        several, comma-separated.
    budgets : sequence of int, optional
        Target budgets: each system runs the largest tree of its family with at most that many
        nodes (:mod:`._budget`).
    c_target, c_draft : float, optional
        The cost model's pass costs (default: measured on the run).

    Beam families (``beamW``), a target root, a stopping policy or budgets make the run
    *dynamic* (:attr:`dynamic`).

    Raises
    ------
    ValueError
        A bad setting, named (checked in the order ``temperature``, ``max_new_tokens``,
        ``batch_size``, ``verifiers``, ``root``, ``stopping``, ``trees``): an unknown
        verifier, root, stopping policy or tree family among them.
    """

    verifiers: str | Sequence[Any] = TREE_VERIFIERS
    trees: object = "binary:1-3"
    max_new_tokens: int = 32
    temperature: float = 1.0
    seed: int = 0
    batch_size: int = 8
    vocab_size: int | None = None
    stop_at_eos: bool = True
    predict: bool = True
    prediction_trials: int = 2000
    kv_cache: bool = True
    root: str | Sequence[str] = "draft"
    stopping: object = None
    budgets: Sequence[int] | None = None
    c_target: float | None = None
    c_draft: float | None = None
    #: The verifier objects by name (:func:`otbound.tree_decoding.tree_verifier`).
    found: Mapping[str, Any] = field(init=False, repr=False, compare=False)
    #: The roots, a tuple of :data:`ROOTS`.
    roots: tuple[str, ...] = field(init=False, repr=False, compare=False)
    #: The stopping policies (deduplicated by label), or None when none was given.
    policies: tuple[StoppingPolicy, ...] | None = field(init=False, repr=False, compare=False)
    #: The trees of a run without budgets (else empty).
    specs: tuple[TreeSpec, ...] = field(init=False, repr=False, compare=False)
    #: The tree families of a budget run (else empty).
    families: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        temperature = self.temperature
        if not (isinstance(temperature, int | float) and math.isfinite(temperature)) or (
            temperature <= 0
        ):
            raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")
        for name in ("max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        verifiers = (self.verifiers,) if isinstance(self.verifiers, str) else tuple(self.verifiers)
        set_(self, "verifiers", verifiers)
        set_(self, "found", {verifier_name(v): tree_verifier(v) for v in verifiers})
        roots = (self.root,) if isinstance(self.root, str) else tuple(str(r) for r in self.root)
        bad_roots = [r for r in roots if r not in ROOTS]
        if bad_roots or not roots:
            raise ValueError(f"root must be one of {', '.join(ROOTS)}, got {', '.join(bad_roots)}")
        set_(self, "roots", roots)
        set_(self, "policies", as_policies(self.stopping))
        if self.budgets is not None:
            set_(self, "budgets", tuple(self.budgets))
            set_(self, "specs", ())
            set_(self, "families", as_families(self.trees))
        else:
            specs = as_specs(self.trees)
            if not specs:
                raise ValueError("trees is empty")
            set_(self, "specs", specs)
            set_(self, "families", ())

    @property
    def dynamic(self) -> bool:
        """Whether the run is dynamic (:mod:`._dynamic`): budgets, stopping policies, a target
        root or a beam family."""
        return (
            self.budgets is not None
            or self.policies is not None
            or self.roots != ("draft",)
            or any(re.fullmatch(r"beam[0-9]+", s.family) for s in self.specs)
        )


#: The settings :class:`TreeDecodingConfig` takes by keyword.
SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(TreeDecodingConfig) if f.init)


def resolve_config(
    config: TreeDecodingConfig | None, settings: Mapping[str, Any]
) -> TreeDecodingConfig:
    """``config`` with ``settings`` (keyword settings of :class:`TreeDecodingConfig`) in place
    of its own, or a config of the settings alone; ``TypeError`` for a keyword that is no
    setting, ``ValueError`` for a config that is no :class:`TreeDecodingConfig`."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise TypeError(
            f"run_tree_decoding() got unexpected keyword argument(s) {', '.join(unknown)}; "
            f"settings: {', '.join(SETTINGS)}"
        )
    if config is None:
        return TreeDecodingConfig(**settings)
    if not isinstance(config, TreeDecodingConfig):
        raise ValueError(f"config must be a TreeDecodingConfig, got {type(config).__name__}")
    return replace(config, **settings) if settings else config


def verifier_name(verifier: Any) -> str:
    """A verifier's name: the registry name, or its class name for other objects."""
    if isinstance(verifier, str):
        return verifier
    return str(getattr(verifier, "name", type(verifier).__name__))


def as_specs(trees: object) -> tuple[TreeSpec, ...]:
    """Trees from a string (:func:`parse_trees`), TreeSpec(s) or a mapping of names to paths."""
    if isinstance(trees, str):
        return tuple(parse_trees(trees))
    if isinstance(trees, TreeSpec):
        return (trees,)
    if isinstance(trees, Mapping):
        return tuple(TreeSpec.custom(name, paths) for name, paths in trees.items())
    specs: list[TreeSpec] = list(trees)  # type: ignore[call-overload]
    if not all(isinstance(s, TreeSpec) for s in specs):
        raise ValueError(
            "trees must be a string such as 'binary:1-5,ternary:1-3', TreeSpec objects, or a "
            "mapping of names to path lists"
        )
    return tuple(specs)


def as_policies(stopping: object) -> tuple[StoppingPolicy, ...] | None:
    """Stopping policies from a comma-separated string, policies or strings; None for None."""
    if stopping is None:
        return None
    items: list[object]
    if isinstance(stopping, str):
        items = [t for t in (x.strip() for x in stopping.split(",")) if t]
    elif isinstance(stopping, StoppingPolicy):
        items = [stopping]
    else:
        items = list(cast(Iterable[object], stopping))
    if not items:
        raise ValueError("stopping is empty")
    out = [s if isinstance(s, StoppingPolicy) else parse_stopping(str(s)) for s in items]
    return tuple({p.label: p for p in out}.values())


def as_families(trees: object) -> tuple[str, ...]:
    """Tree families for budget runs: ``"binary,beam4"`` (``:DEPTHS`` ignored) or specs."""
    if isinstance(trees, str):
        names = [item.strip().split(":")[0] for item in trees.split(",") if item.strip()]
    elif isinstance(trees, TreeSpec):
        names = [trees.family]
    else:
        items = cast(Iterable[Any], trees)
        names = [t.family if isinstance(t, TreeSpec) else str(t) for t in items]
    if not names:
        raise ValueError("trees is empty")
    for name in names:
        family_width(name)
    return tuple(dict.fromkeys(names))
