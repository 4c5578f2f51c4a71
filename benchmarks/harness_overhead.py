"""Harness overhead counted like with like: benchd's daemon vs llama-benchy 0.4.0, client CPU per 1,000
streamed tokens as a MARGINAL cost (start-up cancels) and a FIXED cost, pinned and unpinned, plus the
per-job work benchd adds, each phase in its own row.

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 4] [--n 5] [--context 512] [--gen 256]
        [--size medium] [--modes pinned,unpinned] [--base-src DIR] [--demo-rounds 3] [--json]

RESULTS.md §1 was measured with `--size small --demo-rounds 2 --base-src DIR` (DIR = `git archive
03570eb benchd | tar -x -C DIR`: main before issue 19).

Method
- Each tool runs the same workload twice per round: N requests and 4N requests (prompt ~context tokens,
  `gen` tokens each, forced to run to the end, concurrency 1, prompt cache off). Marginal CPU per 1k
  tokens = (CPU(4N) - CPU(N)) / (tokens(4N) - tokens(N)) * 1000: interpreter start, imports, tokenizer
  load, server start, warm-ups and the runbook are the same in both runs and cancel. Fixed cost =
  CPU(N) - tokens(N) * marginal: what one run costs besides its tokens (its warm-ups included: benchd's
  `warmup = 1` streams a full-size prompt and 16 tokens, llama-benchy's warm-up a 1-token request).
- Within a round the four runs per tool go in a rotated order; rounds alternate the tools.
- `pinned`: servers on the first core, clients on the second. llama-benchy's server (started here, the
  argv benchd's adapter builds) and llama-benchy run with `sched_setaffinity`; benchd's daemon runs the
  sweep with `pin_client = true` (its server on core 0, its event loop on core 1: benchd's own feature).
  `benchd-base` (a daemon from `--base-src`, e.g. main before a change, which may not know
  `pin_client`) runs pinned to core 1 with its server pinned to core 0 by a `taskset` wrapper binary.
  `unpinned`: nothing pinned.
- benchd's CPU = the daemon process's own user+system time (all its threads; its servers and render
  workers are children, excluded) from submit until the job's runbook id is in the store (the runbook
  and its views done), read by a sampling thread here every 10 ms and cut at the job's event times; the
  done moment is read from the state DB read-only, so nothing polls the daemon. The runbook's view
  worker (a child of the daemon) is sampled the same way and reported in its own row.
  Tokens = the rows' generated tokens. Server decode = the rows' timings on /metrics' footing.
- llama-benchy's CPU = its whole process tree (RUSAGE_CHILDREN). Tokens and server decode = the
  shared server's /metrics counters over the run (warm-ups included, the same in N and 4N).

Printed: per tool and mode, median (min..max over rounds) marginal CPU-s per 1k tokens and fixed
CPU-s per run, the ratio benchd / llama-benchy per round (median), benchd's per-job phases, and the
load average. Exit 0 when benchd's marginal cost is <= llama-benchy's pinned.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

BENCHY = "llama-benchy==0.4.0"
CORPUS_URL = "http://127.0.0.1:9/benchd-corpus.txt"  # never fetched: llama-benchy reads its cache file
HF_REPO = "benchd/tiny"
HF_REV = "0" * 40
SERVER_CPUS, CLIENT_CPUS = {0}, {1}


# ------------------------------------------------------------------------------------- llama-benchy


def bench_venvs() -> Path:
    return C.cache_dir() / "bench-venvs"


def ensure_benchy(install: bool) -> tuple[Path | None, str]:
    """llama-benchy 0.4.0 in its own venv under <cache>/bench-venvs (outside the repo, never committed)."""
    venv = bench_venvs() / "llama-benchy"
    exe = venv / "bin" / "llama-benchy"
    if not exe.exists() and install:
        venv.parent.mkdir(parents=True, exist_ok=True)
        with (venv.parent / "llama-benchy.install.log").open("w") as fh:
            rc = subprocess.call([sys.executable, "-m", "venv", "--clear", str(venv)], stdout=fh, stderr=fh)
            rc = rc or subprocess.call([str(venv / "bin" / "pip"), "install", "-q", BENCHY], stdout=fh, stderr=fh)
        if rc:
            return None, f"pip install {BENCHY} failed ({rc}); see {venv.parent / 'llama-benchy.install.log'}"
    if not exe.exists():
        return None, f"not installed ({exe} missing; run without --no-install)"
    out = subprocess.run([str(venv / "bin" / "pip"), "show", "llama-benchy"], capture_output=True, text=True).stdout
    return exe, next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Version:")), "?")


def seed_offline(tok_dir: Path) -> dict[str, str]:
    """llama-benchy reads a book (seeded with benchd's corpus) and a tokenizer (the tiny model's, as
    hub repo `benchd/tiny` in an offline cache) and never reaches a network. Returns its environment."""
    from benchd.engine.corpus import load_corpus

    books = Path.home() / ".cache" / "llama-benchy"
    books.mkdir(parents=True, exist_ok=True)
    (books / (hashlib.md5(CORPUS_URL.encode()).hexdigest() + ".txt")).write_text(load_corpus().take(400_000)[0])
    hub = bench_venvs() / "hf-hub"
    repo = hub / ("models--" + HF_REPO.replace("/", "--"))
    snap = repo / "snapshots" / HF_REV
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(HF_REV)
    for f in tok_dir.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            shutil.copyfile(f, snap / f.name)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub), HF_HOME=str(hub.parent / "hf-home"),
               TRANSFORMERS_OFFLINE="1", NO_COLOR="1", TQDM_DISABLE="1")
    env.pop("PYTHONPATH", None)
    return env


def run_benchy(exe: Path, env: dict[str, str], srv: C.LlamaServer, a: argparse.Namespace, n: int,
               cpus: set[int] | None) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="bench-benchy-"))
    argv = [str(exe), "--base-url", srv.base + "/v1", "--model", HF_REPO, "--tokenizer", HF_REPO, "--pp", str(a.context),
            "--tg", str(a.gen), "--runs", str(n), "--no-cache", "--book-url", CORPUS_URL, "--latency-mode", "none",
            "--skip-coherence", "--exact-tg", "--format", "json", "--save-result", str(out / "r.json")]
    before = srv.metrics()
    try:
        res, cpu, wall = C.run_measured(argv, env=env, cwd=str(out), timeout=1800, cpus=cpus)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    rate, tokens = C.decode_rate(before, srv.metrics())
    if res.returncode != 0 or tokens < n * a.gen:  # it reuses connections llama-server closes: check the count
        return {"error": f"exit {res.returncode}, {tokens:.0f} of {n * a.gen} tokens: {(res.stderr or res.stdout)[-400:]}"}
    return {"cpu_s": cpu, "tokens": tokens, "server_tps": rate, "wall_s": wall}


# ------------------------------------------------------------------------------------------- benchd


class CpuTrace:
    """The daemon's own CPU, and the CPU of its runbook-view workers (`benchd.results.render` children),
    sampled every 10 ms by a thread of THIS process (a worker's total is its last sample: up to 10 ms
    short). Children are found through /proc/PID/task/*/children, not a scan of every process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.proc = psutil.Process(pid)
        self._cmdline = self.proc.cmdline()
        self.points: list[tuple[float, float]] = []  # (wall time.time(), own CPU)
        self.workers: dict[int, float] = {}  # render worker pid -> CPU at its last sample
        self._kids: dict[int, psutil.Process | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        t = self.proc.cpu_times()
        self.points.append((time.time(), t.user + t.system))
        from benchd.sensors.memory.linux import proc_tree

        for kid in (proc_tree(self.pid) or set()) - {self.pid}:
            with contextlib.suppress(psutil.Error):
                if kid not in self._kids:
                    p = psutil.Process(kid)
                    cmd = p.cmdline()
                    if not cmd or cmd == self._cmdline:
                        continue  # forked, not yet exec'd (or mid-exec): look again at the next sample
                    self._kids[kid] = p if "benchd.results.render" in " ".join(cmd) else None
                p = self._kids[kid]
                if p is not None:
                    ct = p.cpu_times()
                    self.workers[kid] = ct.user + ct.system

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self._sample()

    def __enter__(self) -> CpuTrace:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def at(self, when: float) -> float:
        """The daemon's own CPU at wall time `when`: the first sample at or after it."""
        for t, own in self.points:
            if t >= when:
                return own
        return self.points[-1][1]


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def wait_runbook(state: Path, job: str, timeout: float = 900) -> float:
    """The wall time at which the job's runbook id appeared in the store (read-only, no daemon request)."""
    db = sqlite3.connect(f"file:{state / 'benchd.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = db.execute("SELECT runbook_id, state FROM jobs WHERE id = ?", (job,)).fetchone()
            if row and row[0]:
                return time.time()
            time.sleep(0.01)
    finally:
        db.close()
    raise TimeoutError(f"job {job}: no runbook within {timeout} s")


def benchd_sweep(a: argparse.Namespace, model: str, n: int, pin: bool, binary: str | None) -> dict[str, Any]:
    cand: dict[str, Any] = {"id": "tiny", "runtime": "llama-server", "model": model, "args": ["-t", str(a.threads)]}
    if binary:
        cand["binary"] = binary
    doc: dict[str, Any] = {"name": "harness-overhead", "contexts": [a.context], "gen_tokens": a.gen, "probes": n,
                           "warmup": 1, "eval_tier": "none", "sustained": {"tokens": 0},
                           "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0}, "candidates": [cand]}
    if pin:
        doc["pin_client"] = True
    return doc


def run_benchd(d: C.Daemon, doc: dict[str, Any]) -> dict[str, Any]:
    with CpuTrace(d.proc.pid) as trace:
        t0 = time.time()
        job = d.client().submit(doc)["id"]
        t_done = wait_runbook(d.state, job)
    evs = d.events(job)
    info = d.client().job(job)
    if info.get("state") != "succeeded":
        return {"error": f"job {job} {info.get('state')}: {info.get('error')}"}
    rows = [e["payload"]["row"] for e in evs if e["type"] == "probe_finished"]
    ok = [r for r in rows if r["status"] == "ok" and r["kind"] == "probe" and r.get("gen_tps") and r.get("gen_tokens")]
    tokens = sum(r["gen_tokens"] for r in ok)
    secs = sum((r["gen_tokens"] - 1) / r["gen_tps"] for r in ok)  # rows: (n-1)/t; /metrics: n/t
    times = {"submit": t0, "done": t_done}
    for e in evs:
        times.setdefault(e["type"], _epoch(e["time"]))  # first occurrence
    times["last_probe_finished"] = max(_epoch(e["time"]) for e in evs if e["type"] == "probe_finished")
    times["job_finished"] = next(_epoch(e["time"]) for e in evs if e["type"] == "job_finished")
    pinned = next((e["payload"].get("affinity") for e in evs if e["type"] == "server_ready"), None)

    def cpu(a_: str, b_: str) -> float:
        return trace.at(times[b_]) - trace.at(times[a_])

    phases = {"server_start": cpu("server_starting", "server_ready"),
              "warmup_and_sizing": cpu("server_ready", "probe_started"),
              "probes": cpu("probe_started", "last_probe_finished"),
              "server_stop": cpu("last_probe_finished", "job_finished"),
              "runbook_daemon": cpu("job_finished", "done"),
              "runbook_views_worker": sum(trace.workers.values())}
    return {"cpu_s": cpu("submit", "done"), "tokens": tokens, "server_tps": tokens / secs if secs else None,
            "wall_s": t_done - t0, "phases": phases, "ready_s": times["server_ready"] - times["server_starting"],
            "affinity": pinned, "job": job}


def taskset_wrapper(folder: Path, cpus: set[int]) -> str:
    """A llama-server 'binary' that execs the real one pinned to `cpus` (for a daemon without pin_client)."""
    path = folder / "llama-server-pinned"
    path.write_text(f"#!/bin/sh\nexec taskset -c {','.join(map(str, sorted(cpus)))} {C.llama_bin()} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def demo_runbooks(a: argparse.Namespace, tools: list[str]) -> dict[str, Any]:
    """The runbook phase on the demo sweep (`benchctl/demo.py`'s: 3 candidates, 2 contexts, sustained,
    smoke evals; cooldown set to fixed 0 s, which changes nothing in what the runbook holds): each
    daemon's own CPU from job_finished to the runbook id, and its views worker's, alternated per round."""
    from benchctl.demo import _sweep_toml
    from benchctl.sweepfile import read_sweep_dict

    out: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-demo-")))
        (tmp / "demo.toml").write_text(_sweep_toml(C.tiny("small")))
        doc = read_sweep_dict(tmp / "demo.toml")
        doc["cooldown"] = {"policy": "fixed", "seconds": 0, "max_seconds": 0}
        daemons = {t: stack.enter_context(C.benchd_daemon(tmp / t, src=a.base_src if t == "benchd-base" else None))
                   for t in tools}
        for rnd in range(a.demo_rounds):
            for t in tools[rnd % len(tools):] + tools[: rnd % len(tools)]:
                r = run_benchd(daemons[t], doc)
                out[t].append({"round": rnd, **({"error": r["error"]} if "error" in r else r["phases"])})
                print(f"demo round {rnd} {t}: {json.dumps(out[t][-1])[:300]}", file=sys.stderr, flush=True)
    return {t: {k: (C.med([x[k] for x in v if k in x]), C.spread([x[k] for x in v if k in x]))
                for k in ("runbook_daemon", "runbook_views_worker")} | {"raw": v} for t, v in out.items()}


# --------------------------------------------------------------------------------------------- main


def marginal(small: dict[str, Any], big: dict[str, Any]) -> tuple[float, float] | None:
    """(marginal CPU-s per 1k tokens, fixed CPU-s of the small run) from a round's N and 4N runs."""
    if "error" in small or "error" in big or big["tokens"] <= small["tokens"]:
        return None
    m = (big["cpu_s"] - small["cpu_s"]) / (big["tokens"] - small["tokens"]) * 1000
    return m, small["cpu_s"] - small["tokens"] * m / 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--n", type=int, default=5, help="requests in the small run (the big one has 4N)")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--gen", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--size", default="medium", help="tiny model size (medium: 512-dim, 8 layers)")
    p.add_argument("--modes", default="pinned,unpinned")
    p.add_argument("--tools", default="benchd,llama-benchy")
    p.add_argument("--base-src", type=Path, default=None, help="also run the daemon of this checkout as benchd-base")
    p.add_argument("--demo-rounds", type=int, default=3, help="runbook phase on the demo sweep (0: skip)")
    p.add_argument("--no-install", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: daemons and servers are stopped
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS

    models = C.tiny(a.size)
    model = str(models.target)
    tools = [t.strip() for t in a.tools.split(",") if t.strip()] + (["benchd-base"] if a.base_src else [])
    exe, version = ensure_benchy(not a.no_install) if "llama-benchy" in tools else (None, "")
    if exe is None and "llama-benchy" in tools:
        print(f"llama-benchy skipped: {version}", file=sys.stderr)
        tools.remove("llama-benchy")
    env = seed_offline(Path(models.mlx_dir)) if exe else {}
    ctx = a.context + a.gen + CTX_MARGIN_TOKENS
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    loads: dict[str, list[float]] = {}
    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        pinned = mode == "pinned"
        raw[mode] = {f"{t}/{n}": [] for t in tools for n in ("N", "4N")}
        loads[mode] = [os.getloadavg()[0]]
        with contextlib.ExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ho-")))
            srv = stack.enter_context(C.llama_server(model, ctx, a.threads, cpus=SERVER_CPUS if pinned else None))
            daemons = {}
            if "benchd" in tools:
                daemons["benchd"] = stack.enter_context(C.benchd_daemon(tmp / "new"))
            if "benchd-base" in tools:
                daemons["benchd-base"] = stack.enter_context(
                    C.benchd_daemon(tmp / "base", src=a.base_src, cpus=CLIENT_CPUS if pinned else None))
            wrapper = taskset_wrapper(tmp, SERVER_CPUS) if pinned else None
            runs = [(t, n) for t in tools for n in ("N", "4N")]
            for rnd in range(a.rounds):
                for tool, size in runs[rnd % len(runs):] + runs[: rnd % len(runs)]:
                    n = a.n * (4 if size == "4N" else 1)
                    if tool == "llama-benchy":
                        r = run_benchy(exe, env, srv, a, n, CLIENT_CPUS if pinned else None)  # type: ignore[arg-type]
                    else:
                        base = tool == "benchd-base"
                        r = run_benchd(daemons[tool], benchd_sweep(a, model, n, pin=pinned and not base,
                                                                   binary=wrapper if base else None))
                    r["round"] = rnd
                    raw[mode][f"{tool}/{size}"].append(r)
                    print(f"{mode} round {rnd} {tool}/{size}: " + json.dumps(
                        {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items() if k not in ("phases", "affinity")})[:300],
                        file=sys.stderr, flush=True)
        loads[mode].append(os.getloadavg()[0])
    daemon_tools = [t for t in tools if t.startswith("benchd")]
    loads["demo"] = [os.getloadavg()[0]]
    demo = demo_runbooks(a, daemon_tools) if a.demo_rounds and daemon_tools else {}
    loads["demo"].append(os.getloadavg()[0])
    doc = {"machine": C.machine(), "workload": {k: getattr(a, k) for k in ("rounds", "n", "context", "gen", "threads", "size")},
           "llama_benchy": version, "loadavg_1m": loads, "summary": summarize(raw, tools), "demo_runbook": demo, "raw": raw}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    pinned_ratio = doc["summary"].get("pinned", {}).get("ratio_benchd_vs_benchy")
    return 0 if pinned_ratio is not None and pinned_ratio <= 1.0 else 1


def summarize(raw: dict[str, dict[str, list[dict[str, Any]]]], tools: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode, runs in raw.items():
        per: dict[str, Any] = {}
        by_round: dict[str, dict[int, float]] = {}
        for t in tools:
            pairs = [marginal(s, b) for s, b in zip(runs[f"{t}/N"], runs[f"{t}/4N"], strict=True)]
            by_round[t] = {r["round"]: m[0] for r, m in zip(runs[f"{t}/N"], pairs, strict=True) if m}
            ms, fs = [m[0] for m in pairs if m], [m[1] for m in pairs if m]
            srv = [r["server_tps"] for r in runs[f"{t}/N"] + runs[f"{t}/4N"] if r.get("server_tps")]
            per[t] = {"rounds_ok": len(ms), "marginal_cpu_s_per_1k": C.med(ms), "marginal_spread": C.spread(ms),
                      "fixed_cpu_s": C.med(fs), "fixed_spread": C.spread(fs), "server_tps": C.med(srv),
                      "errors": [r["error"] for r in runs[f"{t}/N"] + runs[f"{t}/4N"] if "error" in r][:2]}
            phases = [r["phases"] for r in runs[f"{t}/N"] + runs[f"{t}/4N"] if "phases" in r]
            if phases:
                per[t]["phases_cpu_s"] = {k: C.med([ph[k] for ph in phases]) for k in phases[0]}
                per[t]["affinity"] = next((r.get("affinity") for r in runs[f"{t}/N"] if r.get("affinity")), None)
        ratio = {}
        for t in tools:
            if t != "llama-benchy" and "llama-benchy" in by_round:
                xs = [by_round[t][k] / by_round["llama-benchy"][k] for k in by_round[t] if k in by_round["llama-benchy"]]
                ratio[t] = (C.med(xs), C.spread(xs))
        out[mode] = {"per_tool": per, "ratios_per_round": ratio,
                     "ratio_benchd_vs_benchy": (ratio.get("benchd") or (None,))[0]}
    return out


def print_table(doc: dict[str, Any]) -> None:
    m, w = doc["machine"], doc["workload"]
    print(f"harness_overhead  {m['date_utc']} UTC  {m['cores_logical']} cores  {m['cpu_model']}  llama-benchy {doc['llama_benchy']}")
    print(f"workload: {w['rounds']} rounds x (N={w['n']} and 4N requests) per tool, prompt ~{w['context']}, "
          f"{w['gen']} generated, -t {w['threads']}, tiny {w['size']} GGUF")
    for mode, s in doc["summary"].items():
        print(f"\n[{mode}]  load average (1 min) at start/end: {', '.join(f'{x:.2f}' for x in doc['loadavg_1m'][mode])}")
        print(f"{'tool':14s} {'ok':>3s} {'marginal CPU-s/1k tok':>22s} {'(min..max)':>14s} {'fixed CPU-s/run':>16s} "
              f"{'(min..max)':>14s} {'server tok/s':>12s}")
        for t, v in s["per_tool"].items():
            ms, fs = v["marginal_spread"], v["fixed_spread"]
            print(f"{t:14s} {v['rounds_ok']:>3d} {C.fmt(v['marginal_cpu_s_per_1k'], 4):>22s} "
                  f"{(f'{ms[0]:.4f}..{ms[1]:.4f}' if ms else ''):>14s} {C.fmt(v['fixed_cpu_s']):>16s} "
                  f"{(f'{fs[0]:.3f}..{fs[1]:.3f}' if fs else ''):>14s} {C.fmt(v['server_tps'], 0):>12s}")
            for e in v["errors"]:
                print(f"    error: {e[:200]}")
            if "phases_cpu_s" in v:
                print("    per-job daemon CPU-s (median): " + ", ".join(f"{k} {x:.3f}" for k, x in v["phases_cpu_s"].items() if x is not None))
        for t, (r, sp) in s["ratios_per_round"].items():
            print(f"RATIO {mode} {t} / llama-benchy marginal CPU per token = {C.fmt(r)} "
                  f"({'..'.join(f'{x:.3f}' for x in sp) if sp else ''}) (goal <= 1, pinned)")
    if doc["demo_runbook"]:
        print(f"\n[demo sweep runbook]  load average at start/end: {', '.join(f'{x:.2f}' for x in doc['loadavg_1m']['demo'])}")
        for t, v in doc["demo_runbook"].items():
            (dm, ds), (wm, ws) = v["runbook_daemon"], v["runbook_views_worker"]
            print(f"{t:14s} runbook in the daemon {C.fmt(dm)} CPU-s ({ds[0]:.3f}..{ds[1]:.3f}) (goal <= 0.1); "
                  f"views worker {C.fmt(wm)} CPU-s ({ws[0]:.3f}..{ws[1]:.3f})" if ds and ws else f"{t}: no data")


if __name__ == "__main__":
    sys.exit(main())
