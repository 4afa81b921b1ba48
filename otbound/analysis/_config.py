"""What a bounds run computes: numbers of drafts, designs, verifiers, processing, Monte Carlo."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from otbound.drafts import DESIGNS, get_design
from otbound.resume import fingerprint
from otbound.verifiers import VERIFIERS, BaseVerifier, get_verifier
from otbound.verifiers.base import TARGET_SE

#: Designs a dump can be analysed under: those with one draft distribution per step
#: (``per_slot`` needs one per draft slot, which a dump does not hold).
DUMP_DESIGNS: tuple[str, ...] = tuple(d for d in DESIGNS if not get_design(d).slot_axis)

#: Designs analysed when none are named.
DEFAULT_DESIGNS: tuple[str, ...] = DUMP_DESIGNS

#: Numbers of drafts analysed when none are named.
DEFAULT_N: tuple[int, ...] = (2, 3, 4, 8)


def verifier_design(name: str) -> str:
    """The draft design a shipped verifier runs under (its default)."""
    return str(cast(BaseVerifier, get_verifier(name)).design)


#: Shipped verifiers left out unless named: the optimal verifier of draft sets fits its round
#: rule in about a second a step at V = 151,936 (``optimal`` for i.i.d. drafts, an
#: ``O(V log V)`` pass a step, runs by default).
OPT_IN_VERIFIERS: tuple[str, ...] = ("optimal_without_replacement", "optimal_conditional_poisson")


def verifiers_for(designs: tuple[str, ...]) -> tuple[str, ...]:
    """The shipped verifiers whose draft design is one of ``designs``, in table order
    (without the opt-in ones, :data:`OPT_IN_VERIFIERS`)."""
    return tuple(
        v for v in VERIFIERS if verifier_design(v) in designs and v not in OPT_IN_VERIFIERS
    )


def _positive_ints(values: object, name: str) -> tuple[int, ...]:
    out: tuple[Any, ...] = tuple(values)  # type: ignore[arg-type]
    if not out or any(
        isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in out
    ):
        raise ValueError(f"{name} must be a non-empty list of integers >= 1, got {list(out)}")
    return tuple(int(v) for v in out)


@dataclass(frozen=True)
class AnalysisConfig:
    """The settings of a bounds run, validated on construction.

    Parameters
    ----------
    n : tuple of int, default (2, 3, 4, 8)
        Numbers of drafts.
    designs : tuple of str, default every design in :data:`DUMP_DESIGNS`
        Draft designs whose optimal acceptance ``α*`` is computed (``"bound"`` rows).
    verifiers : tuple of str, optional
        Verifiers to evaluate; by default every shipped verifier whose draft design is among
        ``designs`` (but those of :data:`OPT_IN_VERIFIERS`). A verifier whose design is
        not in ``designs`` still gets its design's ``α*`` in its rows.
    temperatures : tuple of float, default (1.0,)
        Applied identically to both models (0 means argmax); several values make a sweep.
    top_k, top_p : int or float, optional
        Filters applied identically to both models after the temperature.
    mc_trials : int, default 0
        The most Monte Carlo trials per step for a verifier without an exact acceptance at
        that ``(n, V)`` (``rrs_without_replacement`` and ``importance`` at ``n ≥ 3`` on large
        vocabularies: Rao-Blackwellised estimates); 0 skips such rows.
    mc_target_se : float, default 0.005
        Per-step standard error each such row is sized for (two-stage: a pilot, then a fresh
        sample of ``clip(⌈1.25 s² / mc_target_se²⌉, m_0, mc_trials)``, ``m_0`` = 256 for the
        Rao-Blackwellised estimates, whose pilot has 64 trials or, for a row it does not show
        clearly narrow, 256 more, and 1,000 for 0/1 events, whose pilot has as many;
        :meth:`otbound.verifiers.BaseVerifier.estimate`); it is aimed below the target (a
        pilot that misses a rare large value can leave a row slightly above it), unless
        ``mc_trials`` caps it. The rows' ``stderr`` column reports each row's own.
    seed : int, default 0
        Monte Carlo seed; each (step, n, verifier) gets its own stream derived from it.
    skip_bad_steps : bool, default False
        Drop steps with NaN or infinite logits instead of failing the shard.
    truncate_vocab : bool, default False
        Cut both models to the smaller vocabulary when their widths differ.
    max_steps : int, optional
        Analyse only the dump's first ``max_steps`` steps (in shard order; the shards past
        them are not read); default all. Part of :meth:`fingerprint`, so a run on a subset
        is never resumed into a run on more steps.
    chunk_steps : int, default 256
        Steps processed at once; memory grows with ``chunk_steps × V``.
    device : str, optional
        Compute with torch on this device (``"cuda"``, ``"cpu"``...): ``α*`` of the designs
        that have a torch sweep and the exact acceptance of the verifiers that have a torch
        formula (:mod:`otbound.verifiers.torch_acceptance`); default numpy. The results
        agree to 1e-9, so neither this nor ``chunk_steps`` is part of :meth:`fingerprint`.
    """

    n: tuple[int, ...] = DEFAULT_N
    designs: tuple[str, ...] = DEFAULT_DESIGNS
    verifiers: tuple[str, ...] | None = None
    temperatures: tuple[float, ...] = (1.0,)
    top_k: int | None = None
    top_p: float | None = None
    mc_trials: int = 0
    mc_target_se: float = TARGET_SE
    seed: int = 0
    skip_bad_steps: bool = False
    truncate_vocab: bool = False
    max_steps: int | None = None
    chunk_steps: int = field(default=256, compare=False)
    device: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "n", _positive_ints(self.n, "n"))
        designs = tuple(dict.fromkeys(self.designs))
        unknown = [d for d in designs if d not in DUMP_DESIGNS]
        if not designs or unknown:
            raise ValueError(
                f"designs must name at least one of {', '.join(DUMP_DESIGNS)}; "
                f"got {', '.join(map(str, unknown or designs)) or 'none'}"
            )
        set_(self, "designs", designs)
        if self.verifiers is not None:
            names = tuple(dict.fromkeys(self.verifiers))
            bad = [v for v in names if v not in VERIFIERS]
            if bad:
                raise ValueError(
                    f"unknown verifier(s) {', '.join(map(str, bad))}; valid verifiers: "
                    f"{', '.join(VERIFIERS)}"
                )
            set_(self, "verifiers", names)
        temps = tuple(float(t) for t in self.temperatures)
        if not temps or any(not math.isfinite(t) or t < 0 for t in temps):
            raise ValueError(
                f"temperatures must be finite numbers >= 0 (0 means argmax), got {list(temps)}"
            )
        set_(self, "temperatures", tuple(dict.fromkeys(temps)))
        if self.top_k is not None:
            set_(self, "top_k", _positive_ints([self.top_k], "top_k")[0])
        if self.top_p is not None and not (0.0 < float(self.top_p) <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        for name in ("mc_trials", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        target = self.mc_target_se
        if (
            isinstance(target, bool)
            or not isinstance(target, numbers.Real)
            or not (0.0 < float(target) < math.inf)
        ):
            raise ValueError(f"mc_target_se must be a number > 0, got {target!r}")
        set_(self, "mc_target_se", float(target))
        if self.max_steps is not None:
            set_(self, "max_steps", _positive_ints([self.max_steps], "max_steps")[0])
        set_(self, "chunk_steps", _positive_ints([self.chunk_steps], "chunk_steps")[0])
        if self.device is not None and not isinstance(self.device, str):
            raise ValueError(f"device must be a string such as 'cuda', got {self.device!r}")

    @property
    def verifier_names(self) -> tuple[str, ...]:
        """The verifiers evaluated: as given, or all whose design is in :attr:`designs`."""
        return self.verifiers if self.verifiers is not None else verifiers_for(self.designs)

    def steps_per_shard(self, shard_steps: Sequence[int]) -> tuple[int, ...]:
        """Steps analysed in each shard, given the shards' sizes in order: all of them, or
        the first :attr:`max_steps` of the dump (then 0 for the shards past them)."""
        if self.max_steps is None:
            return tuple(int(k) for k in shard_steps)
        out, left = [], self.max_steps
        for k in shard_steps:
            out.append(min(int(k), left))
            left -= out[-1]
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        """The settings that determine the results (JSON-ready; ``chunk_steps`` and ``device``
        left out, and ``max_steps`` when it is None and ``mc_target_se`` without Monte Carlo,
        so that runs keep the fingerprints they had before these options existed; a run with
        Monte Carlo gets a new one, as its rows are now Rao-Blackwellised estimates)."""
        out = asdict(self)
        out.pop("chunk_steps")
        out.pop("device")
        if out["max_steps"] is None:
            out.pop("max_steps")
        if self.mc_trials == 0:
            out.pop("mc_target_se")
        out["verifiers"] = list(self.verifier_names)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def fingerprint(self) -> str:
        """A short hash of :meth:`to_dict` (:func:`otbound.resume.fingerprint`): equal exactly
        when the results would be."""
        return fingerprint(self.to_dict())
