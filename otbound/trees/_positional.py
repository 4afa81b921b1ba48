"""Positional acceptance vectors of verifiers on given distributions (exact or Monte Carlo)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import DTypeLike

from otbound._checks import as_distribution_pair, broadcast_batch, clip_rounding
from otbound.drafts import get_design
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

    Passes to :func:`block_efficiency` and :func:`best_tree` as its :attr:`values`.

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


def positional_acceptance(
    verifier: object,
    p: object,
    q: object,
    width: int | Sequence[int],
    trials: int = 100_000,
    seed: int = 0,
    *,
    method: str = "auto",
) -> PositionalAcceptance:
    r"""Positional acceptance vector of a verifier: ``P(the accepted token is draft k)``.

    For one step, or the mean over a batch of steps. Draft ``k`` is the ``k``-th draft of the
    verifier's design (0-based); the accepted token is attributed to the **first** draft equal
    to it (duplicates of an i.i.d. design count once), so ``Σ_k a_k`` is the acceptance rate
    ``α(width)``.

    How each verifier is computed (``method="auto"``):

    * ``single``, ``rrs``, ``rrs_without_replacement``, ``topk`` (:data:`EXACT_POSITIONAL`):
      exact differences ``a_{k−1} = α(k) − α(k−1)`` of the verifier's exact ``acceptance``.
      Valid because the ``n``-draft procedure restricted to its first ``k`` drafts is the
      ``k``-draft procedure (the first ``k`` of ``n`` i.i.d. or sequential drafts are the
      ``k``-draft design; drafts are tried in order; ``single`` looks at the first draft only),
      so ``α(k) − α(k−1) = P(Y = x_k, Y ∉ x_{<k})``; the vector does not depend on ``width``.
      Where the exact acceptance is unavailable (``rrs_without_replacement`` with
      ``V^k > 200,000`` at ``k ≥ 3``) that step falls back to Monte Carlo.
    * Verifiers on the ``greedy`` design (``greedy``, ``optimal(design="greedy")``) and the
      ``topk`` design: the first slots hold fixed tokens ``T_i`` (the most likely under ``q``),
      and a lossless verifier outputs ``Y ~ p``, so ``a_i = p(T_i)`` for those slots and the
      sampled last slot of ``greedy`` gets ``α(width) − p(T)``. Exact, but width-dependent.
    * ``kseq`` and ``spechub``: the verifier's own closed form, ``positional(p, q, width)``,
      ``O(width · V)``. ``kseq``'s slack ``ρ*`` depends on ``n = width``, so differences of
      ``α`` do not apply; summing over the token ``y`` of the first match at draft ``k + 1``
      (the first ``k`` drafts rejected and ``≠ y``, then ``y`` accepted there or later),
      ``a_k = Σ_y s_y^k t_y (1 + d_y Σ_{i=0}^{n−k−2} m^i)`` with ``t_y = min(q_y, p_y/ρ*)``,
      ``d_y = q_y − t_y``, ``m = Σ d = 1 − β(ρ*)``, ``s_y = m − d_y``. ``spechub``
      (``width = 2``): ``a_0 = q_a p_a + (1 − q_a) M``, ``a_1 = q_a M + (1 − q_a) p_a`` with
      the hub ``a`` and ``α* = p_a + M``. Exact and width-dependent.
    * All others (``importance``, ``gls``, ``optimal``; any verifier object): Monte Carlo with
      ``width`` drafts, ``trials`` trials per step, from ``verifier.simulate`` (its
      :class:`~otbound.SimulationResult` carries the drafts), or from ``verify`` on drafts drawn
      by the design. Width-dependent: the vector describes nodes with ``width`` children.
      At ``width = 1`` every verifier with an exact ``acceptance`` is exact: ``a_0 = α(1)``.

    Parameters
    ----------
    verifier : str or verifier object
        A name in :data:`otbound.VERIFIERS` or an object with the verifier protocol.
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
    >>> pa = positional_acceptance("rrs", [0.3, 0.4, 0.3], [0.6, 0.3, 0.1], width=2)
    >>> pa.method, [round(float(x), 4) for x in pa.values]  # α(1) = .7, α(2) = .82
    ('exact', [0.7, 0.12])
    """
    if method not in ("auto", "exact", "monte_carlo"):
        raise ValueError(f"method must be 'auto', 'exact' or 'monte_carlo', got {method!r}")
    trials = as_trials(trials)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    widths, per_depth = _as_widths(width)
    v = get_verifier(verifier)
    if not hasattr(v, "design"):
        raise TypeError(
            f"positional_acceptance needs a verifier with a 'design'; got {type(v).__name__}"
        )
    spec = get_design(v.design)
    p_arr, q_arr = as_distribution_pair(p, q, q_min_ndim=2 if spec.slot_axis else 1)
    p2, q2, _ = broadcast_batch(p_arr, q_arr, 1 if spec.slot_axis else 0)
    steps = p2.shape[0]
    top = max(widths)
    values: dict[int, np.ndarray] = {}
    variances: dict[int, np.ndarray] = {}
    used = {"exact": 0, "monte_carlo": 0}
    for w in dict.fromkeys(widths):
        fixed_n = getattr(v, "fixed_n", None)
        if fixed_n is not None and w != fixed_n:
            raise ValueError(
                f"verifier {getattr(v, 'name', type(v).__name__)!r} is defined for n={fixed_n} "
                f"only, got width {w}"
            )
        spec.check(q2, w)
        path = None if method == "monte_carlo" else _exact_path(v, w)
        if method == "exact" and path is None:
            raise ValueError(
                f"verifier {getattr(v, 'name', type(v).__name__)!r} (design {spec.name!r}) has "
                f"no exact positional vector at width {w}; use method='auto' or 'monte_carlo'"
            )
        total = np.zeros(w)
        var = np.zeros(w)
        for s in range(steps):
            vec = _exact_step(v, path, p2[s], q2[s], w) if path else None
            if vec is None:
                if method == "exact":
                    raise ValueError(
                        f"the exact acceptance of {v.name!r} is unavailable at step {s} "
                        f"(width {w}); use method='auto'"
                    )
                step_seed = np.random.SeedSequence(seed, spawn_key=(s, w))
                vec = _monte_carlo_step(v, p2[s], q2[s], w, trials, step_seed)
                var += vec * (1.0 - vec) / trials
                used["monte_carlo"] += 1
            else:
                used["exact"] += 1
            total += vec
        values[w] = total / steps
        variances[w] = var / steps**2
    if per_depth:
        out = np.zeros((len(widths), top))
        err = np.zeros((len(widths), top))
        for d, w in enumerate(widths):
            out[d, :w] = values[w]
            err[d, :w] = np.sqrt(variances[w])
    else:
        out, err = values[widths[0]], np.sqrt(variances[widths[0]])
    kind = (
        "mixed"
        if used["exact"] and used["monte_carlo"]
        else ("monte_carlo" if used["monte_carlo"] else "exact")
    )
    return PositionalAcceptance(
        values=out,
        stderr=err,
        method=kind,
        verifier=str(getattr(v, "name", type(v).__name__)),
        design=spec.name,
        width=tuple(widths) if per_depth else widths[0],
        steps=steps,
        trials=trials if used["monte_carlo"] else 0,
    )
