"""One cell's series of probes: how many to run, and what each probe's row must say about it; rebuilt
from the stored rows on resume (docs/measuring.md#a-cells-series)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

import msgspec

from benchd.engine import verdict
from benchd.engine.rows import Invalidation
from benchd.schemas import ProbePlan, Row, ThermalReading
from benchd.sensors.suspend.sensor import STALL_THRESHOLD_S, StopWatch, SuspendClock, slept_s
from benchd.sensors.thermal.sensor import ThermalSensor

#: Re-runs of invalidated probes allowed per cell.
MAX_RERUNS = 3


class CellSeries:
    """The rows of one (candidate, context, kind) so far, and the rule that says whether to go on."""

    def __init__(self, plan: ProbePlan, rows: Sequence[Row] = (), *, ci_stop: bool = True) -> None:
        self.plan = plan
        self.ci_stop = ci_stop  # False: the context's pair rule (engine.rounds) stops an adaptive cell
        self.rows: list[Row] = sorted((r for r in rows if r.status != "aborted"), key=lambda r: r.probe)

    def add(self, row: Row) -> None:
        if row.status != "aborted":
            self.rows = sorted([*(r for r in self.rows if r.probe != row.probe), row], key=lambda r: r.probe)

    @property
    def valid(self) -> list[Row]:
        return [r for r in self.rows if r.invalidated is None]

    def values(self, metric: str | None = None) -> list[float]:
        """The metric over ok valid probes, in probe order (what the CI and the throttle check read)."""
        name = metric or self.plan.metric
        return [float(v) for r in self.valid
                if r.status == "ok" and not r.short and (v := getattr(r, name, None)) is not None]

    def done(self) -> bool:
        valid = self.valid
        if len(self.rows) - len(valid) > MAX_RERUNS:
            return True
        if not self.plan.adaptive:
            return len(valid) >= self.plan.min
        if len(valid) >= self.plan.max:
            return True
        if len(valid) < self.plan.min:
            return False
        vals = self.values()
        return not vals or (self.ci_stop and verdict.ci_target_met(vals, self.plan.target_ci_pct))

    def next_probe(self) -> int | None:
        """The next probe index to run (the lowest unused: an aborted probe runs again), or None."""
        if self.done():
            return None
        used = {r.probe for r in self.rows}
        return next(i for i in range(len(used) + 1) if i not in used)

    def pending_floor(self) -> list[int]:
        """Indices still needed to reach the lower bound (what a server that never starts fails)."""
        used = {r.probe for r in self.rows}
        need = max(0, self.plan.min - len(self.valid))
        out: list[int] = []
        i = 0
        while len(out) < need:
            if i not in used:
                out.append(i)
            i += 1
        return out


def series_row(row: Row, plan: ProbePlan) -> Row:
    """The part of a row the series, its verdict and the pair rule read (a few hundred bytes a probe)."""
    metric = plan.metric
    reasons = {metric: row.null_reasons[metric]} if metric in row.null_reasons else {}
    return Row(job=row.job, candidate=row.candidate, runtime=row.runtime, context=row.context, kind=row.kind,
               probe=row.probe, status=row.status, short=row.short, invalidated=row.invalidated,
               throttle=row.throttle, round=row.round, visit=row.visit, start=row.start, null_reasons=reasons,
               **{metric: getattr(row, metric)})


class SeriesBook:
    """The job's progress record: cells' rows and series, and the keys done (`ci_stop` False: pair rule stops)."""

    def __init__(self, plan: ProbePlan, rows: Iterable[Row] = (), *, ci_stop: bool = True,
                 sustained_runs: int = 1) -> None:
        self.plan = plan
        self.ci_stop = ci_stop
        self.sustained_runs = sustained_runs
        self.cells: dict[tuple[str, int, str], list[Row]] = {}
        for r in rows:
            self.add(r)

    def add(self, row: Row) -> None:
        key = (row.candidate, row.context, row.kind)
        kept = series_row(row, self.plan) if row.kind in ("probe", "sentinel") else row
        self.cells[key] = [*(r for r in self.cells.get(key, []) if r.probe != row.probe), kept]

    def rows(self, candidate: str, context: int, kind: str = "probe") -> list[Row]:
        """The cell's rows kept (not aborted), in probe order."""
        return sorted((r for r in self.cells.get((candidate, context, kind), []) if r.status != "aborted"),
                      key=lambda r: r.probe)

    def series(self, candidate: str, context: int, kind: str = "probe") -> CellSeries:
        plan = self.plan
        if kind == "sentinel":
            n = max(1, len(CellSeries(plan, self.cells.get((candidate, context, "probe"), [])).valid))
            plan = ProbePlan(False, n, n, plan.target_ci_pct, plan.metric, plan.throttle_pct)
        if kind == "sustained":
            runs = self.sustained_runs
            plan = ProbePlan(False, runs, runs, plan.target_ci_pct, plan.metric, plan.throttle_pct)
        return CellSeries(plan, self.cells.get((candidate, context, kind), []), ci_stop=self.ci_stop or kind != "probe")


class Watch:
    """Watches one probe from its start: the sleep clock's gap, and the server's state polled."""

    def __init__(self, clock: SuspendClock, pid: int) -> None:
        self.clock = clock
        self.gap0 = clock.gap()
        self.stop_watch = StopWatch(pid)
        self.stop_watch.start()
        self.slept_s: float | None = None
        self.stopped_s: float | None = None
        self.stalled_s: float | None = None

    async def cancel(self) -> None:
        await self.stop_watch.stop()

    async def finish(self) -> Invalidation | None:
        """Stop watching; the reason to throw the probe away, if the machine slept or the server stopped."""
        self.stopped_s = await self.stop_watch.stop()
        self.stalled_s = None if self.stopped_s is None else round(self.stop_watch.stalled_s, 3)
        self.slept_s = slept_s(self.gap0, self.clock.gap())
        return invalidation(self.clock.source, self.slept_s, self.stopped_s)

    async def annotate(self, row: Row, *, series: CellSeries | None, plan: ProbePlan, sensor: ThermalSensor,
                       target_celsius: float) -> Row:
        """The finished probe's row with what the watch saw and, when ok, its throttle check."""
        thermal = await asyncio.to_thread(sensor.read) if row.status == "ok" else None
        return annotate(row, earlier=series.values() if series else [], plan=plan, thermal=thermal,
                        target_celsius=target_celsius, clock=self.clock, slept_s=self.slept_s, stopped_s=self.stopped_s,
                        stalled_s=self.stalled_s)


def invalidation(clock_source: str, slept_s: float | None, stopped_s: float | None,
                 during: str = "the probe") -> Invalidation | None:
    """Why a finished probe's (or start's) numbers cannot be used: the machine slept, or the server was stopped."""
    if slept_s:
        return Invalidation("machine-slept", f"the machine slept {slept_s:.1f} s during {during} ({clock_source})")
    if stopped_s:
        return Invalidation("server-stopped", f"the server process was stopped for ~{stopped_s:.1f} s during {during}")
    return None


def thermal_state(reading: ThermalReading, target_celsius: float) -> tuple[bool | None, str]:
    """(nominal?, words) of a thermal reading: True cool/nominal, False hot, None unavailable."""
    if not reading.available or (reading.celsius is None and reading.pressure is None):
        return None, f"unavailable ({reading.reason or 'no reading'})"
    if reading.celsius is not None:
        ok = reading.celsius <= target_celsius
        return ok, f"{reading.celsius:.1f} °C {'<=' if ok else '>'} {target_celsius:g} °C ({reading.source})"
    return reading.pressure == "nominal", f"pressure {reading.pressure} ({reading.source})"


def annotate(row: Row, *, earlier: Sequence[float], plan: ProbePlan, thermal: ThermalReading | None,
             target_celsius: float, clock: SuspendClock, slept_s: float | None, stopped_s: float | None,
             stalled_s: float | None) -> Row:
    """The probe row with its suspension figures and, when ok and valid, its throttle check."""
    sources = dict(row.sources)
    reasons = dict(row.null_reasons)
    sources["suspended_s"] = clock.source
    if slept_s is None:
        reasons["suspended_s"] = getattr(clock, "reason", None) or "sleep clock unreadable"
    sources["server_stopped_s"] = "psutil:process-state polled every 0.1 s during the probe"
    if stopped_s is None:
        reasons["server_stopped_s"] = "server process state unreadable"
    sources["stalled_s"] = ("benchd:lateness of its 0.1 s poll beyond 0.05 s, summed over the probe "
                            f"(over {STALL_THRESHOLD_S:g} s: flagged in the report)")
    if stalled_s is None:
        reasons["stalled_s"] = "not polled: the server process state was unreadable"
    changes: dict[str, object] = {"suspended_s": slept_s, "server_stopped_s": stopped_s, "stalled_s": stalled_s}
    if row.invalidated is None and row.status == "ok" and row.kind != "sustained":
        nominal, words = thermal_state(thermal, target_celsius) if thermal else (None, "not read")
        value = getattr(row, plan.metric, None)
        check = verdict.throttle_check(earlier, value, metric=plan.metric, threshold_pct=plan.throttle_pct,
                                       thermal_nominal=nominal, thermal_text=words)
        changes["throttle"] = check
        sources["throttle"] = f"engine:{plan.metric} vs the median of the cell's earlier ok probes; thermal {words}"
    return msgspec.structs.replace(row, sources=sources, null_reasons=reasons, **changes)
