r"""Confidence intervals shared by the verifiers, the analysis of dumps and tree decoding.

* :func:`wilson_interval`: a binomial proportion from independent trials (Monte Carlo
  acceptance rates: :meth:`otbound.verifiers.base.SimulationResult.ci`,
  :func:`otbound.compare`).
* :func:`cluster_mean_interval`: the mean of values that come in correlated clusters (the steps
  or target calls of one prompt share a context, so they are not independent draws), as a ratio
  estimator with a cluster-robust Student-t interval (:func:`otbound.analysis.summarise`,
  :func:`otbound.tree_decoding.summarise_tree_steps`).
* :func:`paired_difference_interval`: the difference of two such means measured on the same
  clusters (two verifiers on the same prompts), with the cluster-robust interval of the
  *difference*, which keeps the covariance the shared prompts induce
  (:func:`otbound.tree_decoding.tree_differences`).
* :func:`paired_difference`: the same from two per-step or per-call tables (a user's two runs).

scipy is imported only when an interval is computed (it takes half a second).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "PairedDifference",
    "cluster_mean_interval",
    "paired_difference",
    "paired_difference_interval",
    "wilson_interval",
]


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    r"""Wilson score interval for a binomial proportion (never outside ``[0, 1]``).

    With ``p̂ = successes / trials``, ``n = trials`` and ``z`` the standard normal quantile
    at ``0.5 + level / 2``:

    .. math::

        \frac{\hat p + \frac{z^2}{2n}}{1 + \frac{z^2}{n}}
        \pm \frac{z}{1 + \frac{z^2}{n}} \sqrt{\frac{\hat p (1 - \hat p)}{n} + \frac{z^2}{4 n^2}},

    clipped to ``[0, 1]``. Unlike the normal (Wald) interval it is not empty at ``p̂ = 0`` or
    ``p̂ = 1``: there the interval is ``[0, z² / (n + z²)]`` and ``[n / (n + z²), 1]``.

    Parameters
    ----------
    successes : int
        Number of successes, ``0 <= successes <= trials``.
    trials : int
        Number of independent trials, ``>= 1``.
    level : float, default 0.95
        Confidence level, in ``(0, 1)``.

    Returns
    -------
    (float, float)
        The lower and upper ends.

    Raises
    ------
    ValueError
        ``trials < 1`` or ``successes`` outside ``[0, trials]``.

    Examples
    --------
    >>> lo, hi = wilson_interval(8, 10)
    >>> round(lo, 4), round(hi, 4)
    (0.4902, 0.9433)
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(
            f"a Wilson interval needs trials >= 1 and 0 <= successes <= trials, got "
            f"{successes} successes in {trials} trials"
        )
    from scipy.special import ndtri  # the normal quantile (scipy.stats: 0.3 s more to import)

    z = float(ndtri(0.5 + level / 2.0))
    phat = successes / trials
    denom = 1.0 + z * z / trials
    centre = (phat + z * z / (2.0 * trials)) / denom
    half = z * math.sqrt(phat * (1.0 - phat) / trials + z * z / (4.0 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def cluster_mean_interval(
    totals: np.ndarray, counts: np.ndarray, level: float = 0.95
) -> tuple[float, float, float]:
    r"""The ratio-estimator mean of clustered values and its cluster-robust interval.

    Cluster ``c`` (a prompt) holds ``M_c`` values summing to ``T_c``. The mean over all values
    is the ratio estimator ``m = Σ_c T_c / Σ_c M_c``, and its cluster-robust standard error is

    .. math::

        \mathrm{se}(m)^2 = \frac{C}{C-1} \frac{\sum_c (T_c - m M_c)^2}{(\sum_c M_c)^2}

    over the ``C`` clusters with ``M_c > 0``; the interval is ``m ± t_{C−1, (1+level)/2} se``
    (Student's t with ``C − 1`` degrees of freedom). With one value per cluster it is the
    usual t interval of a mean.

    Parameters
    ----------
    totals : numpy.ndarray, shape (clusters,)
        ``T_c``, the sum of each cluster's values.
    counts : numpy.ndarray, shape (clusters,)
        ``M_c``, the number of values of each cluster; clusters with ``M_c = 0`` are left out.
    level : float, default 0.95
        Confidence level, in ``(0, 1)``.

    Returns
    -------
    (float, float, float)
        ``(m, low, high)``: all NaN without a cluster, ``low`` and ``high`` NaN with a single
        one (the interval is undefined).

    Examples
    --------
    >>> import numpy as np
    >>> m, lo, hi = cluster_mean_interval(np.array([3.0, 1.0, 2.0, 4.0]), np.array([2, 2, 1, 3]))
    >>> round(float(m), 4), round(float(lo), 4), round(float(hi), 4)
    (1.25, 0.438, 2.062)
    """
    keep = counts > 0
    totals, counts = totals[keep], counts[keep]
    if totals.size == 0:
        return np.nan, np.nan, np.nan
    mean, influence = _ratio_influence(totals, counts)
    half = _t_half_width(influence, level)
    return mean, mean - half, mean + half


def paired_difference_interval(
    totals_a: np.ndarray,
    counts_a: np.ndarray,
    totals_b: np.ndarray,
    counts_b: np.ndarray,
    level: float = 0.95,
) -> tuple[float, float, float]:
    r"""The difference of two ratio-estimator means on the same clusters, and its interval.

    Cluster ``c`` (a prompt) is measured by both runs: run A's ``M_{Ac}`` values sum to
    ``T_{Ac}``, run B's ``M_{Bc}`` to ``T_{Bc}``. Each run's mean is the ratio estimator
    ``m_A = Σ_c T_{Ac} / Σ_c M_{Ac}`` (as :func:`cluster_mean_interval`), and the estimate is
    ``D = m_A − m_B``.

    **Variance (delta method on paired cluster totals).** With ``μ_A``, ``μ_B`` the population
    ratios, to first order

    .. math::

        m_A − μ_A ≈ \frac{\sum_c (T_{Ac} − μ_A M_{Ac})}{\sum_c M_{Ac}}, \qquad
        D − (μ_A − μ_B) ≈ \sum_c g_c, \quad
        g_c = \frac{T_{Ac} − μ_A M_{Ac}}{\sum_c M_{Ac}} − \frac{T_{Bc} − μ_B M_{Bc}}{\sum_c M_{Bc}}.

    Clusters are independent draws (a prompt's two measurements are drawn together, so
    ``g_c`` keeps their dependence), hence ``Var D ≈ Σ_c Var g_c``, estimated with the plug-in
    ``ĝ_c`` (``m`` for ``μ``; ``Σ_c ĝ_c = 0``) and the small-sample factor of
    :func:`cluster_mean_interval`:

    .. math::

        \mathrm{se}(D)^2 = \frac{C}{C-1} \sum_c \hat g_c^2
        = \mathrm{se}(m_A)^2 + \mathrm{se}(m_B)^2
          − 2 \frac{C}{C-1} \sum_c \hat e_{Ac} \hat e_{Bc},
        \qquad \hat e_{Xc} = \frac{T_{Xc} − m_X M_{Xc}}{\sum_c M_{Xc}}.

    The last term is the covariance the shared clusters induce. Dropping it (treating the runs
    as independent samples) gives an interval too wide when a prompt that is easy for one run
    is easy for the other (the usual case) and too narrow when the covariance is negative. The
    interval is ``D ± t_{C−1, (1+level)/2} se(D)``; with one value per cluster in both runs
    it is the paired t interval of the per-cluster differences.

    Parameters
    ----------
    totals_a, counts_a : numpy.ndarray, shape (clusters,)
        ``T_{Ac}`` and ``M_{Ac}``.
    totals_b, counts_b : numpy.ndarray, shape (clusters,)
        ``T_{Bc}`` and ``M_{Bc}``, cluster ``c`` at the same position as in run A.
    level : float, default 0.95
        Confidence level, in ``(0, 1)``.

    Returns
    -------
    (float, float, float)
        ``(D, low, high)``; ``low`` and ``high`` NaN with a single cluster.

    Raises
    ------
    ValueError
        The arrays differ in length, hold a NaN or a negative count, no cluster has values,
        or a cluster has values in one run only (the clusters must be the same).

    Examples
    --------
    Tokens per call of two verifiers on four prompts (4, 4, 5 and 4 calls each):

    >>> import numpy as np
    >>> calls = np.array([4, 4, 5, 4])
    >>> d, lo, hi = paired_difference_interval(
    ...     np.array([9.0, 7.0, 12.0, 8.0]), calls, np.array([8.0, 6.0, 10.0, 7.0]), calls
    ... )
    >>> round(float(d), 4), round(float(lo), 4), round(float(hi), 4)
    (0.2941, 0.162, 0.4263)
    """
    arrays = [np.asarray(x, dtype=float) for x in (totals_a, counts_a, totals_b, counts_b)]
    _check_paired(*arrays)
    ta, ma, tb, mb = (x[(arrays[1] > 0) | (arrays[3] > 0)] for x in arrays)
    mean_a, influence_a = _ratio_influence(ta, ma)
    mean_b, influence_b = _ratio_influence(tb, mb)
    difference = mean_a - mean_b
    half = _t_half_width(influence_a - influence_b, level)
    return difference, difference - half, difference + half


@dataclass(frozen=True)
class PairedDifference:
    """The result of :func:`paired_difference`.

    Attributes
    ----------
    mean_a, mean_b : float
        Each run's mean (ratio estimator over its rows, by cluster).
    difference : float
        ``mean_a − mean_b``.
    ci_low, ci_high : float
        The interval of the difference at ``level`` (NaN with one cluster).
    clusters : int
        Clusters measured by both runs.
    level : float
    """

    mean_a: float
    mean_b: float
    difference: float
    ci_low: float
    ci_high: float
    clusters: int
    level: float

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of zero (the runs are separated)."""
        return bool(self.ci_low > 0.0 or self.ci_high < 0.0)


def paired_difference(
    a: Mapping[str, Any] | Any,
    b: Mapping[str, Any] | Any,
    *,
    value: str = "tokens",
    cluster: str = "prompt",
    level: float = 0.95,
) -> PairedDifference:
    """Compare two runs on the same prompts: the difference of means and its paired interval.

    Each run's mean of ``value`` over its rows is the ratio estimator over clusters of
    :func:`cluster_mean_interval` (``tokens`` over the calls of a tree-decoding run: tokens per
    call; ``acceptance`` over the steps of a ``compute_bounds`` run: mean acceptance). The
    interval is :func:`paired_difference_interval` on the per-cluster totals and counts:
    the clusters must be the same in both runs, and the covariance they induce is kept.

    Parameters
    ----------
    a, b : pandas.DataFrame or mapping of column name to array
        One row per call (or step), with the columns ``value`` and ``cluster``; for example
        one verifier's rows of ``tree_steps.parquet``: ``steps[steps.verifier == "kseq"]``.
    value : str, default "tokens"
        The column averaged.
    cluster : str, default "prompt"
        The column naming each row's cluster (``prompt_id`` in ``compute_bounds`` tables).
    level : float, default 0.95

    Returns
    -------
    PairedDifference

    Raises
    ------
    ValueError
        A missing column, a NaN value or cluster, or a cluster in one run only.

    Examples
    --------
    >>> a = {"prompt": [0, 0, 1, 1, 1, 2, 2], "tokens": [3, 2, 1, 2, 2, 3, 3]}
    >>> b = {"prompt": [0, 0, 0, 1, 1, 2, 2], "tokens": [2, 1, 2, 1, 2, 2, 3]}
    >>> result = paired_difference(a, b)
    >>> round(result.difference, 4), result.clusters, result.excludes_zero
    (0.4286, 3, False)
    """
    ids_a, values_a = _column_pair(a, cluster, value, "a")
    ids_b, values_b = _column_pair(b, cluster, value, "b")
    ids = np.union1d(ids_a, ids_b)
    ta, ma = _cluster_sums(ids, ids_a, values_a)
    tb, mb = _cluster_sums(ids, ids_b, values_b)
    difference, low, high = paired_difference_interval(ta, ma, tb, mb, level)
    return PairedDifference(
        mean_a=float(ta.sum() / ma.sum()),
        mean_b=float(tb.sum() / mb.sum()),
        difference=float(difference),
        ci_low=float(low),
        ci_high=float(high),
        clusters=int(np.count_nonzero(ma)),
        level=float(level),
    )


def _column_pair(
    frame: Mapping[str, Any] | Any, cluster: str, value: str, name: str
) -> tuple[np.ndarray, np.ndarray]:
    """The cluster ids and values of one run's rows, refusing missing columns and NaNs."""
    for needed in (cluster, value):
        if needed not in frame:
            raise ValueError(f"{name} has no column {needed!r} (one row per call or step)")
    column = frame[cluster]
    values = np.asarray(frame[value], dtype=float)
    if hasattr(column, "isna"):  # pandas: None, NaN and NA alike
        missing = np.asarray(column.isna(), dtype=bool)
        ids = np.asarray(column[~missing] if missing.any() else column)
    else:
        ids = np.asarray(column)
        missing = np.array(
            [
                x is None or (isinstance(x, float | np.floating) and math.isnan(x))
                for x in ids.tolist()
            ],
            dtype=bool,
        )
    if missing.shape != values.shape or values.ndim != 1:
        raise ValueError(f"{name}: {cluster!r} and {value!r} must be 1-D columns of one length")
    for column_name, bad in ((cluster, int(missing.sum())), (value, int(np.isnan(values).sum()))):
        if bad:
            raise ValueError(
                f"{name}[{column_name!r}] has {bad} missing value(s): drop or fill them"
            )
    return ids, values


def _cluster_sums(
    every: np.ndarray, ids: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster of ``every`` (sorted ids): the total of ``values`` and the number of rows."""
    where = np.searchsorted(every, ids)
    return (
        np.bincount(where, values, every.size),
        np.bincount(where, minlength=every.size).astype(float),
    )


def _check_paired(ta: np.ndarray, ma: np.ndarray, tb: np.ndarray, mb: np.ndarray) -> None:
    """Refuse what :func:`paired_difference_interval` cannot pair (one line each)."""
    if not ta.shape == ma.shape == tb.shape == mb.shape or ta.ndim != 1:
        raise ValueError(
            "a paired difference needs four 1-D arrays of one length (one entry per cluster), "
            f"got shapes {ta.shape}, {ma.shape}, {tb.shape}, {mb.shape}"
        )
    if any(np.isnan(x).any() for x in (ta, ma, tb, mb)) or (ma < 0).any() or (mb < 0).any():
        raise ValueError("a paired difference needs totals without NaN and counts >= 0")
    one_sided = np.flatnonzero((ma > 0) != (mb > 0))
    if one_sided.size:
        raise ValueError(
            f"cluster(s) at position {', '.join(map(str, one_sided[:5]))} have values in one "
            "run only: a paired difference needs the same clusters in both runs"
        )
    if not (ma > 0).any():
        raise ValueError("a paired difference needs at least one cluster with values")


def _ratio_influence(totals: np.ndarray, counts: np.ndarray) -> tuple[float, np.ndarray]:
    """``m = Σ T / Σ M`` and each cluster's linearised error ``(T_c − m M_c) / Σ M``."""
    size = counts.sum()
    mean = float(totals.sum() / size)
    return mean, (totals - mean * counts) / size


def _t_half_width(influence: np.ndarray, level: float) -> float:
    """``t_{C−1, (1+level)/2} · sqrt(C / (C − 1) · Σ_c e_c²)``; NaN with fewer than 2 clusters."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    c = influence.size
    if c < 2:
        return math.nan
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats: 0.3 s more to import)

    se = math.sqrt(c / (c - 1) * float(np.sum(influence**2)))
    return float(stdtrit(c - 1, 0.5 + level / 2) * se)
