"""Daemon responsiveness and scale: CLI cold start, API latency under polling while a probe streams,
and the read commands on a big store.

    .venv/bin/python benchmarks/daemon_scale.py [--jobs 10000] [--rows 1000000] [--clients 20]
        [--seconds 10] [--json]

1. Cold start: wall time of `benchctl status` (a fresh interpreter each time, as a user types it;
   median and max of 10) against a real daemon. Goal <= 150 ms.
2. API latency: a real daemon runs a sweep whose probe streams at full speed (tiny GGUF, `-t 1`, long
   generations); `--clients` asyncio clients in this process poll `GET /v1/jobs/{id}` over the Unix
   socket back to back (no sleep) for `--seconds`; p50/p99/max of every request's latency. Goal p99
   <= 20 ms. Done twice: on a store with just that job, and on the big store of step 3.
3. Scale (each command alternated with the same command on a small store, 7 times each, so the big
   store's own cost shows apart from the machine's load): a temp store gets `--jobs` queued jobs and `--rows` rows (inserted directly with sqlite3 in
   one transaction, the same schema and encodings benchd writes; rows belong to 1,000-row finished
   jobs), and a runbook written by benchd for a real finished job; then a daemon starts on it (the
   oldest queued job runs and sits in a one-hour fixed cooldown, so the rest stay queued and no server
   streams) and `benchctl jobs`, `benchctl status`, `benchctl
   status JOB` and `benchctl report RUNBOOK` are timed (wall, fresh process, median). Goal < 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

GOAL_COLD_MS = 150
GOAL_P99_MS = 20
GOAL_READ_MS = 200


def streaming_sweep(model: str, name: str = "scale") -> dict[str, Any]:
    """A job that keeps a probe streaming at full speed for a while (long generations, no cooldown)."""
    return {"name": name, "contexts": [128], "gen_tokens": 4096, "probes": 200, "warmup": 0, "eval_tier": "none",
            "sustained": {"tokens": 0}, "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
            "candidates": [{"id": "tiny", "runtime": "llama-server", "model": model, "args": ["-t", "1"]}]}


def idle_sweep(model: str, name: str = "queued") -> dict[str, Any]:
    """A job that, once running, sits in a one-hour fixed cooldown: it holds the queue (the other jobs
    stay queued) without a server streaming, so the read commands are timed on an idle machine."""
    return {"name": name, "contexts": [128], "gen_tokens": 16, "probes": 1, "warmup": 0, "eval_tier": "none",
            "sustained": {"tokens": 0}, "cooldown": {"policy": "fixed", "seconds": 3600, "max_seconds": 3600},
            "candidates": [{"id": "tiny", "runtime": "llama-server", "model": model, "args": ["-t", "1"]}]}


def time_cli(argv: list[str], env: dict[str, str], n: int) -> dict[str, Any]:
    walls = []
    rc = None
    for _ in range(n):
        t0 = time.perf_counter()
        res = subprocess.run(argv, env=env, capture_output=True, text=True)
        walls.append((time.perf_counter() - t0) * 1000)
        rc = res.returncode
    return {"median_ms": statistics.median(walls), "max_ms": max(walls), "min_ms": min(walls), "rc": rc,
            "argv": " ".join(argv[1:])}


def wait_streaming(d: C.Daemon, job: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for line in d.client().events(job, follow=True):
        if json.loads(line)["type"] == "probe_started":
            time.sleep(0.3)  # past the request's start: tokens are streaming
            return
        if time.monotonic() > deadline:
            break
    raise RuntimeError("no probe started")


async def poll_latency(sock: Path, job: str, clients: int, seconds: float) -> dict[str, Any]:
    import aiohttp

    lat: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                async with session.get(f"http://benchd/v1/jobs/{job}") as resp:
                    await resp.read()
                    ok = resp.status == 200
            except aiohttp.ClientError:
                ok = False
            if ok:
                lat.append((time.perf_counter() - t0) * 1000)
            else:
                errors += 1

    conn = aiohttp.UnixConnector(path=str(sock), limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(one(session) for _ in range(clients)))
    lat.sort()
    if not lat:
        return {"requests": 0, "errors": errors}
    return {"requests": len(lat), "errors": errors, "rps": len(lat) / seconds,
            "p50_ms": lat[len(lat) // 2], "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "max_ms": lat[-1]}


def probe_speed(d: C.Daemon, job: str, t0: float, t1: float) -> dict[str, list[float]]:
    """Server decode rates (rows' gen_tps) of probes that ran entirely before vs. during the polling."""
    from datetime import datetime

    out: dict[str, list[float]] = {"unpolled": [], "polled": []}
    evs = d.events(job)
    started = {e["payload"].get("probe"): datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
               for e in evs if e["type"] == "probe_started"}
    for e in evs:
        if e["type"] != "probe_finished" or not e["payload"]["row"].get("gen_tps"):
            continue
        row = e["payload"]["row"]
        end = datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
        begin = started.get(row["probe"], end)
        if end <= t0:
            out["unpolled"].append(row["gen_tps"])
        elif begin >= t0 and end <= t1:
            out["polled"].append(row["gen_tps"])
    return out


def fill_store(state: Path, n_jobs: int, n_rows: int, model: str, runbook_src: Path | None) -> dict[str, Any]:
    """Insert jobs and rows straight into a store benchd created (its schema, its encodings)."""
    import msgspec

    from benchd.schemas import Row, Sweep
    from benchd.store import Store, planned_probes

    state.mkdir(parents=True, exist_ok=True)
    Store(state / "benchd.sqlite3").close() if hasattr(Store, "close") else Store(state / "benchd.sqlite3")
    sweep = msgspec.convert(idle_sweep(model, "queued"), Sweep)
    sweep_json = msgspec.json.encode(sweep).decode()
    total = planned_probes(sweep)
    t0 = time.perf_counter()
    con = sqlite3.connect(state / "benchd.sqlite3")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("BEGIN")
    per_job = 1000
    done_jobs = max(1, n_rows // per_job)
    jobs = []
    for i in range(done_jobs):  # finished jobs holding the rows, older than the queued ones
        jid = f"20261101-{i // 10000:02d}{i % 10000:04d}-done"
        jobs.append((jid, "done", "succeeded", sweep_json, f"2026-11-01T00:00:00.{i % 1000:03d}Z", None, "[]", per_job))
    for i in range(n_jobs):
        jid = f"20261130-{i // 10000:02d}{i % 10000:04d}-q{i % 10:01d}"
        jobs.append((jid, "queued", "queued", sweep_json, "2026-11-30T00:00:00.000Z", None, "[]", total))
    con.executemany("INSERT INTO jobs(id, name, state, sweep, created_at, not_before, when_, total)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", jobs)
    con.executemany("INSERT INTO events(job, seq, time, type, payload) VALUES (?, 1, '2026-11-30T00:00:00.000Z',"
                    " 'job_queued', '{}')", [(j[0],) for j in jobs])
    enc = msgspec.json.Encoder()

    def rows() -> Any:
        for i in range(n_rows):
            jid = jobs[i // per_job][0]
            r = Row(job=jid, candidate="tiny", runtime="llama-server", context=128 * (1 + (i % per_job) // 100),
                    kind="probe", probe=i % 100, status="ok", prompt_tokens=128, gen_tokens=64, prompt_tps=1000.0,
                    gen_tps=500.0, gen_tps_client=499.0, ttft_ms=10.0, e2e_ms=100.0,
                    sources={"gen_tps": "server:timings"})
            yield (r.job, r.candidate, r.context, r.kind, r.probe, r.status, enc.encode(r).decode())

    con.executemany("INSERT INTO rows(job, candidate, context, kind, probe, status, row) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows())
    con.commit()
    con.close()
    runbook = None
    if runbook_src is not None:
        (state / "runbooks").mkdir(exist_ok=True)
        for f in runbook_src.parent.glob(runbook_src.stem + ".*"):
            shutil.copy(f, state / "runbooks" / f.name)
        runbook = runbook_src.stem
    return {"jobs_queued": n_jobs, "jobs_finished": done_jobs, "rows": n_rows, "fill_s": time.perf_counter() - t0,
            "db_bytes": (state / "benchd.sqlite3").stat().st_size, "runbook": runbook}


def small_runbook(model: str, tmp: Path) -> Path:
    """A runbook benchd writes for a real (tiny) finished job, to time `report` on."""
    sweep = {"name": "rb", "contexts": [128], "gen_tokens": 16, "probes": 3, "warmup": 0, "eval_tier": "none",
             "sustained": {"tokens": 0}, "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
             "candidates": [{"id": "tiny", "runtime": "llama-server", "model": model, "args": ["-t", "1"]}]}
    with C.benchd_daemon(tmp / "rb-state") as d:
        job = d.client().submit(sweep)["id"]
        d.wait_job(job)
        for _ in range(100):
            found = sorted((d.state / "runbooks").glob(f"*{job}.json"))
            if found:
                keep = tmp / "runbook"
                keep.mkdir(exist_ok=True)
                for f in found[0].parent.glob(found[0].stem + ".*"):
                    shutil.copy(f, keep / f.name)
                return keep / found[0].name
            time.sleep(0.1)
    raise RuntimeError("no runbook written")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    model = str(C.tiny("small").target)
    benchctl = str(C.BIN / "benchctl")
    out: dict[str, Any] = {"machine": C.machine()}
    with tempfile.TemporaryDirectory(prefix="benchd-scale-") as tmpd:
        tmp = Path(tmpd)
        rb = small_runbook(model, tmp)
        # 1 + 2 on a small store
        with C.benchd_daemon(tmp / "small") as d:
            env = d.env
            job = d.client().submit(streaming_sweep(model))["id"]
            wait_streaming(d, job)
            out["cold_status"] = time_cli([benchctl, "status"], env, 10)
            out["cold_ping"] = time_cli([benchctl, "ping"], env, 5)
            wait_streaming(d, job)
            t0 = time.time()
            out["api_small_store"] = asyncio.run(poll_latency(d.socket, job, a.clients, a.seconds))
            out["probe_gen_tps_small"] = probe_speed(d, job, t0, time.time())
            d.client().cancel(job)
        # 3 on a big store
        big = tmp / "big"
        out["fill"] = fill_store(big, a.jobs, a.rows, model, rb)
        t0 = time.perf_counter()
        with C.benchd_daemon(big) as d:
            out["daemon_ready_s_big_store"] = time.perf_counter() - t0
            env = d.env
            running = None
            for _ in range(300):
                running = d.client().health().get("running_job")
                if running:
                    break
                time.sleep(0.1)
            queued_job = d.client().jobs(state="queued", limit=1)["jobs"]
            qid = queued_job[0]["id"] if queued_job else running
            # The same commands on a small store, alternated with the big one, so the big store's own
            # cost shows apart from this shared machine's load (the interpreter start is most of it).
            with C.benchd_daemon(tmp / "small2") as ds:
                sjob = ds.client().submit(idle_sweep(model, "small"))["id"]
                (ds.state / "runbooks").mkdir(parents=True, exist_ok=True)
                for f in (big / "runbooks").iterdir():
                    shutil.copy(f, ds.state / "runbooks" / f.name)
                cmds = {"jobs": ["jobs"], "status": ["status"], "status_job": ["status", "JOB"],
                        "report": ["report", str(out["fill"]["runbook"])]}
                for name, args in cmds.items():
                    walls: dict[str, list[float]] = {"big": [], "small": []}
                    rcs: dict[str, int | None] = {}
                    for _ in range(7):
                        for which, dd, jid in (("big", d, qid), ("small", ds, sjob)):
                            argv = [benchctl, *[str(jid) if x == "JOB" else x for x in args]]
                            res = time_cli(argv, dd.env, 1)
                            walls[which].append(res["median_ms"])
                            rcs[which] = res["rc"]
                    out[f"big_{name}"] = {"median_ms": statistics.median(walls["big"]), "max_ms": max(walls["big"]),
                                          "min_ms": min(walls["big"]), "rc": rcs["big"], "argv": " ".join(args)}
                    out[f"small_{name}"] = {"median_ms": statistics.median(walls["small"]),
                                            "max_ms": max(walls["small"]), "min_ms": min(walls["small"]), "rc": rcs["small"],
                                            "argv": " ".join(args)}
                ds.client().cancel(sjob)
            if running:
                d.client().cancel(running)
    out["goals"] = {
        "cold_status_ms": (out["cold_status"]["median_ms"], GOAL_COLD_MS, out["cold_status"]["median_ms"] <= GOAL_COLD_MS),
        "api_p99_ms_small": (out["api_small_store"].get("p99_ms"), GOAL_P99_MS,
                             (out["api_small_store"].get("p99_ms") or 1e9) <= GOAL_P99_MS),
        **{f"{k}_ms": (out[k]["median_ms"], GOAL_READ_MS, out[k]["median_ms"] < GOAL_READ_MS)
           for k in ("big_jobs", "big_status", "big_status_job", "big_report")},
    }
    met = all(v[2] for v in out["goals"].values())
    if a.json:
        print(json.dumps(out, indent=2))
        return 0 if met else 1
    m = out["machine"]
    print(f"daemon_scale  {m['date_utc']} UTC  {m['cores_logical']} cores  load {m['loadavg_1m']:.2f}")
    f = out["fill"]
    print(f"big store: {f['jobs_queued']} queued jobs, {f['rows']} rows in {f['jobs_finished']} finished jobs, "
          f"{f['db_bytes'] / 2**20:.0f} MiB (filled in {f['fill_s']:.0f} s); daemon reachable after "
          f"{out['daemon_ready_s_big_store']:.2f} s")
    for k in ("cold_status", "cold_ping", "big_jobs", "small_jobs", "big_status", "small_status", "big_status_job",
              "small_status_job", "big_report", "small_report"):
        v = out[k]
        print(f"  {k:16s} median {v['median_ms']:7.1f} ms  (min {v['min_ms']:.1f}, max {v['max_ms']:.1f}) rc={v['rc']}  [{v['argv']}]")
    for k in ("api_small_store", "api_big_store"):
        v = out.get(k) or {}
        if v.get("requests"):
            print(f"  {k:16s} {a.clients} clients: {v['requests']} requests ({v['rps']:.0f}/s), p50 {v['p50_ms']:.1f} ms, "
                  f"p99 {v['p99_ms']:.1f} ms, max {v['max_ms']:.1f} ms, errors {v['errors']}")
    sp = out["probe_gen_tps_small"]
    print(f"  probe gen tok/s (server timings), small store: before polling {[round(x) for x in sp['unpolled']]}, "
          f"while polled {[round(x) for x in sp['polled']]}")
    for k, (val, goal, ok) in out["goals"].items():
        print(f"GOAL {k}: {C.fmt(val, 1)} vs {goal}: {'met' if ok else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
