"""`[ready] starts` through a real daemon on a real llama-server: cold and warm starts after the probes,
in the runbook (`ready`, `ready_summary`), `benchctl validate`, the report and the page."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]


@pytest.fixture
def own_model(tiny_models, tmp_path: Path) -> Path:
    """A copy of the tiny GGUF no other test's server maps (mapped pages do not drop)."""
    dst = tmp_path / "models" / "ready-tiny.gguf"
    dst.parent.mkdir()
    shutil.copyfile(tiny_models.target, dst)
    return dst


@pytest.mark.skipif(sys.platform != "linux", reason="posix_fadvise page dropping is Linux's")
def test_ready_starts_through_a_job(run_daemon, own_model: Path, llama_server_bin: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    f = tmp_path / "sweep.toml"
    f.write_text(
        'name = "ready"\ncontexts = [64]\ngen_tokens = 8\nprobes = 1\nwarmup = 0\n[sustained]\ntokens = 0\n'
        '[ready]\nstarts = 2\n[cooldown]\npolicy = "fixed"\nseconds = 0\nmax_seconds = 0\n'
        f'[[candidates]]\nid = "tiny"\nruntime = "llama-server"\nmodel = "{own_model}"\nbinary = "{llama_server_bin}"\n')
    shown = d.benchctl("validate", str(f))
    assert shown.returncode == 0 and "2 cold and 2 warm server starts" in shown.stdout, shown.stdout
    out = d.benchctl("submit", str(f), "--follow", "--json")
    assert out.returncode == 0, out.stderr
    job = out.stdout.splitlines()[0]
    deadline = time.monotonic() + 60
    while not (rid := d.client().job(job)["runbook_id"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    rb = d.client().request("GET", f"/v1/runbooks/{rid}")
    starts = rb["ready"]
    assert [s["purpose"] for s in starts] == ["sweep", "ready", "ready", "ready", "ready"]
    extra = starts[1:]
    assert [s["cold_requested"] for s in extra] == [True, False, True, False]
    assert [s["cache"] for s in extra] == ["cold", "warm", "cold", "warm"]
    assert all(s["sources"]["ready_s"] and s["load_s"] is not None for s in starts)
    assert all(" ms (the check before it)" in s["sources"]["ready_s"] for s in starts)  # each start's resolution
    assert all(s["stalled_s"] is not None and s["server_stopped_s"] == 0.0 for s in starts)  # the start's watch
    (summary,) = rb["ready_summary"]
    assert summary["cold_n"] == 2 and summary["warm_n"] >= 2 and summary["load_median_s"] is not None
    sd = ("--state-dir", str(d.state_dir))
    text = d.benchctl("report", rid, *sd).stdout
    assert "time to ready" in text and "cold / warm" in text
    page = d.benchctl("report", rid, "--html", *sd).stdout.strip()
    html = Path(page).read_text()
    assert "Time to ready" in html and "Every server start" in html
    report_json = json.loads(d.benchctl("report", rid, "--json", *sd).stdout)
    assert report_json["ready"][0]["cold_n"] == 2
