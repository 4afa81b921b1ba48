r"""The power of the audit's chi-square test: the smallest total variation it detects.

With ``N`` trials, ``B`` bins and cell probabilities ``p_b`` under the target, an output law
``r`` gives the chi-square statistic a noncentral ``χ²_{B−1}(λ)`` law (asymptotically) with

.. math:: λ = N \sum_b \frac{(r_b − p_b)^2}{p_b} \;\ge\; N \Bigl(\sum_b |r_b − p_b|\Bigr)^2
          = 4 N\, TV_B(r, p)^2

by Cauchy–Schwarz (``Σ p_b = 1``), ``TV_B`` the total variation over the bins. The test at
significance ``a`` rejects when the statistic exceeds ``c = χ²_{B−1}^{-1}(1 − a)``; it does
so with probability ``power`` once ``λ ≥ λ_*``, the noncentrality with
``P(χ²_{B−1}(λ_*) > c) = power``. So every law with

.. math:: TV_B(r, p) \;\ge\; δ = \sqrt{λ_* / (4N)}

is detected with probability at least ``power`` (in the noncentral approximation). Pooled
over steps (statistics and degrees of freedom added), ``Σ_s 4 N_s TV_s^2 ≥ 4 N \overline{TV}^2``
with ``\overline{TV} = Σ_s N_s TV_s / N`` (Jensen), so the same formula with the summed
degrees of freedom and trials bounds the detectable *mean* total variation.
"""

from __future__ import annotations

import math

__all__ = ["detectable_tv"]


def detectable_tv(dof: int, trials: int, significance: float, power: float) -> float:
    r"""``δ = sqrt(λ_* / (4N))``: the total variation over the bins detected with ``power``.

    Parameters
    ----------
    dof : int
        Degrees of freedom (bins minus one; summed over steps for the pooled test).
    trials : int
        ``N`` (summed over steps for the pooled test).
    significance : float
        The test's level ``a``.
    power : float
        In ``(0, 1)``.

    Returns
    -------
    float
        ``inf`` when ``dof < 1`` (one bin: the test sees nothing).

    Examples
    --------
    >>> round(detectable_tv(19, 200_000, 1e-5, 0.99), 4)
    0.0098
    """
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    if not 0.0 < significance < 1.0:
        raise ValueError(f"significance must be in (0, 1), got {significance!r}")
    if dof < 1 or trials < 1:
        return math.inf
    from scipy.special import chdtri, chndtrinc  # chi-square quantile, noncentrality

    critical = float(chdtri(dof, significance))
    noncentrality = float(chndtrinc(critical, dof, 1.0 - power))
    if not math.isfinite(noncentrality):
        raise ValueError(
            f"no noncentrality reaches power {power:g} at {dof} degrees of freedom "
            f"(critical value {critical:.6g})"
        )
    return math.sqrt(noncentrality / (4.0 * trials))
