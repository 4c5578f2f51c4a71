"""The energy area of the platform report: the counter benchd would read, its raw values, what benchd parsed.

On a Mac this is the capture the committed IOReport samples (tests/data/darwin/ioreport_*.json) stand in
for: every channel of one `IOReportCreateSamplesDelta` over half a second, with its group, name, unit and
value, so the real channel names and units of that chip replace the transcribed ones. On Linux: the
RAPL zones found and two raw readings of each counter. `replay_energy` re-parses the raw values with this
build's code and lists every difference from what was parsed on the machine.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict
from typing import Any

from benchctl.platform_report.context import Context

WINDOW_S = 0.5


def _delta(d: Any) -> dict[str, Any]:
    return {"seconds": round(d.seconds, 6), "channels": d.channels, "total_j": d.total_j, "reason": d.reason}


def collect_energy(ctx: Context) -> dict[str, Any]:
    from benchd.sensors.energy.choose import open_reader
    from benchd.sensors.energy.reader import describe

    reader = open_reader()
    out: dict[str, Any] = {"reader": describe(reader), "kind": type(reader).__name__}
    try:
        a = reader.sample()
        time.sleep(WINDOW_S)
        b = reader.sample()
        out["parsed"] = _delta(reader.delta(a, b))
        lib = getattr(reader, "lib", None)
        if lib is not None:  # IOReport: the raw channel walk of the same two samples
            out["raw_channels"] = [asdict(c) for c in lib.walk(a.raw, b.raw)]
        zones = getattr(reader, "zones", None)
        if zones is not None:  # RAPL: the zones and both raw readings
            out["zones"] = [{"path": str(z.path), "label": z.label, "max_range_uj": z.max_range_uj,
                             "in_total": z.in_total} for z in zones]
            out["raw_uj"] = [list(a.raw), list(b.raw)]
            out["unreadable"] = getattr(reader, "unreadable", {})
    finally:
        reader.close()
    if sys.platform == "darwin":
        from benchctl.platform_report.system import run
        from benchd.sensors.energy import darwin

        if os.geteuid() == 0:
            pm = run([*darwin.POWERMETRICS_ARGV, "-n", "2"])
            out["powermetrics"] = {**pm, "parsed": darwin.parse_powermetrics(pm.get("stdout") or "")}
        else:
            out["powermetrics"] = {"error": "needs root (not run)"}
    return out


def replay_energy(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    from benchd.sensors.energy import darwin, linux

    out: list[str] = []
    parsed = area.get("parsed") or {}
    if "raw_channels" in area:
        chans = darwin.parse_channels({"channels": area["raw_channels"]})
        got = _delta(darwin.delta_from_channels(chans, float(parsed.get("seconds") or WINDOW_S)))
        if got["channels"] != parsed.get("channels") or got["total_j"] != parsed.get("total_j"):
            out.append(f"energy: IOReport channels parse to {got['channels']} now, {parsed.get('channels')} on the Mac")
    if "raw_uj" in area and "zones" in area:
        (ra, rb), zones = area["raw_uj"], area["zones"]
        now = {z["label"]: d / 1e6 for z, va, vb in zip(zones, ra, rb, strict=True)
               if va is not None and vb is not None and (d := linux.counter_delta_uj(va, vb, z["max_range_uj"])) is not None}
        if now != parsed.get("channels"):
            out.append(f"energy: RAPL readings give {now} now, {parsed.get('channels')} on the machine")
    pm = area.get("powermetrics") or {}
    if "stdout" in pm:
        again = [[s, w] for s, w in darwin.parse_powermetrics(pm["stdout"])]
        if again != [list(x) for x in pm.get("parsed") or []]:
            out.append("energy: powermetrics output parses differently now")
    return out
