"""Cooldown policies: the file-fed thermal seam, a real busy subprocess for `idle`, timeouts, fallbacks."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import msgspec
import pytest

from benchd.engine import cooldown
from benchd.schemas import Cooldown
from benchd.sensors.thermal.sensor import FileSensor, UnavailableSensor


class FakeTime:
    """Virtual clock for the long bounds (max_seconds = 180 s in a few ms); records every sleep."""

    def __init__(self, on_advance=None) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []
        self.on_advance = on_advance

    def clock(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s
        if self.on_advance:
            self.on_advance(self.t)
        await asyncio.sleep(0)


def put(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.fixture
def tfile(tmp_path: Path) -> Path:
    return tmp_path / "thermal"


async def test_fixed_waits_seconds_and_records_readings(tfile: Path) -> None:
    put(tfile, "70")
    t = time.monotonic()
    rec = await cooldown.wait(Cooldown(policy="fixed", seconds=0.3), FileSensor(tfile))
    assert rec.reason == "fixed" and rec.policy == "fixed"
    assert 0.3 <= rec.waited_s < 5 and time.monotonic() - t >= 0.3
    assert rec.before is not None and rec.before.celsius == 70.0
    assert rec.after is not None and rec.after.celsius == 70.0


async def test_every_row_kinds_cooldown_is_the_wait_between_its_two_events(tfile: Path) -> None:
    """`cool_down`: started (policy), the wait, finished (record), the same `where` fields on both events;
    `finished` records and returns the record it is given (a probe's, after its throttle checks)."""
    events: list[tuple[str, dict[str, object]]] = []

    def emit(type_: str, **payload: object) -> None:
        events.append((type_, payload))

    pol = Cooldown(policy="fixed", seconds=0.0)
    log = cooldown.CooldownEvents(emit, candidate="a", context=64, probe=2, kind="session")
    plain = await cooldown.cool_down(pol, FileSensor(tfile), log)
    assert [t for t, _ in events] == ["cooldown_started", "cooldown_finished"]
    where = {"candidate": "a", "context": 64, "probe": 2, "kind": "session"}
    assert events[0][1] == {**where, "policy": "fixed"} and events[1][1] == {**where, "record": plain}

    events.clear()
    checked = msgspec.structs.replace(plain, extended_s=1.5, throttle_checks=[99.0])
    assert log.finished(checked) is checked and events == [("cooldown_finished", {**where, "record": checked})]


async def test_thermal_reached_when_file_cools(tfile: Path) -> None:
    put(tfile, "80")

    async def cool_later() -> None:
        await asyncio.sleep(0.5)
        put(tfile, "60")

    task = asyncio.create_task(cool_later())
    pol = Cooldown(policy="thermal", seconds=0.1, max_seconds=5, target_celsius=65)
    rec = await cooldown.wait(pol, FileSensor(tfile), poll_s=0.1)
    await task
    assert rec.reason == "reached"
    assert 0.5 <= rec.waited_s < 5  # reached when it cooled, before max_seconds
    assert rec.before is not None and rec.before.celsius == 80.0
    assert rec.after is not None and rec.after.celsius == 60.0


async def test_thermal_pressure_word_reaches_at_nominal(tfile: Path) -> None:
    put(tfile, "serious")
    ft = FakeTime(on_advance=lambda t: tfile.write_text("nominal") if t >= 7 else None)
    pol = Cooldown(policy="thermal", seconds=2, max_seconds=60)
    rec = await cooldown.wait(pol, FileSensor(tfile), clock=ft.clock, sleep=ft.sleep)
    assert rec.reason == "reached" and rec.waited_s == pytest.approx(7.0)
    assert rec.before is not None and rec.before.pressure == "serious"
    assert rec.after is not None and rec.after.pressure == "nominal"


async def test_thermal_honours_the_minimum_even_when_already_cool(tfile: Path) -> None:
    put(tfile, "40")
    ft = FakeTime()
    rec = await cooldown.wait(Cooldown(policy="thermal", seconds=5, max_seconds=60), FileSensor(tfile),
                              clock=ft.clock, sleep=ft.sleep)
    assert rec.reason == "reached" and rec.waited_s == pytest.approx(5.0)


async def test_thermal_timeout_without_busy_waiting(tfile: Path) -> None:
    put(tfile, "95")
    ft = FakeTime()
    pol = Cooldown(policy="thermal", seconds=5, max_seconds=180, target_celsius=65)
    rec = await cooldown.wait(pol, FileSensor(tfile), clock=ft.clock, sleep=ft.sleep)
    assert rec.reason == "timeout" and rec.waited_s == pytest.approx(180.0)
    assert rec.after is not None and rec.after.celsius == 95.0 and rec.note
    assert len(ft.sleeps) <= 181 and min(ft.sleeps) > 0  # ~1 Hz polling, never a zero-length spin


async def test_thermal_sensor_unavailable_falls_back_to_fixed_minimum() -> None:
    pol = Cooldown(policy="thermal", seconds=0.2, max_seconds=60)
    rec = await cooldown.wait(pol, UnavailableSensor())
    assert rec.reason == "sensor-unavailable" and 0.2 <= rec.waited_s < 30  # the minimum, not max_seconds (60)
    assert rec.before is not None and not rec.before.available
    assert rec.note and "no thermal sensor exposed (VM?)" in rec.note and "fixed minimum of 0.2 s" in rec.note


async def test_thermal_sensor_lost_mid_wait(tfile: Path) -> None:
    put(tfile, "90")
    ft = FakeTime(on_advance=lambda t: tfile.unlink(missing_ok=True) if t >= 3 else None)
    pol = Cooldown(policy="thermal", seconds=10, max_seconds=60)
    rec = await cooldown.wait(pol, FileSensor(tfile), clock=ft.clock, sleep=ft.sleep)
    assert rec.reason == "sensor-unavailable" and rec.waited_s == pytest.approx(10.0)
    assert rec.note and "lost mid-wait" in rec.note


async def test_idle_with_load_seam_reaches_when_load_drops() -> None:
    loads = iter([0.9, 0.8, 0.7, 0.2, 0.1])
    ft = FakeTime()
    pol = Cooldown(policy="idle", seconds=1, max_seconds=30, max_load=0.5)
    rec = await cooldown.wait(pol, UnavailableSensor(), load=lambda: next(loads), clock=ft.clock, sleep=ft.sleep)
    assert rec.reason == "reached" and rec.waited_s == pytest.approx(3.0)
    assert rec.load_before == 0.9 and rec.load_after == 0.2


async def test_idle_detects_a_real_busy_subprocess() -> None:
    busy = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    try:
        await asyncio.sleep(0.3)
        # One of this machine's cores is pegged, so load per core >= 1/cores > max_load = 0.4 (for <= 2 cores;
        # on bigger machines the threshold scales down with the core count).
        import psutil

        cores = psutil.cpu_count() or 1
        max_load = 0.8 / cores
        pol = Cooldown(policy="idle", seconds=0, max_seconds=1.0, max_load=max_load)
        rec = await cooldown.wait(pol, UnavailableSensor(), poll_s=0.5)
    finally:
        busy.kill()
        await busy.wait()
    assert rec.reason == "timeout", rec
    assert rec.load_before is not None and rec.load_before >= max_load
    assert rec.load_after is not None and rec.load_after >= max_load
    assert 1.0 <= rec.waited_s < 12 and rec.note  # stopped at max_seconds, not a hang


async def test_idle_without_load_reaches() -> None:
    probe = cooldown.CpuLoad()
    await asyncio.sleep(0.5)
    ambient = probe()
    if ambient > 0.6:
        pytest.skip(f"machine busy with other work (load per core {ambient:.2f}): an idle wait cannot reach")
    pol = Cooldown(policy="idle", seconds=0.5, max_seconds=5.0, max_load=0.9)
    rec = await cooldown.wait(pol, UnavailableSensor(), poll_s=0.5)
    assert rec.reason == "reached", rec
    assert rec.load_after is not None and 0.0 <= rec.load_after < 0.9
    assert 0.5 <= rec.waited_s < 5.0


@pytest.mark.parametrize("policy", ["fixed", "thermal", "idle"])
async def test_cancel_is_prompt(tfile: Path, policy: str) -> None:
    put(tfile, "99")
    pol = Cooldown(policy=policy, seconds=10, max_seconds=20, max_load=0.0)  # type: ignore[arg-type]
    task = asyncio.create_task(cooldown.wait(pol, FileSensor(tfile)))
    await asyncio.sleep(0.2)
    t = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - t < 5  # not the policy's 10 s


async def test_polling_costs_no_cpu(tfile: Path) -> None:
    """A 1.5 s thermal wait at the default 1 Hz polling uses a few ms of CPU, not a spinning core."""
    put(tfile, "99")
    cpu = time.process_time()
    rec = await cooldown.wait(Cooldown(policy="thermal", seconds=0, max_seconds=1.5), FileSensor(tfile))
    assert rec.reason == "timeout"
    assert time.process_time() - cpu < 0.1


async def test_a_probes_throttle_checks_run_between_its_wait_and_cooldown_finished(tfile: Path) -> None:
    """`Runner.cool_down` after a throttle-suspect probe: `cooldown_started`, the wait, the runner's own
    check probe (`check_rate`, a seam here: its real request is covered against a server in
    tests/engine/test_verdicts_real.py), then `cooldown_finished` with the record the check extended."""
    from types import SimpleNamespace

    from benchd.engine.runner import Runner
    from benchd.schemas import Candidate, Row, Sweep, ThrottleCheck

    order: list[str] = []

    class Checked(Runner):
        async def check_rate(self, *args: object) -> float | None:
            order.append("check")
            return 99.0  # back within 15 % of the running median 100: one check is enough

    put(tfile, "50")
    sweep = Sweep(name="t", contexts=[64], gen_tokens=8, candidates=[Candidate(id="a", runtime="llama-server", model="m")],
                  cooldown=Cooldown(policy="thermal", seconds=0.0, max_seconds=30.0, target_celsius=65.0))
    recorder = SimpleNamespace(emit=lambda type_, **payload: order.append(type_))
    runner = Checked("j", sweep, recorder, None, SimpleNamespace(prompts=None), None, FileSensor(tfile), None, 1.0)  # type: ignore[arg-type]
    suspect = ThrottleCheck(metric="gen_tps", value=70.0, running_median=100.0, drop_pct=30.0, threshold_pct=15.0,
                            thermal="unavailable", suspect=True, note="30 % below")
    last = Row(job="j", candidate="a", runtime="llama-server", context=64, kind="probe", probe=3, status="ok",
               throttle=suspect)
    cell = SimpleNamespace(candidate=sweep.candidates[0], context=64, probe=4, kind="probe")
    run = SimpleNamespace(cell=cell, series=SimpleNamespace(rows=[last]), adapter=None, server=None)
    record = await runner.cool_down(run)  # type: ignore[arg-type]
    assert order == ["cooldown_started", "check", "cooldown_finished"]
    assert record.reason == "reached" and record.throttle_checks == [99.0]
    assert "back within 15 %" in (record.note or "")
