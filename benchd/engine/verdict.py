"""A verdict on every cell: is the number steady, too wide, moving, or are there too few probes to say.
Pure; the probe loop, the cell statistics and the results stage all judge with it (docs/measuring.md#cell-verdicts)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import msgspec

from benchd.engine.metrics import metric_stats
from benchd.schemas import CellStats, CellVerdict, MetricStats, ProbePlan, Row, ThrottleCheck
from benchd.stats.cells import (
    CI_MIN_N,
    ci_half_width_pct,
    is_drifting,
    trend,
)
from benchd.stats.notation import plural
from benchd.stats.rows import usable

#: Earlier ok probes a running median needs before a probe can be called throttle-suspect.
THROTTLE_MIN_PRIOR = 3


def ci_target_met(values: Sequence[float], target_ci_pct: float) -> bool:
    """The adaptive stop rule: the CI exists and its half-width is within the target."""
    hw = ci_half_width_pct(values)
    return hw is not None and hw <= target_ci_pct


def judge(values: Sequence[float], *, metric: str, target_ci_pct: float, probes_used: int, adaptive: bool,
          throttle_suspects: int = 0, invalidated: int = 0, null_reason: str | None = None,
          planned: int | None = None) -> CellVerdict:
    """The verdict on one cell's series of `metric` values (ok probes, probe order). `planned`: the fixed
    count (None: `probes_used`)."""
    n = len(values)
    common = dict(metric=metric, n=n, probes_used=probes_used, adaptive=adaptive, target_ci_pct=target_ci_pct,
                  throttle_suspects=throttle_suspects, invalidated=invalidated)
    if n == 0:
        return CellVerdict(verdict=None, reason=null_reason or f"no ok probe measured {metric}", **common)  # type: ignore[arg-type]
    t = trend(values) if n >= 3 else None
    hw = ci_half_width_pct(values)
    if n < CI_MIN_N:
        return CellVerdict(verdict="too few", trend=t, reason=_too_few(n, adaptive, probes_used, planned),
                           **common)  # type: ignore[arg-type]
    width = f"CI ±{hw:.2f} %" if hw is not None else "CI null (median 0)"
    if t is not None and is_drifting(t, target_ci_pct):
        why = (f"{metric} moved {t.drift_pct:+.1f} % over {n} probes (Theil–Sen; Mann–Kendall p = {t.p_value:.3g}),"
               f" beyond the ±{target_ci_pct:g} % target; {width}")
        return CellVerdict(verdict="drifting", ci_half_width_pct=hw, trend=t, reason=why, **common)  # type: ignore[arg-type]
    if ci_target_met(values, target_ci_pct):
        return CellVerdict(verdict="steady", ci_half_width_pct=hw, trend=t,
                           reason=f"{width} <= ±{target_ci_pct:g} % target after {n} ok probes, no trend",
                           **common)  # type: ignore[arg-type]
    stop = f"max {probes_used} probes reached" if adaptive else f"fixed {probes_used} probes"
    return CellVerdict(verdict="unsteady", ci_half_width_pct=hw, trend=t,
                       reason=f"{width}, wider than the ±{target_ci_pct:g} % target ({stop})", **common)  # type: ignore[arg-type]


def _too_few(n: int, adaptive: bool, used: int, planned: int | None) -> str:
    """Why a cell has fewer ok probes than the CI needs: a fixed count below it, fewer probes run than the
    count (the race dropped the candidate, the job ended), or probes that were not ok."""
    planned = used if planned is None else planned
    why = ("" if adaptive else " (fixed probe count below the CI's minimum)" if planned < CI_MIN_N
           else f" ({used} of the fixed {planned} probes ran)" if used < planned
           else f" ({used - n} of {used} probes not ok)" if n < used else "")
    return f"{plural(n, 'ok probe')}: the distribution-free 95 % CI of the median needs {CI_MIN_N}{why}"


def cell_verdict(rows: Sequence[Row], plan: ProbePlan) -> CellVerdict:
    """The verdict on one cell from its probe rows (any order; aborted ones ignored)."""
    kept = sorted((r for r in rows if r.status != "aborted"), key=lambda r: r.probe)
    valid = [r for r in kept if r.invalidated is None]
    ok = [r for r in valid if usable(r, None)]
    values = [float(v) for r in ok if (v := getattr(r, plan.metric, None)) is not None]
    return judge(values, metric=plan.metric, target_ci_pct=plan.target_ci_pct, probes_used=len(valid),
                 adaptive=plan.adaptive, throttle_suspects=_suspects(ok),
                 invalidated=len(kept) - len(valid), null_reason=_null_reason(ok, plan.metric), planned=plan.min)


def _suspects(ok: Sequence[Row]) -> int:
    return sum(1 for r in ok if r.throttle and r.throttle.suspect)


def _null_reason(ok: Sequence[Row], metric: str) -> str | None:
    """The distinct null reasons of `metric` over the rows, joined (None when there is none)."""
    reasons = sorted({r.null_reasons.get(metric, "") for r in ok if getattr(r, metric, None) is None} - {""})
    return "; ".join(reasons) or None


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


def throttle_check(earlier: Sequence[float], value: float | None, *, metric: str, threshold_pct: float,
                   thermal_nominal: bool | None, thermal_text: str) -> ThrottleCheck:
    """Judge one ok probe against its cell's earlier ok median; a hot `thermal_nominal` explains a slowdown."""
    if value is None:
        return ThrottleCheck(metric=metric, value=None, running_median=None, drop_pct=None,
                             threshold_pct=threshold_pct, thermal=thermal_text, suspect=False,
                             note=f"{metric} null in this probe: not assessed")
    if len(earlier) < THROTTLE_MIN_PRIOR:
        return ThrottleCheck(metric=metric, value=value, running_median=None, drop_pct=None,
                             threshold_pct=threshold_pct, thermal=thermal_text, suspect=False,
                             note=f"{plural(len(earlier), 'earlier ok probe')}: a running median needs {THROTTLE_MIN_PRIOR}")
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
