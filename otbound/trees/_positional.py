"""Positional acceptance vectors of verifiers on given distributions (exact or Monte Carlo)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import DTypeLike

from otbound._checks import as_distribution_pair, broadcast_batch, clip_rounding
from otbound._spellings import method_keyword
from otbound.drafts import DraftDesign, get_design
from otbound.drafts import top_tokens as _top_tokens
from otbound.trees._shapes import as_count
from otbound.verifiers.base import BaseVerifier, as_trials, sample_drafts
from otbound.verifiers.registry import get_verifier

#: Verifiers whose ``n``-draft procedure, restricted to its first ``k`` drafts, is its ``k``-draft
#: procedure (the first ``k`` drafts of the design are the ``k``-draft design, and whether draft
#: ``j ≤ k`` is output does not depend on the later drafts). For them the positional vector is
#: exact and width-independent: ``a_{k−1} = α(k) − α(k − 1)``.
EXACT_POSITIONAL = ("single", "rrs", "rrs_without_replacement", "topk")


@dataclass(frozen=True)
class PositionalAcceptance:
    """A verifier's positional acceptance, averaged over steps (:func:`positional_acceptance`).

    Passes to :func:`block_efficiency` and :func:`best_tree` as its :attr:`values`; its
    :attr:`acceptance` is their sum, the acceptance rate.

    Attributes
    ----------
    values : numpy.ndarray, shape (width,) or (depth, max width)
        ``values[k]`` = mean over steps of ``P(the accepted token is draft k)`` (0-based); per
        depth (``width`` given per depth) row ``d`` is the vector at ``width[d]`` drafts, padded
        with zeros.
    stderr : numpy.ndarray
        Standard errors of ``values`` from the Monte Carlo steps (0 where exact):
        ``sqrt(Σ_s a_s (1 − a_s) / trials) / steps``.
    method : {"exact", "monte_carlo", "mixed"}
        How the steps were computed (``"mixed"``: some exact, some by Monte Carlo).
    verifier : str
    design : str
    width : int or tuple of int
    steps : int
    trials : int
        Monte Carlo trials per step and width (0 when every step was exact).
    """

    values: np.ndarray
    stderr: np.ndarray = field(repr=False)
    method: str
    verifier: str
    design: str
    width: int | tuple[int, ...]
    steps: int
    trials: int

    @property
    def acceptance(self) -> float | np.ndarray:
        """The acceptance rate ``α(width) = Σ_k a_k`` (per depth, an array, for per-depth
        widths)."""
        total = self.values.sum(axis=-1)
        return float(total) if total.ndim == 0 else total

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.values, dtype=dtype)


def _exact_path(verifier: object, width: int) -> str | None:
    """``"nested"``, ``"deterministic"``, ``"own"``, ``"one"`` or None (Monte Carlo).

    ``"own"``: a verifier with its own exact ``positional(p, q, n)`` (``kseq``, ``spechub``).
    """
    if not isinstance(verifier, BaseVerifier):
        return None
    default = verifier.design == verifier.default_design
    if verifier.name in EXACT_POSITIONAL and default:
        return "nested"
    if verifier.design in ("topk", "greedy"):
        return "deterministic"
    if default and callable(getattr(verifier, "positional", None)):
        return "own"
    if width == 1:
        return "one"
    return None


def _exact_step(
    verifier: BaseVerifier, path: str, p: np.ndarray, q: np.ndarray, width: int
) -> np.ndarray | None:
    """The exact positional vector of one step, or None when an acceptance is unavailable."""
    if path == "own":
        return np.asarray(verifier.positional(p, q, width), dtype=float)  # type: ignore[attr-defined]
    if path == "one":  # one draft: it is the accepted token whenever one is accepted
        value = verifier.acceptance(p, q, 1)
        return None if value is None else np.array([float(value)])
    if path == "nested":
        alphas = [0.0]
        for k in range(1, width + 1):
            value = verifier.acceptance(p, q, k)
            if value is None:
                return None
            alphas.append(float(value))
        what = f"{verifier.name}: P(slot k accepted) = α(k) − α(k − 1)"
        return clip_rounding(np.diff(alphas), 0.0, 1.0, what)
    # Deterministic draft slots: a lossless verifier outputs Y ~ p, so the slot holding the
    # fixed token t is the accepted one with probability p(t) (the drafts are distinct).
    fixed = width if verifier.design == "topk" else width - 1
    top = _top_tokens(q, fixed)
    out = np.empty(width)
    out[:fixed] = p[top]
    if fixed < width:
        value = verifier.acceptance(p, q, width)
        if value is None:
            return None
        out[fixed] = max(float(value) - float(p[top].sum()), 0.0)
    return out


def _monte_carlo_step(
    verifier: object, p: np.ndarray, q: np.ndarray, width: int, trials: int, seed: object
) -> np.ndarray:
    """``P(first draft position equal to the output = k)`` from ``trials`` seeded trials."""
    drafts = tokens = None
    simulate = getattr(verifier, "simulate", None)
    if callable(simulate):
        out = simulate(p, q, n=width, trials=trials, seed=seed)
        drafts = getattr(out, "drafts", None)
        tokens = getattr(out, "tokens", None)
    if drafts is None or tokens is None:
        verify = getattr(verifier, "verify", None)
        if not callable(verify):
            raise TypeError(
                "positional_acceptance needs the drafts of each trial: a verifier whose simulate "
                "returns .drafts and .tokens (a SimulationResult), or one with "
                "verify(drafts, p, q, rng)"
            )
        rng = np.random.default_rng(seed)  # type: ignore[arg-type]
        drafts = sample_drafts(get_design(verifier.design), q, width, trials, rng)  # type: ignore[attr-defined]
        tokens = np.array([verify(drafts[t], p, q, rng)[0] for t in range(trials)])
    drafts = np.asarray(drafts)
    tokens = np.asarray(tokens)
    if drafts.shape != (trials, width) or tokens.shape != (trials,):
        raise ValueError(
            f"the verifier returned drafts of shape {drafts.shape} and tokens of shape "
            f"{tokens.shape}, expected ({trials}, {width}) and ({trials},)"
        )
    hit = drafts == tokens[:, None]
    accepted = hit.any(axis=1)
    first = np.argmax(hit, axis=1)[accepted]
    return np.bincount(first, minlength=width)[:width] / trials


def _as_widths(width: object) -> tuple[list[int], bool]:
    if isinstance(width, numbers.Integral) and not isinstance(width, bool):
        return [as_count(width, "width", 1)], False
    if isinstance(width, str | bytes) or not isinstance(width, Iterable):
        raise ValueError(f"width must be an integer >= 1 or a list of them, got {width!r}")
    widths = [as_count(w, "each width", 1) for w in width]
    if not widths:
        raise ValueError("width must be an integer >= 1 or a non-empty list of them, got []")
    return widths, True


@method_keyword("verifier")
def positional_acceptance(
    p: object,
    q: object,
    width: int | Sequence[int],
    trials: int = 100_000,
    seed: int = 0,
    *,
    verifier: object,
    method: str = "auto",
) -> PositionalAcceptance:
    r"""Positional acceptance vector of a verifier: ``P(the accepted token is draft k)``.

    For one step, or the mean over a batch of steps. Draft ``k`` is the ``k``-th draft of the
    verifier's design (0-based); the accepted token is attributed to the **first** draft equal
    to it (duplicates of an i.i.d. design count once), so ``Σ_k a_k`` is the acceptance rate
    ``α(width)``.

    How each verifier is computed (``method="auto"``):

    * :data:`EXACT_POSITIONAL` (``single``, ``rrs``, ``rrs_without_replacement``, ``topk``):
      exact differences ``a_{k−1} = α(k) − α(k−1)`` of the exact ``acceptance``, valid because
      the ``n``-draft procedure restricted to its first ``k`` drafts is the ``k``-draft one
      (so ``α(k) − α(k−1) = P(Y = x_k, Y ∉ x_{<k})``, whatever ``width``); a step whose exact
      acceptance is unavailable (``rrs_without_replacement``, ``V^k > 200,000``) falls back to
      Monte Carlo.
    * The ``greedy`` and ``topk`` designs: slot ``i`` holds a fixed token ``T_i`` (the most
      likely under ``q``) and a lossless verifier outputs ``Y ~ p``, so ``a_i = p(T_i)``;
      ``greedy``'s sampled last slot gets ``α(width) − p(T)``. Exact, width-dependent.
    * ``kseq`` and ``spechub``: their own closed forms, ``O(width · V)``
      (:meth:`~otbound.verifiers.kseq.KSequential.positional`,
      :meth:`~otbound.verifiers.spechub.SpecHub.positional`). Exact, width-dependent.
    * All others (``importance``, ``gls``, ``optimal``; any verifier object): Monte Carlo with
      ``width`` drafts, ``trials`` trials per step, from ``simulate``'s drafts (a
      :class:`~otbound.SimulationResult`) or ``verify`` on drafts drawn by the design.
      At ``width = 1`` every verifier with an exact ``acceptance`` is exact: ``a_0 = α(1)``.

    Parameters
    ----------
    p, q : array_like, shape (V,) or (steps, V)
        Target and draft distributions (``q`` of shape ``(…, width, V)`` for ``per_slot``).
    width : int or sequence of int
        Number of drafts. A sequence of per-depth widths (k-ary branching factors) returns a
        per-depth matrix whose row ``d`` is the vector at ``width[d]`` drafts (zero-padded):
        with :func:`kary_tree` of the same factors, :func:`block_efficiency` is then exact in
        the model for every verifier, including the width-dependent ones.
    trials : int, default 100_000
        Monte Carlo trials per step and width.
    seed : int, default 0
        Step ``s`` at width ``w`` uses ``SeedSequence(seed, spawn_key=(s, w))``.
    verifier : str or verifier object
        A name in :data:`otbound.VERIFIERS` or an object with the verifier protocol. (The
        old order, ``positional_acceptance(verifier, p, q, width)``, warns and still works.)
    method : {"auto", "exact", "monte_carlo"}, default "auto"
        ``"exact"`` raises where no exact path exists; ``"monte_carlo"`` simulates every verifier.

    Returns
    -------
    PositionalAcceptance

    Raises
    ------
    ValueError
        Invalid distributions, widths, trials or method; a width the verifier or design is not
        defined for (``spechub`` at ``width ≠ 2``, more distinct drafts than the support of
        ``q``); ``method="exact"`` for a verifier without an exact path.

    Examples
    --------
    >>> pa = positional_acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], width=2, verifier="rrs")
    >>> pa.method, [round(float(x), 4) for x in pa.values]  # α(1) = .7, α(2) = .82
    ('exact', [0.7, 0.12])
    """
    if method not in ("auto", "exact", "monte_carlo"):
        raise ValueError(f"method must be 'auto', 'exact' or 'monte_carlo', got {method!r}")
    trials = as_trials(trials)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    widths, per_depth = _as_widths(width)
    run = _PositionalRun.of(verifier, method, trials, int(seed))
    slot_axis = run.design.slot_axis
    p_arr, q_arr = as_distribution_pair(p, q, q_min_ndim=2 if slot_axis else 1)
    p2, q2, _ = broadcast_batch(p_arr, q_arr, 1 if slot_axis else 0)
    by_width = {w: run.over_steps(p2, q2, w) for w in dict.fromkeys(widths)}
    return run.result(by_width, widths, per_depth, p2.shape[0])


@dataclass(frozen=True)
class _WidthMeans:
    """The positional vector at one width, averaged over the steps: its variance (Monte Carlo
    steps only) and how many steps were exact and simulated."""

    mean: np.ndarray
    variance: np.ndarray
    exact: int
    simulated: int


@dataclass(frozen=True)
class _PositionalRun:
    """How :func:`positional_acceptance` computes: the verifier and its design, the method,
    the Monte Carlo trials per step and width, the base seed."""

    verifier: object
    design: DraftDesign
    method: str
    trials: int
    seed: int

    @classmethod
    def of(cls, verifier: object, method: str, trials: int, seed: int) -> _PositionalRun:
        v = get_verifier(verifier)
        if not hasattr(v, "design"):
            raise TypeError(
                f"positional_acceptance needs a verifier with a 'design'; got {type(v).__name__}"
            )
        return cls(v, get_design(v.design), method, trials, seed)

    @property
    def name(self) -> str:
        return str(getattr(self.verifier, "name", type(self.verifier).__name__))

    def exact_path(self, q2: np.ndarray, width: int) -> str | None:
        """The exact path at ``width`` (None: Monte Carlo), the width checked first."""
        fixed_n = getattr(self.verifier, "fixed_n", None)
        if fixed_n is not None and width != fixed_n:
            raise ValueError(
                f"verifier {self.name!r} is defined for n={fixed_n} only, got width {width}"
            )
        self.design.check(q2, width)
        path = None if self.method == "monte_carlo" else _exact_path(self.verifier, width)
        if self.method == "exact" and path is None:
            raise ValueError(
                f"verifier {self.name!r} (design {self.design.name!r}) has no exact positional "
                f"vector at width {width}; use method='auto' or 'monte_carlo'"
            )
        return path

    def over_steps(self, p2: np.ndarray, q2: np.ndarray, width: int) -> _WidthMeans:
        """The vector at ``width``, each step exact where it can be, else simulated with the
        seed ``SeedSequence(seed, spawn_key=(step, width))``."""
        path = self.exact_path(q2, width)
        steps = p2.shape[0]
        total, var = np.zeros(width), np.zeros(width)
        simulated = 0
        for s in range(steps):
            vec = _exact_step(self.verifier, path, p2[s], q2[s], width) if path else None  # type: ignore[arg-type]
            if vec is None:
                if self.method == "exact":
                    raise ValueError(
                        f"the exact acceptance of {self.name!r} is unavailable at step {s} "
                        f"(width {width}); use method='auto'"
                    )
                step_seed = np.random.SeedSequence(self.seed, spawn_key=(s, width))
                vec = _monte_carlo_step(self.verifier, p2[s], q2[s], width, self.trials, step_seed)
                var += vec * (1.0 - vec) / self.trials
                simulated += 1
            total += vec
        return _WidthMeans(total / steps, var / steps**2, steps - simulated, simulated)

    def result(
        self, by_width: dict[int, _WidthMeans], widths: list[int], per_depth: bool, steps: int
    ) -> PositionalAcceptance:
        """The vectors of every width, a row per depth when ``per_depth`` (zero-padded)."""
        if per_depth:
            out = np.zeros((len(widths), max(widths)))
            err = np.zeros((len(widths), max(widths)))
            for d, w in enumerate(widths):
                out[d, :w] = by_width[w].mean
                err[d, :w] = np.sqrt(by_width[w].variance)
        else:
            out, err = by_width[widths[0]].mean, np.sqrt(by_width[widths[0]].variance)
        exact = sum(m.exact for m in by_width.values())
        simulated = sum(m.simulated for m in by_width.values())
        kind = "mixed" if exact and simulated else ("monte_carlo" if simulated else "exact")
        return PositionalAcceptance(
            values=out,
            stderr=err,
            method=kind,
            verifier=self.name,
            design=self.design.name,
            width=tuple(widths) if per_depth else widths[0],
            steps=steps,
            trials=self.trials if simulated else 0,
        )
