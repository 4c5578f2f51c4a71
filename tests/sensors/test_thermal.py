"""Thermal sources: the file seam, Linux selection (on a fake sysfs tree), darwin parsers on samples."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchd.sensors.thermal import darwin as thermal_darwin
from benchd.sensors.thermal import sensor as thermal

DATA = Path(__file__).parents[1] / "data" / "darwin"


# ------------------------------------------------------------------------------------ file seam


def test_file_seam_reads_current_content_each_time(tmp_path: Path) -> None:
    f = tmp_path / "t"
    f.write_text("71.5\n")
    s = thermal.open_sensor({"BENCHD_THERMAL_FILE": str(f)})
    r = s.read()
    assert r.available and r.celsius == 71.5 and r.pressure is None and r.source == f"file:{f}"
    f.write_text("Serious")
    r = s.read()
    assert r.available and r.pressure == "serious" and r.celsius is None
    f.write_text("nominal")
    assert s.read().pressure == "nominal"


@pytest.mark.parametrize("content", ["", "warm-ish", "nan", "inf"])
def test_file_seam_never_invents(tmp_path: Path, content: str) -> None:
    f = tmp_path / "t"
    f.write_text(content)
    r = thermal.FileSensor(f).read()
    assert not r.available and r.celsius is None and r.pressure is None and r.reason


def test_file_seam_missing_file(tmp_path: Path) -> None:
    r = thermal.FileSensor(tmp_path / "nope").read()
    assert not r.available and "cannot read" in (r.reason or "")


# ------------------------------------------------------------------------------------------ Linux


def _zone(root: Path, n: int, kind: str, temp: str) -> None:
    z = root / f"thermal_zone{n}"
    z.mkdir(parents=True)
    (z / "type").write_text(kind + "\n")
    (z / "temp").write_text(temp + "\n")


def test_sysfs_max_over_cpu_zones_names_the_sensor(tmp_path: Path) -> None:
    """A fake sysfs tree: this VM exposes no thermal zone, so selection is tested on files in its layout."""
    _zone(tmp_path, 0, "acpitz", "45000")
    _zone(tmp_path, 1, "x86_pkg_temp", "61500")
    _zone(tmp_path, 2, "iwlwifi_1", "70000")  # hotter, but not the CPU
    _zone(tmp_path, 3, "x86_pkg_temp", "garbage")  # unreadable zone is skipped
    r = thermal.LinuxSensor(tmp_path, use_psutil=False).read()
    assert r.available and r.celsius == 61.5
    assert r.source == "linux:sysfs:thermal_zone1/x86_pkg_temp"


def test_sysfs_non_cpu_zone_is_labelled(tmp_path: Path) -> None:
    _zone(tmp_path, 0, "iwlwifi_1", "40000")
    r = thermal.LinuxSensor(tmp_path, use_psutil=False).read()
    assert r.celsius == 40.0 and "not CPU-specific" in r.source


def test_no_sensor_is_unavailable_with_reason(tmp_path: Path) -> None:
    r = thermal.LinuxSensor(tmp_path, use_psutil=False).read()
    assert not r.available and r.reason == thermal.NO_SENSOR_REASON and r.celsius is None
    u = thermal.UnavailableSensor().read()
    assert not u.available and u.reason == "no thermal sensor exposed (VM?)"


def test_open_sensor_on_this_machine_is_honest() -> None:
    """Whatever this machine has: a real reading that names its source, or unavailable with a reason."""
    r = thermal.open_sensor({}).read()
    if r.available:
        assert r.celsius is not None or r.pressure is not None
        assert r.source.startswith(("linux:", "darwin:"))
    else:
        assert r.reason and r.celsius is None and r.pressure is None


def test_describe_sources() -> None:
    rows = thermal.describe_sources({})
    assert rows[-1]["name"] == "selected"
    assert all(r["available"] or r.get("reason") for r in rows)
    if sys.platform.startswith("linux"):
        assert {"linux:psutil", "linux:sysfs"} <= {r["name"] for r in rows}


# ----------------------------------------------------------------------------------------- darwin


def test_notifyutil_parser_on_samples() -> None:
    assert thermal_darwin.parse_notifyutil((DATA / "notifyutil_nominal.txt").read_text()) == "nominal"
    assert thermal_darwin.parse_notifyutil((DATA / "notifyutil_heavy.txt").read_text()) == "heavy"
    assert thermal_darwin.parse_notifyutil("com.apple.system.thermalpressurelevel 30\n") is None  # iOS scale
    assert thermal_darwin.parse_notifyutil("") is None


def test_powermetrics_parser_on_sample() -> None:
    text = (DATA / "powermetrics_thermal_nominal.txt").read_text()
    assert thermal_darwin.parse_powermetrics(text) == "nominal"
    assert thermal_darwin.parse_powermetrics(text + "\nCurrent pressure level: Heavy\n") == "heavy"  # last wins
    assert thermal_darwin.parse_powermetrics("Machine model: Mac14,2\n") is None


def test_pmset_therm_parser_on_samples() -> None:
    """The shapes pmset.c prints (issue 14, finding 9): notes when nothing was recorded, a dated
    `Thermal Warning Level = N` (kept, not dropped), and `<date> CPU Power notify` + tab-indented keys."""
    quiet = thermal_darwin.parse_pmset_therm((DATA / "pmset_therm_quiet.txt").read_text())
    assert quiet == {"thermal_warning_level": None, "thermal_warning_recorded": False,
                     "performance_warning_level": None, "performance_warning_recorded": False,
                     "cpu_power_status_recorded": False, "errors": []}
    power = thermal_darwin.parse_pmset_therm((DATA / "pmset_therm_cpu_power.txt").read_text())
    assert power["CPU_Speed_Limit"] == 100 and power["CPU_Available_CPUs"] == 12 and power["CPU_Scheduler_Limit"] == 100
    assert power["cpu_power_status_recorded"] is True and power["thermal_warning_recorded"] is False
    # stdout alone: pmset writes "CPU Power notify" to stderr, so the first key shares the date's line
    limited = thermal_darwin.parse_pmset_therm((DATA / "pmset_therm_limited_stdout_only.txt").read_text())
    assert limited["CPU_Speed_Limit"] == 62 and limited["CPU_Scheduler_Limit"] == 100 and limited["CPU_Available_CPUs"] == 4
    warned = thermal_darwin.parse_pmset_therm((DATA / "pmset_therm_warning.txt").read_text())
    assert warned["thermal_warning_recorded"] is True and warned["thermal_warning_level"] == 1
    assert warned["cpu_power_status_recorded"] is False and "CPU_Speed_Limit" not in warned
    err = thermal_darwin.parse_pmset_therm("Error: No thermal warning level with error code 0xe00002c2\n")
    assert err["thermal_warning_recorded"] is None and err["errors"] == ["Error: No thermal warning level with error code 0xe00002c2"]


def test_darwin_sensor_reports_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off macOS notifyutil does not exist: the sensor must say so, not guess a level."""
    if sys.platform == "darwin":
        pytest.skip("checks the missing-tool path")
    monkeypatch.setenv("PATH", "/nonexistent")
    s = thermal_darwin.DarwinSensor()
    s.root = False
    r = s.read()
    assert not r.available and r.pressure is None and "notifyutil" in (r.reason or "")


@pytest.mark.darwin
@pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS")
def test_darwin_live_pressure() -> None:  # pragma: no cover - macOS only
    r = thermal.open_sensor({}).read()
    assert r.available and r.pressure in thermal_darwin.LEVELS.values()
    assert os.geteuid() == 0 or r.source.startswith("darwin:notifyutil")
