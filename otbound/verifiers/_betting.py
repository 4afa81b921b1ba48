r"""A confidence interval for the mean of bounded values, by betting (Waudby-Smith and Ramdas,
"Estimating means of bounded random variables by betting", JRSS B 2024): valid at every sample
size for every distribution on a known range ``[a, b]``, heavy tails and atoms included.

The values ``X_1..X_m`` (i.i.d., mean ``μ``) are scaled to ``Y_i = (X_i − a)/(b − a) ∈ [0, 1]``
(mean ``ν``). For a candidate mean ``ν_0``, two gamblers bet on the sign of ``Y_i − ν_0``:

.. math::

    K^+(ν_0) = \prod_i \bigl(1 + λ_i^+ (Y_i − ν_0)\bigr),\qquad
    K^-(ν_0) = \prod_i \bigl(1 − λ_i^- (Y_i − ν_0)\bigr),

with ``λ_i^+ = min(λ_i, c/ν_0)``, ``λ_i^- = min(λ_i, c/(1 − ν_0))``, ``c = 3/4`` (every factor
is at least ``1 − c > 0``) and the predictable plug-in bet
``λ_i = sqrt(2 ln(2/α) / (m σ̂²_{i−1}))``, ``σ̂²_i = (1/4 + Σ_{j≤i} (Y_j − μ̂_j)²)/(i + 1)``,
``μ̂_j = (1/2 + Σ_{k≤j} Y_k)/(j + 1)`` (``λ_i`` uses ``Y_1..Y_{i−1}`` only). At ``ν_0 = ν``
each factor has mean 1 given the past, so ``(K^+ + K^-)/2`` is a nonnegative martingale that
starts at 1, and by Markov's inequality ``P[(K^+ + K^-)/2 ≥ 1/α] ≤ α``. The set

.. math::

    \{ν_0 : K^+(ν_0) < 2/α \text{ and } K^-(ν_0) < 2/α\}

therefore holds ``ν`` with probability at least ``1 − α``. ``K^+`` does not increase with
``ν_0`` and ``K^-`` does not decrease (each factor is monotone), so the set is an interval
``[L, U]``, found by bisection (each end rounded outwards). Its width is about
``2.7 σ / sqrt(m)`` where the values spread, and about ``ln(2/α)/(c m)`` of the range where the
sample shows (almost) no spread: what a rare value that the sample missed could still move
the mean by.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["betting_interval"]

#: The largest fraction of its capital a bet may stake (``c``; Waudby-Smith and Ramdas
#: suggest 1/2 to 3/4).
STAKE = 0.75
#: Halvings of ``[0, 1]`` that locate each end: it moves outwards by at most ``2^-36`` (1.5e-11)
#: of the range.
_HALVINGS = 36


@numba.njit(cache=True)
def _bets(y, log_ratio):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The predictable plug-in bets ``λ_i`` of the scaled values ``y`` (module docstring)."""
    m = y.shape[0]
    bets = np.empty(m)
    total = 0.5
    squares = 0.25
    for i in range(m):
        bets[i] = math.sqrt(2.0 * log_ratio / (m * (squares / (i + 1))))
        total += y[i]
        squares += (y[i] - total / (i + 2)) ** 2
    return bets


@numba.njit(cache=True)
def _log_capital(y, bets, nu, upper):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """``ln K^-(ν)`` (``upper``: the bets that the mean lies below ``ν``) or ``ln K^+(ν)``."""
    room = 1.0 - nu if upper else nu
    cap = STAKE / room if room > 0.0 else math.inf
    side = -1.0 if upper else 1.0
    total = 0.0
    for i in range(y.shape[0]):
        total += math.log1p(side * min(bets[i], cap) * (y[i] - nu))
    return total


@numba.njit(cache=True)
def _end(y, bets, log_ratio, upper):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """The end of the interval on one side (``upper`` or lower) in scaled units: the capital
    of that side crosses ``ln(2/α)`` there (it is below at the other edge, 0 or 1, where every
    factor is at most 1). Bisection, returning the rejected end of the last bracket."""
    edge = 1.0 if upper else 0.0
    if _log_capital(y, bets, edge, upper) < log_ratio:
        return edge  # nothing on this side is rejected
    accepted, rejected = 1.0 - edge, edge
    for _ in range(_HALVINGS):
        mid = 0.5 * (accepted + rejected)
        if _log_capital(y, bets, mid, upper) < log_ratio:
            accepted = mid
        else:
            rejected = mid
    return rejected


def betting_interval(
    values: np.ndarray, low: float, high: float, level: float
) -> tuple[float, float]:
    """The betting confidence interval at ``level`` for the mean of ``values`` in ``[low, high]``.

    Parameters
    ----------
    values : numpy.ndarray, shape (m,)
        I.i.d. values, each in ``[low, high]`` (checked by the caller), in the order drawn.
    low, high : float
        A range every value lies in (``low ≤ high``; equal: the mean is ``low``), known before
        sampling.
    level : float
        Confidence level, in ``(0, 1)``.

    Returns
    -------
    (float, float)
        ``[L, U]`` in the units of ``values`` (module docstring), widened to hold the sample
        mean where it does not (a larger set covers as often).

    Raises
    ------
    ValueError
        ``level`` outside ``(0, 1)``.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    span = high - low
    if not span > 0.0:  # one possible value: the mean is known
        return low, high
    y = np.clip((np.asarray(values, dtype=np.float64) - low) / span, 0.0, 1.0)
    log_ratio = math.log(2.0 / (1.0 - level))
    bets = _bets(y, log_ratio)
    lower = _end(y, bets, log_ratio, False)
    upper = _end(y, bets, log_ratio, True)
    mean = float(np.mean(values))
    return min(low + lower * span, mean), max(low + upper * span, mean)
