"""macOS-only power facts: `pmset -g batt` parsing and the `caffeinate` sleep assertion.

Kept apart from `power.py` because none of it can run on Linux (the shared contract): the parser is
pure and tested on committed sample outputs (tests/data/darwin/pmset_*.txt); the commands are only
built here and run by `power.py` on a Mac.

`pmset -g batt` prints which supply the machine draws from on its first line (`Now drawing from 'AC
Power'`, `'Battery Power'`, `'UPS Power'`), then one line per battery with its charge (`54%;
discharging; 3:12 remaining`). A desktop Mac prints the first line only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

PowerSource = Literal["ac", "battery", "unknown"]

PMSET_BATT = ("pmset", "-g", "batt")

_DRAWING = re.compile(r"Now drawing from '([^']+)'")
_PERCENT = re.compile(r"\t\s*(\d{1,3})%;\s*([^;]*);")


@dataclass(frozen=True)
class PmsetBatt:
    """What `pmset -g batt` said: the supply, the first battery's charge and its state, if any."""

    source: PowerSource
    drawing_from: str | None
    percent: float | None
    state: str | None


def parse_pmset_batt(text: str) -> PmsetBatt:
    """Parse `pmset -g batt`. An unrecognised supply name is "unknown", never guessed.

    'UPS Power' counts as battery: the mains has failed and the machine runs on a UPS's battery,
    which is exactly when an overnight job should not start.
    """
    match = _DRAWING.search(text)
    drawing = match.group(1) if match else None
    source: PowerSource = "unknown"
    if drawing is not None:
        low = drawing.lower()
        if low.startswith("ac"):
            source = "ac"
        elif "battery" in low or "ups" in low:
            source = "battery"
    pct = _PERCENT.search(text)
    return PmsetBatt(
        source=source,
        drawing_from=drawing,
        percent=float(pct.group(1)) if pct else None,
        state=pct.group(2).strip() if pct else None,
    )


def caffeinate_command(pid: int) -> list[str]:
    """`caffeinate -i -w PID`: hold a "prevent idle sleep" assertion until PID exits.

    `-i` prevents idle system sleep (the display may still sleep, which costs nothing); `-w` ties the
    assertion to benchd's own pid, so it is released even if benchd is killed with SIGKILL.
    """
    return ["caffeinate", "-i", "-w", str(pid)]
