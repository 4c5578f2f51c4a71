"""The sweep's drift, from the sentinel: the first cell run again at the end of the sweep.

A whole sweep can drift (a laptop heating up over a night, a background job starting) while every
cell looks steady on its own. The engine re-runs the sweep's first cell (same candidate, context and
probe count) as `kind = "sentinel"` rows; here its median is divided by the first run's, and the two
series are compared with the exact Mann–Whitney test `compare` uses. Beyond `sentinel_drift_pct` the
runbook's summary says the whole sweep drifted and by how much.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from benchd.results.compare import ALPHA, EXACT_LIMIT, mann_whitney_exact, min_p_value
from benchd.schemas import Row, Sweep, SweepDrift


def _series(rows: Sequence[Row], cand: str, ctx: int, kind: str, metric: str) -> list[float]:
    return [float(v) for r in sorted(rows, key=lambda r: r.probe)
            if r.candidate == cand and r.context == ctx and r.kind == kind and r.status == "ok" and not r.short
            and r.invalidated is None and (v := getattr(r, metric, None)) is not None]


def sweep_drift(sweep: Sweep, rows: Sequence[Row]) -> tuple[SweepDrift | None, str | None]:
    """(drift, None), or (None, why there is none)."""
    if not sweep.sentinel_on():
        return None, "sentinel off (sentinel = false, or a fixed probe count without sentinel = true)"
    plan = sweep.probe_plan()
    cand, ctx, metric = sweep.candidates[0].id, min(sweep.contexts), plan.metric
    first = _series(rows, cand, ctx, "probe", metric)
    again = _series(rows, cand, ctx, "sentinel", metric)
    if not any(r.kind == "sentinel" for r in rows):
        why = "the first cell has no ok probe to compare with" if not first else "the sentinel never ran (job ended early?)"
        return None, why
    base = dict(candidate=cand, context=ctx, metric=metric, n_first=len(first), n_sentinel=len(again),
                target_pct=sweep.sentinel_drift_pct)
    if not first or not again:
        side = "first run" if not first else "sentinel"
        return SweepDrift(**base, summary=f"no drift figure: the {side} has no ok {metric} value",  # type: ignore[arg-type]
                          null_reasons={"ratio": f"the {side} has no ok {metric} value"}), None
    m1, m2 = statistics.median(first), statistics.median(again)
    ratio = m2 / m1 if m1 else None
    p: float | None = None
    reasons: dict[str, str] = {}
    if min_p_value(len(first), len(again)) > ALPHA:
        reasons["p_value"] = f"too few probes for the exact test to reach p < {ALPHA} ({len(first)} vs {len(again)})"
    elif len(first) + len(again) > EXACT_LIMIT:
        reasons["p_value"] = f"more than {EXACT_LIMIT} pooled probes: the exact test is not run"
    else:
        p = mann_whitney_exact(first, again)[1]
    if ratio is None:
        reasons["ratio"] = "first run's median is 0"
        return SweepDrift(**base, first_median=m1, sentinel_median=m2, p_value=p,  # type: ignore[arg-type]
                          summary="no drift figure: the first run's median is 0", null_reasons=reasons), None
    pct = (ratio - 1) * 100
    drifted = abs(pct) > sweep.sentinel_drift_pct
    ptext = f"p = {p:.3g}" if p is not None else f"p null ({reasons['p_value']})"
    summary = (f"the whole sweep drifted {pct:+.1f} % ({cand} @ {ctx}: {metric} median {m1:.4g} first, {m2:.4g} "
               f"at the end; Mann–Whitney {ptext}), beyond the ±{sweep.sentinel_drift_pct:g} % target"
               if drifted else
               f"no sweep drift beyond ±{sweep.sentinel_drift_pct:g} %: the sentinel's {metric} median is "
               f"{pct:+.1f} % of the first run's ({ptext})")
    return SweepDrift(**base, first_median=m1, sentinel_median=m2, ratio=ratio, drift_pct=pct, p_value=p,  # type: ignore[arg-type]
                      drifted=drifted, summary=summary, null_reasons=reasons), None
