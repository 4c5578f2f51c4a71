"""Server vs in-process: llama-server's prompt and generation rates at depth d, as benchd records them,
÷ `llama-bench`'s pp / tg at the same depth, same binary build, same threads. Interleaved A B A B.

    .venv/bin/python benchmarks/server_vs_inprocess.py [--rounds 3] [--contexts 512,2048] [--gen 128]
        [--probes 3] [--threads 1] [--json]

A = a real benchd daemon runs a one-candidate sweep (the tiny "medium" GGUF, `-t N`; warm-up 1, no
sustained/evals, cooldown fixed 0 s); its rows give `prompt_tps` (llama-server `timings.prompt_per_second`
for a prompt of ~d tokens) and `gen_tps` (`timings.predicted_per_second`, generating after that prompt).
B = `llama-bench -m MODEL -t N -p d -n 0` (pp of d tokens from an empty context) and
`-p 0 -n GEN -d d` (tg of GEN tokens at depth d), `-r probes`, JSON output; both binaries are the
provisioned pinned build (benchd.provision; `build_commit` is printed).

Ratios per round: median over the round's rows ÷ llama-bench `avg_ts`; the table shows the median over
rounds and the spread. Goal: >= 0.95. Why the server can be slower, by design: it tokenizes and
applies the chat template (its prompt is d tokens plus ~12 template tokens, and it processes them as
one request with HTTP, JSON and sampling around the batch); its generation samples each token through
the full sampler chain and streams it (SSE, one write per token), where llama-bench only decodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

GOAL = 0.95


def sweep(model: str, a: argparse.Namespace) -> dict[str, Any]:
    return {
        "name": "server-vs-inprocess", "contexts": a.contexts, "gen_tokens": a.gen, "probes": a.probes,
        "warmup": 1, "eval_tier": "none", "sustained": {"tokens": 0},
        "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
        "candidates": [{"id": "medium", "runtime": "llama-server", "model": model, "args": ["-t", str(a.threads)]}],
    }


def run_benchd(d: C.Daemon, model: str, a: argparse.Namespace) -> dict[int, dict[str, Any]]:
    job = d.client().submit(sweep(model, a))["id"]
    info = d.wait_job(job)
    if info.get("state") != "succeeded":
        raise RuntimeError(f"job {job} {info.get('state')}: {info.get('error')}")
    rows = [e["payload"]["row"] for e in d.events(job) if e["type"] == "probe_finished"]
    out: dict[int, dict[str, Any]] = {}
    for ctx in a.contexts:
        ok = [r for r in rows if r["context"] == ctx and r["status"] == "ok" and r["kind"] == "probe"]
        out[ctx] = {"prompt_tps": statistics.median([r["prompt_tps"] for r in ok if r["prompt_tps"]]),
                    "gen_tps": statistics.median([r["gen_tps"] for r in ok if r["gen_tps"]]),
                    "prompt_tokens": statistics.median([r["prompt_tokens"] for r in ok if r["prompt_tokens"]]),
                    "server_version": ok[0]["server_version"] if ok else None, "job": job}
    return out


def llama_bench(model: str, args: list[str], reps: int, threads: int) -> dict[str, Any]:
    argv = [str(C.llama_bin("llama-bench")), "-m", model, "-t", str(threads), "-r", str(reps), "-o", "json", *args]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise RuntimeError(f"llama-bench failed: {res.stderr[-500:]}")
    rec = json.loads(res.stdout)[0]
    return {"avg_ts": rec["avg_ts"], "stddev_ts": rec["stddev_ts"], "build_commit": rec.get("build_commit"),
            "argv": " ".join(argv[1:])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--contexts", default="512,2048")
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--probes", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    a.contexts = [int(x) for x in a.contexts.split(",")]
    model = str(C.tiny("medium").target)
    per: dict[int, dict[str, list[float]]] = {c: {"pp": [], "tg": []} for c in a.contexts}
    raw: list[dict[str, Any]] = []
    build = None
    with C.benchd_daemon() as d:
        for rnd in range(a.rounds):
            order = ["benchd", "llama-bench"] if rnd % 2 == 0 else ["llama-bench", "benchd"]
            got: dict[str, Any] = {}
            for what in order:
                if what == "benchd":
                    got["benchd"] = run_benchd(d, model, a)
                else:
                    got["bench"] = {c: {"pp": llama_bench(model, ["-p", str(c), "-n", "0"], a.probes, a.threads),
                                        "tg": llama_bench(model, ["-p", "0", "-n", str(a.gen), "-d", str(c)], a.probes, a.threads)}
                                    for c in a.contexts}
            for c in a.contexts:
                s, b = got["benchd"][c], got["bench"][c]
                per[c]["pp"].append(s["prompt_tps"] / b["pp"]["avg_ts"])
                per[c]["tg"].append(s["gen_tps"] / b["tg"]["avg_ts"])
                build = b["pp"]["build_commit"]
                raw.append({"round": rnd, "context": c, "server": s, "llama_bench": b})
                print(f"round {rnd} d={c}: server pp {s['prompt_tps']:.0f} / bench {b['pp']['avg_ts']:.0f} = "
                      f"{per[c]['pp'][-1]:.3f};  server tg {s['gen_tps']:.1f} / bench {b['tg']['avg_ts']:.1f} = "
                      f"{per[c]['tg'][-1]:.3f}", file=sys.stderr, flush=True)
    summary: dict[str, Any] = {str(c): {k: {"median": C.med(v), "spread": C.spread(v)} for k, v in per[c].items()}
                               for c in a.contexts}
    met = all(summary[str(c)][k]["median"] is not None and summary[str(c)][k]["median"] >= GOAL
              for c in a.contexts for k in ("pp", "tg"))
    doc = {"machine": C.machine(), "model": model, "threads": a.threads, "gen": a.gen, "probes": a.probes,
           "rounds": a.rounds, "llama_bench_build_commit": build,
           "server_version": raw[0]["server"]["server_version"] if raw else None,
           "summary": summary, "goal": GOAL, "goal_met": met, "raw": raw}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0 if met else 1
    m = doc["machine"]
    print(f"server_vs_inprocess  {m['date_utc']} UTC  {m['cores_logical']} cores  load {m['loadavg_1m']:.2f}  "
          f"tiny medium GGUF, -t {a.threads}, gen {a.gen}, {a.rounds} rounds")
    print(f"server: {doc['server_version']}  llama-bench build_commit: {build}")
    print(f"{'depth':>6s} {'prompt: server/bench':>21s} {'(min..max)':>14s} {'gen: server/bench':>18s} {'(min..max)':>14s}")
    for c in a.contexts:
        s = summary[str(c)]
        pp, tg = s["pp"], s["tg"]
        print(f"{c:>6d} {C.fmt(pp['median']):>21s} {pp['spread'][0]:>6.3f}..{pp['spread'][1]:<6.3f} "
              f"{C.fmt(tg['median']):>18s} {tg['spread'][0]:>6.3f}..{tg['spread'][1]:<6.3f}")
    print(f"goal >= {GOAL}: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
