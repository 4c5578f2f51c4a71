"""`make demo`'s flow, run the way the Makefile runs it (issue 7: "a test runs the same flow").

It drives the real entry points as subprocesses — runtimes install (cached), benchd, benchctl submit
--follow, report — on a temporary state dir (the session fixture `demo_run` in conftest.py, shared
with the browser tests of the page), then checks what a newcomer would look at: the exit code, a report
with real numbers, the runbook, chart and page files, the page's path printed, the next-step hint, and
that no daemon or server outlived the demo.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = [pytest.mark.slow]


def doc_text(doc: dict[str, Any]) -> str:
    """The cells' verdicts as text (a cell verdict "too few" is what a plan below six probes gives)."""
    return json.dumps([c.get("verdict") for c in doc.get("cells", [])])


def test_demo_runs_end_to_end(demo_run: Any) -> None:
    state, out = demo_run.state, demo_run.out
    assert demo_run.returncode == 0, out[-4000:]
    # the Pareto view once (at the end of submit --follow), one line of what it found, a hint naming no candidate
    assert out.count("frontier = ") == 2, out[-4000:]  # one line per context of the grid
    assert "What it found: at context 256" in out
    assert "benchctl lock --candidate ID" in out and "lock --candidate tiny-" not in out
    runbooks = sorted((state / "runbooks").glob("*.json"))
    assert len(runbooks) == 1
    doc = json.loads(runbooks[0].read_text())
    assert doc["outcome"] == "succeeded" and doc["job"]["state"] == "succeeded"
    rows = doc["rows"]
    by_cand = {r["candidate"] for r in rows}
    assert by_cand == {"tiny-gguf", "tiny-gguf-draft", "tiny-mlx"}
    ok = [r for r in rows if r["status"] == "ok" and r["kind"] == "probe"]
    # probes = 6: the fewest that give every cell a verdict (3 would leave each "too few")
    assert len(ok) == 3 * 2 * 6, [r["error"] for r in rows if r["status"] != "ok"]
    # the plan reaches verdicts: every cell ran its 6 probes; a cell is "too few" only where a probe could
    # not measure gen_tps (a starved client reads the whole stream at once: a load-dependent null, with why)
    nulls = {(r["candidate"], r["context"]) for r in ok if r["gen_tps"] is None}
    for c in doc["cells"]:
        v = c["verdict"]
        assert v["probes_used"] == 6, doc_text(doc)
        assert v["verdict"] != "too few" or (c["candidate"], c["context"]) in nulls, doc_text(doc)
    assert all(r["gen_tps"] > 0 if r["gen_tps"] is not None else r["null_reasons"].get("gen_tps") for r in ok)
    assert all(r["mem_peak_bytes"] and r["mem_peak_bytes"] > 0 for r in ok)
    assert (state / "runbooks" / (runbooks[0].stem + ".md")).stat().st_size > 0
    assert (state / "runbooks" / (runbooks[0].stem + ".pareto.png")).stat().st_size > 0
    # The page is the thing to open: written beside the JSON, and its path is what the demo prints last.
    page = runbooks[0].with_suffix(".html")
    assert page.stat().st_size > 0
    assert "Open the runbook page" in out and str(page) in out.split("Open the runbook page", 1)[1]
    # Nothing outlived the demo: no process names its state dir (the daemon), and no server record is
    # left (the supervisor removes a record only after the server's whole process group is gone).
    assert not demo_run.leftovers, demo_run.leftovers
    assert not list((state / "servers").glob("*.json"))
