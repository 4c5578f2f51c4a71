"""Power facts for overnight queues: where the machine draws power from, and keeping it awake.
Reasons and facts: docs/measuring.md#power-source-and-sleep."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import psutil

from benchd.lifeline import die_with_daemon
from benchd.sensors.power import darwin as power_darwin
from benchd.sensors.power.darwin import PowerSource

SYSFS_POWER_SUPPLY = Path("/sys/class/power_supply")
#: How long `keep_awake` waits for the OS to confirm the assertion before calling it failed.
CONFIRM_TIMEOUT_S = 3.0


class PowerStatus(msgspec.Struct, kw_only=True, frozen=True):
    """Where power comes from. `method` names the source of the answer; `reason` explains "unknown"."""

    source: PowerSource
    percent: float | None = None
    method: str | None = None
    reason: str | None = None


class SleepGuard(msgspec.Struct, kw_only=True, frozen=True):
    """Whether sleep is being prevented while a job runs: `method` is the command, `reason` why not."""

    prevented: bool
    method: str | None = None
    reason: str | None = None


# ------------------------------------------------------------------------------------- power source


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _percent(cap: str | None) -> float | None:
    try:
        return float(cap) if cap is not None else None
    except ValueError:
        return None


def _battery_status(battery: tuple[str | None, float | None, Path] | None, mains_seen: bool) -> PowerStatus | None:
    """What the first battery's status says (an offline mains seen: battery), or None when it says nothing."""
    if battery is None:
        return None
    status, pct, entry = battery
    if mains_seen or status == "Discharging":
        return PowerStatus(source="battery", percent=pct, method=f"sysfs:{entry / 'status'}")
    if status in ("Charging", "Full", "Not charging"):
        return PowerStatus(source="ac", percent=pct, method=f"sysfs:{entry / 'status'}")
    return None


def linux_sysfs_status(root: Path = SYSFS_POWER_SUPPLY) -> PowerStatus | None:
    """Read the kernel's power supplies. None when there are none to read (VMs, most desktops). A Mains/USB
    supply online is AC; else a battery's own status decides (some laptops expose no Mains node)."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return None
    mains_seen = False
    battery: tuple[str | None, float | None, Path] | None = None
    for entry in entries:
        kind = _read(entry / "type")
        if kind in ("Mains", "USB", "USB_C", "USB_PD"):
            online = _read(entry / "online")
            if online is None:
                continue
            mains_seen = True
            if online == "1":
                return PowerStatus(source="ac", method=f"sysfs:{entry / 'online'}")
        elif kind == "Battery" and battery is None:
            battery = (_read(entry / "status"), _percent(_read(entry / "capacity")), entry)
    on_battery = _battery_status(battery, mains_seen)
    if on_battery is not None:
        return on_battery
    if mains_seen:
        return PowerStatus(source="unknown", reason="a mains supply is offline but no battery is present")
    return None


def psutil_status() -> PowerStatus | None:
    """psutil's battery view (the portable fallback); None when it sees no battery."""
    try:
        batt = psutil.sensors_battery()
    except (AttributeError, NotImplementedError, OSError):
        return None
    if batt is None:
        return None
    if batt.power_plugged is None:
        return PowerStatus(source="unknown", percent=batt.percent, reason="psutil: battery present, plug state unknown")
    return PowerStatus(
        source="ac" if batt.power_plugged else "battery", percent=batt.percent, method="psutil.sensors_battery"
    )


def darwin_status(run: Callable[[list[str]], str] | None = None) -> PowerStatus:
    """`pmset -g batt` on macOS. `run` is a seam for tests (it returns the command's stdout)."""
    runner = run or _run_text
    try:
        out = runner(list(power_darwin.PMSET_BATT))
    except (OSError, subprocess.SubprocessError) as exc:
        return PowerStatus(source="unknown", reason=f"pmset -g batt failed: {exc}")
    parsed = power_darwin.parse_pmset_batt(out)
    if parsed.source == "unknown":
        return PowerStatus(source="unknown", reason=f"pmset -g batt: unrecognised supply {parsed.drawing_from!r}")
    return PowerStatus(source=parsed.source, percent=parsed.percent, method="pmset -g batt")


def _run_text(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout


def power_status(*, platform: str | None = None, sysfs_root: Path = SYSFS_POWER_SUPPLY) -> PowerStatus:
    """The machine's power source, with where the answer came from. Never raises."""
    plat = platform or sys.platform
    if plat == "darwin":
        return darwin_status()
    if plat.startswith("linux"):
        found = linux_sysfs_status(sysfs_root)
        if found is not None:
            return found
    found = psutil_status()
    if found is not None:
        return found
    where = f" ({sysfs_root} lists no supply)" if plat.startswith("linux") else ""
    return PowerStatus(source="unknown", reason=f"the OS reports no power supply or battery{where}")


def power_source() -> PowerSource:
    """`"ac" | "battery" | "unknown"` for this machine."""
    return power_status().source


# -------------------------------------------------------------------------------------- keep awake


def inhibit_command(pid: int, which: Callable[[str], str | None] = shutil.which) -> list[str] | None:
    """The Linux inhibitor command, or None when systemd-inhibit is not installed."""
    exe = which("systemd-inhibit")
    if exe is None:
        return None
    tail = which("tail")
    hold = [tail, f"--pid={pid}", "-f", "/dev/null"] if tail else ["sleep", "infinity"]
    return [
        exe,
        "--what=sleep:idle",
        "--who=benchd",
        f"--why=benchmark job running (benchd pid {pid})",
        "--mode=block",
        *hold,
    ]


async def _confirm(proc: asyncio.subprocess.Process, needs_child: bool, limit_s: float) -> str | None:
    """None once the assertion is held; else why not (the process exited, or never confirmed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    settle = loop.time() + 0.3  # caffeinate has no child: alive after a moment counts as held
    while loop.time() < deadline:
        if proc.returncode is not None:
            break
        if needs_child:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(proc.pid).children():
                    return None
        elif loop.time() >= settle:
            return None
        await asyncio.sleep(0.05)
    if proc.returncode is None:
        return f"no confirmation within {limit_s:.0f} s"
    err = b""
    if proc.stderr is not None:
        with contextlib.suppress(Exception):
            err = await asyncio.wait_for(proc.stderr.read(), 1.0)
    text = err.decode(errors="replace").strip().splitlines()
    return f"exited with status {proc.returncode}: {text[-1] if text else 'no message'}"


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """TERM the whole process group (the inhibitor and its child), KILL after 2 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.returncode is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 2.0)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the child may outlive a TERMed parent


def _awake_command(pid: int, plat: str, which: Callable[[str], str | None]) -> tuple[list[str] | None, str, bool]:
    """(the command keeping the machine awake or None, why there is none, whether it needs a child)."""
    if plat == "darwin":
        cmd = power_darwin.caffeinate_command(pid) if which("caffeinate") else None
        return cmd, "caffeinate not found on PATH", False
    if plat.startswith("linux"):
        return (inhibit_command(pid, which),
                "systemd-inhibit not found (no systemd/logind): nothing keeps this machine awake", True)
    return None, f"no sleep prevention implemented for {plat}", False


@contextlib.asynccontextmanager
async def keep_awake(
    pid: int,
    *,
    platform: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
) -> AsyncIterator[SleepGuard]:
    """Keep the machine awake while the block runs; yields a SleepGuard. Never raises for a missing or
    failing mechanism (the guard says why); the helper runs in its own process group, torn down on exit."""
    cmd, missing, needs_child = _awake_command(pid, platform or sys.platform, which)
    if cmd is None:
        yield SleepGuard(prevented=False, reason=missing)
        return
    method = " ".join(cmd[:1] + [a for a in cmd[1:] if not a.startswith("--why")])
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_daemon(),
        )
    except OSError as exc:
        yield SleepGuard(prevented=False, reason=f"{cmd[0]} could not start: {exc}")
        return
    try:
        failure = await _confirm(proc, needs_child, confirm_timeout_s)
        if failure is not None:
            tool = Path(cmd[0]).name
            hint = " (logind over D-Bus is unavailable here)" if "bus" in failure.lower() else ""
            yield SleepGuard(prevented=False, reason=f"{tool} {failure}{hint}")
        else:
            yield SleepGuard(prevented=True, method=method)
    finally:
        await _stop(proc)


async def check_sleep_prevention() -> SleepGuard:
    """Try the real mechanism for this process and release it at once (for `benchctl doctor`)."""
    async with keep_awake(os.getpid()) as guard:
        return guard
