"""`make demo`'s flow, run the way the Makefile runs it (issue 7: "a test runs the same flow").

It drives the real entry points as subprocesses — runtimes install (cached), benchd, benchctl submit
--follow, report --pareto — on a temporary state dir, then checks what a newcomer would look at: the
exit code, a report with real numbers, the runbook and chart files, the next-step hint, and that no
daemon or server outlived the demo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_demo_runs_end_to_end(tmp_path: Path, cache_dir: Path, tiny_models: object) -> None:
    state = tmp_path / "state"
    env = dict(os.environ, BENCHD_CACHE_DIR=str(cache_dir))
    env.pop("BENCHD_STATE_DIR", None)
    env.pop("BENCHD_SOCKET", None)
    before = {p.pid for p in psutil.process_iter()}
    done = subprocess.run([sys.executable, "-m", "benchctl.demo", str(state)], env=env, capture_output=True,
                          text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "Pareto view" in out and "frontier" in out
    assert "benchctl lock --candidate" in out
    runbooks = sorted((state / "runbooks").glob("*.json"))
    assert len(runbooks) == 1
    doc = json.loads(runbooks[0].read_text())
    assert doc["outcome"] == "succeeded" and doc["job"]["state"] == "succeeded"
    rows = doc["rows"]
    by_cand = {r["candidate"] for r in rows}
    assert by_cand == {"tiny-gguf", "tiny-gguf-draft", "tiny-mlx"}
    ok = [r for r in rows if r["status"] == "ok" and r["kind"] == "probe"]
    assert len(ok) == 3 * 2 * 3, [r["error"] for r in rows if r["status"] != "ok"]
    assert all(r["gen_tps"] and r["gen_tps"] > 0 for r in ok)
    assert all(r["mem_peak_bytes"] and r["mem_peak_bytes"] > 0 for r in ok)
    assert (state / "runbooks" / (runbooks[0].stem + ".md")).stat().st_size > 0
    assert (state / "runbooks" / (runbooks[0].stem + ".pareto.png")).stat().st_size > 0
    # Nothing outlived the demo: no process names its state dir (the daemon), and no server record is
    # left (the supervisor removes a record only after the server's whole process group is gone).
    leftovers = [p.info for p in psutil.process_iter(["pid", "cmdline"])
                 if p.pid not in before and str(state) in " ".join(p.info["cmdline"] or [])]
    assert not leftovers, leftovers
    assert not list((state / "servers").glob("*.json"))
