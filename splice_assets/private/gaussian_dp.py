"""The exact (epsilon, delta) curve of one Gaussian mechanism, in the standard library alone.

For sigma/Delta = s, the Gaussian mechanism is (epsilon, delta)-DP exactly when
delta >= Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s) (Balle & Wang 2018, Theorem 8). Gaussian mechanisms
compose exactly to one Gaussian with s = (sum_i s_i^-2)^(-1/2) (Dong, Roth & Su 2022, Cor. 3.3), so this curve
calibrates every release and composes a lifetime of them. It is what ``dp_accounting.gaussian_mechanism`` computes
(the tests hold it to that library); written here on ``math.erfc`` so that planning a release and reading a budget
do not import dp_accounting and SciPy (about 1.2 s).

Both inverses bisect to the last float and return the end of the bracket on the private side: the larger sigma,
the larger epsilon.
"""

from __future__ import annotations

import math
from collections.abc import Callable

_SQRT_HALF = math.sqrt(0.5)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
#: Below this x, erfc(-x/sqrt 2) nears the floats' floor and log Phi(x) takes its asymptotic series.
_SERIES_BELOW = -35.0


def log_ndtr(x: float) -> float:
    """log Phi(x), the standard normal's log CDF, to ~1e-15 relative over the floats."""
    if x >= 0.0:
        return math.log1p(-0.5 * math.erfc(x * _SQRT_HALF))
    if x >= _SERIES_BELOW:
        return math.log(0.5 * math.erfc(-x * _SQRT_HALF))
    # Mills ratio: Phi(x) = phi(x)/|x| (1 - 1/x^2 + 3/x^4 - 15/x^6 + 105/x^8 - ...); the next term is < 4e-13.
    u = 1.0 / (x * x)
    series = 1.0 - u * (1.0 - u * (3.0 - u * (15.0 - u * 105.0)))
    return -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI + math.log(series)


def log_delta(multiplier: float, epsilon: float) -> float:
    """log delta(epsilon) of the Gaussian mechanism with sigma/Delta = ``multiplier`` (-inf when delta is 0)."""
    s = multiplier
    a = log_ndtr(1.0 / (2.0 * s) - epsilon * s)
    b = epsilon + log_ndtr(-1.0 / (2.0 * s) - epsilon * s)
    return a + math.log(-math.expm1(b - a)) if b < a else -math.inf


def sigma_for(epsilon: float, delta: float) -> float:
    """The smallest sigma/Delta whose Gaussian mechanism is (epsilon, delta)-DP, rounded up to a float that is."""
    target = math.log(delta)
    lo, hi = 0.1, 1.0
    while log_delta(lo, epsilon) < target:
        lo, hi = lo / 10.0, lo
    while log_delta(hi, epsilon) > target:
        lo, hi = hi, hi * 10.0
    return _bisect(lambda s: log_delta(s, epsilon) <= target, lo, hi)


def epsilon_for(multiplier: float, delta: float) -> float:
    """The smallest epsilon at which the Gaussian mechanism with sigma/Delta = ``multiplier`` is (epsilon, delta)-DP,
    rounded up to a float at which it is."""
    if math.isinf(multiplier):
        return 0.0
    target = math.log(delta)
    if log_delta(multiplier, 0.0) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while log_delta(multiplier, hi) > target:
        lo, hi = hi, hi * 10.0
    return _bisect(lambda eps: log_delta(multiplier, eps) <= target, lo, hi)


def _bisect(is_private: Callable[[float], bool], lo: float, hi: float) -> float:
    """The smallest float in (lo, hi] where the monotone ``is_private`` holds, given it fails at lo and holds at hi."""
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return hi
        if is_private(mid):
            hi = mid
        else:
            lo = mid


#: A delta below DELTA_FAR_BELOW / n is far below 1/n: ``delta_cost`` says what it costs in sigma.
DELTA_FAR_BELOW = 1e-3
#: What such a delta is compared with: delta = 1/(DELTA_REFERENCE_ROWS n), a conventional "well below 1/n".
DELTA_REFERENCE_ROWS = 100


def delta_cost(epsilon: float, delta: float, n: int) -> float | None:
    """sigma at ``delta`` over sigma at delta = 1/(100 n), both at ``epsilon``, when delta < 1e-3/n; else None.

    The sensitivity does not depend on delta, so the ratio of the noise multipliers is the ratio of the sigmas."""
    if n < 1 or not 0.0 < delta < DELTA_FAR_BELOW / n:
        return None
    return sigma_for(epsilon, delta) / sigma_for(epsilon, 1.0 / (DELTA_REFERENCE_ROWS * n))


def delta_cost_text(epsilon: float, delta: float, n: int) -> str | None:
    """One line on what a far-below-1/n delta costs in sigma (None when delta is not that far below)."""
    ratio = delta_cost(epsilon, delta, n)
    if ratio is None:
        return None
    reference = 1.0 / (DELTA_REFERENCE_ROWS * n)
    return (f"delta = {delta:.3g} costs sigma x{ratio:.1f} against delta = 1/({DELTA_REFERENCE_ROWS} n) = "
            f"{reference:.2g} at n = {n:,}, epsilon = {epsilon:.4g} (a larger delta below 1/n means less noise)")
