r"""Confidence intervals shared by the verifiers, the analysis of dumps and tree decoding.

* :func:`wilson_interval`: a binomial proportion from independent trials (Monte Carlo
  acceptance rates: :meth:`otbound.verifiers.base.SimulationResult.ci`,
  :func:`otbound.compare`).
* :func:`cluster_mean_interval`: the mean of values that come in correlated clusters (the steps
  or target calls of one prompt share a context, so they are not independent draws), as a ratio
  estimator with a cluster-robust Student-t interval (:func:`otbound.analysis.summarise`,
  :func:`otbound.tree_decoding.summarise_tree_steps`).

scipy is imported only when an interval is computed (it takes half a second).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["cluster_mean_interval", "wilson_interval"]


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
    c = totals.size
    if c == 0:
        return np.nan, np.nan, np.nan
    mean = totals.sum() / counts.sum()
    if c < 2:
        return mean, np.nan, np.nan
    resid = totals - mean * counts
    se = np.sqrt(c / (c - 1) * np.sum(resid**2)) / counts.sum()
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats: 0.3 s more to import)

    half = stdtrit(c - 1, 0.5 + level / 2) * se
    return mean, mean - half, mean + half
