"""`benchctl doctor --platform-report` (issue 14): the report on this machine, and the replay of Mac reports.

- On Linux the command runs for real: every area is present, the memory checks hold on a real child,
  the peer credentials match, nothing private is in the file, and replaying it finds no difference.
- Every `platform_report*.json` under tests/data/darwin/ is replayed: the darwin parsers (ctypes structs,
  pmset, notifyutil, launchctl) must reproduce what the report says the bytes and text mean. The
  committed sample is synthesized from the header layouts and pmset.c's shapes (SAMPLES.md); a real
  report from a user goes beside it and is checked the same way.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.platform_report import AREAS, REPORT_VERSION, replay, scrub

DATA = Path(__file__).parents[1] / "data" / "darwin"
BENCHCTL = Path(sys.executable).parent / "benchctl"
REPORTS = sorted(DATA.glob("platform_report*.json"))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("report") / "report.json"
    state = tmp_path_factory.mktemp("state")
    env = {k: v for k, v in os.environ.items() if k != "BENCHD_SOCKET"} | {"BENCHD_STATE_DIR": str(state)}
    done = subprocess.run([str(BENCHCTL), "doctor", "--platform-report", str(out)], capture_output=True, text=True,
                          env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout and "bug report" in done.stdout
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["_text"] = out.read_text()
    return doc


def test_every_area_is_reported(report: dict[str, Any]) -> None:
    assert report["report_version"] == REPORT_VERSION and report["platform"]["sys_platform"] == sys.platform
    assert set(report["areas"]) == {*AREAS, "doctor"}  # doctor adds its own checks
    failed = {k: v["error"] for k, v in report["areas"].items() if "error" in v}
    assert failed == {}, failed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux expectations")
def test_linux_paths_hold(report: dict[str, Any]) -> None:
    areas = report["areas"]
    assert areas["memory"]["checks"] == {"mapped_file_counted": True, "zombie_reads_as_gone": True,
                                         "peak_saw_the_freed_allocation": True}
    assert areas["memory"]["steps"]["reset"] == {"error": None}
    assert areas["peer_credentials"]["peer_uid_matches_own"] is True
    assert areas["swap"]["source"] == "psutil:swap_memory sin/sout" and "pswpin" in areas["swap"]["vmstat"]
    assert any(r["name"] == "llama-server" and r["installed"] for r in areas["runtimes"]["runtimes"])
    sleep = areas["sleep_prevention"]
    assert sleep["prevented"] or sleep["reason"]  # either works, or says why not


def test_nothing_private(report: dict[str, Any]) -> None:
    text = report["_text"]
    assert str(Path.home()) + "/" not in text and f'"{Path.home()}"' not in text
    host = socket.gethostname()
    if len(host) >= 3:
        assert host not in text
    assert "~/" in text  # paths are shown, shortened


def test_this_machines_report_replays_clean(report: dict[str, Any]) -> None:
    assert replay({k: v for k, v in report.items() if k != "_text"}) == []


def test_scrub_whole_words_only() -> None:
    import re

    pairs = [(re.compile(r"(?<![A-Za-z0-9_.-])/Users/ada(?![A-Za-z0-9_-])"), "~"),
             (re.compile(r"(?<![A-Za-z0-9_.-])ada(?![A-Za-z0-9_-])"), "<user>")]
    got = scrub({"k": ["/Users/ada/Library/x", "metadata", "ada's Mac", "/Users/adam/x"]}, pairs)
    assert got == {"k": ["~/Library/x", "metadata", "<user>'s Mac", "/Users/adam/x"]}


# ------------------------------------------------------------------------------ replaying Mac reports


@pytest.mark.parametrize("path", REPORTS, ids=[p.name for p in REPORTS])
def test_mac_report_replays_clean(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert doc["platform"]["sys_platform"] == "darwin"
    assert replay(doc) == []


def test_sample_covers_the_audit_findings() -> None:
    """The synthesized macOS 13.0 report exercises findings 3, 4, 7 and the pmset shapes of 9."""
    doc = json.loads((DATA / "platform_report_sample.json").read_text())
    steps = doc["areas"]["memory"]["steps"]
    after_reset = steps["after_reset"]["parsed"]
    assert after_reset["interval_max_phys_footprint"] == 0 and after_reset["peak"] == after_reset["phys_footprint"]
    assert steps["exited_not_reaped"]["parsed"] is None  # a zombie's footprint 0 is not a reading
    assert steps["after_map"]["parsed"]["phys_footprint"] - steps["after_reset"]["parsed"]["phys_footprint"] < 1 << 20
    swap = doc["areas"]["swap"]
    assert [swap["swap_in_bytes"], swap["swap_out_bytes"]] != swap["psutil_sin_sout"]  # swap is not pageins
    assert doc["areas"]["thermal"]["pmset_therm"]["parsed"]["CPU_Speed_Limit"] == 62


@pytest.mark.parametrize(
    ("area", "path", "value"),
    [
        ("memory", ["steps", "after_reset", "parsed", "peak"], 0),  # the macOS 13 bug: peak 0 after a reset
        ("memory", ["steps", "exited_not_reaped", "parsed"], {"phys_footprint": 0}),  # the zombie bug
        ("swap", ["swap_in_bytes"], 1_234_567 * 16384),  # the pageins-as-swap bug
        ("thermal", ["pmset_therm", "parsed", "CPU_Speed_Limit"], 100),
        ("power", ["pmset_batt", "parsed", "percent"], None),
        ("peer_credentials", ["parsed_uid"], 0),
        ("memory", ["steps", "mapped_regions", 0, "parsed", 2], 0),
        ("energy", ["parsed", "channels", "CPU"], 1.745 + 0.031),  # a per-cluster channel added to CPU Energy
    ],
)
def test_replay_catches_a_wrong_parse(area: str, path: list[Any], value: Any) -> None:
    """The replay has teeth: a report whose parsed value disagrees with its raw bytes is reported."""
    doc = json.loads((DATA / "platform_report_sample.json").read_text())
    node = doc["areas"][area]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    diffs = replay(copy.deepcopy(doc))
    assert len(diffs) == 1 and diffs[0].startswith(area), diffs


def test_unknown_report_version_is_refused() -> None:
    assert replay({"report_version": 99, "areas": {}}) == ["unknown report_version 99 (this build reads 1)"]
