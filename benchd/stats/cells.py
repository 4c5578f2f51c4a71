"""Cell statistics: the distribution-free CI of a median, and a series' trend (Mann–Kendall, Theil–Sen).
Reasons and facts: docs/measuring.md#cell-statistics."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from benchd.schemas import Trend

ALPHA = 0.05
CI_LEVEL = 0.95
CI_MIN_N = 6
#: Exact Mann–Kendall distribution up to this many values (the DP is O(n³); beyond, normal approximation).
EXACT_MK_LIMIT = 60
_Z975 = 1.959963984540054


def median_ci(values: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float, float] | None:
    """Distribution-free CI of the median: (low, high, coverage), or None when n < 6; the narrowest symmetric
    order-statistic interval with coverage >= level."""
    xs = sorted(values)
    n = len(xs)
    if n < CI_MIN_N:
        return None
    best: tuple[float, float, float] | None = None
    tail = 0.0
    for j in range(1, n // 2 + 1):
        tail += math.comb(n, j - 1) / 2.0**n  # now P(B <= j-1)
        coverage = 1.0 - 2.0 * tail
        if coverage < level:
            break
        best = (xs[j - 1], xs[n - j], coverage)
    return best



def ci_half_width_pct(values: Sequence[float]) -> float | None:
    """Half-width of the median's 95 % CI in % of the median; None when n < 6 or the median is 0."""
    ci = median_ci(values)
    med = statistics.median(values) if values else 0.0
    if ci is None or med == 0:
        return None
    return (ci[1] - ci[0]) / 2.0 / abs(med) * 100.0


# ------------------------------------------------------------------------------------------ trend


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _mahonian(n: int) -> list[int]:
    """Permutations of n items counted by their number of inversions (index = inversions)."""
    counts = [1]
    for m in range(2, n + 1):
        new = [0] * (len(counts) + m - 1)
        for k, c in enumerate(counts):
            for i in range(m):
                new[k + i] += c
        counts = new
    return counts


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _tie_groups(values: Sequence[float]) -> list[int]:
    seen: dict[float, int] = {}
    for v in values:
        seen[v] = seen.get(v, 0) + 1
    return [t for t in seen.values() if t > 1]


def mk_variance(values: Sequence[float]) -> float:
    """Variance of S under no trend, corrected for tied values."""
    n = len(values)
    ties = sum(t * (t - 1) * (2 * t + 5) for t in _tie_groups(values))
    return (n * (n - 1) * (2 * n + 5) - ties) / 18.0


def mann_kendall(values: Sequence[float]) -> tuple[int, float, str]:
    """(S, two-sided p-value, method) of the Mann–Kendall test for a monotone trend in series order."""
    n = len(values)
    if n < 3:
        raise ValueError("a trend test needs at least 3 values")
    s = sum(_sign(values[j] - values[i]) for i in range(n) for j in range(i + 1, n))
    if not _tie_groups(values) and n <= EXACT_MK_LIMIT:
        # S = pairs − 2·inversions; P(|S| >= |s|) over the n! equally likely orders.
        counts = _mahonian(n)
        pairs = n * (n - 1) // 2
        extreme = sum(c for inv, c in enumerate(counts) if abs(pairs - 2 * inv) >= abs(s))
        return s, min(1.0, extreme / math.factorial(n)), "exact"
    var = mk_variance(values)
    if var <= 0:
        return s, 1.0, "normal approximation (all values tied)"
    z = (s - _sign(s)) / math.sqrt(var)  # continuity correction
    return s, min(1.0, 2.0 * _normal_sf(abs(z))), "normal approximation (ties)"


def theil_sen(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """(slope per probe, 95 % CI low, high): median of pairwise slopes, Sen's interval."""
    n = len(values)
    slopes = sorted((values[j] - values[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
    if not slopes:
        raise ValueError("a slope needs at least 2 values")
    slope = statistics.median(slopes)
    c = _Z975 * math.sqrt(mk_variance(values))
    m = len(slopes)
    lo_rank, hi_rank = (m - c) / 2.0, (m + c) / 2.0 + 1.0  # 1-based ranks of the bounds
    if lo_rank < 1 or hi_rank > m:
        return slope, None, None  # too few pairs for a 95 % interval
    return slope, slopes[round(lo_rank) - 1], slopes[round(hi_rank) - 1]


def trend(values: Sequence[float]) -> Trend | None:
    """The trend of a series (None below 3 values or with a zero median)."""
    med = statistics.median(values) if values else 0.0
    if len(values) < 3 or med == 0:
        return None
    s, p, method = mann_kendall(values)
    slope, lo, hi = theil_sen(values)
    start = statistics.median(v - slope * i for i, v in enumerate(values))  # the fitted line's first value
    base = start if start > 0 else abs(med)
    return Trend(n=len(values), s=s, p_value=p, method=method, slope_per_probe=slope, slope_ci_low=lo,
                 slope_ci_high=hi, drift_pct=slope * (len(values) - 1) / base * 100.0)


def is_drifting(t: Trend | None, target_pct: float) -> bool:
    return t is not None and t.p_value < ALPHA and abs(t.drift_pct) > target_pct
