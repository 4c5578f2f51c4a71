"""Which memory reader this machine gets, the swap counters, and what `benchctl doctor` lists."""

from __future__ import annotations

import os
import sys

import psutil

from benchd.sensors.memory import darwin as memory_darwin
from benchd.sensors.memory import linux as memory_linux
from benchd.sensors.memory.readers import Backend, PsutilRss


def default_backend() -> Backend:
    if sys.platform.startswith("linux") and os.path.exists("/proc/self/status"):
        return memory_linux.LinuxProc()
    if sys.platform == "darwin":
        return memory_darwin.Darwin()
    return PsutilRss()


def read_swap() -> tuple[int, int, str] | tuple[None, None, str]:
    """System-wide (swapped-in bytes, swapped-out bytes, source) since boot, or (None, None, why not);
    macOS reads vm_statistics64 (psutil's sin/sout count pager page-ins there)."""
    if sys.platform == "darwin":
        try:
            sin, sout = memory_darwin.read_swap()
        except OSError as exc:
            return None, None, f"vm_statistics64 unavailable: {exc}"
        return sin, sout, "darwin:vm_statistics64 swapins/swapouts"
    try:
        s = psutil.swap_memory()
    except (OSError, RuntimeError, NotImplementedError) as exc:
        return None, None, f"psutil.swap_memory() unavailable: {exc}"
    return int(s.sin), int(s.sout), "psutil:swap_memory sin/sout"


def describe_sources() -> list[dict[str, object]]:
    """What memory sources exist on this machine and which do not, with why (for `benchctl doctor`)."""
    out: list[dict[str, object]] = []
    if sys.platform == "darwin":
        out.extend(memory_darwin.describe())
    elif os.path.exists("/proc/self/status"):
        out.extend(memory_linux.describe())
    else:
        out.append({"name": "kernel peak", "available": False, "reason": f"no kernel peak source on {sys.platform}"})
    out.append({"name": "psutil:rss", "available": True, "detail": "sampled RSS, fallback only"})
    sin, _, src = read_swap()
    if sin is None:
        out.append({"name": "swap counters", "available": False, "reason": src})
    else:
        total = psutil.swap_memory().total
        out.append({"name": src, "available": True, "detail": "system-wide swap in/out delta per probe"
                    + ("" if total else " (no swap configured: deltas will be 0)")})
    return out
