"""One cell's series of probes: how many to run, and what each probe's row must say about it.

- `CellSeries` decides the next probe index or that the cell is done. A fixed count runs that many
  valid probes; `probes = "auto"` runs at least `min`, then stops as soon as the distribution-free 95 %
  CI of the median of the plan's metric is within `target_ci_pct` of the median (`verdict.ci_target_met`),
  or at `max`. A probe invalidated by a sleep or a stopped server does not count: it is re-run (at most
  `MAX_RERUNS` times per cell, so a machine that keeps sleeping cannot stall the sweep). An adaptive cell
  with no ok value after `min` probes stops there: there is nothing to converge on. Short probes
  count as probes run but stay out of the values, like the medians. `SeriesBook` keeps every
  cell's rows (the drift sentinel's series repeats the first cell's count of valid probes).
- `Watch` follows one probe from its start (the sleep clock's gap, the server's state polled) and
  `annotate` turns a probe row into what it must record: the throttle check against the cell's
  running median, and, when the machine slept or the server was seen stopped during the probe, a failed
  row with that reason (`invalidated`), never a slow number.
- `throttle_checks` extends a `thermal` cooldown after a throttle-suspect probe: short check probes until one
  is back within the threshold, bounded by the policy's `max_seconds`; every check is in the record.

Resume-safe: the series is rebuilt from the rows already stored, so it continues where it stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from benchd.engine import probe, verdict
from benchd.engine.sizing import PromptSizer
from benchd.schemas import Candidate, Cooldown, CooldownRecord, ProbePlan, Row, ThermalReading
from benchd.sensors.suspend.sensor import StopWatch, SuspendClock, slept_s
from benchd.sensors.thermal.sensor import ThermalSensor
from benchd.servers.runtimes.base import RuntimeAdapter
from benchd.servers.supervisor import Server

#: Re-runs of invalidated probes allowed per cell.
MAX_RERUNS = 3


class CellSeries:
    """The rows of one (candidate, context, kind) so far, and the rule that says whether to go on."""

    def __init__(self, plan: ProbePlan, rows: Sequence[Row] = ()) -> None:
        self.plan = plan
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
        return not vals or verdict.ci_target_met(vals, self.plan.target_ci_pct)

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


class SeriesBook:
    """Every cell's rows so far (from the store on resume, then as committed), and each cell's series.
    The sentinel's series repeats the first run's count of valid probes, fixed."""

    def __init__(self, plan: ProbePlan, rows: Sequence[Row] = ()) -> None:
        self.plan = plan
        self.cells: dict[tuple[str, int, str], list[Row]] = {}
        for r in rows:
            self.add(r)

    def add(self, row: Row) -> None:
        key = (row.candidate, row.context, row.kind)
        self.cells[key] = [*(r for r in self.cells.get(key, []) if r.probe != row.probe), row]

    def series(self, candidate: str, context: int, kind: str = "probe") -> CellSeries:
        plan = self.plan
        if kind == "sentinel":
            n = max(1, len(CellSeries(plan, self.cells.get((candidate, context, "probe"), [])).valid))
            plan = ProbePlan(False, n, n, plan.target_ci_pct, plan.metric, plan.throttle_pct)
        return CellSeries(plan, self.cells.get((candidate, context, kind), []))


# --------------------------------------------------------------------------------------- per row


class Watch:
    """Watches one probe from its start: the sleep clock's gap, and the server's state polled."""

    def __init__(self, clock: SuspendClock, pid: int) -> None:
        self.clock = clock
        self.gap0 = clock.gap()
        self.stop_watch = StopWatch(pid)
        self.stop_watch.start()

    async def cancel(self) -> None:
        await self.stop_watch.stop()

    async def judge(self, row: Row, *, series: CellSeries | None, plan: ProbePlan, sensor: ThermalSensor,
                    target_celsius: float) -> Row:
        """The finished probe's row, annotated (`annotate`) with what the watch saw and the thermal reading."""
        stopped = await self.stop_watch.stop()
        thermal = await asyncio.to_thread(sensor.read) if row.status == "ok" else None
        return annotate(row, earlier=series.values() if series else [], plan=plan, thermal=thermal,
                        target_celsius=target_celsius, clock=self.clock, slept_s=slept_s(self.gap0, self.clock.gap()),
                        stopped_s=stopped)


def thermal_state(reading: ThermalReading, target_celsius: float) -> tuple[bool | None, str]:
    """(nominal?, words) of a thermal reading: True cool/nominal, False hot, None unavailable."""
    if not reading.available or (reading.celsius is None and reading.pressure is None):
        return None, f"unavailable ({reading.reason or 'no reading'})"
    if reading.celsius is not None:
        ok = reading.celsius <= target_celsius
        return ok, f"{reading.celsius:.1f} °C {'<=' if ok else '>'} {target_celsius:g} °C ({reading.source})"
    return reading.pressure == "nominal", f"pressure {reading.pressure} ({reading.source})"


def annotate(row: Row, *, earlier: Sequence[float], plan: ProbePlan, thermal: ThermalReading | None,
             target_celsius: float, clock: SuspendClock, slept_s: float | None, stopped_s: float | None) -> Row:
    """The probe row with its throttle check, suspension figures, and (if suspended) invalidated."""
    clock_source, clock_reason = clock.source, getattr(clock, "reason", None)
    sources = dict(row.sources)
    reasons = dict(row.null_reasons)
    sources["suspended_s"] = clock_source
    if slept_s is None:
        reasons["suspended_s"] = clock_reason or "sleep clock unreadable"
    sources["server_stopped_s"] = "psutil:process-state polled every 0.1 s during the probe"
    if stopped_s is None:
        reasons["server_stopped_s"] = "server process state unreadable"
    changes: dict[str, object] = {"suspended_s": slept_s, "server_stopped_s": stopped_s}
    why = None
    if slept_s:
        why, kind = f"the machine slept {slept_s:.1f} s during the probe ({clock_source})", "machine-slept"
    elif stopped_s:
        why, kind = f"the server process was stopped for ~{stopped_s:.1f} s during the probe", "server-stopped"
    if why is not None and row.status in ("ok", "failed", "timeout"):
        changes.update(status="failed", invalidated=kind,
                       error=f"invalidated: {why}; its numbers are not used and the probe is run again"
                             + (f" (the probe itself: {row.error})" if row.error else ""))
    elif row.status == "ok" and row.kind != "sustained":
        nominal, words = thermal_state(thermal, target_celsius) if thermal else (None, "not read")
        value = getattr(row, plan.metric, None)
        check = verdict.throttle_check(earlier, value, metric=plan.metric, threshold_pct=plan.throttle_pct,
                                       thermal_nominal=nominal, thermal_text=words)
        changes["throttle"] = check
        sources["throttle"] = f"engine:{plan.metric} vs the median of the cell's earlier ok probes; thermal {words}"
    return msgspec.structs.replace(row, sources=sources, null_reasons=reasons, **changes)


# ------------------------------------------------------------------------------ throttle checks


def throttle_baseline(series: CellSeries | None, policy: Cooldown) -> float | None:
    """The running median to recover to when policy `thermal` follows a throttle-suspect probe, else None."""
    last = series.rows[-1] if series and series.rows else None
    if policy.policy != "thermal" or last is None or last.throttle is None or not last.throttle.suspect:
        return None
    return last.throttle.running_median


async def extend_cooldown(record: CooldownRecord, series: CellSeries | None, policy: Cooldown, plan: ProbePlan,
                          check: Callable[[], Awaitable[float | None]]) -> CooldownRecord:
    """The cooldown record, extended by `throttle_checks` when the cell's last probe was throttle-suspect."""
    baseline = throttle_baseline(series, policy)
    if baseline is None:
        return record
    return await throttle_checks(record, baseline=baseline, threshold_pct=plan.throttle_pct,
                                 max_seconds=policy.max_seconds, check=check)


async def throttle_checks(record: CooldownRecord, *, baseline: float, threshold_pct: float, max_seconds: float,
                          check: Callable[[], Awaitable[float | None]], pause_s: float = 2.0,
                          clock: Callable[[], float] = time.monotonic,
                          sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> CooldownRecord:
    """Extend a cooldown after a throttle-suspect probe until a check probe's rate is back within
    `threshold_pct` of `baseline` (the cell's running median), within `max_seconds` in all."""
    t0 = clock()
    rates: list[float] = []
    floor = baseline * (1 - threshold_pct / 100.0)
    outcome = f"max_seconds {max_seconds:g} s reached before a check probe was back within {threshold_pct:g} %"
    while record.waited_s + (clock() - t0) < max_seconds:
        rate = await check()
        if rate is not None:
            rates.append(round(rate, 3))
            if rate >= floor:
                outcome = f"check probe {rate:.1f} back within {threshold_pct:g} % of {baseline:.1f}"
                break
        else:
            outcome = "a check probe measured no rate"
            break
        await sleep(max(0.0, min(pause_s, max_seconds - record.waited_s - (clock() - t0))))
    extended = clock() - t0
    note = (f"throttle check after a throttle-suspect probe: extended {extended:.1f} s, {len(rates)} check "
            f"probe(s) {rates}; {outcome}")
    return msgspec.structs.replace(record, waited_s=record.waited_s + extended, extended_s=round(extended, 3),
                                   throttle_checks=rates,
                                   note=f"{record.note}; {note}" if record.note else note)


async def check_rate(sizer: PromptSizer, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int,
                     metric: str) -> float | None:
    """A short unrecorded check probe at the cell's context (32 tokens at most): its rate of `metric`."""
    prompt = await sizer.prompts.build(context, f"{sizer.job}/{cand.id}/{context}/check",
                                       await sizer.counter(adapter, server), key=cand.id)
    result = await probe.run_chat(adapter, server.base_url, cand, prompt=prompt.text,
                                  max_tokens=min(sizer.sweep.gen_tokens, 32), sampling=sizer.sweep.sampling,
                                  timeout_s=sizer.timeout_s)
    value = getattr(adapter.normalize(result, spec_configured=cand.spec is not None), metric, None)
    return float(value) if isinstance(value, (int, float)) else None
