"""Thermal sensing behind one interface; every reading names its source. `open_sensor()` picks
`$BENCHD_THERMAL_FILE` (the test seam: °C or a pressure word), macOS pressure, Linux temperatures (max
over CPU-ish sensors), else an unavailable sensor with a reason."""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import psutil

from benchd.schemas import ThermalReading

#: Pressure words a reading may carry. Apple's ProcessInfo names and thermald's five levels.
PRESSURE_WORDS = frozenset(
    {"nominal", "fair", "serious", "critical", "moderate", "heavy", "trapping", "sleeping"}
)

#: psutil sensor names / sysfs zone types that measure the CPU package or cores (or the SoC).
_CPU_NAME = re.compile(r"^(coretemp|k10temp|zenpower|x86_pkg_temp|cpu|soc|tctl|acpitz)", re.IGNORECASE)

NO_SENSOR_REASON = "no thermal sensor exposed (VM?)"


class ThermalSensor(Protocol):
    """Anything with a `read()`. Reads may block briefly (a file, a sysfs walk, a short subprocess)."""

    def read(self) -> ThermalReading: ...


class UnavailableSensor:
    """The honest answer on machines without a sensor."""

    def __init__(self, reason: str = NO_SENSOR_REASON, source: str = "none") -> None:
        self.reason = reason
        self.source = source

    def read(self) -> ThermalReading:
        return ThermalReading(source=self.source, available=False, reason=self.reason)


class FileSensor:
    """Test seam: the file's current content is the reading (°C number or pressure word)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.source = f"file:{self.path}"

    def read(self) -> ThermalReading:
        try:
            text = self.path.read_text().strip()
        except OSError as exc:
            return ThermalReading(source=self.source, available=False, reason=f"cannot read: {exc.strerror or exc}")
        return parse_reading(text, self.source)


def parse_reading(text: str, source: str) -> ThermalReading:
    """A °C number or a pressure word; anything else is unavailable with the reason."""
    word = text.strip().lower()
    if word in PRESSURE_WORDS:
        return ThermalReading(source=source, pressure=word)
    try:
        value = float(word)
    except ValueError:
        return ThermalReading(source=source, available=False, reason=f"unrecognized thermal value {text[:40]!r}")
    if not math.isfinite(value):
        return ThermalReading(source=source, available=False, reason=f"non-finite thermal value {text[:40]!r}")
    return ThermalReading(source=source, celsius=value)


# -------------------------------------------------------------------------------------------- Linux


def _pick(candidates: list[tuple[str, float, bool]]) -> tuple[str, float, bool] | None:
    """Max over CPU-ish sensors, else over all; (name, celsius, cpu_ish)."""
    cpu = [c for c in candidates if c[2]]
    pool = cpu or candidates
    return max(pool, key=lambda c: c[1]) if pool else None


class LinuxSensor:
    """psutil hwmon temperatures, else sysfs thermal zones. `sysfs_root`/`use_psutil` are test seams."""

    def __init__(self, sysfs_root: str | os.PathLike[str] = "/sys/class/thermal", *, use_psutil: bool = True) -> None:
        self.sysfs_root = Path(sysfs_root)
        self.use_psutil = use_psutil

    def psutil_candidates(self) -> list[tuple[str, float, bool]]:
        if not self.use_psutil or not hasattr(psutil, "sensors_temperatures"):
            return []
        try:
            temps = psutil.sensors_temperatures()
        except (OSError, RuntimeError):
            return []
        out = []
        for name, entries in temps.items():
            for i, e in enumerate(entries):
                if e.current is None or not math.isfinite(e.current):
                    continue
                label = e.label or str(i)
                out.append((f"linux:psutil:{name}/{label}", float(e.current), bool(_CPU_NAME.match(name))))
        return out

    def sysfs_candidates(self) -> list[tuple[str, float, bool]]:
        out = []
        for zone in sorted(self.sysfs_root.glob("thermal_zone*")):
            try:
                kind = (zone / "type").read_text().strip()
                milli = int((zone / "temp").read_text().strip())
            except (OSError, ValueError):
                continue  # unreadable or disabled zone (EINVAL/ENODATA are common)
            out.append((f"linux:sysfs:{zone.name}/{kind}", milli / 1000.0, bool(_CPU_NAME.match(kind))))
        return out

    def read(self) -> ThermalReading:
        for candidates in (self.psutil_candidates(), self.sysfs_candidates()):
            best = _pick(candidates)
            if best is not None:
                name, celsius, cpu_ish = best
                source = name if cpu_ish else f"{name} (not CPU-specific: no CPU sensor found)"
                return ThermalReading(source=source, celsius=celsius)
        return ThermalReading(source="linux", available=False, reason=NO_SENSOR_REASON)


# --------------------------------------------------------------------------------------- selection


def open_sensor(env: Mapping[str, str] | None = None) -> ThermalSensor:
    """The best sensor this machine has (see the module docstring for the order)."""
    env = os.environ if env is None else env
    path = env.get("BENCHD_THERMAL_FILE")
    if path:
        return FileSensor(path)
    if sys.platform == "darwin":
        from benchd.sensors.thermal import darwin as thermal_darwin

        return thermal_darwin.DarwinSensor()
    if sys.platform.startswith("linux"):
        sensor = LinuxSensor()
        if sensor.read().available:
            return sensor
    return UnavailableSensor()


def _linux_sources() -> list[dict[str, object]]:
    s = LinuxSensor()
    ps = s.psutil_candidates()
    zs = s.sysfs_candidates()
    return [{"name": "linux:psutil", "available": bool(ps),
             **({"detail": ", ".join(n for n, _, _ in ps)} if ps
                else {"reason": "psutil.sensors_temperatures() reports no sensor (no /sys/class/hwmon temps)"})},
            {"name": "linux:sysfs", "available": bool(zs),
             **({"detail": ", ".join(n for n, _, _ in zs)} if zs
                else {"reason": f"no readable {s.sysfs_root}/thermal_zone*/temp"})}]


def describe_sources(env: Mapping[str, str] | None = None) -> list[dict[str, object]]:
    """Each thermal source: whether it exists here, and why not (for `benchctl doctor`)."""
    env = os.environ if env is None else env
    out: list[dict[str, object]] = []
    path = env.get("BENCHD_THERMAL_FILE")
    if path:
        r = FileSensor(path).read()
        out.append({"name": "file", "available": r.available, "detail": f"$BENCHD_THERMAL_FILE={path} (test seam)"}
                   | ({"reason": r.reason} if r.reason else {}))
    if sys.platform == "darwin":
        from benchd.sensors.thermal import darwin as thermal_darwin

        out.extend(thermal_darwin.describe())
    elif sys.platform.startswith("linux"):
        out += _linux_sources()
    else:
        out.append({"name": "thermal", "available": False, "reason": f"no thermal source implemented for {sys.platform}"})
    chosen = open_sensor(env).read()
    out.append({"name": "selected", "available": chosen.available, "detail": chosen.source}
               | ({"reason": chosen.reason} if chosen.reason else {}))
    return out
