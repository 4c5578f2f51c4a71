"""macOS thermal pressure: parsers for notifyutil / powermetrics / pmset output, and the sensor using them.
Reasons and facts: docs/measuring.md#thermal-pressure-on-macos."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from benchd.schemas import ThermalReading

NOTIFY_KEY = "com.apple.system.thermalpressurelevel"
#: macOS values of OSThermalPressureLevel (iOS uses 0/10/20/30/40/50: not handled, reported unrecognized).
LEVELS = {0: "nominal", 1: "moderate", 2: "heavy", 3: "trapping", 4: "sleeping"}
_TIMEOUT_S = 5.0


def parse_notifyutil(text: str) -> str | None:
    """`com.apple.system.thermalpressurelevel 2` → "heavy"; None when the output has no known level."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == NOTIFY_KEY and parts[-1].lstrip("-").isdigit():
            return LEVELS.get(int(parts[-1]))
    return None


_PM_PRESSURE = re.compile(r"^\s*Current pressure level:\s*([A-Za-z]+)", re.MULTILINE)


def parse_powermetrics(text: str) -> str | None:
    """The last "Current pressure level: X" of a powermetrics thermal sample, lowercased."""
    found = _PM_PRESSURE.findall(text)
    if not found:
        return None
    word = found[-1].lower()
    return word if word in LEVELS.values() else None


_PMSET_KV = re.compile(r"\b((?:CPU|GPU)_[A-Za-z_]+)\s*=\s*(\d+)")
_THERMAL_LEVEL = re.compile(r"Thermal Warning Level\s*[=:]\s*(-?\d+)", re.IGNORECASE)
_PERF_LEVEL = re.compile(r"Performance Warning Level\s*[=:]\s*(-?\d+)", re.IGNORECASE)


def _recorded(text: str, what: str, level: re.Match[str] | None) -> bool | None:
    """True when pmset printed a level, False when it said none was recorded, None when it said neither."""
    if level is not None:
        return True
    return False if f"no {what} has been recorded" in text.lower() else None


def parse_pmset_therm(text: str) -> dict[str, object]:
    """`pmset -g therm` (stdout and stderr) → the CPU_* limits, `*_warning_level` / `*_recorded` and `errors`."""
    out: dict[str, object] = {k: int(v) for k, v in _PMSET_KV.findall(text)}
    thermal, perf = _THERMAL_LEVEL.search(text), _PERF_LEVEL.search(text)
    out["thermal_warning_level"] = int(thermal.group(1)) if thermal else None
    out["thermal_warning_recorded"] = _recorded(text, "thermal warning level", thermal)
    out["performance_warning_level"] = int(perf.group(1)) if perf else None
    out["performance_warning_recorded"] = _recorded(text, "performance warning level", perf)
    cpu = any(k.startswith("CPU_") for k in out) or "cpu power notify" in text.lower()
    out["cpu_power_status_recorded"] = True if cpu else _recorded(text, "cpu power status", None)
    out["errors"] = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Error")]
    return out


def _run(argv: list[str], *, with_stderr: bool = False) -> str:
    """Run a short command (stdout, plus stderr when asked); raises OSError (with the reason) on failure."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if with_stderr else subprocess.PIPE,
                              text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise OSError(f"{argv[0]} exited {done.returncode}: {(done.stderr or done.stdout or '').strip()[:200]}")
    return done.stdout


class DarwinSensor:
    """Thermal pressure: powermetrics when root (falling back to notifyutil), else notifyutil."""

    def __init__(self) -> None:
        self.root = os.geteuid() == 0

    def _powermetrics(self) -> ThermalReading:
        src = "darwin:powermetrics:thermal"
        try:
            level = parse_powermetrics(_run(["powermetrics", "-s", "thermal", "-n", "1", "-i", "100"]))
        except OSError as exc:
            return ThermalReading(source=src, available=False, reason=str(exc))
        if level is None:
            return ThermalReading(source=src, available=False, reason="no pressure level in powermetrics output")
        return ThermalReading(source=src, pressure=level)

    def _notifyutil(self) -> ThermalReading:
        src = f"darwin:notifyutil:{NOTIFY_KEY}"
        try:
            out = _run(["notifyutil", "-g", NOTIFY_KEY])
        except OSError as exc:
            return ThermalReading(source=src, available=False, reason=str(exc))
        level = parse_notifyutil(out)
        if level is None:
            return ThermalReading(source=src, available=False, reason=f"unrecognized notifyutil output {out.strip()[:80]!r}")
        return ThermalReading(source=src, pressure=level)

    def read(self) -> ThermalReading:
        if self.root:
            r = self._powermetrics()
            if r.available:
                return r
        return self._notifyutil()


def describe() -> list[dict[str, object]]:
    """What exists on this Mac, and why not where it does not."""
    out: list[dict[str, object]] = []
    s = DarwinSensor()
    n = s._notifyutil() if shutil.which("notifyutil") else None
    out.append({"name": "darwin:notifyutil", "available": bool(n and n.available),
                **({"detail": f"pressure={n.pressure}"} if n and n.available
                   else {"reason": n.reason if n else "notifyutil not on PATH"})})
    if s.root:
        p = s._powermetrics()
        out.append({"name": "darwin:powermetrics", "available": p.available,
                    **({"detail": f"pressure={p.pressure}"} if p.available else {"reason": p.reason})})
    else:
        out.append({"name": "darwin:powermetrics", "available": False, "reason": "needs root"})
    try:
        info = parse_pmset_therm(_run(["pmset", "-g", "therm"], with_stderr=True))
        out.append({"name": "darwin:pmset-therm", "available": True, "detail": info})
    except OSError as exc:
        out.append({"name": "darwin:pmset-therm", "available": False, "reason": str(exc)})
    return out
