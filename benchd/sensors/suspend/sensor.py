"""Was a probe suspended (a sleep or a stopped server)? Two independent signs, each with its source.
Reasons and facts: docs/measuring.md#suspended-probes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from typing import Protocol

import psutil

#: A gap that grows by more than this during a probe means the machine slept (clock reads are µs apart).
SLEEP_THRESHOLD_S = 0.25
STOPPED_STATES = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP})
#: A poll this late past its interval counts as a stall; more stall than the threshold flags a probe.
STALL_TOLERANCE_S = 0.05
STALL_THRESHOLD_S = 0.25


class SuspendClock(Protocol):
    source: str

    def gap(self) -> float | None: ...


class LinuxClock:
    source = "linux:CLOCK_BOOTTIME-CLOCK_MONOTONIC"

    def gap(self) -> float | None:
        return time.clock_gettime(time.CLOCK_BOOTTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)


class UnavailableClock:
    def __init__(self, reason: str) -> None:
        self.source = "none"
        self.reason = reason

    def gap(self) -> float | None:
        return None


def open_clock() -> LinuxClock | UnavailableClock | SuspendClock:
    """The platform's sleep clock, or an unavailable one naming why."""
    if sys.platform == "linux" and hasattr(time, "CLOCK_BOOTTIME"):
        return LinuxClock()
    if sys.platform == "darwin":
        try:
            from benchd.sensors.suspend.darwin import MachClock

            return MachClock()
        except (OSError, AttributeError) as exc:
            return UnavailableClock(f"mach clocks unavailable: {exc}")
    return UnavailableClock(f"no sleep-counting clock on {sys.platform}")


def slept_s(before: float | None, after: float | None) -> float | None:
    """Seconds slept between two gap readings (None when either is missing); tiny noise reads as 0."""
    if before is None or after is None:
        return None
    d = after - before
    return round(d, 3) if d > SLEEP_THRESHOLD_S else 0.0


def stall_text(stalled_s: float | None, during: str = "the probe") -> str | None:
    """What a stall over STALL_THRESHOLD_S means for the figures measured meanwhile (None: no such stall)."""
    if stalled_s is None or stalled_s <= STALL_THRESHOLD_S:
        return None
    return (f"benchd was not run for ~{stalled_s:.1f} s during {during} (its 0.1 s poll woke that late: the "
            "machine or the daemon was paused); the figures include the pause")


class StopWatch:
    """Counts the seconds a process is seen stopped, polling its state from a task while a probe runs, and
    the seconds its own polls woke late beyond STALL_TOLERANCE_S (`stalled_s`, `longest_stall_s`)."""

    def __init__(self, pid: int, poll_s: float = 0.1) -> None:
        self.pid = pid
        self.poll_s = poll_s
        self.stopped_s = 0.0
        self.stalled_s = 0.0
        self.longest_stall_s = 0.0
        self.error: str | None = None
        self._last = 0.0
        self._task: asyncio.Task[None] | None = None

    def _stopped(self, proc: psutil.Process) -> bool:
        try:
            return proc.status() in STOPPED_STATES
        except psutil.Error:
            return False  # gone: the probe's own error says so

    def _poll(self) -> None:
        now = time.monotonic()
        if (late := now - self._last - self.poll_s) > STALL_TOLERANCE_S:
            self.stalled_s += late
            self.longest_stall_s = max(self.longest_stall_s, late)
        self._last = now

    async def _run(self) -> None:
        try:
            proc = psutil.Process(self.pid)
        except psutil.Error as exc:
            self.error = f"server process not readable: {exc}"
            return
        was = self._stopped(proc)
        while True:
            await asyncio.sleep(self.poll_s)
            last = self._last
            self._poll()
            stopped = self._stopped(proc)
            if stopped or was:
                self.stopped_s += self._last - last if (stopped and was) else (self._last - last) / 2
            was = stopped

    def start(self) -> None:
        self._last = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> float | None:
        """Stop polling; seconds seen stopped (None when the process could not be read at all)."""
        if self._task is not None:
            if not self._task.done():
                self._poll()  # a stall still under way when the probe ended
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            try:
                proc = psutil.Process(self.pid)
                if self._stopped(proc):  # still stopped at the end: counts too
                    self.stopped_s += self.poll_s
            except psutil.Error:
                pass
        return None if self.error else round(self.stopped_s, 3)
