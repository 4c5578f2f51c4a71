"""`benchctl doctor --platform-report FILE`: exercise every platform path on this machine and write one
JSON file of raw outputs and parsed values, to attach to a bug report.

One area per function (`AREAS`: name -> collect(ctx) -> dict, and `REPLAYS`: name -> replay(area,
platform) -> differences). A new area (energy) adds its own module and one entry in each. An area that
fails is recorded with its error and the others still run. Nothing private leaves the machine: `scrub`
turns the home directory into `~` and the user and host names into `<user>` / `<host>` everywhere.

Reasons and facts: docs/macos.md#platform-report-internals.
"""

from __future__ import annotations

import getpass
import json
import os
import platform
import re
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchctl.platform_report import energy, memory, sandbox, system
from benchctl.platform_report.context import Context

#: 1: first version.
REPORT_VERSION = 1

Collect = Callable[[Context], dict[str, Any]]
Replay = Callable[[dict[str, Any], dict[str, Any]], list[str]]

AREAS: dict[str, Collect] = {
    "memory": memory.collect_memory,
    "swap": memory.collect_swap,
    "thermal": system.collect_thermal,
    "power": system.collect_power,
    "sleep_prevention": system.collect_sleep,
    "peer_credentials": system.collect_peer_credentials,
    "service": system.collect_service,
    "runtimes": system.collect_runtimes,
    "energy": energy.collect_energy,
    "eval_sandbox": sandbox.collect_sandbox,
}
REPLAYS: dict[str, Replay] = {
    "memory": memory.replay_memory,
    "swap": memory.replay_swap,
    "thermal": system.replay_thermal,
    "power": system.replay_power,
    "peer_credentials": system.replay_peer_credentials,
    "service": system.replay_service,
    "energy": energy.replay_energy,
}


def platform_facts() -> dict[str, Any]:
    mac = platform.mac_ver()[0] if sys.platform == "darwin" else None
    return {"sys_platform": sys.platform, "release": platform.release(), "macos": mac or None,
            "machine": platform.machine(), "python": platform.python_version(), "page_size": os.sysconf("SC_PAGE_SIZE")}


def build(ctx: Context, areas: dict[str, Collect] | None = None) -> dict[str, Any]:
    """Run every area; a failing one keeps its error and traceback's last line, the rest still run."""
    from importlib.metadata import version

    out: dict[str, Any] = {}
    for name, collect in (areas or AREAS).items():
        try:
            out[name] = collect(ctx)
        except Exception as exc:  # recorded in the report: the point is to learn what fails on a Mac
            out[name] = {"error": f"{type(exc).__name__}: {exc}",
                         "where": traceback.format_exc().strip().splitlines()[-3:]}
    return {"report_version": REPORT_VERSION, "benchd_version": version("benchd"),
            "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "platform": platform_facts(), "areas": out}


def _secrets() -> list[tuple[re.Pattern[str], str]]:
    """(pattern of a private word, replacement), longest first so /Users/ada is caught before ada. Whole
    words only: a user named "ada" must not turn "metadata" into "met<user>"."""
    pairs = [(str(Path.home()), "~")]
    host = socket.gethostname()
    pairs += [(host, "<host>"), (host.split(".")[0], "<host>")]
    try:
        pairs.append((getpass.getuser(), "<user>"))
    except (KeyError, OSError):
        pass
    words = sorted({(k, v) for k, v in pairs if len(k) >= 3 and k not in ("/", "~")}, key=lambda kv: -len(kv[0]))
    return [(re.compile(rf"(?<![A-Za-z0-9_.-]){re.escape(k)}(?![A-Za-z0-9_-])"), v) for k, v in words]


def scrub(value: Any, secrets: list[tuple[re.Pattern[str], str]] | None = None) -> Any:
    """The same structure with every private word replaced (home -> ~, user -> <user>, host -> <host>)."""
    pairs = _secrets() if secrets is None else secrets
    if isinstance(value, str):
        for private, public in pairs:
            value = private.sub(public, value)
        return value
    if isinstance(value, dict):
        return {scrub(k, pairs): scrub(v, pairs) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v, pairs) for v in value]
    return value


def write(path: Path, ctx_dirs: tuple[Path, Path, Path], extra: dict[str, Collect] | None = None) -> dict[str, Any]:
    """Build the report in a scratch folder, scrub it, write it to `path`; returns the report. `extra`
    areas run after `AREAS` (doctor passes its own checks: this package never imports the commands)."""
    state_dir, cache_dir, sock = ctx_dirs
    with tempfile.TemporaryDirectory(prefix="benchd-report-") as tmp:
        ctx = Context(tmp=Path(tmp), state_dir=state_dir, cache_dir=cache_dir, socket=sock)
        report = build(ctx, {**AREAS, **(extra or {})})
    clean = scrub(report)
    path.write_text(json.dumps(clean, indent=2, sort_keys=False) + "\n")
    return clean  # type: ignore[no-any-return]


def replay(report: dict[str, Any]) -> list[str]:
    """Re-parse every raw output of a report with this build's parsers: the differences (empty = agree)."""
    if report.get("report_version") != REPORT_VERSION:
        return [f"unknown report_version {report.get('report_version')!r} (this build reads {REPORT_VERSION})"]
    out: list[str] = []
    for name, area in (report.get("areas") or {}).items():
        if name in REPLAYS and isinstance(area, dict) and "error" not in area:
            out += REPLAYS[name](area, report.get("platform") or {})
    return out
