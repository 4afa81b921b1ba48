r"""From stored rows to the distributions compared: the same processing for target and draft.

The pipeline follows Hugging Face's sampling warpers, in their order:

1. temperature: ``ℓ / T`` (``T = 0``: greedy, a one-hot row at the argmax, lowest id on ties);
2. top-k: keep the tokens whose (scaled) logit is at least the ``k``-th largest (ties at the
   cut-off are all kept, as ``TopKLogitsWarper`` does);
3. top-p: on the softmax of what is left, keep the most likely tokens, in decreasing order,
   while the mass before a token is ``< top_p`` (at least one token; ``TopPLogitsWarper``);
4. softmax of the survivors, renormalised, in float64.

Probability inputs (``values="probs"``) go through the same steps with ``ℓ = log p``, which
is exact: ``p^{1/T}`` renormalised is ``softmax(log p / T)``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from otbound.dumps._format import DumpError
from otbound.logits import softmax_in_place

#: Probability rows must sum to one within this before they are renormalised.
PROBS_SUM_TOLERANCE = 1e-3
#: Step ids listed in one error message before "and N more".
_MAX_LISTED = 10

VALUES = ("logits", "probs")


def describe_steps(steps: np.ndarray) -> str:
    """``"3 steps: 5, 17, 230"`` (at most ten listed, then ``"… and N more"``)."""
    steps = np.asarray(steps).ravel()
    listed = ", ".join(str(int(s)) for s in steps[:_MAX_LISTED])
    more = f" and {steps.size - _MAX_LISTED} more" if steps.size > _MAX_LISTED else ""
    word = "step" if steps.size == 1 else "steps"
    return f"{steps.size} {word}: {listed}{more}"


def _as_rows(x: object, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise DumpError(f"{name} must have shape (steps, V) with V >= 1, got {np.shape(x)}")  # type: ignore[call-overload]
    if arr.dtype.kind not in "fiu":
        raise DumpError(f"{name} must be numeric, got dtype {arr.dtype}")
    return arr


def as_step_ids(step_ids: object, steps: int) -> np.ndarray:
    if step_ids is None:
        return np.arange(steps, dtype=np.int64)
    ids = np.asarray(step_ids, dtype=np.int64).ravel()
    if ids.size != steps:
        raise ValueError(f"step_ids has {ids.size} entries for {steps} steps")
    return ids


def find_bad_steps(rows: object, values: str = "logits") -> np.ndarray:
    """Rows that cannot be turned into a distribution.

    Logit rows are bad when they hold NaN or ``+inf``, or mask every token (all ``-inf``);
    probability rows when they hold NaN, an infinity or a negative entry, or do not sum to one
    within ``PROBS_SUM_TOLERANCE``.

    Parameters
    ----------
    rows : array_like, shape (steps, V) or (V,)
    values : {"logits", "probs"}

    Returns
    -------
    numpy.ndarray of bool, shape (steps,)
    """
    if values not in VALUES:
        raise ValueError(f"values must be one of {VALUES}, got {values!r}")
    arr = _as_rows(rows, values)
    bad = np.zeros(arr.shape[0], dtype=bool)
    chunk = max(1, (1 << 22) // arr.shape[1])
    for start in range(0, arr.shape[0], chunk):
        block = np.asarray(arr[start : start + chunk])
        if values == "logits":
            # a row's maximum is NaN if any entry is, +inf if any is, -inf if all are
            with np.errstate(invalid="ignore"):
                bad_block = ~np.isfinite(np.max(block, axis=1))
        else:
            block = block.astype(np.float64, copy=False)
            with np.errstate(invalid="ignore"):
                bad_block = np.any(~np.isfinite(block) | (block < 0), axis=1)
                bad_block |= np.abs(block.sum(axis=1) - 1.0) > PROBS_SUM_TOLERANCE
        bad[start : start + chunk] = bad_block
    return bad


def probability_tolerance(dtype: str, width: int) -> float:
    r"""How far from one a row of probabilities stored in ``dtype`` may sum.

    Each probability written by a softmax and stored in ``dtype`` (unit roundoff ``u``: 2⁻¹¹
    float16, 2⁻⁸ bfloat16, 2⁻²⁴ float32, 2⁻⁵³ float64) is within ``3u`` relative of the exact
    value (the softmax's exp and division, then storage), or within ``η``, half the smallest
    subnormal, where it underflows. So a row of ``V`` entries sums to one within

    .. math:: τ = \max(τ_0,\ 4u + Vη),

    with ``τ_0 = PROBS_SUM_TOLERANCE``, the floor that puts inside every row that
    ``values="probs"`` accepts (float16 with
    ``V = 152064``: ``τ ≈ 6.5e-3``; bfloat16: ``1.6e-2``; float32 and float64: ``1e-3``).

    Parameters
    ----------
    dtype : str
        The storage dtype: numpy's name (``"float16"``, ...), ``"bfloat16"`` or a safetensors
        code (``"F16"``, ``"BF16"``, ...).
    width : int
        ``V``, the entries per row.

    Returns
    -------
    float
    """
    name = _DTYPE_NAMES.get(dtype, dtype)
    if name == "bfloat16":
        unit, tiny = 2.0**-8, 2.0**-134
    else:
        info = np.finfo(np.dtype(name))
        unit, tiny = float(info.eps) / 2, float(info.smallest_subnormal) / 2
    return max(PROBS_SUM_TOLERANCE, 4 * unit + width * tiny)


_DTYPE_NAMES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


def find_probability_rows(rows: object, tolerance: float) -> np.ndarray:
    """Rows that look like probabilities: every entry ``>= 0`` and a sum within ``tolerance``
    of one (see :func:`probability_tolerance`).

    Real logits are not like that: they are mostly negative, or sum far from one. Read as
    logits, such rows would be flattened by the softmax towards uniform. Rows of one entry are
    never flagged (their softmax is ``[1]`` either way). The check reads the rows in chunks;
    only rows whose minimum is ``>= 0`` are summed, so real logits cost one pass of ``min``.

    Parameters
    ----------
    rows : array_like, shape (steps, V) or (V,)
    tolerance : float

    Returns
    -------
    numpy.ndarray of bool, shape (steps,)
    """
    arr = _as_rows(rows, "rows")
    found = np.zeros(arr.shape[0], dtype=bool)
    if arr.shape[1] < 2:
        return found
    chunk = max(1, (1 << 22) // arr.shape[1])
    for start in range(0, arr.shape[0], chunk):
        block = np.asarray(arr[start : start + chunk])
        with np.errstate(invalid="ignore"):
            candidates = np.flatnonzero(block.min(axis=1) >= 0)
        if candidates.size:
            total = block[candidates].sum(axis=1, dtype=np.float64)
            found[start + candidates] = np.abs(total - 1.0) <= tolerance
    return found


def check_filters(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be None or an integer >= 1, got {top_k!r}")
    if top_p is not None and not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p!r}")


def _top_k_mask(scores: np.ndarray, k: int) -> np.ndarray:
    """Tokens whose score is at least the row's ``k``-th largest (ties kept)."""
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
    return scores >= kth


def top_p_mask(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Most likely tokens first (lower id on ties) while the mass before them is < top_p."""
    order = np.argsort(-probs, axis=1, kind="stable")
    ranked = np.take_along_axis(probs, order, axis=1)
    before = np.cumsum(ranked, axis=1) - ranked
    keep_ranked = before < top_p
    keep_ranked[:, 0] = True
    keep: np.ndarray = np.empty_like(keep_ranked)
    np.put_along_axis(keep, order, keep_ranked, axis=1)
    return keep


def to_probabilities(
    rows: object,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    values: str = "logits",
    step_ids: object = None,
    name: str = "logits",
) -> np.ndarray:
    r"""Probability rows from logits (or probabilities): temperature, then top-k, then top-p.

    .. math:: p = \operatorname{softmax}\bigl(\operatorname{filter}(\ell / T)\bigr)

    Parameters
    ----------
    rows : array_like, shape (steps, V) or (V,)
        Logits in any float dtype (upcast first), or probabilities with ``values="probs"``.
    temperature : float, default 1.0
        ``T >= 0``; ``0`` means greedy (one-hot at the argmax, lowest id on ties).
    top_k : int, optional
        Keep the tokens scoring at least the ``k``-th largest (``TopKLogitsWarper``).
    top_p : float in (0, 1], optional
        Nucleus filtering after top-k (``TopPLogitsWarper``): tokens in decreasing
        probability, while the mass before them is below ``top_p``; ``1.0`` keeps all.
    values : {"logits", "probs"}, default "logits"
    step_ids : array_like of int, optional
        Global step id of each row, for messages (default ``0 .. steps − 1``).
    name : str, default "logits"
        What the rows are, for messages (``"target logits"``).

    Returns
    -------
    numpy.ndarray of float64, shape (steps, V)
        Rows summing to one (a 1-D input gives one row of shape (1, V)).

    Raises
    ------
    DumpError
        Rows with NaN or ``+inf`` (or all ``-inf``; for probabilities: negative, infinite or
        not summing to one), naming their global step ids.
    ValueError
        An invalid ``temperature``, ``top_k`` or ``top_p``.

    Examples
    --------
    >>> to_probabilities([[0.0, 0.0, -np.inf]]).tolist()
    [[0.5, 0.5, 0.0]]
    >>> to_probabilities([[3.0, 1.0, 2.0]], top_k=2, temperature=0).tolist()
    [[1.0, 0.0, 0.0]]
    """
    check_filters(temperature, top_k, top_p)
    arr = _as_rows(rows, name)
    ids = as_step_ids(step_ids, arr.shape[0])
    bad = find_bad_steps(arr, values)
    if np.any(bad):
        problem = (
            "NaN or +inf (or every token masked)"
            if values == "logits"
            else "NaN, infinite or negative entries, or rows not summing to 1"
        )
        raise DumpError(
            f"{name} contain {problem} at {describe_steps(ids[bad])} (global step ids); "
            "pass skip_bad_steps=True to drop them"
        )
    return _checked_probabilities(arr, temperature, top_k, top_p, values)


def _checked_probabilities(
    arr: np.ndarray, temperature: float, top_k: int | None, top_p: float | None, values: str
) -> np.ndarray:
    """:func:`to_probabilities` on rows already checked by :func:`find_bad_steps`."""
    x = np.array(arr, dtype=np.float64)
    if values == "probs":
        with np.errstate(divide="ignore"):
            np.log(x, out=x)
    # x is this function's own float64 copy, its rows checked: no second copy or check
    if temperature == 0:
        return softmax_in_place(x, 0.0)
    x /= temperature
    if top_k is not None and top_k < x.shape[1]:
        x[~_top_k_mask(x, int(top_k))] = -np.inf
    probs = softmax_in_place(x)
    if top_p is not None and top_p < 1.0:
        probs[~top_p_mask(probs, float(top_p))] = 0.0
        probs /= probs.sum(axis=1, keepdims=True)
    return probs


@dataclass(frozen=True)
class StepDistributions:
    """Target and draft distributions of the usable steps of a shard.

    Attributes
    ----------
    target, draft : numpy.ndarray of float64, shape (m, V)
        ``p`` and ``q`` of the kept steps (rows sum to one).
    step : numpy.ndarray of int64, shape (m,)
        Their global step ids.
    kept : numpy.ndarray of bool, shape (steps,)
        Which input steps were kept.
    skipped : numpy.ndarray of int64
        Global ids of the bad steps dropped (only with ``skip_bad_steps=True``).
    vocab_size : int
        ``V`` after any truncation.
    """

    target: np.ndarray
    draft: np.ndarray
    step: np.ndarray
    kept: np.ndarray
    skipped: np.ndarray
    vocab_size: int


def align_vocab(
    target_width: int, draft_width: int, truncate_vocab: bool, *, stacklevel: int = 3
) -> int:
    """The common width, or :class:`DumpError` for different widths without ``truncate_vocab``.

    With ``truncate_vocab=True`` the larger model's extra (highest-id) tokens are cut, with a
    warning; its rows are renormalised over the remaining tokens by the softmax.
    """
    if target_width == draft_width:
        return target_width
    smaller = min(target_width, draft_width)
    larger = "target" if target_width > draft_width else "draft"
    if not truncate_vocab:
        raise DumpError(
            f"target and draft vocabularies differ: {target_width} and {draft_width} tokens; "
            f"pass truncate_vocab=True to cut both to the first {smaller} tokens"
        )
    warnings.warn(
        f"target and draft vocabularies differ ({target_width} and {draft_width} tokens): "
        f"cutting the {larger} model's last {abs(target_width - draft_width)} token(s), "
        f"keeping the first {smaller}, and renormalising",
        UserWarning,
        stacklevel=stacklevel,
    )
    return smaller


def prepare_distributions(
    target: object,
    draft: object,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    values: str | tuple[str, str] = "logits",
    step_ids: object = None,
    skip_bad_steps: bool = False,
    truncate_vocab: bool = False,
) -> StepDistributions:
    """Target and draft distributions, processed identically, with bad steps handled.

    Parameters
    ----------
    target, draft : array_like, shape (steps, V_t) and (steps, V_d)
        Logits (or probabilities, see ``values``) of the two models at the same steps.
    temperature, top_k, top_p
        As in :func:`to_probabilities`, applied to both.
    values : {"logits", "probs"} or (str, str), default "logits"
        What the rows hold (one value for both, or ``(target, draft)``).
    step_ids : array_like of int, optional
        Global step ids of the rows (default ``0 .. steps − 1``).
    skip_bad_steps : bool, default False
        Drop steps where either row is bad (see :func:`find_bad_steps`) and report them in
        ``skipped``, instead of raising.
    truncate_vocab : bool, default False
        Cut both to the smaller vocabulary when the widths differ (with a warning) instead of
        raising.

    Returns
    -------
    StepDistributions

    Raises
    ------
    DumpError
        Bad steps (their global ids named), different step counts, or different vocabularies
        without ``truncate_vocab``.
    """
    kinds = (values, values) if isinstance(values, str) else tuple(values)
    for kind in kinds:
        if kind not in VALUES:
            raise ValueError(f"values must be one of {VALUES}, got {kind!r}")
    check_filters(temperature, top_k, top_p)
    t_rows = _as_rows(target, "target")
    d_rows = _as_rows(draft, "draft")
    if t_rows.shape[0] != d_rows.shape[0]:
        raise DumpError(
            f"target and draft hold different numbers of steps: {t_rows.shape[0]} and "
            f"{d_rows.shape[0]}"
        )
    ids = as_step_ids(step_ids, t_rows.shape[0])
    width = align_vocab(t_rows.shape[1], d_rows.shape[1], truncate_vocab)
    t_rows, d_rows = t_rows[:, :width], d_rows[:, :width]
    bad_t = find_bad_steps(t_rows, kinds[0])
    bad_d = find_bad_steps(d_rows, kinds[1])
    bad = bad_t | bad_d
    if np.any(bad) and not skip_bad_steps:
        which = [f"target at {describe_steps(ids[bad_t])}"] if np.any(bad_t) else []
        which += [f"draft at {describe_steps(ids[bad_d])}"] if np.any(bad_d) else []
        raise DumpError(
            "rows with NaN or +inf logits (or every token masked, or invalid probabilities): "
            + "; ".join(which)
            + " (global step ids); pass skip_bad_steps=True to drop them"
        )
    kept = ~bad
    if np.any(bad):
        t_rows, d_rows = t_rows[kept], d_rows[kept]
    if kept.any():
        p = _checked_probabilities(t_rows, temperature, top_k, top_p, kinds[0])
        q = _checked_probabilities(d_rows, temperature, top_k, top_p, kinds[1])
    else:
        p = q = np.zeros((0, width))
    return StepDistributions(
        target=p, draft=q, step=ids[kept], kept=kept, skipped=ids[bad], vocab_size=width
    )
