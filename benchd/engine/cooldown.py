"""Cooldown between probes: explicit policies, each wait recorded (how long, why it stopped, readings).

Reasons and facts: docs/measuring.md#cooldown.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

import msgspec

from benchd.schemas import Cooldown, CooldownRecord, Row, ThermalReading
from benchd.sensors.cpu import FIRST_LOAD_WINDOW_S, CpuLoad
from benchd.sensors.thermal.sensor import ThermalSensor


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
    """Wait according to `policy`; returns what was waited and why it stopped.

    `load` returns the current load per core (default: `CpuLoad()`, see the module docstring);
    `clock`/`sleep` are seams for tests; `poll_s` is the polling period (≥ 1 s in production).
    """
    if poll_s <= 0:
        raise ValueError("poll_s must be > 0")
    t0 = clock()

    async def read() -> ThermalReading:
        return await asyncio.to_thread(sensor.read)

    def step(elapsed: float) -> float:
        deadline = policy.seconds if elapsed < policy.seconds else policy.max_seconds
        return max(0.0, min(poll_s, deadline - elapsed))

    before = await read()

    if policy.policy == "fixed":
        await sleep(policy.seconds)
        return CooldownRecord(policy="fixed", waited_s=clock() - t0, reason="fixed", before=before, after=await read())

    if policy.policy == "thermal":
        reading = before
        while True:
            elapsed = clock() - t0
            if not _usable(reading):
                return await _fallback(policy, before, reading, t0, clock, sleep, read)
            if elapsed >= policy.seconds and _cool(reading, policy.target_celsius):
                return CooldownRecord(policy="thermal", waited_s=elapsed, reason="reached", before=before, after=reading)
            if elapsed >= policy.max_seconds:
                return CooldownRecord(
                    policy="thermal", waited_s=elapsed, reason="timeout", before=before, after=reading,
                    note=f"still above target {policy.target_celsius:g} °C / not nominal after {policy.max_seconds:g} s",
                )
            await sleep(step(elapsed))
            reading = await read()

    if policy.policy == "idle":
        load_fn: Callable[[], float]
        if load is None:
            load_fn = CpuLoad()
            await sleep(min(poll_s, FIRST_LOAD_WINDOW_S))
        else:
            load_fn = load
        cur = load_fn()
        load_before = cur
        while True:
            elapsed = clock() - t0
            if elapsed >= policy.seconds and cur < policy.max_load:
                reason = "reached"
                break
            if elapsed >= policy.max_seconds:
                reason = "timeout"
                break
            await sleep(step(elapsed))
            cur = load_fn()
        note = None
        if reason == "timeout":
            note = f"load per core {cur:.2f} still ≥ max_load {policy.max_load:g} after {policy.max_seconds:g} s"
        return CooldownRecord(
            policy="idle", waited_s=clock() - t0, reason=reason,  # type: ignore[arg-type]
            before=before, after=await read(), load_before=_num(load_before), load_after=_num(cur), note=note,
        )

    raise ValueError(f"unknown cooldown policy {policy.policy!r}")


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


# ------------------------------------------------------------------------------ throttle checks


async def before_probe(policy: Cooldown, sensor: ThermalSensor, *, last: Row | None, threshold_pct: float,
                       check: Callable[[], Awaitable[float | None]]) -> CooldownRecord:
    """The wait before a probe: the policy's wait, then (policy `thermal`, when the cell's `last` probe
    was throttle-suspect) short check probes until one is back within `threshold_pct` of that probe's
    running median, bounded by `max_seconds` in all; every check is in the record."""
    record = await wait(policy, sensor)
    if policy.policy != "thermal" or last is None or last.throttle is None or not last.throttle.suspect:
        return record
    baseline = last.throttle.running_median
    if baseline is None:
        return record
    return await throttle_checks(record, baseline=baseline, threshold_pct=threshold_pct, max_seconds=policy.max_seconds,
                         check=check)


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
