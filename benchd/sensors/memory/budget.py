"""How much memory servers resident side by side may take (the interleaved order's fit check);
`$BENCHD_MEMORY_BUDGET_BYTES` replaces it. Reasons and facts: docs/measuring.md#memory-budget."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchd.sensors.facts import sysctl

#: Share of physical memory the resident servers may take together.
BUDGET_FRACTION = 0.60
#: The test knob (bytes).
ENV_BUDGET = "BENCHD_MEMORY_BUDGET_BYTES"
#: No Mac report has confirmed the iogpu.wired_limit_mb reading yet.
DARWIN_VERIFIED = False


@dataclass(frozen=True)
class Budget:
    """The byte budget and where it came from (`source` is what the runbook prints)."""

    bytes: int | None
    source: str


def linux_physical(read: Callable[[], str] = lambda: Path("/proc/meminfo").read_text()) -> int | None:
    """MemTotal from /proc/meminfo, in bytes (None when unreadable)."""
    try:
        text = read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def darwin_limits(sysctl: Callable[[str], str | None] = sysctl) -> tuple[int | None, int | None]:
    """(hw.memsize bytes, iogpu.wired_limit_mb in bytes or None when unset/0/unreadable)."""
    mem = sysctl("hw.memsize")
    wired = sysctl("iogpu.wired_limit_mb")
    physical = int(mem) if mem and mem.strip().isdigit() else None
    limit = int(wired) * 1024 * 1024 if wired and wired.strip().isdigit() and int(wired) > 0 else None
    return physical, limit


def _darwin_budget(physical: int | None, wired: int | None) -> Budget:
    """A share of hw.memsize, or the GPU wired limit when it is lower."""
    if physical is None:
        return Budget(None, "sysctl hw.memsize unreadable: no budget, servers are not started side by side")
    share = int(physical * BUDGET_FRACTION)
    note = "" if DARWIN_VERIFIED else " (macOS reading unverified)"
    if wired is not None and wired < share:
        return Budget(wired, f"iogpu.wired_limit_mb = {wired // (1024 * 1024)} MiB, under "
                             f"{BUDGET_FRACTION:.0%} of hw.memsize{note}")
    extra = "iogpu.wired_limit_mb unset" if wired is None else "iogpu.wired_limit_mb above it"
    return Budget(share, f"{BUDGET_FRACTION:.0%} of hw.memsize ({extra}){note}")


def read_budget(*, platform: str = sys.platform, env: Mapping[str, str] = os.environ,
                meminfo: Callable[[], int | None] = linux_physical,
                darwin: Callable[[], tuple[int | None, int | None]] = darwin_limits) -> Budget:
    """The budget on this machine (readers injected for tests)."""
    knob = env.get(ENV_BUDGET)
    if knob and knob.isdigit():
        return Budget(int(knob), f"${ENV_BUDGET} = {int(knob)} bytes")
    if platform == "darwin":
        return _darwin_budget(*darwin())
    physical = meminfo() if platform.startswith("linux") else psutil.virtual_memory().total
    if physical is None:
        return Budget(None, "/proc/meminfo MemTotal unreadable: no budget, servers are not started side by side")
    where = "/proc/meminfo MemTotal" if platform.startswith("linux") else "psutil virtual_memory total"
    return Budget(int(physical * BUDGET_FRACTION), f"{BUDGET_FRACTION:.0%} of {where}")


def footprint_bytes(pid: int) -> int | None:
    """A resident server's footprint: the RSS of the process and its children; None when it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
        return int(sum(p.memory_info().rss for p in procs))
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
