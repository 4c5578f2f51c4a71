"""benchd.sensors.power.status: power source and sleep prevention.

The pmset samples under tests/data/darwin/ (see SAMPLES.md) follow pmset.c's output shapes, not
captured on a Mac in this run (none is available here): the live macOS path is the `darwin` test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from testlib import wait_until

from benchd.sensors.power import darwin as power_darwin
from benchd.sensors.power import status as power
from benchd.sensors.power.status import PowerStatus, keep_awake

DATA = Path(__file__).parents[1] / "data" / "darwin"


@pytest.mark.parametrize(
    ("sample", "source", "percent", "state", "estimate", "remaining"),
    [
        ("pmset_ac_charged.txt", "ac", 100.0, "charged", "0:00", 0),
        ("pmset_ac_not_charging.txt", "ac", 100.0, "AC attached", "not charging", None),
        ("pmset_ac_finishing.txt", "ac", 99.0, "finishing charge", "0:04", 4),
        ("pmset_battery_discharging.txt", "battery", 54.0, "discharging", "3:12", 192),
        ("pmset_battery_no_estimate.txt", "battery", 85.0, "discharging", "no estimate", None),
        ("pmset_battery_no_time.txt", "battery", 62.0, "discharging", None, None),  # no "; h:mm" part at all
        ("pmset_desktop.txt", "ac", None, None, None, None),
        ("pmset_ups.txt", "battery", 88.0, "discharging", "0:41", 41),
    ],
)
def test_parse_pmset_batt_samples(sample: str, source: str, percent: float | None, state: str | None,
                                  estimate: str | None, remaining: int | None) -> None:
    """Every line shape pmset.c's show_power_sources prints (issue 14, finding 9): with and without the
    `; h:mm remaining` part, `(no estimate)`, `AC attached; not charging`."""
    parsed = power_darwin.parse_pmset_batt((DATA / sample).read_text())
    assert parsed.source == source
    assert parsed.percent == percent
    assert parsed.state == state
    assert parsed.estimate == estimate and parsed.remaining_min == remaining
    assert parsed.present is (None if percent is None else True)


def test_parse_pmset_garbage_is_unknown() -> None:
    parsed = power_darwin.parse_pmset_batt("pmset: command failed\n")
    assert parsed.source == "unknown" and parsed.percent is None


def test_darwin_status_through_the_run_seam() -> None:
    text = (DATA / "pmset_battery_discharging.txt").read_text()
    status = power.darwin_status(run=lambda cmd: text if cmd == ["pmset", "-g", "batt"] else "")
    assert status == PowerStatus(source="battery", percent=54.0, method="pmset -g batt")

    def broken(cmd: list[str]) -> str:
        raise FileNotFoundError("pmset")

    failed = power.darwin_status(run=broken)
    assert failed.source == "unknown" and failed.reason and "pmset" in failed.reason


def _supply(root: Path, name: str, **files: str) -> None:
    d = root / name
    d.mkdir(parents=True)
    for key, value in files.items():
        (d / key).write_text(value + "\n")


def test_linux_sysfs_mains_online_is_ac(tmp_path: Path) -> None:
    """A stand-in sysfs tree: this machine has no power supply to read (a VM)."""
    _supply(tmp_path, "AC", type="Mains", online="1")
    _supply(tmp_path, "BAT0", type="Battery", status="Charging", capacity="40")
    status = power.linux_sysfs_status(tmp_path)
    assert status is not None and status.source == "ac"
    assert status.method == f"sysfs:{tmp_path / 'AC' / 'online'}"


def test_linux_sysfs_mains_offline_is_battery(tmp_path: Path) -> None:
    _supply(tmp_path, "ADP1", type="Mains", online="0")
    _supply(tmp_path, "BAT0", type="Battery", status="Discharging", capacity="54")
    status = power.linux_sysfs_status(tmp_path)
    assert status is not None and (status.source, status.percent) == ("battery", 54.0)


def test_linux_sysfs_battery_only_uses_its_status(tmp_path: Path) -> None:
    _supply(tmp_path, "BAT1", type="Battery", status="Full", capacity="100")
    status = power.linux_sysfs_status(tmp_path)
    assert status is not None and status.source == "ac"


def test_linux_sysfs_empty_is_none_and_power_status_unknown(tmp_path: Path) -> None:
    assert power.linux_sysfs_status(tmp_path) is None
    assert power.linux_sysfs_status(tmp_path / "missing") is None
    if psutil.sensors_battery() is None:
        status = power.power_status(platform="linux", sysfs_root=tmp_path)
        assert status.source == "unknown" and status.reason and str(tmp_path) in status.reason


def test_power_status_on_this_machine() -> None:
    status = power.power_status()
    assert status.source in ("ac", "battery", "unknown")
    assert power.power_source() == status.source
    # An answer names its source; "unknown" says why.
    assert (status.method is not None) if status.source != "unknown" else bool(status.reason)


# ------------------------------------------------------------------------------------- keep_awake


def _inhibit_works() -> bool:
    exe = shutil.which("systemd-inhibit")
    if exe is None:
        return False
    done = subprocess.run([exe, "--what=idle", "--who=benchd-test", "--why=test", "true"], capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux inhibitor path")
async def test_keep_awake_real_linux_reports_truthfully() -> None:
    """The real systemd-inhibit: held where logind answers, else prevented=False with its error."""
    works = _inhibit_works()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    async with keep_awake(os.getpid()) as guard:
        assert guard.prevented is works
        if works:
            assert guard.method and "systemd-inhibit" in guard.method and guard.reason is None
        else:
            assert guard.reason and guard.method is None
            if shutil.which("systemd-inhibit"):
                assert "systemd-inhibit" in guard.reason
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before, "the inhibitor outlived the context"


async def test_keep_awake_missing_tool() -> None:
    async with keep_awake(os.getpid(), platform="linux", which=lambda name: None) as guard:
        assert guard.prevented is False and guard.reason and "systemd-inhibit not found" in guard.reason
    async with keep_awake(os.getpid(), platform="darwin", which=lambda name: None) as guard:
        assert guard.prevented is False and guard.reason == "caffeinate not found on PATH"
    async with keep_awake(os.getpid(), platform="sunos5") as guard:
        assert guard.prevented is False and guard.reason and "sunos5" in guard.reason


def _fake_inhibit(tmp_path: Path) -> Path:
    """A stand-in systemd-inhibit (logind is not reachable in this container): skips its options and
    forks the command like the real one does after logind granted the lock."""
    script = tmp_path / "systemd-inhibit"
    script.write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\n"$@" &\nwait\n')
    script.chmod(0o755)
    return script


def _holders(pid: int) -> list[psutil.Process]:
    """The `tail --pid=PID` processes holding the fake inhibitor's lock."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or [""]
        if cmd[0].endswith("tail") and f"--pid={pid}" in cmd:
            out.append(p)
    return out


@pytest.mark.skipif(shutil.which("tail") is None, reason="needs GNU tail")
async def test_keep_awake_held_then_released_and_tied_to_pid(tmp_path: Path) -> None:
    fake = _fake_inhibit(tmp_path)
    target = await asyncio.create_subprocess_exec("sleep", "60")  # stands for benchd's pid
    try:

        def which(name: str) -> str | None:
            return str(fake) if name == "systemd-inhibit" else shutil.which(name)

        async with keep_awake(target.pid, platform="linux", which=which) as guard:
            assert guard.prevented is True and guard.reason is None
            assert guard.method and f"--pid={target.pid}" in guard.method and "--what=sleep:idle" in guard.method
            # keep_awake confirms once the inhibitor has a child; that child execs `tail` a moment later.
            holders = wait_until(lambda: _holders(target.pid), what="the fake inhibitor's `tail --pid` holder")
            assert len(holders) == 1
            # benchd dying (here: its stand-in) ends the holder, so a SIGKILLed daemon leaks no lock.
            target.kill()
            await target.wait()
            deadline = time.monotonic() + 5
            while holders[0].is_running() and holders[0].status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline, "tail --pid did not exit after its target died"
                await asyncio.sleep(0.1)
        leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(fake) in " ".join(p.info["cmdline"] or [])]
        assert [p for p in leftovers if p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        if target.returncode is None:
            target.kill()
            await target.wait()


async def test_keep_awake_failing_tool_gives_its_error(tmp_path: Path) -> None:
    bad = tmp_path / "systemd-inhibit"
    bad.write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    bad.chmod(0o755)
    async with keep_awake(os.getpid(), platform="linux", which=lambda n: str(bad) if n == "systemd-inhibit" else shutil.which(n)) as guard:
        assert guard.prevented is False
        assert guard.reason and "Failed to connect to bus: No medium found" in guard.reason and "status 1" in guard.reason


@pytest.mark.darwin
@pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS (caffeinate)")
async def test_keep_awake_caffeinate_live() -> None:
    async with keep_awake(os.getpid()) as guard:
        assert guard.prevented is True and guard.method and guard.method.startswith("caffeinate -i -w")
        proc = await asyncio.create_subprocess_exec("pmset", "-g", "assertions", stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        assert b"caffeinate" in out
