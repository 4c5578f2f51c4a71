"""The distributions behind `stats.comparison` (its only user), in pure Python (docs/measuring.md#rank-tests)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from math import comb

#: Exact rank-sum enumeration up to this many pooled values; beyond, the normal approximation.
EXACT_LIMIT = 60


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-14
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def _t_pdf(t: float, df: float) -> float:
    lc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(lc - (df + 1) / 2 * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile (p > 0.5) of Student's t with `df` > 0 degrees of freedom."""
    if not 0.5 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df > 0 (got p={p}, df={df})")
    if df == 1.0:
        return math.tan(math.pi * (p - 0.5))
    z = _normal_quantile(p)
    t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)
    lo, hi = 0.0, max(2.0 * t, 10.0)
    while t_cdf(hi, df) < p:
        hi *= 2.0
    t = min(max(t, lo), hi)
    for _ in range(100):
        f = t_cdf(t, df) - p
        if abs(f) < 1e-12:
            break
        if f < 0:
            lo = t
        else:
            hi = t
        step = t - f / _t_pdf(t, df)
        t = step if lo < step < hi else (lo + hi) / 2.0
        if hi - lo < 1e-12 * max(1.0, t):
            break
    return t


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _tie_groups2(values: Sequence[float]) -> tuple[list[int], list[int]]:
    """(doubled mid-rank per value, sizes of the tie groups in ascending order)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks2 = [0] * len(values)
    sizes: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks2[order[k]] = (i + 1) + (j + 1)
        sizes.append(j - i + 1)
        i = j + 1
    return ranks2, sizes


def _group_ranks2(sizes: Sequence[int]) -> list[int]:
    out, start = [], 1
    for g in sizes:
        out.append(start + (start + g - 1))
        start += g
    return out


@lru_cache(maxsize=256)
def _rank_sum_counts(n1: int, sizes: tuple[int, ...]) -> dict[int, int]:
    """Doubled rank sum -> number of n1-subsets of the pooled values, for this tie pattern."""
    dp: list[dict[int, int]] = [{} for _ in range(n1 + 1)]
    dp[0][0] = 1
    for g, r2 in zip(sizes, _group_ranks2(sizes), strict=True):
        new: list[dict[int, int]] = [dict(d) for d in dp]
        for k in range(n1 + 1):
            for s, cnt in dp[k].items():
                for j in range(1, min(g, n1 - k) + 1):
                    tgt = new[k + j]
                    key = s + j * r2
                    tgt[key] = tgt.get(key, 0) + cnt * comb(g, j)
        dp = new
    return dp[n1]


def mann_whitney_min_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact test can give at these sizes (complete separation)."""
    return 1.0 if n1 == 0 or n2 == 0 else min(1.0, 2 / comb(n1 + n2, n1))


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> tuple[float, bool]:
    """(two-sided p, exact?) of the Mann–Whitney U test of `a` against `b` (mid-ranks for ties)."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    ranks2, sizes = _tie_groups2([*a, *b])
    w2 = sum(ranks2[:n1])
    n = n1 + n2
    if n > EXACT_LIMIT:
        mean2 = n1 * (n + 1)
        ties = sum(g**3 - g for g in sizes)
        var2 = 4 * n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
        if var2 <= 0:
            return 1.0, False
        return min(1.0, 2 * _normal_sf(max(0.0, abs(w2 - mean2) - 2) / math.sqrt(var2))), False
    counts = _rank_sum_counts(n1, tuple(sizes))
    mean2 = n1 * (n + 1)  # the doubled rank sum's mean, an integer
    dev = abs(w2 - mean2)
    extreme = sum(c for s, c in counts.items() if abs(s - mean2) >= dev)
    return min(1.0, extreme / comb(n, n1)), True


@lru_cache(maxsize=256)
def _signed_rank_counts(sizes: tuple[int, ...]) -> dict[int, int]:
    """Doubled positive-rank sum -> number of sign patterns, for this tie pattern of |d|."""
    dp: dict[int, int] = {0: 1}
    for g, r2 in zip(sizes, _group_ranks2(sizes), strict=True):
        new: dict[int, int] = {}
        for s, cnt in dp.items():
            for j in range(g + 1):
                key = s + j * r2
                new[key] = new.get(key, 0) + cnt * comb(g, j)
        dp = new
    return dp


def signed_rank_min_p(n_nonzero: int) -> float:
    """The smallest two-sided p the exact signed-rank test can give with this many non-zero pairs."""
    return min(1.0, 2.0 / 2.0**n_nonzero)


def signed_rank_p(d: Sequence[float]) -> tuple[float, int]:
    """(exact two-sided p, non-zero pairs) of the Wilcoxon signed-rank test on differences `d`."""
    nz = [x for x in d if x != 0]
    if not nz:
        return 1.0, 0
    ranks2, sizes = _tie_groups2([abs(x) for x in nz])
    w2 = sum(r for r, x in zip(ranks2, nz, strict=True) if x > 0)
    total2 = sum(ranks2)
    counts = _signed_rank_counts(tuple(sizes))
    dev = abs(2 * w2 - total2)
    extreme = sum(c for s, c in counts.items() if abs(2 * s - total2) >= dev)
    return min(1.0, extreme / 2 ** len(nz)), len(nz)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p: discordant pairs b (A only) and c (B only) under Binomial(b + c, ½)."""
    m = b + c
    if m == 0:
        return 1.0
    k = min(b, c)
    return min(1.0, 2 * sum(comb(m, i) for i in range(k + 1)) / 2.0**m)


def _binom_cdf(k: int, n: int, p: float) -> float:
    return 1.0 if k >= n else 1.0 - betainc(k + 1, n - k, p)


def clopper_pearson(k: int, n: int, level: float) -> tuple[float, float]:
    """The exact (Clopper–Pearson) two-sided interval at `level` for a proportion k of n."""
    if n == 0:
        return 0.0, 1.0
    tail = (1.0 - level) / 2.0

    def solve(target: float, kk: int) -> float:  # p with P(X <= kk | p) == target, by bisection
        lo, hi = 0.0, 1.0
        for _ in range(80):
            mid = (lo + hi) / 2
            if _binom_cdf(kk, n, mid) > target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    low = 0.0 if k == 0 else solve(1.0 - tail, k - 1)
    high = 1.0 if k == n else solve(tail, k)
    return low, high


def wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval for a proportion k of n at normal quantile `z`."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1.0 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z / den * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, mid - half), min(1.0, mid + half)


def newcombe_paired(both: int, only_a: int, only_b: int, neither: int, level: float) -> tuple[float, float]:
    """Newcombe's method 10 (1998): the score interval at `level` for the paired difference of pass rates
    B − A, from the 2×2 table (both passed, A only, B only, neither): Wilson intervals of each rate
    combined with the table's correlation φ (0 when a margin is empty)."""
    n = both + only_a + only_b + neither
    if n == 0:
        return -1.0, 1.0
    z = _normal_quantile(1.0 - (1.0 - level) / 2.0)
    p1, p2 = (both + only_a) / n, (both + only_b) / n  # A's and B's pass rates
    l1, u1 = wilson(both + only_a, n, z)
    l2, u2 = wilson(both + only_b, n, z)
    den = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = (both * neither - only_a * only_b) / math.sqrt(den) if den > 0 else 0.0
    d = p2 - p1
    lo = d - math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    hi = d + math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return max(-1.0, lo), min(1.0, hi)


def normal_quantile(p: float) -> float:
    """The p-quantile of the standard normal."""
    return _normal_quantile(p)
