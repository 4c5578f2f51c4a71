"""One interface for energy counters: cheap cumulative samples now, joules per channel later.
Reasons and facts: docs/measuring.md#energy-counters."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Where Linux exposes powercap zones (RAPL on Intel and, with the same names, on AMD).
POWERCAP_ROOT = "/sys/class/powercap"
#: The test seam: a directory laid out like /sys/class/powercap.
POWERCAP_ENV = "BENCHD_POWERCAP_ROOT"
SCOPE_SYSTEM = ("system energy: the counter covers the whole {what}, shared with everything else running "
                "(the OS, other processes, benchd itself), not the server alone")


@dataclass(frozen=True)
class Sample:
    """A snapshot of the counters at `t` (`time.perf_counter()` seconds); `raw` is reader-specific."""

    t: float
    raw: Any


@dataclass(frozen=True)
class Delta:
    """Joules between two samples: per channel, and the total over the channels `source` names.
    `total_j` is None exactly when `reason` says why (unreadable counter, reader unavailable, ...)."""

    seconds: float
    channels: dict[str, float] = field(default_factory=dict)
    total_j: float | None = None
    reason: str | None = None

    @property
    def watts(self) -> float | None:
        return self.total_j / self.seconds if self.total_j is not None and self.seconds > 0 else None


class EnergyReader(Protocol):
    source: str
    available: bool
    reason: str | None
    #: True when a counter is unreadable for a permission this user can be given (`reason` says how).
    grantable: bool
    granularity: str
    scope: str
    #: Samples per second during a sustained run (per-window energy): what a sample costs decides it.
    trace_hz: float

    def sample(self) -> Sample: ...

    def delta(self, a: Sample, b: Sample) -> Delta: ...

    def close(self) -> None: ...


class BaseReader:
    """Defaults shared by the readers; subclasses set the attributes and implement sample/delta."""

    source = "none"
    available = False
    reason: str | None = None
    grantable = False
    granularity = "none"
    scope = "none"
    trace_hz = 50.0

    def close(self) -> None:
        return None


class NullReader(BaseReader):
    """No energy counter here: every delta is null with the reason (VMs, CI, unsupported OSes)."""

    def __init__(self, reason: str, source: str = "none") -> None:
        self.reason = reason
        self.source = source

    def sample(self) -> Sample:
        return Sample(time.perf_counter(), None)

    def delta(self, a: Sample, b: Sample) -> Delta:
        return Delta(seconds=b.t - a.t, reason=self.reason)


def describe(reader: EnergyReader) -> dict[str, object]:
    """What a reader is, as plain data (runbook provenance, doctor, server_ready events)."""
    return {"source": reader.source, "available": reader.available, "reason": reader.reason,
            "granularity": reader.granularity, "scope": reader.scope}


def one_reading(reader: EnergyReader, seconds: float = 0.25) -> Delta:
    """Two samples `seconds` apart: the mean watts now (for `benchctl doctor`)."""
    a = reader.sample()
    time.sleep(seconds)
    return reader.delta(a, reader.sample())
