"""The sweep's drift: the sentinel (the first cell run again at the end, `kind = "sentinel"`) against
the first run by the one comparison (docs/metrics.md)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from benchd.schemas import Row, Sweep, SweepDrift
from benchd.stats.comparison import ALPHA, AXES, compare_axis


def _series(rows: Sequence[Row], cand: str, ctx: int, kind: str, metric: str) -> list[float]:
    return [float(v) for r in sorted(rows, key=lambda r: r.probe)
            if r.candidate == cand and r.context == ctx and r.kind == kind and r.status == "ok" and not r.short
            and r.invalidated is None and (v := getattr(r, metric, None)) is not None]


def sweep_drift(sweep: Sweep, rows: Sequence[Row], alpha: float = ALPHA) -> tuple[SweepDrift | None, str | None]:
    """(drift, None), or (None, why there is none)."""
    if not sweep.sentinel_on():
        return None, ("sentinel = false" if sweep.sentinel is False
                      else "a fixed probe count runs it only with sentinel = true")
    # the engine runs the first candidate's first cell again, or the first the race kept: the rows say which
    cand = next((r.candidate for r in rows if r.kind == "sentinel"), sweep.candidates[0].id)
    ctx, metric = min(sweep.contexts), sweep.probe_plan().metric
    first = _series(rows, cand, ctx, "probe", metric)
    again = _series(rows, cand, ctx, "sentinel", metric)
    if not any(r.kind == "sentinel" for r in rows):
        return None, ("the sentinel never ran (job ended early?)" if first
                      else "the first cell has no ok probe to compare with")
    base = dict(candidate=cand, context=ctx, metric=metric, n_first=len(first), n_sentinel=len(again),
                target_pct=sweep.sentinel_drift_pct)
    if not first or not again:
        side = "first run" if not first else "sentinel"
        return SweepDrift(**base, summary=f"no drift figure: the {side} has no ok {metric} value",  # type: ignore[arg-type]
                          null_reasons={"ratio": f"the {side} has no ok {metric} value"}), None
    return _compared(sweep, base, metric, f"{cand} @ {ctx}: {metric}", (first, again), alpha), None


def _compared(sweep: Sweep, base: dict[str, object], metric: str, cell: str,
              series: tuple[list[float], list[float]], alpha: float) -> SweepDrift:
    first, again = series
    m1, m2 = statistics.median(first), statistics.median(again)
    if m1 == 0:
        return SweepDrift(**base, first_median=m1, sentinel_median=m2,  # type: ignore[arg-type]
                          summary="no drift figure: the first run's median is 0",
                          null_reasons={"ratio": "first run's median is 0"})
    better = AXES[metric].better if metric in AXES else "higher"
    v = compare_axis(first, again, axis=metric, better=better, margin_pct=sweep.sentinel_drift_pct, alpha=alpha)
    ratio = m2 / m1
    pct = (ratio - 1) * 100
    where = f"{cell} median {m1:.4g} first, {m2:.4g} at the end"
    drifted = {"different": True, "tied": False}.get(v.verdict)
    summary = {True: f"the whole sweep drifted {pct:+.1f} %", None: "sweep drift unresolved",
               False: f"no sweep drift beyond ±{sweep.sentinel_drift_pct:g} %"}[drifted]
    summary += f" ({where}; {v.text})"
    reasons = {} if v.guard_p is not None else {"p_value": v.text}
    return SweepDrift(**base, first_median=m1, sentinel_median=m2, ratio=ratio, drift_pct=pct,  # type: ignore[arg-type]
                      p_value=v.guard_p, drifted=drifted, verdict=v.verdict, text=v.text, alpha=alpha,
                      summary=summary, null_reasons=reasons)
