"""`--when` conditions of a queued job: `idle` (CPU load per core at most the sweep's `cooldown.max_load`)
and `ac-power` (not on battery; unknown power runs). `unmet()` is None when all hold, else why the job
waits. Probes are injectable (`Probes`) for tests."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchd.schemas import Cooldown
from benchd.sensors.cpu import FIRST_LOAD_WINDOW_S, CpuLoad
from benchd.sensors.power.status import PowerStatus, power_status


class RecentLoad:
    """System CPU load per core since the previous check (`benchd.engine.cooldown.CpuLoad`, the idle
    cooldown's measure). NaN before a first interval; checks under a second apart reuse the last figure."""

    REUSE_WITHIN_S = 1.0

    def __init__(self) -> None:
        self._meter: CpuLoad | None = None
        self._last: tuple[float, float] | None = None  # (monotonic time, value)

    def __call__(self) -> float | None:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.REUSE_WITHIN_S:
            return self._last[1]
        if self._meter is None:
            self._meter = CpuLoad()
            return math.nan
        value = self._meter()
        if not math.isnan(value):
            self._last = (now, value)
        return value


load_per_core = RecentLoad()


@dataclass(frozen=True)
class Probes:
    """Where `unmet` reads the machine's state (seams for tests; the defaults read the real OS)."""

    load_per_core: Callable[[], float | None] = field(default=load_per_core)
    power: Callable[[], PowerStatus] = field(default=power_status)


DEFAULT_PROBES = Probes()


def idle_reason(load: float | None, max_load: float) -> str | None:
    if load is None:
        return None  # the OS gives no load figure: waiting forever would be worse than running
    if load > max_load:
        return f"waiting for idle: load {load:.2f}/core > {max_load:.2f}"
    return None


def power_reason(status: PowerStatus) -> str | None:
    if status.source != "battery":
        return None  # "ac" runs; "unknown" runs too, and is recorded as unknown
    pct = f" {status.percent:.0f} %" if status.percent is not None else ""
    return f"waiting for AC power: on battery{pct}"


async def unmet(when: list[str], cooldown: Cooldown, *, probes: Probes = DEFAULT_PROBES) -> str | None:
    """None when every condition in `when` holds, else why the job waits; ValueError for an unknown one."""
    reasons: list[str] = []
    for cond in when:
        if cond == "idle":
            load = probes.load_per_core()
            if load is not None and math.isnan(load):  # no interval yet: measure a short one
                await asyncio.sleep(FIRST_LOAD_WINDOW_S)
                load = probes.load_per_core()
            if load is not None and math.isnan(load):
                load = None
            reason = idle_reason(load, cooldown.max_load)
        elif cond == "ac-power":
            # pmset on macOS is a subprocess: keep it off the event loop.
            reason = power_reason(await asyncio.to_thread(probes.power))
        else:
            raise ValueError(f"unknown --when condition {cond!r}")
        if reason:
            reasons.append(reason)
    return "; ".join(reasons) if reasons else None
