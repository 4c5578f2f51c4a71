"""macOS-only: the launchctl commands for the benchd LaunchAgent, and a parser for `launchctl print`.

Isolated per the shared contract (launchctl cannot run on Linux): the commands are built here and run by
`service.py` on a Mac; the parser is pure and tested on a committed sample
(tests/data/darwin/launchctl_print_running.txt).

Modern launchctl verbs: `bootstrap gui/UID PLIST` loads an agent into the user's GUI session (the one
Metal needs), `bootout gui/UID/LABEL` unloads it, `print gui/UID/LABEL` describes it, `enable` clears a
previous `disable` (which would otherwise make bootstrap fail with "service disabled").
"""

from __future__ import annotations

import os
import re
from pathlib import Path


def domain(uid: int | None = None) -> str:
    return f"gui/{os.getuid() if uid is None else uid}"


def agent_path(label: str, home: Path | None = None) -> Path:
    return (home or Path.home()) / "Library" / "LaunchAgents" / f"{label}.plist"


def bootstrap_commands(label: str, plist: Path, uid: int | None = None) -> list[list[str]]:
    """Unload any previous copy (its failure is fine), clear a disable, then load the new plist."""
    target = f"{domain(uid)}/{label}"
    return [
        ["launchctl", "bootout", target],
        ["launchctl", "enable", target],
        ["launchctl", "bootstrap", domain(uid), str(plist)],
    ]


def bootout_command(label: str, uid: int | None = None) -> list[str]:
    return ["launchctl", "bootout", f"{domain(uid)}/{label}"]


def print_command(label: str, uid: int | None = None) -> list[str]:
    return ["launchctl", "print", f"{domain(uid)}/{label}"]


_TOP_KEY = re.compile(r"^\t([a-z][a-z ]*[a-z]) = (.*)$")


def parse_print(text: str) -> dict[str, str]:
    """The service's own top-level `key = value` lines of `launchctl print` (one tab deep).

    Nested blocks (`arguments = {`, `environment = {`) are skipped; the keys that matter are `state`
    (running / not running / spawn scheduled), `pid`, `last exit code`, `path`, `runs`.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        match = _TOP_KEY.match(line)
        if match and not match.group(2).endswith("{"):
            out.setdefault(match.group(1), match.group(2).strip())
    return out
