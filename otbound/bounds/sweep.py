r"""The exact optimal acceptance rate by one sorted sweep.

By max-flow/min-cut (the dual of the membership-cost transport LP is totally unimodular),

.. math::

    α^* = 1 + \min_{H ⊆ V} \bigl[p(H) − Q(H)\bigr],\qquad Q(H) = P(\text{all drafts lie in } H).

For the ``iid``, ``without_replacement`` and ``conditional_poisson`` designs the minimum is
attained on a prefix of the tokens sorted by ``p/q`` ascending (q-convexity, Hu et al. §4;
tokens with ``q = 0`` last), so ``α* = 1 + min(0, min_i [p(H_i) − Q(H_i)])`` costs one sort
and one pass. For ``greedy``, ``topk`` and ``hub`` the deterministic tokens go first and the
same formula gives their closed forms. For ``per_slot`` no single order is known to be exact:
several orders are tried and the best ``H`` is a certified upper bound (``exact=False``).

Any ``H`` certifies the upper bound ``1 + p(H) − Q(H)``; the one found is returned with
``certificate=True``.

A NaN in any ``p(H) − Q(H)`` raises ``ValueError`` (design, ``n``, row, prefix): compared
with ``<`` or ``np.minimum`` it would vanish and read as ``α* = 1``. ``α*`` is clipped into
``[0, 1]`` only where it is out by rounding (:func:`otbound._checks.clip_rounding`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from otbound._checks import as_num_drafts, clip_rounding
from otbound.drafts import DraftDesign, get_design, prefix_sums
from otbound.problem import Step


@dataclass(frozen=True)
class SweepResult:
    """The optimal acceptance rate with its certificate.

    Attributes
    ----------
    acceptance : float or numpy.ndarray
        ``α*``, shape of the batch (a float for one step).
    H : numpy.ndarray of bool, shape (..., V)
        A set attaining ``1 + p(H) − Q(H) = α*`` (empty when ``α* = 1``).
    exact : bool
        ``True`` when the sweep is exact for the design; ``False`` for an upper bound
        (``per_slot``).
    design : str
    n : int
    step : Step
        The validated inputs the rate was computed from.
    """

    acceptance: float | np.ndarray
    H: np.ndarray
    exact: bool
    design: str
    n: int
    step: Step | None = field(default=None, repr=False, compare=False)


#: Rows are swept in chunks of about this many entries, so that the temporaries stay small.
_CHUNK_ELEMENTS = 1 << 20


def _take_sorted(x: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Reorder the last axis of ``x`` (B, [k,] V) by ``order`` (B, V)."""
    index = order if x.ndim == 2 else order[:, None, :]
    return np.take_along_axis(x, index, axis=-1)


def refuse_nan(gap: np.ndarray, design: DraftDesign, n: int, step: str, first_row: int) -> None:
    """Raise ``ValueError`` if ``gap`` (B, ...) holds a NaN: compared with ``<`` or
    ``np.minimum``, a NaN would vanish and leave ``α* = 1``."""
    bad = np.isnan(gap)
    if np.any(bad):
        where = np.argwhere(bad)[0]
        prefix = f", prefix {int(where[1])}" if where.size > 1 else ""
        raise ValueError(
            f"NaN in the {step} of design {design.name!r}, n={n}, at row "
            f"{first_row + int(where[0])}{prefix}: p(H) − Q(H) must be a number"
        )


def _sweep(
    p: np.ndarray, q: np.ndarray, n: int, design: DraftDesign, first_row: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Minimum of ``p(H) − Q(H)`` over the design's prefixes, per row, and the arg-min set.

    ``first_row`` is the index of the first row in the caller's batch (for error messages).
    The design's own :meth:`~otbound.drafts.DraftDesign.direct_sweep` (a closed form, or
    ``iid``'s bucketed kernel) where it has one, else the generic sorted sweep.
    """
    direct = design.direct_sweep(p, q, n)
    if direct is not None:
        refuse_nan(direct[0], design, n, design.direct_sweep_name, first_row)
        return direct
    if _bucketed(design, p):
        gap, chosen = _bucketed_sweep(p, q, [n], design, first_row, certificate=True)
        return gap[0], chosen[0]
    return _sorted_sweep(p, q, n, design, first_row)


#: Rows of at least this many tokens take a design's ``bucketed_minimum`` (no full sort);
#: below, the vectorised sorted sweep costs less than one call per row.
BUCKETED_FROM = 256


def _bucketed(design: DraftDesign, p: np.ndarray) -> bool:
    """Whether the rows of ``p`` (B, V) take the design's ``bucketed_minimum``."""
    return getattr(design, "bucketed_minimum", None) is not None and p.shape[-1] >= BUCKETED_FROM


def _bucketed_sweep(
    p: np.ndarray,
    q: np.ndarray,
    counts: Sequence[int],
    design: DraftDesign,
    first_row: int = 0,
    certificate: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``min(0, min_i [p(H_i) − Q_n(H_i)])`` per ``n`` and row (len(counts), B) by the
    design's ``bucketed_minimum`` (ratio buckets, no full sort), and with ``certificate`` the
    arg-min sets (len(counts), B, V). Rows it declines (ratios outside the normal range,
    masses too small for its kernel) take the sorted sweep."""
    rows, vocab = p.shape
    gap = np.zeros((len(counts), rows))
    chosen = np.zeros((len(counts), rows, vocab) if certificate else (0, 0, 0), dtype=bool)
    declined = []
    batch = getattr(design, "bucketed_minima", None)
    if batch is not None:  # the rows together (on numba's threads)
        every = batch(p, q, counts, certificate)
    else:
        every = [design.bucketed_minimum(p[row], q[row], counts) for row in range(rows)]  # type: ignore[attr-defined]
    for row, found in enumerate(every):
        if found is None:
            declined.append(row)
            continue
        value, index, order = found
        gap[:, row] = value
        if certificate:
            for c, length in enumerate(index):
                chosen[c, row, order[: int(length)]] = True
    for c, n in enumerate(counts):
        refuse_nan(gap[c], design, n, "bucketed prefix sweep", first_row)
    if declined:
        rest = np.asarray(declined)
        if certificate:
            for c, n in enumerate(counts):
                gap[c, rest], chosen[c, rest] = _sorted_sweep(
                    p[rest], q[rest], n, design, first_row
                )
        else:
            gap[:, rest] = _shared_sorted_sweep(
                p[rest], q[rest], counts, design, first_row, bucketed=False
            )
    return gap, chosen


def _sorted_sweep(
    p: np.ndarray, q: np.ndarray, n: int, design: DraftDesign, first_row: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The generic sweep: sort by each of the design's orders, scan the prefixes."""
    rows, vocab = p.shape
    best = np.zeros(rows)  # H = ∅ gives 0
    best_set = np.zeros((rows, vocab), dtype=bool)
    for order in design.sweep_orders(p, q, n):
        values, wheres = _prefix_minimum(p, q, order, [n], design, first_row)
        value, where = values[0], wheres[0]
        better = value < best
        if np.any(better):
            best[better] = value[better]
            inside = np.arange(vocab)[None, :] < where[better, None]
            chosen = np.zeros((int(better.sum()), vocab), dtype=bool)
            np.put_along_axis(chosen, order[better], inside, axis=-1)
            best_set[better] = chosen
    return best, best_set


def optimal_acceptance(
    p: object | Step,
    q: object,
    n: int = 2,
    design: str | DraftDesign = "iid",
    *,
    certificate: bool = False,
    normalize: bool = False,
) -> float | np.ndarray | SweepResult:
    r"""Optimal acceptance rate ``α*`` of ``n``-draft speculative decoding, by the exact sweep.

    .. math::

        α^* = \max_{\text{lossless verifiers}} P(Y ∈ \bar x)
            = 1 + \min_{H} \bigl[p(H) − Q(H)\bigr]

    Parameters
    ----------
    p : array_like, shape (..., V), or Step
        Target distributions (rows sum to one), or a validated :class:`otbound.problem.Step`
        (then ``q`` is not read and nothing is validated again).
    q : array_like, shape (..., V), or (..., n, V) for ``design="per_slot"``
        Draft distributions; batch axes broadcast against ``p``'s.
    n : int, default 2
        Number of drafts.
    design : str or DraftDesign, default "iid"
        One of :data:`otbound.DESIGNS`. ``"without_replacement"`` is sequential sampling
        without replacement (what Gumbel-top-k and ``torch.multinomial(replacement=False)``
        draw), computed exactly by the exponential-clock integral (error below 1e-12); it is
        not ``"conditional_poisson"``, whose ``Q(H) = e_n(q_H)/e_n(q)`` is a different design
        (``p=(.3,.4,.3)``, ``q=(.6,.3,.1)``, ``n=2``: 0.99286 sequential, 1.0 conditional
        Poisson).
    certificate : bool, default False
        Return a :class:`SweepResult` with the set ``H`` attaining the minimum.
    normalize : bool, default False
        Rescale rows that do not sum to one instead of raising.

    Returns
    -------
    float, numpy.ndarray or SweepResult
        ``α*``: a float for one step (1-D inputs), an array with the batch shape for a batch,
        and with ``certificate=True`` a :class:`SweepResult` holding either as ``.acceptance``.

    Raises
    ------
    ValueError
        Invalid probabilities, mismatched vocabularies, ``n < 1``, ``n`` larger than the
        support for designs with distinct drafts, or an unknown design; a NaN in some
        ``p(H) − Q(H)`` or an ``α*`` outside ``[0, 1]`` by more than rounding (a bug, named
        with the design, ``n`` and the row).

    Notes
    -----
    Cost: one sort per step, then ``O(V)`` (``iid``, ``greedy``, ``topk``, ``hub``),
    ``O(nV)`` (``conditional_poisson``) or ``O(nV · nodes)`` (``without_replacement``).
    For ``without_replacement`` the prefix sweep is checked, not proved, to be exact
    (thousands of brute-force cases); :func:`otbound.solve_primal` is the exact LP for small V.

    Examples
    --------
    >>> import otbound as ob
    >>> round(ob.optimal_acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=1), 6)
    0.7
    >>> round(ob.optimal_acceptance([0.3, 0.4, 0.3], [0.6, 0.3, 0.1], n=2,
    ...                              design="without_replacement"), 5)
    0.99286
    """
    spec = get_design(design)
    n = as_num_drafts(n)
    step = Step.validate(p, q, normalize=normalize, slot_axis=spec.slot_axis)
    return _solve(step, n, spec, certificate)


def _solve(
    step: Step, n: int, spec: DraftDesign, certificate: bool
) -> float | np.ndarray | SweepResult:
    """:func:`optimal_acceptance` on a validated step (checked for the design here)."""
    spec.check_rows(step.q.shape, n, lambda: step.support)
    p2, q2, batch = step.flat
    gap = np.empty(p2.shape[0])
    chosen = np.empty(p2.shape, dtype=bool)
    step = max(1, _CHUNK_ELEMENTS // p2.shape[-1])
    for start in range(0, p2.shape[0], step):
        rows = slice(start, start + step)
        gap[rows], chosen[rows] = _sweep(
            np.ascontiguousarray(p2[rows]), np.ascontiguousarray(q2[rows]), n, spec, start
        )
    alpha = _alpha_from_gap(gap, spec, [n]).reshape(batch)
    value: float | np.ndarray = float(alpha) if alpha.ndim == 0 else alpha
    if not certificate:
        return value
    return SweepResult(
        acceptance=value,
        H=chosen.reshape(*batch, p2.shape[-1]),
        exact=spec.exact_sweep,
        design=spec.name,
        n=n,
        step=step,
    )


def prefix_mass_what(design: str, counts: Sequence[int], first_row: int | None = None) -> str:
    """What a design's prefix masses ``Q(H_i)`` are called when :func:`otbound._checks.
    clip_rounding` refuses one (the numpy sweep's words, and the torch sweep's); ``first_row``
    the caller's first row, where it knows it."""
    names = ", ".join(str(n) for n in counts)
    rows = "" if first_row is None else f"; rows from {first_row}"
    return f"prefix mass Q(H) of design {design!r} (n={names}{rows})"


def alpha_what(design: str, counts: Sequence[int]) -> str:
    """What ``α* = 1 + gap`` is called when :func:`otbound._checks.clip_rounding` refuses one
    (the numpy sweep's words, and the torch sweep's)."""
    names = ", ".join(str(n) for n in counts)
    return f"α* of design {design!r} (n={names})"


def _checked_mass(
    mass: np.ndarray, design: DraftDesign, counts: Sequence[int], first_row: int
) -> np.ndarray:
    """A design's prefix masses ``Q(H_i)``, refused outside ``[0, 1]`` beyond rounding (a
    design that returns ``1 + 1e-9`` has a bug that clipping ``α*`` would hide)."""
    return clip_rounding(mass, 0.0, 1.0, prefix_mass_what(design.name, counts, first_row))


def _alpha_from_gap(gap: np.ndarray, design: DraftDesign, counts: Sequence[int]) -> np.ndarray:
    """``α* = 1 + gap`` (..., B), clipped into ``[0, 1]`` where it is out by rounding only.

    ``gap = min(0, min_H [p(H) − Q(H)]) ≥ −1`` since ``p(H) ≥ 0`` and ``Q(H) ≤ 1``.
    """
    return clip_rounding(1.0 + gap, 0.0, 1.0, alpha_what(design.name, counts))


def _prefix_minimum(
    p: np.ndarray,
    q: np.ndarray,
    order: np.ndarray,
    counts: Sequence[int],
    design: DraftDesign,
    first_row: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The minimum of ``p(H_i) − Q_n(H_i)`` over the prefixes of ``order`` and its prefix
    length, per ``n`` and row (len(counts), B): the design's own
    :meth:`~otbound.drafts.DraftDesign.prefix_minimum` where it has one, else the minimum of
    its checked :meth:`~otbound.drafts.DraftDesign.prefix_masses`."""
    p_sorted, q_sorted = _take_sorted(p, order), _take_sorted(q, order)
    found = design.prefix_minimum(p_sorted, q_sorted, counts)
    if found is not None:
        return found
    cum_p = prefix_sums(p_sorted)
    masses = design.prefix_masses(q_sorted, counts)
    for n, mass in zip(counts, masses, strict=True):
        refuse_nan(cum_p - mass, design, n, "prefix sweep", first_row)
    gap = cum_p[None] - _checked_mass(masses, design, counts, first_row)
    where = np.argmin(gap, axis=-1)
    return np.take_along_axis(gap, where[..., None], axis=-1)[..., 0], where


def _shared_sorted_sweep(
    p: np.ndarray,
    q: np.ndarray,
    counts: Sequence[int],
    design: DraftDesign,
    first_row: int = 0,
    bucketed: bool = True,
) -> np.ndarray:
    """``min(0, min_i [p(H_i) − Q_n(H_i)])`` per ``n`` and row, from one sort: (len(counts), B)
    (or from ratio buckets, where ``bucketed`` and the design has them)."""
    if bucketed and _bucketed(design, p):
        return _bucketed_sweep(p, q, counts, design, first_row)[0]
    rows = p.shape[0]
    best = np.zeros((len(counts), rows))
    for order in design.sweep_orders(p, q, counts[0]):
        gap, _ = _prefix_minimum(p, q, order, counts, design, first_row)
        best = np.minimum(best, gap)
    return best


def optimal_acceptance_by_n(
    p: object | Step,
    q: object,
    counts: Sequence[int],
    design: str | DraftDesign = "iid",
) -> np.ndarray:
    r"""``α*`` for several numbers of drafts at once: :func:`optimal_acceptance` for each ``n``.

    For designs with ``shared_sweep`` (``without_replacement``, ``conditional_poisson``) the
    sweep order does not depend on ``n``, so one sort serves every ``n``, and
    ``without_replacement`` integrates ``Q(H)`` for all of them in one pass per node: about
    the cost of one ``n`` instead of one per ``n``. Other designs call
    :func:`optimal_acceptance` once per ``n``. Values equal :func:`optimal_acceptance`'s to
    rounding (the integration grid of ``without_replacement`` starts at the smallest ``n``'s
    left end: differences of order 1e-15).

    Parameters
    ----------
    p, q : array_like, shape (..., V)
        As for :func:`optimal_acceptance` (no ``per_slot``: its ``q`` changes with ``n``);
        ``p`` may be a validated :class:`otbound.problem.Step` (``q`` is then not read).
    counts : sequence of int
        The numbers of drafts ``n``.
    design : str or DraftDesign, default "iid"

    Returns
    -------
    numpy.ndarray, shape (len(counts), ...)
        Row ``j``: ``α*`` at ``counts[j]`` drafts, with the batch shape.

    Raises
    ------
    ValueError
        As :func:`optimal_acceptance`, for the first ``n`` that fails (``n`` above the support
        of some row for a distinct-draft design, ...); an empty ``counts``; a NaN in some
        ``p(H) − Q(H)``.

    Examples
    --------
    >>> import otbound as ob
    >>> from otbound.bounds.sweep import optimal_acceptance_by_n
    >>> p, q = [0.3, 0.4, 0.3], [0.6, 0.3, 0.1]
    >>> optimal_acceptance_by_n(p, q, [1, 2], "without_replacement").round(5).tolist()
    [0.7, 0.99286]
    """
    spec = get_design(design)
    ns = [as_num_drafts(n) for n in counts]
    if not ns:
        raise ValueError("counts must hold at least one number of drafts, got none")
    step = Step.validate(p, q, slot_axis=spec.slot_axis)
    if not spec.shared_sweep or len(ns) == 1:  # per_slot never shares: its q changes with n
        return np.stack([np.asarray(_solve(step, n, spec, False), dtype=float) for n in ns])
    for n in ns:
        spec.check_rows(step.q.shape, n, lambda: step.support)  # the support counted once
    p2, q2, batch = step.flat
    gap = np.empty((len(ns), p2.shape[0]))
    step = max(1, _CHUNK_ELEMENTS // (p2.shape[-1] * len(ns)))
    for start in range(0, p2.shape[0], step):
        rows = slice(start, start + step)
        gap[:, rows] = _shared_sorted_sweep(
            np.ascontiguousarray(p2[rows]), np.ascontiguousarray(q2[rows]), ns, spec, start
        )
    return _alpha_from_gap(gap, spec, ns).reshape(len(ns), *batch)
