"""`benchctl doctor`: check this machine, say what to do about each problem.

Works without the daemon (the shared contract): it reads files, runs `--version`s and asks the daemon
only whether it answers. Each check is `ok`, `warn` (benchd works, something is degraded: no thermal
sensor, no sleep prevention, daemon not started) or `problem` (something needed is missing: no runtime
at all, a state dir others can read or that is not yours). Exit 1 on any problem, else 0.

The parts come from the modules that own them (`benchd.servers.locate.list_runtimes`,
`benchd.sensors.thermal.sensor` / `benchd.sensors.memory.sources` `describe_sources`, `benchd.sensors.power.status`, the socket client); a module missing from
this build is reported as such, never as a crash.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from benchctl import exitcodes
from benchctl.commands.common import _fail, state_dir_option
from benchd.schemas import Health
from benchd.stats.notation import fmt_duration

HEALTH_TIMEOUT_S = 2.0
SERVER_RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")


def _check(name: str, status: str, summary: str, fix: str | None = None) -> dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "fix": fix}


def check_state_dir(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """0700 and owned by this user: the socket's peer check is the guard, the dir mode the first fence."""
    info: dict[str, Any] = {"path": str(path), "exists": path.exists(), "mode": None, "owner_uid": None}
    if not path.exists():
        return info, _check("state dir", "ok", f"{path} does not exist yet; benchd creates it (mode 0700) on first start")
    st = path.stat()
    info.update(mode=f"{stat.S_IMODE(st.st_mode):04o}", owner_uid=st.st_uid)
    if not stat.S_ISDIR(st.st_mode):
        return info, _check("state dir", "problem", f"{path} is not a directory", f"move it away: mv {path} {path}.bak")
    if st.st_uid != os.getuid():
        return info, _check("state dir", "problem", f"{path} belongs to uid {st.st_uid}, not you (uid {os.getuid()})",
                            f"use your own state dir (--state-dir / $BENCHD_STATE_DIR), or: sudo chown -R {os.getuid()} {path}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        return info, _check("state dir", "problem", f"{path} has mode {info['mode']}: other users can read it",
                            f"chmod 700 {path}")
    if not os.access(path, os.W_OK | os.X_OK):
        return info, _check("state dir", "problem", f"{path} is not writable by you", f"chmod u+rwx {path}")
    return info, _check("state dir", "ok", f"{path} (mode {info['mode']}, yours)")


def check_runtimes(cache_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from benchd.servers.locate import list_runtimes

    runtimes = list_runtimes(cache_dir)
    checks: list[dict[str, Any]] = []
    for rt in runtimes:
        name = str(rt["name"])
        if rt.get("installed"):
            version = rt.get("version") or "version unknown"
            checks.append(_check(name, "ok", f"{version} — {rt.get('path')} (found via {rt.get('how')})"))
        else:
            install = "mlx" if name.startswith("mlx") else "llama-server"
            checks.append(_check(name, "warn", str(rt.get("reason") or "not found"),
                                 f"benchctl runtimes install {install}"))
    servers = [rt for rt in runtimes if rt["name"] in SERVER_RUNTIMES and rt.get("installed")]
    if not servers:
        checks.append(_check("runtimes", "problem", "no inference server runtime found: nothing can be benchmarked",
                             "benchctl runtimes install all   (or set $BENCHD_LLAMA_SERVER to a llama-server binary)"))
    return runtimes, checks


def check_daemon(socket: Path, state_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from benchctl.client import Client, ClientError, Unreachable

    info: dict[str, Any] = {"reachable": False, "socket": str(socket), "health": None, "reason": None}
    try:
        answer = Client(socket, timeout=HEALTH_TIMEOUT_S).health()
    except Unreachable as exc:
        info["reason"] = "no socket" if not socket.exists() else (exc.reason or "not running")
        return info, _check("daemon", "warn", f"not running on {socket} ({info['reason']})",
                            f"start it: benchd --state-dir {state_dir}   (or keep it running: benchctl service install)")
    except (ClientError, ValueError, OSError) as exc:
        info["reason"] = str(exc)
        return info, _check("daemon", "warn", f"{socket} answered, but not like benchd: {exc}",
                            "is something else listening there? check `benchctl logs` / the daemon's log")
    try:
        health = msgspec.convert(answer, Health)
    except msgspec.ValidationError as exc:
        info["reason"] = str(exc)
        return info, _check("daemon", "warn", f"{socket} answered, but not like benchd: {exc}",
                            "is something else listening there? check `benchctl logs` / the daemon's log")
    info.update(reachable=True, health=answer)
    summary = (f"benchd {health.version} pid {health.pid}, up {fmt_duration(health.uptime_s)}, "
               f"{health.queue_depth} queued, running: {health.running_job or 'nothing'}")
    if Path(health.state_dir) != state_dir:
        return info, _check("daemon", "warn", f"{summary}; but it uses state dir {health.state_dir}, not {state_dir}",
                            "pass the same --state-dir / $BENCHD_STATE_DIR to benchctl and benchd")
    return info, _check("daemon", "ok", summary)


def _sources(kind: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from benchd.sensors.memory import sources as memory_sources
    from benchd.sensors.thermal import sensor

    describe = {"thermal": sensor.describe_sources, "memory": memory_sources.describe_sources}[kind]
    sources: list[dict[str, Any]] = describe()
    have = [s["name"] for s in sources if s.get("available") and s["name"] != "selected"]
    missing = [f"{s['name']} ({s.get('reason')})" for s in sources if not s.get("available") and s["name"] != "selected"]
    if kind == "thermal":
        chosen = next((s for s in sources if s["name"] == "selected"), None)
        if chosen is not None and not chosen.get("available"):
            return sources, _check("thermal", "warn", f"no thermal sensor: {chosen.get('reason')}; unavailable: {'; '.join(missing)}",
                                   "cooldowns fall back to fixed waits (policy 'fixed' or 'idle' avoids the warning)")
    summary = f"available: {', '.join(have) or 'none'}" + (f"; unavailable: {'; '.join(missing)}" if missing else "")
    return sources, _check(kind, "ok" if have else "warn", summary)


def check_power() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    from benchd.sensors.power.status import check_sleep_prevention, power_status

    ps = power_status()
    power = {"source": ps.source, "percent": ps.percent, "method": ps.method, "reason": ps.reason}
    pct = f" {ps.percent:.0f} %" if ps.percent is not None else ""
    if ps.source == "unknown":
        pcheck = _check("power", "ok", f"unknown ({ps.reason}); --when ac-power runs at once and records 'unknown'")
    else:
        pcheck = _check("power", "ok", f"{ps.source}{pct} (from {ps.method})")
    guard = asyncio.run(check_sleep_prevention())
    sleep = {"prevented": guard.prevented, "method": guard.method, "reason": guard.reason}
    if guard.prevented:
        scheck = _check("sleep prevention", "ok", f"works: {guard.method}")
    else:
        fix = ("disable automatic sleep while benchmarks run (System Settings > Energy)" if sys.platform == "darwin"
               else "disable suspend for overnight runs, or run benchd in a login session where systemd-logind answers")
        scheck = _check("sleep prevention", "warn", f"unavailable: {guard.reason}", fix)
    return power, pcheck, sleep, scheck


def check_recheck(state_dir: Path, socket: Path, daemon_up: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `[recheck]` settings in force: the running daemon's (read at its start), else the file's."""
    from benchd.config_toml import load_settings, settings_path

    path = settings_path(state_dir)
    loaded, error = load_settings(path)
    info: dict[str, Any] = {"path": str(path), "exists": path.exists(), "error": error, "from": "file"}
    settings: Any = loaded.recheck
    if daemon_up:
        from benchctl.client import Client, ClientError

        try:
            st = Client(socket, timeout=HEALTH_TIMEOUT_S).recheck_status()
            info.update({"from": "daemon", "error": st.get("settings_error"), "pending": st.get("pending"),
                         "last": st.get("last")})
            error = st.get("settings_error")
            settings = type(settings)(**st["settings"])
        except (ClientError, ValueError, OSError, KeyError, TypeError) as exc:
            info["daemon_error"] = str(exc)
    info["settings"] = {k: getattr(settings, k) for k in settings.__struct_fields__}
    if error:
        return info, _check("recheck", "warn", f"{error} (defaults in force: when idle + ac-power, next 03:00, "
                            "every 24 h, threshold 5 %)", f"fix {path}, then restart benchd")
    when = ", ".join(settings.when) or "no conditions"
    confirm = ", confirmed by a second run" if getattr(settings, "confirm", True) else ""
    summary = (f"{'on' if settings.enabled else 'detection off'}: every {settings.recheck_hours:g} h; a recheck waits for "
               f"{when}, {'next ' + settings.at if settings.at else 'no set time'}; regression beyond "
               f"{settings.threshold_pct:g} %{confirm} "
               f"({'settings ' + str(path) if path.exists() else 'defaults: no ' + str(path)})")
    return info, _check("recheck", "ok", summary)


def check_energy(seconds: float = 0.25) -> tuple[dict[str, Any], dict[str, Any]]:
    """The energy counter benchd will read (benchd.sensors.energy) and one reading: mean watts over `seconds`.

    Standalone on purpose, so a platform report can call it too. No counter is a warning, not a
    problem: benchd runs, and every energy figure is null with the reason shown here."""
    from benchd.sensors.energy.choose import open_reader
    from benchd.sensors.energy.reader import describe, one_reading

    reader = open_reader()
    try:
        info: dict[str, Any] = describe(reader)
        d = one_reading(reader, seconds) if reader.available else None
    finally:
        reader.close()
    if d is None or d.total_j is None:
        why = (d.reason if d is not None else None) or reader.reason or "no reading"
        info["reading"] = None
        fix = ("give this user read access to the RAPL counters (the command is in the message above)"
               if reader.grantable else
               "energy per token stays null on this machine (a VM or container has no RAPL; on a Mac, IOReport "
               "needs Apple silicon)")
        return info, _check("energy", "warn", f"not measurable: {why}", fix)
    info["reading"] = {"seconds": round(d.seconds, 3), "joules": round(d.total_j, 6),
                       "watts": round(d.watts or 0.0, 3), "channels": {k: round(v, 6) for k, v in d.channels.items()}}
    parts = ", ".join(f"{k} {v / d.seconds:.2f} W" for k, v in d.channels.items())
    return info, _check("energy", "ok", f"{reader.source}: {d.watts or 0.0:.2f} W over {d.seconds:.2f} s now ({parts}); "
                        "system energy, not the server alone")


def check_sandbox() -> tuple[dict[str, Any], dict[str, Any]]:
    """The eval sandbox in force (benchd.servers.sandbox.detect: it runs a program in each backend). None
    is a warning: benchd runs, but code evals are refused unless a sweep says eval_sandbox = "none"."""
    from benchd.servers import sandbox

    box = sandbox.detect()
    info: dict[str, Any] = {"kind": box.kind, "binary": box.binary, "detail": box.detail}
    if not box.isolated:
        return info, _check("eval sandbox", "warn", f"{box.detail}; code evals are refused unless a sweep says "
                            "eval_sandbox = \"none\"", "Linux: apt-get install bubblewrap (or allow user namespaces)")
    return info, _check("eval sandbox", "ok", f"{box.kind} ({box.binary}): {box.detail}")


def run_checks(state_dir: Path, socket: Path, cache_dir: Path) -> dict[str, Any]:
    state_info, state_check = check_state_dir(state_dir)
    runtimes, runtime_checks = check_runtimes(cache_dir)
    daemon, daemon_check = check_daemon(socket, state_dir)
    thermal, thermal_check = _sources("thermal")
    memory, memory_check = _sources("memory")
    power, power_check, sleep, sleep_check = check_power()
    recheck, recheck_check = check_recheck(state_dir, socket, bool(daemon["reachable"]))
    energy, energy_check = check_energy()
    eval_sandbox, sandbox_check = check_sandbox()
    checks = [state_check, *runtime_checks, daemon_check, thermal_check, memory_check, energy_check, power_check,
              sleep_check, recheck_check, sandbox_check]
    problems = [c for c in checks if c["status"] == "problem"]
    return {
        "ok": not problems,
        "problems": [c["summary"] for c in problems],
        "checks": checks,
        "state_dir": state_info,
        "cache_dir": str(cache_dir),
        "runtimes": runtimes,
        "daemon": daemon,
        "thermal": thermal,
        "memory": memory,
        "energy": energy,
        "power": power,
        "sleep_prevention": sleep,
        "recheck": recheck,
        "eval_sandbox": eval_sandbox,
    }


MARKS = {"ok": ("✓", "green"), "warn": ("!", "yellow"), "problem": ("✗", "red")}


def _print(report: dict[str, Any]) -> None:
    width = max(len(c["name"]) for c in report["checks"])
    for c in report["checks"]:
        mark, color = MARKS[c["status"]]
        click.echo(f"{click.style(mark, fg=color, bold=True)} {c['name']:<{width}}  {c['summary']}")
        if c["fix"] and c["status"] != "ok":
            click.echo(f"  {'':<{width}}  {click.style('fix:', bold=True)} {c['fix']}")
    if report["ok"]:
        click.echo(click.style("\nno problems found", fg="green"))
    else:
        n = len(report["problems"])
        click.echo(click.style(f"\n{n} problem{'s' if n > 1 else ''} to fix (see 'fix:' above)", fg="red", bold=True))


@click.command("doctor")
@state_dir_option(help="State dir to check (default: $BENCHD_STATE_DIR, else the platform default).")
@click.option("--socket", "socket_path", envvar="BENCHD_SOCKET", type=click.Path(dir_okay=False), default=None,
              help="benchd's socket (default: <state dir>/benchd.sock).")
@click.option("--json", "as_json", is_flag=True, help="Print every finding as JSON.")
@click.option("--platform-report", "report_file", type=click.Path(dir_okay=False, writable=True), default=None,
              metavar="FILE", help="Exercise every platform path here and write raw outputs + parsed values to FILE "
                                   "(nothing private: home is ~, user and host are masked) for a bug report.")
def doctor(state_dir: str | None, socket_path: str | None, as_json: bool, report_file: str | None) -> None:
    """Check this machine: runtimes and versions, daemon, state dir, sensors, power, sleep.

    Prints what to do about each problem. Exit status 1 when something needed is missing (no runtime
    at all, a state dir with wrong owner or permissions), 0 otherwise. Does not need the daemon.

    \b
    Examples:
      benchctl doctor
      benchctl doctor --json | jq '.runtimes'
      BENCHD_LLAMA_SERVER=~/llama.cpp/build/bin/llama-server benchctl doctor
      benchctl doctor --platform-report benchd-report.json   # on a Mac: attach it to a bug report
    """
    from benchd.config import Config

    config = Config.resolve(state_dir=state_dir, socket=socket_path)
    if report_file is not None:
        write_platform_report(Path(report_file), config.state_dir, config.cache_dir, config.socket)
        return
    report = run_checks(config.state_dir, config.socket, config.cache_dir)
    if as_json:
        import json

        click.echo(json.dumps(report, indent=2))
    else:
        _print(report)
    sys.exit(exitcodes.OK if report["ok"] else exitcodes.FAILED)


def write_platform_report(path: Path, state_dir: Path, cache_dir: Path, socket: Path) -> None:
    """`--platform-report`: write the file, say which areas failed; exit 2 when it cannot be written."""
    from benchctl.platform_report import write

    try:
        report = write(path, (state_dir, cache_dir, socket),
                       extra={"doctor": lambda ctx: run_checks(ctx.state_dir, ctx.socket, ctx.cache_dir)})
    except OSError as exc:
        raise _fail(f"error: cannot write the platform report to {path}: {exc.strerror or exc}",
                    exitcodes.BAD_INPUT) from exc
    failed = [name for name, area in report["areas"].items() if isinstance(area, dict) and "error" in area]
    click.echo(f"wrote {path} ({len(report['areas'])} areas" + (f"; failed: {', '.join(failed)}" if failed else "") + ")")
    click.echo("please attach it to a bug report: it holds raw command outputs and parsed values, no user or host names")
