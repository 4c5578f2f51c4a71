"""macOS-only power facts: `pmset -g batt` and `caffeinate` (docs/measuring.md#power-on-macos)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

PowerSource = Literal["ac", "battery", "unknown"]

PMSET_BATT = ("pmset", "-g", "batt")

_DRAWING = re.compile(r"Now drawing from '([^']+)'")
_BATTERY = re.compile(r"\t\s*(\d{1,3})%;([^\n]*)")
_REMAINING = re.compile(r"(\d+):(\d{2}) remaining")
_PRESENT = re.compile(r"\bpresent: (true|false)")


@dataclass(frozen=True)
class PmsetBatt:
    """What `pmset -g batt` said: the supply, the first battery's charge, state and time estimate."""

    source: PowerSource
    drawing_from: str | None
    percent: float | None
    state: str | None
    remaining_min: int | None = None  # "h:mm remaining" (to empty on battery, to full on AC)
    estimate: str | None = None  # "h:mm", "no estimate", "not charging", or None (no time part at all)
    present: bool | None = None


def _supply(drawing: str | None) -> PowerSource:
    if drawing is None:
        return "unknown"
    low = drawing.lower()
    if low.startswith("ac"):
        return "ac"
    return "battery" if "battery" in low or "ups" in low else "unknown"


def _estimate(remaining: re.Match[str] | None, rest: str) -> str | None:
    if remaining:
        return f"{remaining.group(1)}:{remaining.group(2)}"
    if "(no estimate)" in rest:
        return "no estimate"
    return "not charging" if "not charging" in rest else None


def parse_pmset_batt(text: str) -> PmsetBatt:
    """Parse `pmset -g batt`; an unrecognised supply is "unknown", 'UPS Power' is battery."""
    match = _DRAWING.search(text)
    drawing = match.group(1) if match else None
    source = _supply(drawing)
    batt = _BATTERY.search(text)
    if batt is None:
        return PmsetBatt(source=source, drawing_from=drawing, percent=None, state=None)
    rest = batt.group(2)
    present = _PRESENT.search(rest)
    parts = [p.strip() for p in _PRESENT.sub("", rest).split(";")]
    state = re.sub(r"\s*\([^)]*/[^)]*\)$", "", parts[0]) or None  # drop a "(Good/100)" health suffix
    remaining = _REMAINING.search(rest)
    return PmsetBatt(
        source=source,
        drawing_from=drawing,
        percent=float(batt.group(1)),
        state=state,
        remaining_min=int(remaining.group(1)) * 60 + int(remaining.group(2)) if remaining else None,
        estimate=_estimate(remaining, rest),
        present=None if present is None else present.group(1) == "true",
    )


def caffeinate_command(pid: int) -> list[str]:
    """`caffeinate -i -w PID`: prevent idle sleep until PID (benchd) exits, even by SIGKILL."""
    return ["caffeinate", "-i", "-w", str(pid)]
