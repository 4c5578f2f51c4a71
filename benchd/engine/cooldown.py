"""Cooldown between probes: explicit policies, each wait recorded (docs/measuring.md#cooldown)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Literal

import msgspec

from benchd.schemas import Cooldown, CooldownRecord, Row, ThermalReading
from benchd.sensors.cpu import FIRST_LOAD_WINDOW_S, CpuLoad
from benchd.sensors.thermal.sensor import ThermalSensor
from benchd.stats.notation import plural


def _usable(r: ThermalReading) -> bool:
    return r.available and (r.celsius is not None or r.pressure is not None)


def _cool(r: ThermalReading, target: float) -> bool:
    if r.celsius is not None:
        return r.celsius <= target
    return r.pressure == "nominal"


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x


async def wait(
    policy: Cooldown,
    sensor: ThermalSensor,
    *,
    load: Callable[[], float] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    poll_s: float = 1.0,
) -> CooldownRecord:
    """Wait as `policy` says: what was waited and why it stopped (`load`, `clock`, `sleep`: test seams)."""
    if poll_s <= 0:
        raise ValueError("poll_s must be > 0")
    w = _Wait(policy, sensor, clock, sleep, poll_s)
    before = await w.read()
    run = {"fixed": w.fixed, "thermal": w.thermal, "idle": w.idle}.get(policy.policy)
    if run is None:
        raise ValueError(f"unknown cooldown policy {policy.policy!r}")
    return await run(before, load)


class CooldownEvents:
    """A row's cooldown events, the same `where` on both: `started` (the policy), `finished` (the record)."""

    def __init__(self, emit: Callable[..., None], *, candidate: str, context: int, probe: int, kind: str) -> None:
        self.emit = emit
        self.where = {"candidate": candidate, "context": context, "probe": probe, "kind": kind}

    def started(self, policy: Cooldown) -> None:
        self.emit("cooldown_started", **self.where, policy=policy.policy)

    def finished(self, record: CooldownRecord) -> CooldownRecord:
        self.emit("cooldown_finished", **self.where, record=record)
        return record


async def cool_down(policy: Cooldown, sensor: ThermalSensor, events: CooldownEvents) -> CooldownRecord:
    """`events.started`, the policy's `wait`, `events.finished` (a probe's runner adds its throttle checks)."""
    events.started(policy)
    return events.finished(await wait(policy, sensor))


class _Wait:
    """One wait in progress: the policy, the seams, and when it began."""

    def __init__(self, policy: Cooldown, sensor: ThermalSensor, clock: Callable[[], float],
                 sleep: Callable[[float], Awaitable[None]], poll_s: float) -> None:
        self.policy, self.sensor, self.clock, self.sleep, self.poll_s = policy, sensor, clock, sleep, poll_s
        self.t0 = clock()

    async def read(self) -> ThermalReading:
        return await asyncio.to_thread(self.sensor.read)

    def step(self, elapsed: float) -> float:
        policy = self.policy
        deadline = policy.seconds if elapsed < policy.seconds else policy.max_seconds
        return max(0.0, min(self.poll_s, deadline - elapsed))

    async def fixed(self, before: ThermalReading, load: Callable[[], float] | None) -> CooldownRecord:
        await self.sleep(self.policy.seconds)
        return CooldownRecord(policy="fixed", waited_s=self.clock() - self.t0, reason="fixed", before=before,
                              after=await self.read())

    async def thermal(self, before: ThermalReading, load: Callable[[], float] | None) -> CooldownRecord:
        policy, reading = self.policy, before
        while True:
            elapsed = self.clock() - self.t0
            if not _usable(reading):
                return await _fallback(policy, before, reading, self.t0, self.clock, self.sleep, self.read)
            if elapsed >= policy.seconds and _cool(reading, policy.target_celsius):
                return CooldownRecord(policy="thermal", waited_s=elapsed, reason="reached", before=before, after=reading)
            if elapsed >= policy.max_seconds:
                return CooldownRecord(
                    policy="thermal", waited_s=elapsed, reason="timeout", before=before, after=reading,
                    note=f"still above target {policy.target_celsius:g} °C / not nominal after {policy.max_seconds:g} s",
                )
            await self.sleep(self.step(elapsed))
            reading = await self.read()

    async def idle(self, before: ThermalReading, load: Callable[[], float] | None) -> CooldownRecord:
        policy = self.policy
        load_fn: Callable[[], float]
        if load is None:
            load_fn = CpuLoad()
            await self.sleep(min(self.poll_s, FIRST_LOAD_WINDOW_S))
        else:
            load_fn = load
        cur = load_before = load_fn()
        while True:
            elapsed = self.clock() - self.t0
            if elapsed >= policy.seconds and cur < policy.max_load:
                return await self._idle_record("reached", before, load_before, cur)
            if elapsed >= policy.max_seconds:
                return await self._idle_record("timeout", before, load_before, cur)
            await self.sleep(self.step(elapsed))
            cur = load_fn()

    async def _idle_record(self, reason: Literal["reached", "timeout"], before: ThermalReading, load_before: float,
                           cur: float) -> CooldownRecord:
        policy = self.policy
        note = (f"load per core {cur:.2f} still ≥ max_load {policy.max_load:g} after {policy.max_seconds:g} s"
                if reason == "timeout" else None)
        return CooldownRecord(
            policy="idle", waited_s=self.clock() - self.t0, reason=reason,
            before=before, after=await self.read(), load_before=_num(load_before), load_after=_num(cur), note=note,
        )


async def _fallback(
    policy: Cooldown,
    before: ThermalReading,
    bad: ThermalReading,
    t0: float,
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    read: Callable[[], Awaitable[ThermalReading]],
) -> CooldownRecord:
    """No usable thermal reading: wait out the fixed minimum and say so."""
    remaining = policy.seconds - (clock() - t0)
    if remaining > 0:
        await sleep(remaining)
    why = bad.reason or "reading has neither celsius nor pressure"
    when = "" if bad is before else " (lost mid-wait)"
    return CooldownRecord(
        policy="thermal", waited_s=clock() - t0, reason="sensor-unavailable", before=before, after=await read(),
        note=f"thermal sensor unavailable{when}: {why}; waited the fixed minimum of {policy.seconds:g} s instead",
    )


def throttle_checks(policy: Cooldown, record: CooldownRecord, *, last: Row | None,
                    threshold_pct: float) -> ThrottleChecks | None:
    """The check probes due after the wait (`thermal` policy, a throttle-suspect `last` probe), or None."""
    if policy.policy != "thermal" or last is None or last.throttle is None or not last.throttle.suspect:
        return None
    baseline = last.throttle.running_median
    if baseline is None:
        return None
    return ThrottleChecks(record, baseline=baseline, threshold_pct=threshold_pct, max_seconds=policy.max_seconds)


class ThrottleChecks:
    """Extends a cooldown until a check probe's rate is back within `threshold_pct` of `baseline`, for
    `max_seconds` at most: `while c.due(): c.add(rate); if c.due(): await sleep(c.pause())`."""

    def __init__(self, record: CooldownRecord, *, baseline: float, threshold_pct: float, max_seconds: float,
                 pause_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.base, self.baseline, self.threshold_pct, self.max_seconds = record, baseline, threshold_pct, max_seconds
        self.pause_s, self.clock, self.t0 = pause_s, clock, clock()
        self.rates: list[float] = []
        self.floor = baseline * (1 - threshold_pct / 100.0)
        self.outcome: str | None = None

    def _left(self) -> float:
        return self.max_seconds - self.base.waited_s - (self.clock() - self.t0)

    def due(self) -> bool:
        return self.outcome is None and self._left() > 0

    def pause(self) -> float:
        return max(0.0, min(self.pause_s, self._left()))

    def add(self, rate: float | None) -> None:
        if rate is None:
            self.outcome = "a check probe measured no rate"
            return
        self.rates.append(round(rate, 3))
        if rate >= self.floor:
            self.outcome = f"check probe {rate:.1f} back within {self.threshold_pct:g} % of {self.baseline:.1f}"

    def record(self) -> CooldownRecord:
        extended = self.clock() - self.t0
        outcome = self.outcome or (f"max_seconds {self.max_seconds:g} s reached before a check probe was back "
                                   f"within {self.threshold_pct:g} %")
        note = (f"throttle check after a throttle-suspect probe: extended {extended:.1f} s, {plural(len(self.rates), 'check probe')} "
                f"{self.rates}; {outcome}")
        rec = self.base
        return msgspec.structs.replace(rec, waited_s=rec.waited_s + extended, extended_s=round(extended, 3),
                                       throttle_checks=self.rates, note=f"{rec.note}; {note}" if rec.note else note)
