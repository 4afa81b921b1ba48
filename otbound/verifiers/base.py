r"""The verifier protocol, its result objects, and the helpers every verifier shares.

A *verifier* sees ``n`` draft tokens ``x̄ = (x_1..x_n)`` drawn by a draft design from ``q``,
the target ``p`` and the draft ``q``, and outputs one token ``Y``. It is *lossless* when
``Y ~ p`` exactly. Its acceptance rate is

.. math::

    α = P(Y ∈ \bar x),

the event that the output is one of the drafts (what engines call "a draft token
accepted", and what the optimal acceptance rate ``α*`` bounds). Every verifier here reports
this membership event: ``SimulationResult.accepted[t]`` is ``tokens[t] ∈ drafts[t]``. For most
verifiers it coincides with "the acceptance test passed" because the residual distribution is
zero on every rejected draft; where it does not (``single`` with ``n > 1``, ``importance``) the
module says so and its exact acceptance counts the residual draw landing on another draft.

The protocol (:class:`Verifier`) is what :func:`otbound.check_lossless` and
:func:`otbound.compare` need: ``design``, ``acceptance`` (may return ``None``), and
``simulate`` or a single-trial ``verify``. :class:`BaseVerifier` implements the protocol for
the shipped verifiers: input validation, seeded simulation (draws the drafts from the design,
then calls the verifier's vectorised ``_verify_batch``), and ``verify`` for one trial. Its
``applies_to``, ``acceptance_of`` and ``simulate_step`` take a validated
:class:`otbound.problem.Step` and check nothing again (:func:`otbound.compare` uses them).
"""

from __future__ import annotations

import math
import numbers
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from otbound._checks import as_num_drafts, clip_rounding
from otbound.drafts import DraftDesign, get_design, inverse_cdf
from otbound.problem import Step, frozen
from otbound.stats import wilson_interval

__all__ = [
    "MIN_RB_TRIALS",
    "MIN_TRIALS",
    "RB_PILOT",
    "TARGET_SE",
    "WIDE_PILOT",
    "BaseVerifier",
    "Estimate",
    "SimulationResult",
    "Verifier",
    "membership",
    "overlap",
    "residual",
    "sample_tokens",
]

_T = TypeVar("_T")


@runtime_checkable
class Verifier(Protocol):
    """What :func:`otbound.check_lossless` and :func:`otbound.compare` accept.

    Attributes
    ----------
    design : str or DraftDesign
        The draft design whose drafts the verifier expects (a name in :data:`otbound.DESIGNS`).

    Methods
    -------
    acceptance(p, q, n) -> float or None
        Exact ``P(Y ∈ x̄)``, or ``None`` where no closed form or enumeration exists.
    simulate(p, q, n, trials, seed) -> SimulationResult
        Seeded Monte Carlo: ``.tokens`` (int, (trials,)) and ``.accepted`` (bool, (trials,)).
    verify(drafts, p, q, rng) -> (int, bool)
        One trial (an alternative to ``simulate``; at least one of the two is required).
    """

    design: Any

    def acceptance(self, p: Any, q: Any, n: int = 2) -> float | None: ...


@dataclass(frozen=True)
class SimulationResult:
    """Monte Carlo output of one verifier on one step.

    Attributes
    ----------
    tokens : numpy.ndarray of int64, shape (trials,)
        The output token ``Y`` of each trial.
    accepted : numpy.ndarray of bool, shape (trials,)
        ``Y ∈ x̄`` for each trial.
    drafts : numpy.ndarray of int64, shape (trials, n)
        The draft tuples the trials verified.
    verifier : str
    design : str
    n : int
    seed : object
        The seed the simulation was run with.
    """

    tokens: np.ndarray
    accepted: np.ndarray
    drafts: np.ndarray = field(repr=False)
    verifier: str = ""
    design: str = ""
    n: int = 0
    seed: object = None

    @property
    def trials(self) -> int:
        """Number of trials."""
        return int(self.tokens.shape[0])

    @property
    def acceptance(self) -> float:
        """Monte Carlo acceptance rate, the mean of ``accepted``."""
        return float(np.mean(self.accepted))

    @property
    def stderr(self) -> float:
        """Standard error of :attr:`acceptance`, ``sqrt(a (1 − a) / trials)``."""
        a = self.acceptance
        return math.sqrt(a * (1.0 - a) / self.trials)

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """Wilson score interval for the acceptance rate at confidence ``level``."""
        return wilson_interval(int(np.count_nonzero(self.accepted)), self.trials, level)


#: The per-step standard error a run aims at (:attr:`otbound.analysis.AnalysisConfig.mc_target_se`).
TARGET_SE = 0.005

#: Size of the pilot sample of :meth:`BaseVerifier.estimate` with a target standard error, and
#: the fewest trials its final sample gets (0/1 Monte Carlo).
MIN_TRIALS = 1_000

#: The fewest trials of a Rao-Blackwellised estimate's final sample (a verifier with
#: ``_conditional``): its values vary far less than 0/1 events (on ``data/sample`` the final
#: samples' per-trial deviation has median 0.002 and maximum 0.091, so 256 trials give a
#: standard error below 0.005 on all but the 4 of 3,456 rows the pilots size larger). Their
#: interval (:meth:`Estimate.ci`) is valid at any size; where the sample shows no spread each
#: side is about ``ln(40) / (0.75 m)`` of the values' proved range (0.019 of it at 256).
MIN_RB_TRIALS = 256

#: The first pilot of a Rao-Blackwellised estimate: enough to tell a clearly narrow row
#: (:func:`_wide`), whose final sample is then the least, from one that may need more.
RB_PILOT = 64

#: A row the first pilot does not show clearly narrow gets a second pilot this many times
#: larger (256 trials), on which its final sample is sized: 64 trials miss a rare large value
#: too often to size a wide row. The threshold is a per-trial deviation of 0.04 (256 final
#: trials and a target of 0.005).
WIDE_PILOT = 4


def _wide(spread: float, least: int, target_se: float) -> bool:
    """Whether a pilot's per-trial deviation ``spread`` leaves its row possibly wide: the
    least final sample would have a standard error above half ``target_se`` (or the spread is
    not finite)."""
    return not spread / math.sqrt(least) <= 0.5 * target_se


@dataclass(frozen=True)
class Estimate:
    r"""An acceptance rate with its Monte Carlo standard error (:meth:`BaseVerifier.estimate`).

    Attributes
    ----------
    acceptance : float
        The exact value, or the mean of the per-trial values.
    stderr : float
        ``0`` when exact; else the standard error of the mean, ``s / sqrt(trials)`` with ``s``
        the sample standard deviation of the per-trial values (``sqrt(a (1 − a) / trials)``
        for 0/1 values, as :attr:`SimulationResult.stderr`).
    trials : int
        Trials averaged (0 when exact).
    method : {"exact", "rao_blackwell", "monte_carlo"}
        ``"rao_blackwell"``: each trial contributes a conditional probability of acceptance
        given part of its randomness (the verifier's ``_conditional``), an unbiased estimate
        whose variance is at most that of the 0/1 indicator; ``"monte_carlo"``: the 0/1
        acceptance events of :meth:`BaseVerifier.simulate`.
    successes : int
        Accepted trials (0/1 Monte Carlo only, for a Wilson interval; else 0).
    values : numpy.ndarray, optional
        The final sample's Rao-Blackwellised values in the order drawn (read-only; ``None``
        otherwise), for :meth:`ci`.
    value_range : (float, float)
        A range every one of ``values`` lies in, known before sampling (the verifier's
        ``_conditional_range``; ``(0, 1)`` when no values are kept).
    """

    acceptance: float
    stderr: float
    trials: int
    method: str
    successes: int = 0
    values: np.ndarray | None = field(default=None, repr=False, compare=False)
    value_range: tuple[float, float] = (0.0, 1.0)

    @property
    def exact(self) -> bool:
        """Whether the value is exact (no Monte Carlo)."""
        return self.method == "exact"

    def ci(self, level: float = 0.95) -> tuple[float, float]:
        """Interval at ``level``: the value itself when exact, Wilson for 0/1 Monte Carlo, and
        for a Rao-Blackwellised mean the betting interval of its values on their range
        (:func:`otbound.verifiers._betting.betting_interval`), within ``[0, 1]``.

        The betting interval covers the mean with probability at least ``level`` for any
        distribution of values on ``value_range`` and any number of trials. The values are
        skewed, with rare large ones that a sample of a few hundred often misses entirely, so
        a normal (or t, or bootstrap) interval on them covers less than it says: on rows of
        ``data/sample`` with exact rates, ``mean ± 1.96 stderr`` covered 91.8 % of 2,400
        intervals (rows as low as 79 %) and this interval 99.5 %
        (``tests/test_estimate_coverage.py``; docs/mathematics.md, "Intervals of
        Rao-Blackwellised estimates").

        Raises
        ------
        ValueError
            ``level`` outside ``(0, 1)`` (Rao-Blackwellised), or a Rao-Blackwellised estimate
            made without its values.
        """
        if self.exact:
            return self.acceptance, self.acceptance
        if self.method == "monte_carlo":
            return wilson_interval(self.successes, self.trials, level)
        if self.values is None:
            raise ValueError("a Rao-Blackwellised estimate needs its values for an interval")
        from otbound.verifiers._betting import betting_interval  # numba, loaded on first use

        low, high = betting_interval(self.values, *self.value_range, level)
        return max(0.0, low), min(1.0, high)


# -- shared helpers ------------------------------------------------------------------------


def acceptance_what(verifier: str, n: int) -> str:
    """What an exact acceptance rate is called when :func:`otbound._checks.clip_rounding`
    refuses one (every path's words: numpy, :func:`otbound.compare`, torch)."""
    return f"acceptance rate of verifier {verifier!r} (n={n})"


def overlap(p: np.ndarray, q: np.ndarray) -> float:
    """``β(p, q) = Σ_x min(p_x, q_x)``, the single-draft acceptance rate (``1 − TV``)."""
    return float(np.minimum(p, q).sum())


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``res(p, q) = (p − q)⁺ / Σ (p − q)⁺``, the distribution to sample after a rejection.

    The normaliser is summed from the positive parts (not ``1 − β``) so that it carries no
    cancellation. When ``p ≤ q`` everywhere (``p = q``) a rejection has probability zero and
    ``p`` itself is returned.
    """
    d = np.maximum(p - q, 0.0)
    total = d.sum()
    out: np.ndarray = p.copy() if total <= 0.0 else d / total
    return out


#: Tokens drawn from ``dist`` (V,) by inverting its CDF at uniforms ``u``; never a zero
#: (:func:`otbound.drafts.inverse_cdf`, which the designs sample with too).
sample_tokens = inverse_cdf


#: Draft tuples are sampled in chunks of at most this many ``rows × V`` entries, because some
#: designs (``without_replacement``'s Gumbel-top-k) build a ``(rows, V)`` array of keys.
SAMPLE_CHUNK_ENTRIES = 1 << 23


def sample_drafts(
    design: DraftDesign, q: np.ndarray, n: int, trials: int, rng: np.random.Generator
) -> np.ndarray:
    """``design.sample`` in chunks bounding the memory to ~64 MB; int64 (trials, n)."""
    rows = max(1, SAMPLE_CHUNK_ENTRIES // q.shape[-1])
    if trials <= rows:
        return np.ascontiguousarray(design.sample(q, n, trials, rng), dtype=np.int64)
    out = np.empty((trials, n), dtype=np.int64)
    for start in range(0, trials, rows):
        stop = min(trials, start + rows)
        out[start:stop] = design.sample(q, n, stop - start, rng)
    return out


def membership(tokens: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """``tokens[t] ∈ drafts[t]`` for each trial: the acceptance event."""
    hits: np.ndarray = np.any(drafts == tokens[:, None], axis=1)
    return hits


def as_seed_rng(seed: object) -> np.random.Generator:
    """A numpy Generator from an int, a SeedSequence or a Generator (passed through)."""
    if isinstance(seed, np.random.Generator):
        return seed
    try:
        return np.random.default_rng(seed)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"seed must be an int, a numpy SeedSequence or a Generator, got {seed!r}"
        ) from exc


def as_trials(trials: object) -> int:
    """Validate a number of Monte Carlo trials: an integer >= 1."""
    if isinstance(trials, bool) or not isinstance(trials, numbers.Integral) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    return int(trials)


def _words(a: np.ndarray) -> np.ndarray | None:
    """``a``'s bytes as 64-bit words (a view), or ``None`` where ``a`` is not a contiguous
    array of 8-byte items."""
    if a.ndim and a.dtype.itemsize == 8 and a.flags.c_contiguous:
        return a.view(np.uint64)
    return None


def _digest(a: np.ndarray) -> tuple[object, ...]:
    """A cheap digest of an array: shape, dtype and the wrapped sum of its 64-bit words (its
    bytes where it has none). Equal arrays, bit for bit, have equal digests; the converse is
    checked by :func:`_same_bits`."""
    words = _words(a)
    total = (
        int(np.add.reduce(words, axis=None, dtype=np.uint64)) if words is not None else a.tobytes()
    )
    return (a.shape, a.dtype.str, total)


def _layout(a: np.ndarray) -> tuple[object, ...]:
    """``a``'s identity and layout: the key of a frozen row (its values cannot change, but a
    view's shape, strides and dtype can be set in place)."""
    return (id(a), a.shape, a.strides, a.dtype.str)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same bytes (shape and dtype too: ``-0.0`` is not ``0.0``)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a_words, b_words = _words(a), _words(b)
    if a_words is not None and b_words is not None:
        return bool(np.array_equal(a_words, b_words))
    return a.tobytes() == b.tobytes()


class BaseVerifier(ABC):
    """Common machinery of the shipped verifiers.

    Subclasses set :attr:`name` and :attr:`default_design` and implement
    :meth:`_acceptance` (exact value or ``None``), :meth:`_verify_one` (one trial, plain
    Python, to be read next to the paper) and :meth:`_verify_batch` (all trials at once,
    vectorised or compiled). Inputs are validated once here.

    Parameters
    ----------
    design : str, optional
        The draft design (only verifiers listing several in :attr:`designs` accept another one).

    Attributes
    ----------
    name : str
        Registry name.
    design : str
        The draft design the verifier expects.
    designs : tuple of str
        The designs the verifier is defined for.
    fixed_n : int or None
        The only number of drafts it is defined for (``spechub``: 2).
    """

    name: ClassVar[str]
    default_design: ClassVar[str] = "iid"
    designs: ClassVar[tuple[str, ...]] = ()
    fixed_n: ClassVar[int | None] = None

    def __init__(self, design: str | DraftDesign | None = None) -> None:
        spec = get_design(self.default_design if design is None else design)
        allowed = self.designs or (self.default_design,)
        if spec.name not in allowed:
            raise ValueError(
                f"verifier {self.name!r} is defined for design(s) {', '.join(allowed)}; "
                f"got design={spec.name!r}"
            )
        self._spec: DraftDesign = spec
        self.design: str = spec.name

    def __repr__(self) -> str:
        return f"<verifier {self.name!r} design={self.design!r}>"

    def has_default_settings(self) -> bool:
        """Whether every setting of this verifier is its class's default (a batched formula
        of the shipped verifier, :func:`otbound.verifiers.batched.shipped_name`, computes
        the default only). ``True`` here: a verifier with settings says otherwise."""
        return True

    def _memo(self, tag: str, p: np.ndarray, q: np.ndarray, n: int, build: Callable[[], _T]) -> _T:
        """``build()`` cached on the exact inputs (a few entries), so that a loop of
        :meth:`verify` calls on one step solves its LP or bisection once, and the estimates of
        a step's ``n`` share what depends on the step only.

        Keyed on a cheap digest of ``p`` and ``q`` (:func:`_digest`: their 64-bit words
        added); an entry keeps copies of the inputs it was built from and serves only inputs
        equal to them bit for bit (a digest that collides builds anew), without hashing the
        whole rows on every call. Rows that nothing can write (:func:`otbound.problem.frozen`:
        views of the rows :func:`otbound.compare` validated) are keyed on the objects
        themselves and their layout (held by weak references, so an entry never keeps a batch
        alive, and a dead entry never serves an object that took its id): a step's calls
        pass the same rows, and checking them cost more than the rest of :meth:`_memo`
        (4 % of the main job).
        """
        cache = self.__dict__.setdefault("_cache", {})
        if frozen(p) and frozen(q):  # no array can change them: the same objects will do
            key: tuple[object, ...] = (tag, n, *_layout(p), *_layout(q))
            entry = cache.get(key)
            if entry is None or entry[0]() is not p or entry[1]() is not q:
                entry = self._memo_entry(cache, key, weakref.ref(p), weakref.ref(q), build)
        else:
            key = (tag, n, _digest(p), _digest(q))
            entry = cache.get(key)
            if entry is None or not (_same_bits(entry[0], p) and _same_bits(entry[1], q)):
                entry = self._memo_entry(cache, key, p.copy(), q.copy(), build)
        value: _T = entry[2]
        return value

    @staticmethod
    def _memo_entry(
        cache: dict[tuple[object, ...], tuple[Any, Any, Any]],
        key: tuple[object, ...],
        p_kept: object,
        q_kept: object,
        build: Callable[[], _T],
    ) -> tuple[Any, Any, _T]:
        """A new entry of :meth:`_memo`'s cache (a few entries: a full cache is emptied)."""
        if len(cache) >= 8:
            cache.clear()
        entry = (p_kept, q_kept, build())
        cache[key] = entry
        return entry

    # -- validation ---------------------------------------------------------------------------
    def validate_step(self, p: object, q: object) -> Step:
        """Validate the values and shapes of one step ``p``, ``q``: the :class:`Step` that
        :meth:`applies_to`, :meth:`acceptance_of` and :meth:`simulate_step` trust."""
        slot = self._spec.slot_axis
        step = Step.validate(p, q, slot_axis=slot)
        if step.p.ndim != 1 or step.q.ndim != (2 if slot else 1):
            want = "(n, V)" if slot else "(V,)"
            raise ValueError(
                f"verifiers work on one step: p must have shape (V,) and q shape {want}, got "
                f"{step.p.shape} and {step.q.shape}; use otbound.compare for batches of steps"
            )
        return step

    def _clean(self, p: object, q: object, n: object) -> tuple[Step, int]:
        """Validate ``n`` and one step ``p``, ``q``."""
        n = as_num_drafts(n)
        return self.validate_step(p, q), n

    def _check_limits(self, step: Step, n: int) -> None:
        """Raise ``ValueError`` where ``n`` is outside the verifier's or its design's limits."""
        if self.fixed_n is not None and n != self.fixed_n:
            raise ValueError(
                f"verifier {self.name!r} is defined for n={self.fixed_n} only, got n={n}"
            )
        self._spec.check_rows(step.q.shape, n, lambda: step.support)

    def _validate(self, p: object, q: object, n: object) -> tuple[np.ndarray, np.ndarray, int]:
        """Clean ``p``, ``q`` (one step) and ``n``; raise ``ValueError`` naming the argument."""
        step, n = self._clean(p, q, n)
        self._check_limits(step, n)
        return step.p, step.q, n

    def applies(self, p: object, q: object, n: int = 2) -> bool:
        """Whether the verifier is defined for these inputs (``n``, support, size limits).

        Invalid probabilities or shapes still raise ``ValueError``; only the verifier's own
        limits (an ``n`` it is not defined for, ``n`` above the support of a distinct-draft
        design, a vocabulary too large for an enumeration-only verifier) give ``False``.
        """
        step, n = self._clean(p, q, n)
        return self.applies_to(step, n)

    def applies_to(self, step: Step, n: int) -> bool:
        """:meth:`applies` on a validated one-step :class:`Step` (from :meth:`validate_step`,
        or a row of a validated batch) and a validated ``n``: nothing is checked again."""
        try:
            self._check_limits(step, n)
        except ValueError:
            return False
        return self._applies(step.p, step.q, n)

    def _applies(self, p: np.ndarray, q: np.ndarray, n: int) -> bool:
        return True

    @staticmethod
    def _check_drafts(drafts: object) -> np.ndarray:
        """Drafts as a non-empty 1-D int64 array (the range is checked against ``V`` later)."""
        arr = np.asarray(drafts)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(
                f"drafts must be a non-empty 1-D sequence of token ids, got shape {arr.shape}"
            )
        if not np.issubdtype(arr.dtype, np.integer):
            if not (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr))):
                raise ValueError(f"drafts must be integer token ids, got {arr.tolist()!r}")
        return arr.astype(np.int64)

    # -- the protocol -------------------------------------------------------------------------
    def acceptance(self, p: object, q: object, n: int = 2) -> float | None:
        """Exact acceptance rate ``P(Y ∈ x̄)``, or ``None`` where none is computable.

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        q : array_like, shape (V,) (``(n, V)`` for the ``per_slot`` design)
            Draft distribution.
        n : int, default 2
            Number of drafts.

        Returns
        -------
        float or None
            Clipped into ``[0, 1]`` where it is out by rounding only.

        Raises
        ------
        ValueError
            Invalid inputs, or a value outside ``[0, 1]`` by more than rounding (a bug in the
            verifier's formula, named with the value).
        """
        step, n = self._clean(p, q, n)
        return self.acceptance_of(step, n)

    def acceptance_of(self, step: Step, n: int) -> float | None:
        """:meth:`acceptance` on a validated one-step :class:`Step` and ``n`` (as
        :meth:`applies_to`); raises where ``n`` is outside the verifier's limits."""
        self._check_limits(step, n)
        if not self._applies(step.p, step.q, n):
            return None
        value = self._acceptance(step.p, step.q, n)
        if value is None:
            return None
        return float(clip_rounding(value, 0.0, 1.0, acceptance_what(self.name, n)))

    def acceptances_of(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """:meth:`acceptance_of` for several ``n`` of one validated step, each value the one
        :meth:`acceptance_of` gives alone.

        A verifier whose exact formula does the same work for every ``n`` of a step (a sort of
        ``p / q``, a pass over quadrature nodes) does it once here (:meth:`_acceptances`);
        :func:`otbound.compare` asks for all the ``n`` of a step in one call.

        Parameters
        ----------
        step : Step
            One validated step (as :meth:`applies_to`).
        ns : sequence of int
            Validated numbers of drafts.

        Returns
        -------
        dict of int to float or None
            As :meth:`acceptance_of` for each ``n``.

        Raises
        ------
        ValueError
            As :meth:`acceptance_of`, for the first ``n`` that raises.
        """
        for n in ns:
            self._check_limits(step, n)
        usable = [n for n in dict.fromkeys(ns) if self._applies(step.p, step.q, n)]
        values = self._acceptances(step, usable) if usable else {}
        out: dict[int, float | None] = {}
        for n in ns:
            value = values.get(n)
            what = acceptance_what(self.name, n)
            out[n] = None if value is None else float(clip_rounding(value, 0.0, 1.0, what))
        return out

    def simulate(
        self, p: object, q: object, n: int = 2, trials: int = 100_000, seed: object = 0
    ) -> SimulationResult:
        """Monte Carlo: draw ``trials`` draft tuples from the design and verify them all.

        Vectorised over trials (numpy, or a compiled loop); reproducible from ``seed``.

        Parameters
        ----------
        p, q : array_like
            As in :meth:`acceptance`.
        n : int, default 2
        trials : int, default 100_000
        seed : int, SeedSequence or Generator, default 0

        Returns
        -------
        SimulationResult
        """
        step, n = self._clean(p, q, n)
        return self.simulate_step(step, n, trials, seed)

    def simulate_step(
        self, step: Step, n: int, trials: int = 100_000, seed: object = 0
    ) -> SimulationResult:
        """:meth:`simulate` on a validated one-step :class:`Step` and ``n`` (as
        :meth:`applies_to`)."""
        self._check_limits(step, n)
        p_arr, q_arr = step.p, step.q
        trials = as_trials(trials)
        if not self._applies(p_arr, q_arr, n):
            raise ValueError(self._not_applicable_message(p_arr, q_arr, n))
        rng = as_seed_rng(seed)
        drafts = sample_drafts(self._spec, q_arr, n, trials, rng)
        tokens = np.asarray(self._verify_batch(drafts, p_arr, q_arr, rng), dtype=np.int64)
        return SimulationResult(
            tokens=tokens,
            accepted=membership(tokens, drafts),
            drafts=drafts,
            verifier=self.name,
            design=self.design,
            n=n,
            seed=seed,
        )

    def estimate(
        self,
        p: object,
        q: object,
        n: int = 2,
        trials: int = 100_000,
        seed: object = 0,
        *,
        target_se: float | None = None,
    ) -> Estimate:
        r"""The acceptance rate: exact where :meth:`acceptance` has it, else its best estimate.

        Without an exact value, each trial contributes the verifier's Rao-Blackwellised value
        (the probability of acceptance given part of the trial's randomness, computed exactly;
        see the verifier's ``_conditional``), or, for a verifier without one, the 0/1 event of
        :meth:`simulate`. Both are unbiased; by the law of total variance the conditional value
        never has a larger variance than the indicator it averages.

        Parameters
        ----------
        p, q : array_like
            As in :meth:`acceptance`.
        n : int, default 2
        trials : int, default 100_000
            The number of trials; with ``target_se`` the most the final sample may use.
        seed : int, SeedSequence or Generator, default 0
        target_se : float, optional
            Choose the number of trials for this standard error (two-stage, Stein): a pilot
            estimates the per-trial standard deviation ``s``, and the estimate is the mean of
            a *fresh* sample of ``m = clip(⌈1.25 s² / target_se²⌉, m_0, trials)`` trials, so
            that ``m`` does not depend on the values averaged and the mean stays unbiased
            (``m_0`` = :data:`MIN_RB_TRIALS` for a Rao-Blackwellised estimate,
            :data:`MIN_TRIALS` for 0/1 events). A Rao-Blackwellised pilot has
            :data:`RB_PILOT` trials; where it does not show the row clearly narrow (``m_0``
            trials would give more than half ``target_se``) a second pilot of
            ``WIDE_PILOT · RB_PILOT`` trials sizes the sample instead. A 0/1 pilot has
            ``m_0`` trials. Pilots never exceed ``trials``. The reported standard error is the
            final sample's own. It is aimed below ``target_se`` (the factor 1.25 covers the
            usual error of the pilot's ``s``), not guaranteed: a pilot that misses a rare
            large value sizes the sample short, and the cap ``trials`` can bind. On
            ``data/sample`` (``compute_bounds --out DIR``: ``steps.parquet``, rows with
            ``exact`` false) the largest standard error of the 3,456 Rao-Blackwellised rows
            is 0.0045, for a target of 0.005.

        Returns
        -------
        Estimate
            With the final sample's values (Rao-Blackwellised), whose interval
            :meth:`Estimate.ci` covers the rate with at least the probability it says at any
            sample size: the interval does not depend on the pilot, since the final sample
            is fresh and its size is fixed before it is drawn.
        """
        step, n = self._clean(p, q, n)
        return self.estimate_step(step, n, trials, seed, target_se=target_se)

    def estimate_step(
        self,
        step: Step,
        n: int,
        trials: int = 100_000,
        seed: object = 0,
        *,
        target_se: float | None = None,
    ) -> Estimate:
        """:meth:`estimate` on a validated one-step :class:`Step` and ``n`` (as
        :meth:`applies_to`)."""
        value = self.acceptance_of(step, n)
        if value is not None:
            return Estimate(acceptance=value, stderr=0.0, trials=0, method="exact")
        trials = as_trials(trials)
        if target_se is not None and not (isinstance(target_se, float | int) and target_se > 0):
            raise ValueError(f"target_se must be a number > 0, got {target_se!r}")
        return self._sampled_estimate(step, n, trials, as_seed_rng(seed), target_se)

    def _sampled_estimate(
        self, step: Step, n: int, trials: int, rng: np.random.Generator, target_se: float | None
    ) -> Estimate:
        """:meth:`estimate_step` by sampling, whether or not an exact value exists (validated
        arguments): ``trials`` trials, or with ``target_se`` the pilots and the final sample."""
        if target_se is None:
            return self._estimate_sample(step, n, trials, rng)
        first = RB_PILOT if self._rao_blackwellised() else MIN_TRIALS
        pilot = self._estimate_sample(step, n, min(trials, first), rng, final=False)
        least = MIN_RB_TRIALS if pilot.method == "rao_blackwell" else MIN_TRIALS
        spread = pilot.stderr * math.sqrt(pilot.trials)
        if pilot.trials < trials and (
            pilot.method != "rao_blackwell" or _wide(spread, least, target_se)
        ):
            # not clearly narrow, or 0/1 events from a verifier that had none of its values
            # (its pilot was a Rao-Blackwellised one's): a pilot too small to size on
            bigger = WIDE_PILOT * RB_PILOT if pilot.method == "rao_blackwell" else MIN_TRIALS
            if bigger > pilot.trials:
                pilot = self._estimate_sample(step, n, min(trials, bigger), rng, final=False)
                spread = pilot.stderr * math.sqrt(pilot.trials)
        want = trials
        if math.isfinite(spread):
            want = math.ceil(1.25 * spread**2 / float(target_se) ** 2)
        size = min(trials, max(least, want))
        return self._estimate_sample(step, n, size, rng)

    def _checked_values(self, n: int, values: np.ndarray, span: tuple[float, float]) -> np.ndarray:
        """``values`` in ``span``, the verifier's :meth:`_conditional_range` (clipped where
        out by rounding only; beyond, the interval would rest on a false range:
        ``ValueError``), read-only."""
        low, high = span
        what = (
            f"Rao-Blackwellised value of verifier {self.name!r} (n={n}), which its "
            f"_conditional_range puts in [{low!r}, {high!r}]"
        )
        checked = clip_rounding(values, low, high, what)
        checked.flags.writeable = False
        return checked

    def _rao_blackwellised(self) -> bool:
        """Whether this verifier's class has Rao-Blackwellised values (``_conditional``)."""
        return type(self)._conditional is not BaseVerifier._conditional

    def _estimate_sample(
        self, step: Step, n: int, trials: int, rng: np.random.Generator, *, final: bool = True
    ) -> Estimate:
        """Mean and standard error of ``trials`` Rao-Blackwellised values, or 0/1 events.

        The mean and the standard error ``s / √m`` (``ddof = 1``) are numpy's ``np.mean`` and
        ``np.std(values, ddof=1) / √m``, bit for bit, from one compiled pass that also checks
        the values are finite (:func:`~otbound.verifiers._estimate_kernels.finite_mean_stderr`).
        A ``final`` sample keeps its values, checked in :meth:`_conditional_range`, for its
        interval (a pilot, which only sizes the final sample, keeps none).
        """
        values = self._conditional(step.p, step.q, n, trials, rng)
        if values is not None:
            from otbound.verifiers._estimate_kernels import finite_mean_stderr  # numba

            values = np.ascontiguousarray(values, dtype=np.float64)
            finite = values.shape == (trials,)
            if finite:
                finite, mean, se = finite_mean_stderr(values)
            if not finite:
                raise ValueError(
                    f"verifier {self.name!r}: its Rao-Blackwellised values must be {trials} "
                    f"finite numbers (a bug in _conditional)"
                )
            what = f"Rao-Blackwellised acceptance of verifier {self.name!r} (n={n})"
            mean = float(clip_rounding(mean, 0.0, 1.0, what))
            if not final:
                return Estimate(acceptance=mean, stderr=se, trials=trials, method="rao_blackwell")
            span = self._conditional_range(step.p, step.q, n)
            return Estimate(
                acceptance=mean,
                stderr=se,
                trials=trials,
                method="rao_blackwell",
                values=self._checked_values(n, values, span),
                value_range=span,
            )
        sim = self.simulate_step(step, n, trials, rng)
        hits = int(np.count_nonzero(sim.accepted))
        return Estimate(
            acceptance=hits / trials,
            stderr=sim.stderr,
            trials=trials,
            method="monte_carlo",
            successes=hits,
        )

    def verify(self, drafts: object, p: object, q: object, rng: object = None) -> tuple[int, bool]:
        """One trial: the output token for these drafts, and whether it is one of them.

        Parameters
        ----------
        drafts : sequence of int, length n
            Draft tokens, drawn from the verifier's design.
        p, q : array_like
            As in :meth:`acceptance`.
        rng : numpy.random.Generator or seed, optional

        Returns
        -------
        (int, bool)
            ``Y`` and ``Y ∈ drafts``.
        """
        arr = self._check_drafts(drafts)
        p_arr, q_arr, n = self._validate(p, q, arr.size)
        vocab = p_arr.shape[-1]
        if np.any((arr < 0) | (arr >= vocab)):
            raise ValueError(f"drafts must be token ids in [0, {vocab}), got {arr.tolist()}")
        if not self._applies(p_arr, q_arr, n):
            raise ValueError(self._not_applicable_message(p_arr, q_arr, n))
        token = int(self._verify_one(arr, p_arr, q_arr, as_seed_rng(rng)))
        return token, bool(token in arr)

    def _not_applicable_message(self, p: np.ndarray, q: np.ndarray, n: int) -> str:
        return f"verifier {self.name!r} does not apply to these inputs (n={n}, V={p.shape[-1]})"

    # -- to implement ---------------------------------------------------------------------------
    def _conditional(
        self, p: np.ndarray, q: np.ndarray, n: int, trials: int, rng: np.random.Generator
    ) -> np.ndarray | None:
        """``trials`` i.i.d. unbiased values of the acceptance rate, each an exact conditional
        expectation given part of one trial's randomness (Rao-Blackwellised; possibly plus an
        exact control variate, so a value may leave ``[0, 1]``: :meth:`_conditional_range`
        says where they lie), or ``None`` (the default): :meth:`estimate` then averages the
        0/1 events of :meth:`simulate`."""
        return None

    def _conditional_range(self, p: np.ndarray, q: np.ndarray, n: int) -> tuple[float, float]:
        """``(low, high)``, ``low ≤ high``: a range every value of :meth:`_conditional` on
        these inputs lies in, proved, not observed (the interval of :meth:`Estimate.ci` is
        valid because of it, and :meth:`estimate` refuses a value outside it). The default
        ``(0, 1)`` holds for conditional probabilities; a verifier with a control variate, or
        a tighter proved range (a narrower interval), overrides it."""
        return 0.0, 1.0

    @abstractmethod
    def _acceptance(self, p: np.ndarray, q: np.ndarray, n: int) -> float | None:
        """Exact ``P(Y ∈ x̄)`` on validated inputs, or ``None``."""

    def _acceptances(self, step: Step, ns: Sequence[int]) -> dict[int, float | None]:
        """:meth:`_acceptance` for each of the distinct ``ns`` (all applying) of one validated
        step: override to share the work of a step's ``n`` (and what the ``Step`` keeps, such
        as :attr:`Step.ratio_order`), giving each ``n`` the value :meth:`_acceptance` gives."""
        return {n: self._acceptance(step.p, step.q, n) for n in ns}

    @abstractmethod
    def _verify_one(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> int:
        """The output token of one trial."""

    @abstractmethod
    def _verify_batch(
        self, drafts: np.ndarray, p: np.ndarray, q: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """Output tokens (trials,) for draft tuples (trials, n)."""
