"""The machine-level areas of the platform report: thermal, power, sleep prevention, peer credentials,
the service manager, the runtimes. Each keeps the command's raw output beside what benchd parsed."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict
from typing import Any

from benchctl.platform_report.context import Context

TIMEOUT_S = 20.0


def run(argv: list[str]) -> dict[str, Any]:
    """A command's exit status, stdout and stderr, or why it could not run."""
    if shutil.which(argv[0]) is None:
        return {"argv": argv, "error": f"{argv[0]} not on PATH"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"argv": argv, "error": f"{type(exc).__name__}: {exc}"}
    return {"argv": argv, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def _text(out: dict[str, Any]) -> str:
    return (out.get("stdout") or "") + (out.get("stderr") or "")


def collect_thermal(ctx: Context) -> dict[str, Any]:
    import msgspec

    from benchd.sensors.thermal import sensor

    out: dict[str, Any] = {"selected": msgspec.structs.asdict(sensor.open_sensor().read())}
    if sys.platform != "darwin":
        out["sources"] = sensor.describe_sources()
        return out
    from benchd.sensors.thermal import darwin as thermal_darwin

    notify = run(["notifyutil", "-g", thermal_darwin.NOTIFY_KEY])
    therm = run(["pmset", "-g", "therm"])
    out["notifyutil"] = {**notify, "parsed": thermal_darwin.parse_notifyutil(notify.get("stdout") or "")}
    out["pmset_therm"] = {**therm, "parsed": thermal_darwin.parse_pmset_therm(_text(therm))}
    if os.geteuid() == 0:
        pm = run(["powermetrics", "-s", "thermal", "-n", "1", "-i", "100"])
        out["powermetrics"] = {**pm, "parsed": thermal_darwin.parse_powermetrics(pm.get("stdout") or "")}
    else:
        out["powermetrics"] = {"error": "needs root (not run)"}
    return out


def replay_thermal(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    from benchd.sensors.thermal import darwin as thermal_darwin

    out: list[str] = []
    for key, parse, text in (
        ("notifyutil", thermal_darwin.parse_notifyutil, lambda a: a.get("stdout") or ""),
        ("pmset_therm", thermal_darwin.parse_pmset_therm, _text),
        ("powermetrics", thermal_darwin.parse_powermetrics, lambda a: a.get("stdout") or ""),
    ):
        raw = area.get(key)
        if not isinstance(raw, dict) or "parsed" not in raw:
            continue
        got = parse(text(raw))
        if got != raw["parsed"]:
            out.append(f"thermal.{key}: parsed {got}, report says {raw['parsed']}")
    return out


def collect_power(ctx: Context) -> dict[str, Any]:
    from benchd.sensors.power.status import power_status

    status = power_status()
    out: dict[str, Any] = {"status": {"source": status.source, "percent": status.percent, "method": status.method,
                                      "reason": status.reason}}
    if sys.platform == "darwin":
        from benchd.sensors.power import darwin as power_darwin

        batt = run(list(power_darwin.PMSET_BATT))
        out["pmset_batt"] = {**batt, "parsed": asdict(power_darwin.parse_pmset_batt(batt.get("stdout") or ""))}
    return out


def replay_power(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    from benchd.sensors.power import darwin as power_darwin

    raw = area.get("pmset_batt")
    if not isinstance(raw, dict) or "parsed" not in raw:
        return []
    got = asdict(power_darwin.parse_pmset_batt(raw.get("stdout") or ""))
    return [] if got == raw["parsed"] else [f"power.pmset_batt: parsed {got}, report says {raw['parsed']}"]


def collect_sleep(ctx: Context) -> dict[str, Any]:
    from benchd.sensors.power.status import check_sleep_prevention

    guard = asyncio.run(check_sleep_prevention())
    return {"prevented": guard.prevented, "method": guard.method, "reason": guard.reason}


def collect_peer_credentials(ctx: Context) -> dict[str, Any]:
    """The daemon's peer check on a socket pair: both ends are this process, so the uid must be ours."""
    from benchd import peercred

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if sys.platform == "darwin":
            raw = a.getsockopt(peercred.SOL_LOCAL, peercred.LOCAL_PEERCRED, peercred.XUCRED_SIZE)
            parsed: Any = peercred.parse_xucred(raw)
        elif sys.platform.startswith("linux"):
            raw = a.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, peercred.UCRED_SIZE)
            parsed = peercred.parse_ucred(raw)[1]
        else:
            return {"error": f"not implemented on {sys.platform}"}
        uid = peercred.peer_uid(a)
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        a.close()
        b.close()
    return {"raw_hex": raw.hex(), "parsed_uid": parsed, "peer_uid_matches_own": uid == os.getuid() == parsed}


def replay_peer_credentials(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    from benchd import peercred

    if "raw_hex" not in area:
        return []
    raw = bytes.fromhex(area["raw_hex"])
    got = peercred.parse_xucred(raw) if platform.get("sys_platform") == "darwin" else peercred.parse_ucred(raw)[1]
    return [] if got == area.get("parsed_uid") else [f"peer_credentials: parsed {got}, report says {area.get('parsed_uid')}"]


def collect_service(ctx: Context) -> dict[str, Any]:
    """What the service manager says about benchd's unit, and whether the rendered plist lints."""
    from benchd.service import launchd as service_darwin
    from benchd.service import manager

    if sys.platform != "darwin":
        return {"systemctl": run(["systemctl", "--user", "show", "benchd.service", "-p",
                                  "ActiveState,SubState,MainPID,ExecMainStatus,NRestarts"])}
    shown = run(service_darwin.print_command("dev.benchd"))
    out: dict[str, Any] = {"launchctl_print": {**shown, "parsed": service_darwin.parse_print(shown.get("stdout") or "")}}
    plist = ctx.tmp / "dev.benchd.plist"
    plist.write_text(manager.plan(ctx.state_dir, manager="launchd").text)
    out["plutil_lint"] = run(["plutil", "-lint", str(plist)])
    return out


def replay_service(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    from benchd.service import launchd as service_darwin

    raw = area.get("launchctl_print")
    if not isinstance(raw, dict) or "parsed" not in raw:
        return []
    got = service_darwin.parse_print(raw.get("stdout") or "")
    return [] if got == raw["parsed"] else [f"service.launchctl_print: parsed {got}, report says {raw['parsed']}"]


def collect_runtimes(ctx: Context) -> dict[str, Any]:
    """Each runtime benchd would use here, found how, and its `--version` answer."""
    from benchd.servers.locate import list_runtimes

    return {"runtimes": list_runtimes(ctx.cache_dir)}
