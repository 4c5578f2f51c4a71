"""Sweep efficiency: how much of a job's wall time is the work a sweep is for, from the job's own events.

    .venv/bin/python benchmarks/sweep_efficiency.py [--job JOB --state-dir DIR] [--json]

Without `--job`: writes the demo sweep (`benchctl/demo.py`'s, the same file `make demo` submits), starts a
real `benchd` on a temporary state dir, submits it, follows it to the end and analyses that job. With
`--job`: analyses an existing job of the store in `--state-dir` (no daemon needed).

From the events (timestamps are the store's, milliseconds):
- load      = server_starting -> server_ready
- cooldown  = cooldown_started -> cooldown_finished
- probe     = probe_started -> probe_finished (recorded probes and the sustained generation)
- wall      = job_started -> job_finished/failed/cancelled
- the rest is attributed by position: after server_ready and before the group's first cooldown =
  warm-up (+ prompt sizing); after the candidate's last probe_finished and before server_stopped =
  evals (tier `smoke`/`standard`) + teardown; server_stopped -> next server_starting = stop/gap;
  anything else = other (e.g. building the next probe's prompt after a cooldown).
Goal (issue 9): (load + probe + cooldown) / wall >= 0.97. A second ratio also counts warm-up and evals
as work, because they are work the sweep asked for, not orchestration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sqlite3
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

GOAL = 0.97


def ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def load_events(state: Path, job: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(f"file:{state / 'benchd.sqlite3'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT seq, time, type, payload FROM events WHERE job = ? ORDER BY seq", (job,)).fetchall()
    finally:
        con.close()
    return [{"seq": s, "t": ts(t), "type": ty, "payload": json.loads(p)} for s, t, ty, p in rows]


def analyse(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Attribute every interval between consecutive events to one category."""
    cats = {"load": 0.0, "cooldown": 0.0, "probe": 0.0, "warmup_sizing": 0.0, "evals_teardown": 0.0,
            "stop_gap": 0.0, "prompt_build_after_cooldown": 0.0, "other": 0.0}
    start = next(e["t"] for e in events if e["type"] in ("job_started", "job_resumed"))
    end = next(e["t"] for e in reversed(events) if e["type"] in ("job_finished", "job_failed", "job_cancelled"))
    spans = []
    for prev, cur in itertools.pairwise(events):
        if prev["t"] < start or cur["t"] > end:
            continue
        a, b, d = prev["type"], cur["type"], cur["t"] - prev["t"]
        if a == "server_starting":
            cat = "load"
        elif a == "cooldown_started":
            cat = "cooldown"
        elif a == "probe_started":
            cat = "probe"
        elif a == "server_ready":
            cat = "warmup_sizing"
        elif a == "probe_finished" and b == "server_stopped":
            cat = "evals_teardown"
        elif a == "server_stopped":
            cat = "stop_gap"
        elif a == "cooldown_finished" and b == "probe_started":
            cat = "prompt_build_after_cooldown"
        elif a == "probe_finished" and b == "cooldown_started":
            cat = "other"  # row commit + next cell's bookkeeping
        elif a == "probe_finished" and b == "server_starting":
            cat = "stop_gap"
        else:
            cat = "other"
        cats[cat] += d
        spans.append((d, a, b))
    # Inside probe_started -> probe_finished: the request itself (the row's e2e_ms) and the engine's
    # own work around it (prompt building with /tokenize calls, memory sampler start/stop, /metrics).
    starts = {(e["payload"].get("candidate"), e["payload"].get("context"), e["payload"].get("kind"),
               e["payload"].get("probe")): e["t"] for e in events if e["type"] == "probe_started"}
    request_s = overhead_s = 0.0
    per_probe_overhead = []
    for e in events:
        row = e["payload"].get("row") if e["type"] == "probe_finished" else None
        if not row or row.get("e2e_ms") is None:
            continue
        t0 = starts.get((row["candidate"], row["context"], row["kind"], row["probe"]))
        if t0 is None:
            continue
        req = row["e2e_ms"] / 1000
        request_s += req
        overhead_s += (e["t"] - t0) - req
        per_probe_overhead.append((e["t"] - t0) - req)
    wall = end - start
    core = cats["load"] + cats["probe"] + cats["cooldown"]
    work = core + cats["warmup_sizing"] + cats["evals_teardown"]
    spans.sort(reverse=True)
    return {"wall_s": wall, "seconds": cats, "probe_request_s": request_s, "probe_engine_overhead_s": overhead_s,
            "probe_engine_overhead_median_s": C.med(per_probe_overhead), "ratio_goal_definition": core / wall if wall else None,
            "ratio_incl_warmup_evals": work / wall if wall else None,
            "unattributed_s": wall - sum(cats.values()),
            "largest_non_core_spans": [{"s": round(d, 3), "from": a, "to": b} for d, a, b in spans
                                       if a not in ("server_starting", "cooldown_started", "probe_started")][:8]}


def run_demo() -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    from benchctl.demo import _sweep_toml
    from benchctl.sweepfile import read_sweep_dict

    models = C.tiny("small")
    with tempfile.TemporaryDirectory(prefix="benchd-eff-") as tmp:
        path = Path(tmp) / "demo-sweep.toml"
        path.write_text(_sweep_toml(models))
        sweep = read_sweep_dict(path)
        with C.benchd_daemon(Path(tmp) / "state") as d:
            job = d.client().submit(sweep)["id"]
            info = d.wait_job(job, timeout=3600)
            return job, load_events(d.state, job), info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--job")
    p.add_argument("--state-dir", type=Path)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    info: dict[str, Any] = {}
    if a.job:
        if not a.state_dir:
            p.error("--job needs --state-dir")
        job, events = a.job, load_events(a.state_dir, a.job)
    else:
        job, events, info = run_demo()
    res = analyse(events)
    ok = res["ratio_goal_definition"] is not None and res["ratio_goal_definition"] >= GOAL
    doc = {"machine": C.machine(), "job": job, "state": info.get("state"), **res, "goal": GOAL, "goal_met": ok}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0 if ok else 1
    m = doc["machine"]
    print(f"sweep_efficiency  {m['date_utc']} UTC  {m['cores_logical']} cores  load {m['loadavg_1m']:.2f}  job {job} {doc['state'] or ''}")
    print(f"wall {res['wall_s']:.1f} s")
    for k, v in res["seconds"].items():
        print(f"  {k:28s} {v:8.2f} s  {v / res['wall_s'] * 100:5.1f} %")
    print(f"  of probe: the requests (rows' e2e_ms) {res['probe_request_s']:.2f} s; engine work inside the probe window "
          f"(prompt build, sampler, /metrics) {res['probe_engine_overhead_s']:.2f} s "
          f"(median {C.fmt(res['probe_engine_overhead_median_s'])} s per probe)")
    print(f"RATIO (load + probe + cooldown) / wall = {C.fmt(res['ratio_goal_definition'])} (goal >= {GOAL}: {'met' if ok else 'NOT met'})")
    print(f"ratio also counting warm-up/sizing and evals as work = {C.fmt(res['ratio_incl_warmup_evals'])}")
    print("largest non-core spans:", ", ".join(f"{s['s']}s {s['from']}->{s['to']}" for s in res["largest_non_core_spans"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
