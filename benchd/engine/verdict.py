"""A verdict on every cell: is the number steady, too wide, moving, or are there too few probes to say.

Pure arithmetic over one cell's series of probe values in probe order (no I/O, no clock), so the
adaptive probe loop (engine.series), the runbook's cell statistics (engine.metrics) and the results
stage (Pareto, compare, report) all judge with the same code.

Reasons and facts: docs/measuring.md#cell-verdicts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import msgspec

from benchd.engine.metrics import CI_MIN_N, median_ci, metric_stats
from benchd.schemas import CellStats, CellVerdict, MetricStats, ProbePlan, Row, ThrottleCheck, Trend

ALPHA = 0.05
#: Exact Mann–Kendall distribution up to this many values (the DP is O(n³); beyond, normal approximation).
EXACT_MK_LIMIT = 60
#: Earlier ok probes a running median needs before a probe can be called throttle-suspect.
THROTTLE_MIN_PRIOR = 3
_Z975 = 1.959963984540054


def ci_half_width_pct(values: Sequence[float]) -> float | None:
    """Half-width of the median's 95 % CI in % of the median; None when n < 6 or the median is 0."""
    ci = median_ci(values)
    med = statistics.median(values) if values else 0.0
    if ci is None or med == 0:
        return None
    return (ci[1] - ci[0]) / 2.0 / abs(med) * 100.0


def ci_target_met(values: Sequence[float], target_ci_pct: float) -> bool:
    """The adaptive stop rule: the CI exists and its half-width is within the target."""
    hw = ci_half_width_pct(values)
    return hw is not None and hw <= target_ci_pct


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


# ---------------------------------------------------------------------------------------- verdict


def judge(values: Sequence[float], *, metric: str, target_ci_pct: float, probes_used: int, adaptive: bool,
          throttle_suspects: int = 0, invalidated: int = 0, null_reason: str | None = None) -> CellVerdict:
    """The verdict on one cell's series of `metric` values (ok probes, probe order)."""
    n = len(values)
    common = dict(metric=metric, n=n, probes_used=probes_used, adaptive=adaptive, target_ci_pct=target_ci_pct,
                  throttle_suspects=throttle_suspects, invalidated=invalidated)
    if n == 0:
        return CellVerdict(verdict=None, reason=null_reason or f"no ok probe measured {metric}", **common)  # type: ignore[arg-type]
    t = trend(values) if n >= 3 else None
    hw = ci_half_width_pct(values)
    if n < CI_MIN_N:
        why = (f"{n} ok probe(s): the distribution-free 95 % CI of the median needs {CI_MIN_N}"
               + (" (fixed probe count below the CI's minimum)" if not adaptive else ""))
        return CellVerdict(verdict="too few", trend=t, reason=why, **common)  # type: ignore[arg-type]
    width = f"CI ±{hw:.2f} %" if hw is not None else "CI null (median 0)"
    if t is not None and is_drifting(t, target_ci_pct):
        why = (f"{metric} moved {t.drift_pct:+.1f} % over {n} probes (Theil–Sen; Mann–Kendall p = {t.p_value:.3g}),"
               f" beyond the ±{target_ci_pct:g} % target; {width}")
        return CellVerdict(verdict="drifting", ci_half_width_pct=hw, trend=t, reason=why, **common)  # type: ignore[arg-type]
    if hw is not None and hw <= target_ci_pct:
        return CellVerdict(verdict="steady", ci_half_width_pct=hw, trend=t,
                           reason=f"{width} <= ±{target_ci_pct:g} % target after {n} ok probes, no trend",
                           **common)  # type: ignore[arg-type]
    stop = f"max {probes_used} probes reached" if adaptive else f"fixed {probes_used} probes"
    return CellVerdict(verdict="unsteady", ci_half_width_pct=hw, trend=t,
                       reason=f"{width} wider than the ±{target_ci_pct:g} % target ({stop})", **common)  # type: ignore[arg-type]


def cell_verdict(rows: Sequence[Row], plan: ProbePlan) -> CellVerdict:
    """The verdict on one cell from its probe rows (any order; aborted ones ignored)."""
    kept = sorted((r for r in rows if r.status != "aborted"), key=lambda r: r.probe)
    valid = [r for r in kept if r.invalidated is None]
    ok = [r for r in valid if r.status == "ok" and not r.short]  # a short probe did other work: out, like the medians
    values = [float(v) for r in ok if (v := getattr(r, plan.metric, None)) is not None]
    reasons = sorted({r.null_reasons.get(plan.metric, "") for r in ok if getattr(r, plan.metric, None) is None} - {""})
    return judge(values, metric=plan.metric, target_ci_pct=plan.target_ci_pct, probes_used=len(valid),
                 adaptive=plan.adaptive, throttle_suspects=sum(1 for r in ok if r.throttle and r.throttle.suspect),
                 invalidated=len(kept) - len(valid), null_reason="; ".join(reasons) or None)


def draft_acceptance_stats(rows: Sequence[Row]) -> MetricStats | None:
    """Draft acceptance over a cell's ok probes where a spec is configured (None where none is)."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok or all(r.null_reasons.get("draft_acceptance") == "no spec configured" for r in ok):
        return None
    return metric_stats("draft_acceptance", [r.draft_acceptance for r in ok],
                        [r.null_reasons.get("draft_acceptance") for r in ok if r.draft_acceptance is None])


def with_verdicts(cells: Sequence[CellStats], rows: Sequence[Row], plan: ProbePlan) -> list[CellStats]:
    """Each cell's statistics with its verdict and draft acceptance added (probe rows only)."""
    by_cell: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        if r.kind == "probe":
            by_cell.setdefault((r.candidate, r.context), []).append(r)
    out = []
    for c in cells:
        mine = by_cell.get((c.candidate, c.context), [])
        out.append(msgspec.structs.replace(c, verdict=cell_verdict(mine, plan), draft_acceptance=draft_acceptance_stats(mine)))
    return out


# --------------------------------------------------------------------------------------- throttle


def throttle_check(earlier: Sequence[float], value: float | None, *, metric: str, threshold_pct: float,
                   thermal_nominal: bool | None, thermal_text: str) -> ThrottleCheck:
    """Judge one ok probe against the median of its cell's earlier ok probes.

    `thermal_nominal`: True (sensor says cool/nominal), False (hot: the slowdown is explained, not
    suspect), None (no usable sensor: a slowdown the sensor cannot explain is suspect too).
    """
    if value is None:
        return ThrottleCheck(metric=metric, value=None, running_median=None, drop_pct=None,
                             threshold_pct=threshold_pct, thermal=thermal_text, suspect=False,
                             note=f"{metric} null in this probe: not assessed")
    if len(earlier) < THROTTLE_MIN_PRIOR:
        return ThrottleCheck(metric=metric, value=value, running_median=None, drop_pct=None,
                             threshold_pct=threshold_pct, thermal=thermal_text, suspect=False,
                             note=f"{len(earlier)} earlier ok probe(s): a running median needs {THROTTLE_MIN_PRIOR}")
    med = statistics.median(earlier)
    drop = (med - value) / med * 100.0 if med else 0.0
    slow = drop > threshold_pct
    suspect = slow and thermal_nominal is not False
    if not slow:
        note = f"{metric} {value:.1f} within {threshold_pct:g} % of the running median {med:.1f}"
    elif suspect:
        note = (f"throttle-suspect: {metric} {value:.1f} is {drop:.1f} % below the running median {med:.1f} "
                f"(threshold {threshold_pct:g} %) while thermal says {thermal_text}")
    else:
        note = (f"{metric} {value:.1f} is {drop:.1f} % below the running median {med:.1f}, explained by the "
                f"thermal reading ({thermal_text}): thermal throttling, not suspect")
    return ThrottleCheck(metric=metric, value=value, running_median=med, drop_pct=drop, threshold_pct=threshold_pct,
                         thermal=thermal_text, suspect=suspect, note=note)
