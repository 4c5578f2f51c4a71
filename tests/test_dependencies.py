"""The declared dependency floors cover the APIs the code calls (issue 14, finding 10).

A floor that is too low installs fine and fails at run time on the one machine that has the old
version: `Process.net_connections` exists from psutil 6.0 (before, `Process.connections`), so a
`psutil>=5.9` floor let a Mac with Homebrew's older psutil crash on the first orphan check.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: psutil API -> first psutil version that has it (psutil's HISTORY.rst).
PSUTIL_SINCE = {"net_connections": (6, 0)}


def _floor(name: str) -> tuple[int, ...]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if re.match(rf"{name}\b", d))
    match = re.search(r">=\s*([\d.]+)", spec)
    assert match, f"{spec!r} has no lower bound"
    return tuple(int(p) for p in match.group(1).split("."))


def test_psutil_floor_covers_every_api_used() -> None:
    sources = "\n".join(p.read_text() for p in (ROOT / "benchd").rglob("*.py"))
    sources += "\n".join(p.read_text() for p in (ROOT / "benchctl").rglob("*.py"))
    floor = _floor("psutil")
    for api, since in PSUTIL_SINCE.items():
        if re.search(rf"\.{api}\(", sources):
            assert floor >= since, f"the code calls psutil {api}() (psutil >= {since}), but pyproject allows {floor}"


def test_aiohttp_floor_covers_the_loopback_connector() -> None:
    """`TCPConnector(socket_factory=)`, the loopback-only guard's hook, is new in aiohttp 3.12 (aio-libs PR 10520)."""
    sources = (ROOT / "benchd" / "servers" / "runtimes" / "http.py").read_text()
    assert "socket_factory=" in sources
    assert _floor("aiohttp") >= (3, 12)
