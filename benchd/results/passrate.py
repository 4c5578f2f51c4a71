"""Pass rates a user can compare: the exact (Clopper–Pearson) 95 % interval of k passes in n tasks.

The interval's ends are the binomial probabilities p at which P(X >= k) = alpha/2 (low) and
P(X <= k) = alpha/2 (high), found by bisection on the exact binomial tail (n up to a few thousand
tasks: sums in log space stay exact enough and need no SciPy).
"""

from __future__ import annotations

import math
from collections.abc import Callable


def _log_pmf(n: int, k: int, p: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


def _cdf(n: int, k: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    return min(1.0, sum(math.exp(_log_pmf(n, i, p)) for i in range(k + 1)))


def _solve(f: Callable[[float], float], target: float) -> float:
    """The p in (0, 1) where the decreasing f(p) crosses target."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact two-sided (1 - alpha) interval of a pass rate; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    # P(X >= k) = 1 - P(X <= k-1) = alpha/2  <=>  P(X <= k-1) = 1 - alpha/2 (decreasing in p).
    low = 0.0 if k == 0 else _solve(lambda p: _cdf(n, k - 1, p), 1.0 - alpha / 2)
    high = 1.0 if k == n else _solve(lambda p: _cdf(n, k, p), alpha / 2)
    return low, high
