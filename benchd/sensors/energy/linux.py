"""Linux energy: powercap RAPL zones (`/sys/class/powercap/intel-rapl:*`, also on AMD), read as deltas.
Reasons and facts: docs/measuring.md#energy-on-linux."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from benchd.sensors.energy.reader import SCOPE_SYSTEM, BaseReader, Delta, NullReader, Sample

#: Zone directories of the MSR interface; the MMIO interface duplicates package-0 on some laptops.
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
GRANT_HINT = (
    "until reboot: sudo chmod a+r {root}/intel-rapl:*/energy_uj {root}/intel-rapl:*:*/energy_uj; "
    "for good: echo 'SUBSYSTEM==\"powercap\", ACTION==\"add\", RUN+=\"/bin/chmod a+r /sys%p/energy_uj\"' "
    "| sudo tee /etc/udev/rules.d/70-benchd-rapl.rules && sudo udevadm trigger --subsystem-match=powercap "
    "(this exposes the RAPL side channel, CVE-2020-8694, to every local user)"
)
GRANULARITY = ("RAPL energy-status counters (hardware update about every 1 ms, unit 15.3-61 µJ), "
               "read at the probe's phase boundaries: request start, first token, end of stream")


@dataclass(frozen=True)
class Zone:
    """One RAPL zone: where its counter is, what to call it, where it wraps, and if it is in the total."""

    path: Path
    label: str
    max_range_uj: int | None
    in_total: bool


def _read_int(path: Path | str) -> int:
    """One counter file: os.open/read/close on a prepared str path (cheaper per read than pathlib or buffered files)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return int(os.read(fd, 64))
    finally:
        os.close(fd)


def _denied(zone: Zone, root: Path, exc: OSError) -> str:
    return (f"needs root or a udev rule: {zone.path / 'energy_uj'} is not readable by this user "
            f"({exc.strerror or exc}); {GRANT_HINT.format(root=root)}")


def find_zones(root: Path) -> list[Zone]:
    """Every RAPL zone under `root`, parents before their sub-zones, labelled `package-0`, `package-0/dram`."""
    found = [z for entry in (sorted(root.glob("intel-rapl:*")) if root.is_dir() else []) if (z := _zone_entry(entry))]
    names = {key[0]: name for key, _, name in found if key[1] == -1}
    zones = []
    for (top, sub), path, name in sorted(found, key=lambda z: z[0]):
        label = name if sub == -1 else f"{names.get(top, f'zone-{top}')}/{name}"
        in_total = (sub == -1 and name.startswith("package")) or name.startswith("dram")
        zones.append(Zone(path=path, label=label, max_range_uj=_max_range(path), in_total=in_total))
    return zones


def _zone_entry(entry: Path) -> tuple[tuple[int, int], Path, str] | None:
    """((zone, sub-zone or -1), path, name) of a RAPL zone directory with a counter, else None."""
    m = _ZONE.match(entry.name)
    if not m or not (entry / "energy_uj").exists():
        return None
    try:
        name = (entry / "name").read_text().strip()
    except OSError:
        name = entry.name
    return (int(m.group(1)), -1 if m.group(2) is None else int(m.group(2))), entry, name


def _max_range(path: Path) -> int | None:
    try:
        return _read_int(path / "max_energy_range_uj")
    except (OSError, ValueError):
        return None


def counter_delta_uj(a: int, b: int, max_range_uj: int | None) -> int | None:
    """b - a for a counter wrapping at `max_range_uj`; None if it went back and the range is unknown."""
    if b >= a:
        return b - a
    if max_range_uj is None or max_range_uj <= 0:
        return None
    return b + max_range_uj - a


def _scope_of(totals: list[str]) -> str:
    return "CPU package (cores, uncore, integrated GPU)" + (" and DRAM" if any("dram" in t for t in totals) else "")


class RaplReader(BaseReader):
    """Samples every zone's `energy_uj`; deltas per zone in joules, total over packages + DRAM."""

    def __init__(self, root: Path, zones: list[Zone]) -> None:
        self.root = root
        self.zones = zones
        self.files = [str(z.path / "energy_uj") for z in zones]
        self.unreadable: dict[str, str] = {}
        totals = [z.label for z in zones if z.in_total]
        self.source = " + ".join(f"rapl:{label}" for label in totals)
        self.available = True
        self.reason = None
        self.granularity = GRANULARITY
        self.scope = SCOPE_SYSTEM.format(what=_scope_of(totals))
        self.sample()  # finds unreadable zones now, so doctor and provenance can say so before any probe
        if self.unreadable and all(z.label in self.unreadable for z in zones if z.in_total):
            self.available = False
            self.reason = next(iter(self.unreadable.values()))

    def sample(self) -> Sample:
        """One read of each zone's counter (a few tens of µs in all): cheap enough for the hot loop."""
        values: list[int | None] = []
        for z, path in zip(self.zones, self.files, strict=True):
            try:
                values.append(_read_int(path))
            except PermissionError as exc:
                self.unreadable[z.label] = _denied(z, self.root, exc)
                self.grantable = True
                values.append(None)
            except (OSError, ValueError) as exc:
                self.unreadable[z.label] = f"cannot read {z.path / 'energy_uj'}: {exc}"
                values.append(None)
        return Sample(time.perf_counter(), tuple(values))

    def delta(self, a: Sample, b: Sample) -> Delta:
        channels: dict[str, float] = {}
        missing: list[str] = []
        for z, va, vb in zip(self.zones, a.raw, b.raw, strict=True):
            d = counter_delta_uj(va, vb, z.max_range_uj) if va is not None and vb is not None else None
            if d is None:
                if z.in_total:
                    missing.append(self.unreadable.get(z.label)
                                   or f"rapl:{z.label} went backwards and its max_energy_range_uj is unreadable")
                continue
            channels[z.label] = d / 1e6
        seconds = b.t - a.t
        if missing:
            return Delta(seconds=seconds, channels=channels, reason="; ".join(sorted(set(missing))))
        total = sum(channels[z.label] for z in self.zones if z.in_total)
        return Delta(seconds=seconds, channels=channels, total_j=total)


def open_rapl(root: Path, hwmon_root: Path = Path("/sys/class/hwmon")) -> RaplReader | NullReader:
    """A RAPL reader over `root`, or a null reader saying what this machine lacks."""
    zones = find_zones(root)
    if not zones or not any(z.in_total for z in zones):
        hwmon = sorted(hwmon_root.glob("hwmon*/energy*_input")) if hwmon_root.is_dir() else []
        also = (f"; hwmon has energy counters ({', '.join(str(p) for p in hwmon[:3])}) but benchd does not read "
                "hwmon energy yet" if hwmon else f"; no hwmon energy counter under {hwmon_root} either")
        where = f"no powercap RAPL package zone under {root}" if root.exists() else f"no powercap ({root} does not exist)"
        return NullReader(f"{where}{also} (a VM or a container without RAPL passthrough?)", source="rapl")
    return RaplReader(root, zones)
