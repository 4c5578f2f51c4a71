"""macOS sleep clock: `mach_continuous_time` minus `mach_absolute_time` grows by the time slept. Pure
conversions tested on tests/data/darwin/mach_clocks.json; `MachClock` binds libSystem (macOS only)."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any


class _Timebase(ctypes.Structure):
    _fields_ = [("numer", ctypes.c_uint32), ("denom", ctypes.c_uint32)]


def ticks_to_s(ticks: int, numer: int, denom: int) -> float:
    """Mach ticks to seconds: ticks × numer / denom nanoseconds (integer maths first: no float drift)."""
    if denom <= 0 or numer <= 0:
        raise ValueError(f"invalid mach timebase {numer}/{denom}")
    return (ticks * numer // denom) / 1e9


def gap_s(continuous: int, absolute: int, numer: int, denom: int) -> float:
    """Seconds the continuous clock is ahead of the absolute one: time slept since boot."""
    return ticks_to_s(continuous - absolute, numer, denom)


class MachClock:
    """The sleep gap from libSystem's mach clocks (macOS 10.12+ has `mach_continuous_time`)."""

    source = "darwin:mach_continuous_time-mach_absolute_time"

    def __init__(self, lib: Any = None) -> None:
        if lib is None:
            path = ctypes.util.find_library("System")
            if path is None:
                raise OSError("libSystem not found")
            lib = ctypes.CDLL(path)
        self._lib = lib
        lib.mach_absolute_time.restype = ctypes.c_uint64
        lib.mach_continuous_time.restype = ctypes.c_uint64
        tb = _Timebase()
        if lib.mach_timebase_info(ctypes.byref(tb)) != 0:
            raise OSError("mach_timebase_info failed")
        self.numer, self.denom = int(tb.numer), int(tb.denom)

    def gap(self) -> float:
        cont = int(self._lib.mach_continuous_time())
        absolute = int(self._lib.mach_absolute_time())
        return gap_s(cont, absolute, self.numer, self.denom)
