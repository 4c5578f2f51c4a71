"""macOS energy: IOReport's "Energy Model" channel group (no sudo), `powermetrics` only when already root.
Reasons and facts: docs/measuring.md#energy-on-macos."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchd.lifeline import die_with_daemon
from benchd.sensors.energy.reader import SCOPE_SYSTEM, BaseReader, Delta, NullReader, Sample

GROUP = "Energy Model"
COMPONENTS = ("CPU", "GPU", "ANE", "DRAM")
UNIT_TO_J = {"mJ": 1e-3, "uJ": 1e-6, "µJ": 1e-6, "nJ": 1e-9, "J": 1.0}
IOREPORT_SOURCE = "ioreport:Energy Model (CPU Energy + GPU Energy + ANE + DRAM)"
IOREPORT_GRANULARITY = ("IOReport Energy Model counters, one IOReportCreateSamples at each phase boundary "
                        "(request start, first token, end of stream); deltas per channel")
SCOPE = SCOPE_SYSTEM.format(what="SoC (CPU, GPU, Neural Engine) and its DRAM")
_DIE = re.compile(r"^DIE_\d+_")


@dataclass(frozen=True)
class ChannelValue:
    """One channel of an IOReport sample (or of a delta of two samples)."""

    group: str
    name: str
    unit: str
    value: int


def component(name: str) -> str | None:
    """Which SoC component a channel is the total of, or None for a part of one (per core, SRAM, ...)."""
    base = _DIE.sub("", name)
    if base == "CPU Energy":
        return "CPU"
    if base == "GPU Energy":
        return "GPU"
    if base.startswith("ANE"):
        return "ANE"
    if base.startswith("DRAM"):
        return "DRAM"
    return None


def component_joules(channels: Iterable[ChannelValue]) -> tuple[dict[str, float], list[str]]:
    """Joules per component (CPU, GPU, ANE, DRAM) of a delta, and the problems met (unknown units)."""
    out: dict[str, float] = {}
    problems: list[str] = []
    for ch in channels:
        if ch.group != GROUP:
            continue
        comp = component(ch.name)
        if comp is None:
            continue
        scale = UNIT_TO_J.get(ch.unit.strip())
        if scale is None:
            problems.append(f"channel {ch.name!r} has unit {ch.unit!r}, not one of {', '.join(UNIT_TO_J)}")
            continue
        out[comp] = out.get(comp, 0.0) + ch.value * scale
    return out, problems


def parse_channels(doc: dict[str, Any]) -> list[ChannelValue]:
    """A committed sample (`{"channels": [{"group", "name", "unit", "value"}, ...]}`) as channel values."""
    return [ChannelValue(group=str(c.get("group", GROUP)), name=str(c["name"]), unit=str(c["unit"]),
                         value=int(c["value"])) for c in doc.get("channels", [])]


def delta_from_channels(channels: list[ChannelValue], seconds: float) -> Delta:
    """The Delta of one IOReport delta sample: components as channels, total = their sum."""
    joules, problems = component_joules(channels)
    if problems:
        return Delta(seconds=seconds, channels=joules, reason="; ".join(problems))
    if not joules:
        return Delta(seconds=seconds, reason=f"no {', '.join(COMPONENTS)} channel in the IOReport '{GROUP}' group")
    return Delta(seconds=seconds, channels=joules, total_j=sum(joules.values()))


# --------------------------------------------------------------------------------- powermetrics (root)

_PM_ELAPSED = re.compile(r"\(([\d.]+)ms elapsed\)")
_PM_POWER = re.compile(r"^(CPU|GPU|ANE|DRAM) Power:\s*([\d.]+)\s*mW", re.MULTILINE)
POWERMETRICS_ARGV = ("powermetrics", "-i", "100", "--samplers", "cpu_power,gpu_power,ane_power")


def parse_powermetrics(text: str) -> list[tuple[float, dict[str, float]]]:
    """`powermetrics --samplers cpu_power,...` text: per sample block, (elapsed s, watts per component)."""
    out = []
    for block in text.split("*** Sampled system activity")[1:]:
        m = _PM_ELAPSED.search(block)
        watts = {name: float(mw) / 1000.0 for name, mw in _PM_POWER.findall(block)}
        if m and watts:
            out.append((float(m.group(1)) / 1000.0, watts))
    return out


class PowermetricsReader(BaseReader):
    """Root only: a `powermetrics` child every 100 ms, its mean power × interval summed into joules."""

    trace_hz = 10.0

    def __init__(self) -> None:
        self.source = "powermetrics:cpu_power,gpu_power,ane_power (CPU + GPU + ANE)"
        self.granularity = "powermetrics mean power every 100 ms, integrated; a boundary is up to 100 ms stale"
        self.scope = SCOPE
        self.totals = dict.fromkeys(("CPU", "GPU", "ANE"), 0.0)
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(POWERMETRICS_ARGV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     preexec_fn=die_with_daemon())
        self.available, self.reason = True, None
        threading.Thread(target=self._pump, name="powermetrics", daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        block: list[str] = []
        for line in self.proc.stdout:
            if line.startswith("*** Sampled system activity") and block:
                for seconds, watts in parse_powermetrics("".join(block)):
                    with self.lock:
                        for k, w in watts.items():
                            self.totals[k] = self.totals.get(k, 0.0) + w * seconds
                block = []
            block.append(line)

    def sample(self) -> Sample:
        with self.lock:
            return Sample(time.perf_counter(), dict(self.totals))

    def delta(self, a: Sample, b: Sample) -> Delta:
        chans = {k: b.raw[k] - a.raw.get(k, 0.0) for k in b.raw}
        return Delta(seconds=b.t - a.t, channels=chans, total_j=sum(chans.values()))

    def close(self) -> None:
        self.proc.terminate()


# --------------------------------------------------------------------------------- IOReport (ctypes)

_UTF8 = 0x08000100
_CF = "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation"
_IOREPORT = "/usr/lib/libIOReport.dylib"
_P = ctypes.c_void_p


class _Owned:
    """A CoreFoundation object this process owns, released when the Python object goes."""

    def __init__(self, lib: _IOReport, ptr: int | None) -> None:
        self.lib, self.ptr = lib, ptr

    def __del__(self) -> None:
        if self.ptr:
            self.lib.cf.CFRelease(self.ptr)


class _IOReport:
    """The ctypes loader: one subscription to the Energy Model group, samples, and the channel walk."""

    def __init__(self) -> None:
        cf = self.cf = ctypes.CDLL(_CF)
        ior = self.ior = ctypes.CDLL(_IOREPORT)
        sigs: list[tuple[Any, Any, list[Any]]] = [
            (cf.CFStringCreateWithCString, _P, [_P, ctypes.c_char_p, ctypes.c_uint32]),
            (cf.CFStringGetCString, ctypes.c_bool, [_P, ctypes.c_char_p, ctypes.c_long, ctypes.c_uint32]),
            (cf.CFDictionaryGetValue, _P, [_P, _P]), (cf.CFDictionaryGetCount, ctypes.c_long, [_P]),
            (cf.CFDictionaryCreateMutableCopy, _P, [_P, ctypes.c_long, _P]),
            (cf.CFArrayGetCount, ctypes.c_long, [_P]), (cf.CFArrayGetValueAtIndex, _P, [_P, ctypes.c_long]),
            (cf.CFRelease, None, [_P]),
            (ior.IOReportCopyChannelsInGroup, _P, [_P, _P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64]),
            (ior.IOReportCreateSubscription, _P, [_P, _P, ctypes.POINTER(_P), ctypes.c_uint64, _P]),
            (ior.IOReportCreateSamples, _P, [_P, _P, _P]), (ior.IOReportCreateSamplesDelta, _P, [_P, _P, _P]),
            (ior.IOReportChannelGetGroup, _P, [_P]), (ior.IOReportChannelGetChannelName, _P, [_P]),
            (ior.IOReportChannelGetUnitLabel, _P, [_P]), (ior.IOReportSimpleGetIntegerValue, ctypes.c_int64, [_P, ctypes.c_int32]),
        ]
        for fn, res, args in sigs:
            fn.restype, fn.argtypes = res, args
        self.key = cf.CFStringCreateWithCString(None, b"IOReportChannels", _UTF8)
        group = cf.CFStringCreateWithCString(None, GROUP.encode(), _UTF8)
        chans = ior.IOReportCopyChannelsInGroup(group, None, 0, 0, 0)
        cf.CFRelease(group)
        if not chans or cf.CFDictionaryGetCount(chans) == 0:
            raise OSError(f"IOReport has no '{GROUP}' channel group (an Intel Mac, or a macOS without it)")
        self.channels = cf.CFDictionaryCreateMutableCopy(None, cf.CFDictionaryGetCount(chans), chans)
        cf.CFRelease(chans)
        subbed = _P()
        self.sub = ior.IOReportCreateSubscription(None, self.channels, ctypes.byref(subbed), 0, None)
        if not self.sub:
            raise OSError("IOReportCreateSubscription returned NULL")

    def sample(self) -> _Owned:
        return _Owned(self, self.ior.IOReportCreateSamples(self.sub, self.channels, None))

    def _str(self, ref: int | None) -> str:
        if not ref:
            return ""
        buf = ctypes.create_string_buffer(256)
        return buf.value.decode("utf-8", "replace") if self.cf.CFStringGetCString(ref, buf, 256, _UTF8) else ""

    def walk(self, a: _Owned, b: _Owned) -> list[ChannelValue]:
        """The channels of the delta b - a (IOReportCreateSamplesDelta), as plain values."""
        cf, ior = self.cf, self.ior
        d = ior.IOReportCreateSamplesDelta(a.ptr, b.ptr, None)
        if not d:
            return []
        try:
            arr = cf.CFDictionaryGetValue(d, self.key)
            out = []
            for i in range(cf.CFArrayGetCount(arr) if arr else 0):
                item = cf.CFArrayGetValueAtIndex(arr, i)
                out.append(ChannelValue(group=self._str(ior.IOReportChannelGetGroup(item)),
                                        name=self._str(ior.IOReportChannelGetChannelName(item)),
                                        unit=self._str(ior.IOReportChannelGetUnitLabel(item)),
                                        value=int(ior.IOReportSimpleGetIntegerValue(item, 0))))
            return out
        finally:
            cf.CFRelease(d)


class IOReportReader(BaseReader):
    """IOReport Energy Model, no root: the default on Apple silicon. A sample is a CoreFoundation
    dictionary of every channel (unmeasured cost on a real Mac), so sustained runs trace at 10 Hz."""

    trace_hz = 10.0

    def __init__(self) -> None:
        self.lib = _IOReport()
        self.source, self.granularity, self.scope = IOREPORT_SOURCE, IOREPORT_GRANULARITY, SCOPE
        self.available, self.reason = True, None

    def sample(self) -> Sample:
        return Sample(time.perf_counter(), self.lib.sample())

    def delta(self, a: Sample, b: Sample) -> Delta:
        return delta_from_channels(self.lib.walk(a.raw, b.raw), b.t - a.t)


def open_darwin() -> BaseReader:
    """IOReport; else powermetrics when already root; else a null reader with both reasons."""
    try:
        return IOReportReader()
    except (OSError, AttributeError) as exc:
        why = f"IOReport Energy Model unavailable: {exc}"
    if os.geteuid() == 0:
        try:
            return PowermetricsReader()
        except OSError as exc:
            why += f"; powermetrics failed: {exc}"
    else:
        why += "; the powermetrics fallback needs root and benchd never asks for it"
    return NullReader(why, source="ioreport")
