"""Suspension sensing (issue 15): the Linux boottime/monotonic gap, the macOS mach-clock arithmetic on
committed samples (tests/data/darwin/mach_clocks.json), and the stop watch on a real stopped process."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from benchd.sensors.suspend import darwin
from benchd.sensors.suspend.sensor import SLEEP_THRESHOLD_S, STALL_TOLERANCE_S, StopWatch, open_clock, slept_s

SAMPLES = json.loads((Path(__file__).parents[1] / "data" / "darwin" / "mach_clocks.json").read_text())


@pytest.mark.parametrize("case", SAMPLES["cases"], ids=[c["name"] for c in SAMPLES["cases"]])
def test_mach_gap_on_samples(case: dict) -> None:
    n, d = case["numer"], case["denom"]
    before = darwin.gap_s(case["before"]["continuous"], case["before"]["absolute"], n, d)
    after = darwin.gap_s(case["after"]["continuous"], case["after"]["absolute"], n, d)
    assert slept_s(before, after) == pytest.approx(case["slept_s"])


def test_mach_clock_binds_libsystem_calls() -> None:
    """MachClock against a stand-in for libSystem (no Mac here): it reads the timebase through the
    struct pointer and converts continuous − absolute ticks."""

    class FakeLib:
        class _Fn:
            def __init__(self, value: int) -> None:
                self.value = value
                self.restype = None

            def __call__(self) -> int:
                return self.value

        def __init__(self) -> None:
            self.mach_absolute_time = self._Fn(3_000)
            self.mach_continuous_time = self._Fn(3_000 + 24_000_000)  # 24 M ticks at 24 MHz: 1 s asleep

        def mach_timebase_info(self, ref: object) -> int:
            tb = ref._obj  # type: ignore[attr-defined]
            tb.numer, tb.denom = 125, 3
            return 0

    clock = darwin.MachClock(FakeLib())
    assert (clock.numer, clock.denom) == (125, 3)
    assert clock.gap() == pytest.approx(1.0)
    assert darwin.ticks_to_s(24_000_000, 125, 3) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        darwin.ticks_to_s(1, 1, 0)
    assert isinstance(ctypes.sizeof(darwin._Timebase), int)


@pytest.mark.skipif(sys.platform != "linux", reason="CLOCK_BOOTTIME is Linux's")
def test_linux_clock_gap_is_steady_without_sleep() -> None:
    clock = open_clock()
    assert clock.source == "linux:CLOCK_BOOTTIME-CLOCK_MONOTONIC"
    a = clock.gap()
    b = clock.gap()
    assert slept_s(a, b) == 0.0
    assert slept_s(0.0, SLEEP_THRESHOLD_S + 1.0) == pytest.approx(SLEEP_THRESHOLD_S + 1.0)
    assert slept_s(None, 1.0) is None


async def test_stop_watch_counts_a_real_sigstop() -> None:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(30)")
    try:
        watch = StopWatch(proc.pid)
        watch.start()
        await asyncio.sleep(0.3)
        os.kill(proc.pid, signal.SIGSTOP)
        await asyncio.sleep(1.0)
        os.kill(proc.pid, signal.SIGCONT)
        await asyncio.sleep(0.3)
        stopped = await watch.stop()
        assert stopped is not None and 0.6 <= stopped <= 1.6
        calm = StopWatch(proc.pid)
        calm.start()
        await asyncio.sleep(0.5)
        assert await calm.stop() == 0.0
    finally:
        proc.kill()
        await proc.wait()


class _SignalledWatch(StopWatch):
    """A StopWatch that says when it polled (the event the test waits for)."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.polled = asyncio.Event()

    def _poll(self) -> None:
        super()._poll()
        self.polled.set()


async def test_stop_watch_counts_the_time_its_own_process_was_not_run() -> None:
    """A blocked event loop stands in for a paused daemon (a stalled VM pauses it the same way): the poll
    due meanwhile wakes late by about the block, mid-probe or still under way when the probe ends. Only
    lower bounds: a busy machine can add stall, never take it away."""
    watch = _SignalledWatch(os.getpid())
    watch.start()
    time.sleep(0.6)  # noqa: ASYNC251 - the stall itself: the loop, and so the poll, does not run
    await asyncio.wait_for(watch.polled.wait(), 10)  # the poll that was due meanwhile
    assert await watch.stop() == 0.0  # the process itself was never stopped
    assert watch.stalled_s >= 0.6 - watch.poll_s - STALL_TOLERANCE_S and watch.longest_stall_s >= 0.45
    at_end = StopWatch(os.getpid())
    at_end.start()
    time.sleep(0.5)  # noqa: ASYNC251 - a stall under way when the probe ends
    await at_end.stop()
    assert at_end.stalled_s >= 0.5 - at_end.poll_s - STALL_TOLERANCE_S
