"""`--when` conditions of a queued job: `idle` and `ac-power`. The queue asks `unmet()` before starting.

`unmet()` returns None when every condition holds, else one human line saying why the job waits
(`benchctl jobs` shows it as the job's `waiting_reason`):
- `idle`: the system's 1-minute load average per core is at most the sweep's `cooldown.max_load` (the
  same threshold the idle cooldown policy uses, so "idle" means one thing in benchd).
- `ac-power`: the machine is not on battery. When the OS cannot tell ("unknown": VMs, desktops without
  a battery driver) the job runs; the runbook records the power source as unknown rather than guessing.

The probes are injectable (`Probes`) so tests control load and power without waiting for them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from benchd.power import PowerStatus, power_status
from benchd.schemas import Cooldown


def load_per_core() -> float | None:
    """1-minute load average divided by the logical core count; None where the OS gives none.

    `benchd.cooldown.load_per_core` is preferred when that module provides it (one measure of load
    for the idle cooldown and the idle condition); this psutil reading is the fallback.
    """
    try:
        from benchd import cooldown  # type: ignore[attr-defined]

        shared = getattr(cooldown, "load_per_core", None)
    except ImportError:
        shared = None
    if callable(shared) and shared is not load_per_core:
        value = shared()
        return None if value is None else float(value)
    try:
        one_min = psutil.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return one_min / (psutil.cpu_count() or os.cpu_count() or 1)


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
    """None when every condition in `when` holds now, else why the job waits ("; "-joined).

    An unknown condition name is a bug upstream (the schema only admits "idle" and "ac-power"), so it
    raises ValueError rather than silently running or waiting forever.
    """
    reasons: list[str] = []
    for cond in when:
        if cond == "idle":
            reason = idle_reason(probes.load_per_core(), cooldown.max_load)
        elif cond == "ac-power":
            # pmset on macOS is a subprocess: keep it off the event loop.
            reason = power_reason(await asyncio.to_thread(probes.power))
        else:
            raise ValueError(f"unknown --when condition {cond!r}")
        if reason:
            reasons.append(reason)
    return "; ".join(reasons) if reasons else None
