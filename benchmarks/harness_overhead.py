"""Harness overhead vs peers: client CPU per 1,000 streamed tokens and the server's decode speed while
each tool measures it, side by side in one run, interleaved (A B C … A B C …).

    .venv/bin/python benchmarks/harness_overhead.py [--rounds 3] [--probes 20] [--context 512]
        [--gen 256] [--threads 1] [--tools benchd-daemon,benchd-probe,llama-benchy,aiperf,guidellm]
        [--json]

Tools (each round runs every tool once, in a rotated order):
- `alone`: the unmeasured server — the same streamed requests read by `curl -N` into /dev/null (a C
  client doing nothing per chunk; the server still pays for its own SSE writes); its /metrics decode
  rate is the 1.00 reference. `--alone-nonstream` uses non-streaming requests instead.
- `benchd-daemon`: a real `benchd` daemon process runs a submitted one-candidate sweep (same model,
  `-t`, context, gen_tokens, probes; warm-up 1, no sustained/evals, cooldown fixed 0 s). Client CPU =
  the daemon process's own user+system CPU from submit to the job's end (its threads included, the
  llama-server it spawns excluded because psutil's per-process times exclude children). benchd spawns
  its OWN llama-server (same argv as the shared one), so its server speed comes from its rows
  (`timings.predicted_*`, weighted: sum(tokens) / sum(tokens / tps)). Tokens counted = the recorded
  probes' generated tokens only (warm-up tokens are not counted: conservative against benchd).
  Its reference is `alone-fresh` (run just before and after it): a fresh server with the same argv,
  one warm-up, the same non-streaming requests.
- `benchd-probe`: benchd's probe path in-process (`benchmarks/_probe_client.py`: prompt sizing via
  /tokenize + `probe.run_chat` + normalize) against the SHARED server, as a subprocess, so its whole
  process tree (interpreter start and imports included, like the peers) is measured.
- `llama-benchy`, `aiperf`, `guidellm`: installed from PyPI into their own venvs under
  `<cache>/peers/<tool>` on first use (`--no-install` to skip), run against the shared server with the
  same prompt size, gen tokens and request count at concurrency 1, prompt cache off where the tool
  can say so. Their CPU = the whole subprocess tree (`RUSAGE_CHILDREN` delta: every descendant the
  tool waited for). Their tokens and server decode rate = the shared server's /metrics counter
  difference over the tool's run (everything the tool had streamed, its own warm-ups included).

Printed: per tool the median over rounds of CPU-s / 1k tokens and server decode ÷ alone (per round,
against that round's `alone`), and the ratios benchd ÷ best peer. Exit 0 when both goals are met.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

PEERS = {"llama-benchy": "llama-benchy", "aiperf": "aiperf", "guidellm": "guidellm"}
GOAL_CPU_RATIO = 0.5
GOAL_SERVER = 0.99
CORPUS_URL = "http://127.0.0.1:9/benchd-corpus.txt"  # never fetched: llama-benchy reads its cache file


# ------------------------------------------------------------------------------------------- peers


def peer_venv(tool: str) -> Path:
    return C.cache_dir() / "peers" / tool


def ensure_peer(tool: str, install: bool) -> tuple[Path | None, str]:
    """(the tool's executable, version or why it is missing). Installs into its own venv on first use."""
    venv = peer_venv(tool)
    exe = venv / "bin" / tool
    if not exe.exists() and install:
        venv.parent.mkdir(parents=True, exist_ok=True)
        log = venv.parent / f"{tool}.install.log"
        with log.open("w") as fh:
            rc = subprocess.call([sys.executable, "-m", "venv", "--clear", str(venv)], stdout=fh, stderr=fh)
            if rc == 0:
                rc = subprocess.call([str(venv / "bin" / "pip"), "install", "-q", PEERS[tool]], stdout=fh, stderr=fh)
        if rc != 0:
            tail = [ln for ln in log.read_text().splitlines() if "is ignored" not in ln][-3:]
            return None, f"pip install {PEERS[tool]} failed ({rc}): {' | '.join(tail)}"
    if not exe.exists():
        return None, f"not installed ({exe} missing)"
    out = subprocess.run([str(venv / "bin" / "pip"), "show", PEERS[tool]], capture_output=True, text=True).stdout
    version = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Version:")), "?")
    return exe, version


def peer_env(hub: Path) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub), HF_HOME=str(hub.parent / "hf-home"), TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               NO_COLOR="1", TQDM_DISABLE="1")
    for k in ("BENCHD_STATE_DIR", "BENCHD_SOCKET"):
        env.pop(k, None)
    return env


def seed_benchy_corpus() -> None:
    """llama-benchy downloads a book unless its cache has one for the URL: seed it with benchd's corpus."""
    from benchd.engine.corpus import load_corpus

    d = Path.home() / ".cache" / "llama-benchy"
    d.mkdir(parents=True, exist_ok=True)
    text, _ = load_corpus().take(400_000)
    (d / (hashlib.md5(CORPUS_URL.encode()).hexdigest() + ".txt")).write_text(text)


HF_REPO = "benchd/tiny-small"
HF_REV = "0" * 40


def seed_hf_cache(tok_dir: Path) -> Path:
    """A Hugging Face hub cache holding the tiny model's tokenizer as repo `benchd/tiny-small`, so the
    peers load it in offline mode (aiperf's offline loader only accepts hub ids, not paths)."""
    hub = C.cache_dir() / "peers" / "hf-hub"
    repo = hub / ("models--" + HF_REPO.replace("/", "--"))
    snap = repo / "snapshots" / HF_REV
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(HF_REV)
    for f in tok_dir.iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copyfile(f, snap / f.name)
    return hub


def peer_argv(tool: str, exe: Path, base: str, a: argparse.Namespace, out: Path) -> list[str]:
    """The same workload in each tool's words: prompt ~context tokens (its own tokenizer = the model's),
    gen tokens, request count, concurrency 1, streaming, greedy where the tool lets us say so."""
    if tool == "llama-benchy":
        return [str(exe), "--base-url", base + "/v1", "--model", HF_REPO, "--tokenizer", HF_REPO,
                "--pp", str(a.context), "--tg", str(a.gen), "--runs", str(a.probes), "--no-cache",
                "--book-url", CORPUS_URL, "--latency-mode", "none", "--skip-coherence", "--exact-tg",
                "--format", "json", "--save-result", str(out / "benchy.json")]
    if tool == "aiperf":
        return [str(exe), "profile", "--model", "benchd-tiny", "--tokenizer", HF_REPO, "--url", base,
                "--endpoint-type", "chat", "--streaming", "--isl", str(a.context), "--isl-stddev", "0",
                "--osl", str(a.gen), "--extra-inputs", "ignore_eos:true", "--extra-inputs", "cache_prompt:false",
                "--request-count", str(a.probes), "--concurrency", "1", "--warmup-request-count", "1",
                "--artifact-dir", str(out / "aiperf"), "--ui", "none"]
    if tool == "guidellm":
        return [str(exe), "run", "--backend", f"kind=openai_http,target={base},model=benchd-tiny",
                "--profile", "kind=synchronous", "--constraint", f"kind=max_requests,count={a.probes}",
                "--tokenizer", f"kind=huggingface_auto,model={HF_REPO}",
                "--data", f"kind=synthetic_text,prompt_tokens={a.context},output_tokens={a.gen}",
                "--output", f"kind=json,path={out / 'guidellm.json'}", "--disable-console-interactive"]
    raise ValueError(tool)


# ------------------------------------------------------------------------------------------ runs


_CPT: list[float] = []


def prompt_text(srv: C.LlamaServer, n_tokens: int) -> str:
    """A unique prompt of about `n_tokens` tokens of the server's tokenizer (chars/token measured once
    with /tokenize; ~12 tokens of chat template come on top, as with the other tools)."""
    from benchd.engine.corpus import load_corpus

    text, _ = load_corpus().take(20_000)
    if not _CPT:
        _CPT.append(4000 / len(C.http_json(srv.base + "/tokenize", {"content": text[:4000]})["tokens"]))
    return f"[{secrets.token_hex(6)}] " + text[: int((n_tokens - 12) * _CPT[0])]


def run_alone(srv: C.LlamaServer, a: argparse.Namespace) -> dict[str, Any]:
    """The reference: the same streamed requests read by `curl -N` into /dev/null (a C client that does
    nothing per chunk), so the server pays its own streaming cost but no Python client competes with
    it. (`--alone-nonstream`: non-streaming requests instead, which also spares the server the per-token
    SSE writes.)"""
    before = srv.metrics()
    for _ in range(a.probes):
        body = json.dumps({
            "messages": [{"role": "user", "content": prompt_text(srv, a.context)}], "max_tokens": a.gen,
            "stream": not a.alone_nonstream, "stream_options": {"include_usage": True}, "cache_prompt": False,
            "ignore_eos": True, "temperature": 0, "seed": 0,
        }).encode()
        subprocess.run(["curl", "-sSN", "-o", "/dev/null", "-H", "Content-Type: application/json", "--data-binary", "@-",
                        srv.base + "/v1/chat/completions"], input=body, check=True, timeout=300)
    rate, n = C.decode_rate(before, srv.metrics())
    return {"server_tps": rate, "tokens": n, "cpu_s": None}


def run_alone_fresh(model: str, ctx: int, a: argparse.Namespace) -> dict[str, Any]:
    """The reference for benchd-daemon, which starts its own server per job: a FRESH server with the
    same argv, one warm-up request, then the same non-streaming requests (a new process decodes at a
    different speed than a long-running one on this machine, so the shared server is not its reference)."""
    with C.llama_server(model, ctx, a.threads) as fresh:
        run_alone(fresh, argparse.Namespace(**{**vars(a), "probes": 1}))
        return run_alone(fresh, a)


def run_probe_client(srv: C.LlamaServer, a: argparse.Namespace, model: str) -> dict[str, Any]:
    before = srv.metrics()
    res, cpu, wall = C.run_measured([sys.executable, str(Path(__file__).parent / "_probe_client.py"),
                                     "--url", srv.base, "--model", model, "--context", str(a.context),
                                     "--gen", str(a.gen), "--probes", str(a.probes), "--warmup", "1"])
    if res.returncode != 0:
        return {"error": res.stderr[-500:]}
    rate, n = C.decode_rate(before, srv.metrics())
    doc = json.loads(res.stdout)
    return {"server_tps": rate, "tokens": n, "cpu_s": cpu, "wall_s": wall,
            "loop_cpu_s": doc["loop_cpu_s"], "loop_tokens": doc["streamed_tokens"]}


def run_peer(tool: str, exe: Path, srv: C.LlamaServer, a: argparse.Namespace, hub: Path) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix=f"bench-{tool}-"))
    before = srv.metrics()
    try:
        res, cpu, wall = C.run_measured(peer_argv(tool, exe, srv.base, a, out), env=peer_env(hub),
                                        cwd=str(out), timeout=1200)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 1200 s"}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    rate, n = C.decode_rate(before, srv.metrics())
    if res.returncode != 0 or n < a.probes * a.gen:
        return {"error": f"exit {res.returncode}, {n:.0f} tokens streamed: {(res.stderr or res.stdout)[-600:]}"}
    return {"server_tps": rate, "tokens": n, "cpu_s": cpu, "wall_s": wall}


def daemon_sweep(a: argparse.Namespace, model: str) -> dict[str, Any]:
    return {
        "name": "harness-overhead", "contexts": [a.context], "gen_tokens": a.gen, "probes": a.probes,
        "warmup": 1, "eval_tier": "none", "sustained": {"tokens": 0},
        "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
        "candidates": [{"id": "tiny", "runtime": "llama-server", "model": model, "args": ["-t", str(a.threads)]}],
    }


def run_daemon(d: C.Daemon, a: argparse.Namespace, model: str) -> dict[str, Any]:
    cpu0 = C.proc_cpu(d.proc.pid)
    w0 = time.perf_counter()
    job = d.client().submit(daemon_sweep(a, model))["id"]
    info = d.wait_job(job)
    cpu = C.proc_cpu(d.proc.pid) - cpu0
    wall = time.perf_counter() - w0
    if info.get("state") != "succeeded":
        return {"error": f"job {job} {info.get('state')}: {info.get('error')}"}
    rows = [e["payload"]["row"] for e in d.events(job) if e["type"] == "probe_finished"]
    ok = [r for r in rows if r["status"] == "ok" and r.get("gen_tps") and r.get("gen_tokens")]
    # Rows carry llama-server's predicted_per_second = (n - 1) / t (the first token is free); /metrics
    # counts n / t. Put the rows on the counters' footing so every tool's rate is the same quantity.
    n = sum(r["gen_tokens"] for r in ok)
    secs = sum((r["gen_tokens"] - 1) / r["gen_tps"] for r in ok)
    return {"server_tps": n / secs if secs else None, "tokens": n, "cpu_s": cpu, "wall_s": wall, "job": job}


# ------------------------------------------------------------------------------------------ main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--probes", type=int, default=20)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--gen", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tools", default="benchd-daemon,benchd-probe,llama-benchy,aiperf,guidellm")
    p.add_argument("--no-install", action="store_true")
    p.add_argument("--alone-nonstream", action="store_true", help="reference = non-streaming requests")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()

    from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS

    models = C.tiny("small")
    model = str(models.target)
    hub = seed_hf_cache(Path(models.mlx_dir))  # the same vocabulary as the GGUF (tinymodels writes both)
    wanted = [t.strip() for t in a.tools.split(",") if t.strip()]
    peers: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    versions: dict[str, str] = {}
    for tool in wanted:
        if tool in PEERS:
            exe, info = ensure_peer(tool, not a.no_install)
            if exe is None:
                skipped[tool] = info
            else:
                peers[tool], versions[tool] = exe, info
    if "llama-benchy" in peers:
        seed_benchy_corpus()
    tools = ["alone"] + [t for t in wanted if t in peers or t.startswith("benchd")]
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
    if "benchd-daemon" in tools:
        results["alone-fresh"] = []
    ctx = a.context + a.gen + CTX_MARGIN_TOKENS
    with contextlib.ExitStack() as stack:
        srv = stack.enter_context(C.llama_server(model, ctx, a.threads))
        daemon = stack.enter_context(C.benchd_daemon()) if "benchd-daemon" in tools else None
        run_alone(srv, argparse.Namespace(**{**vars(a), "probes": 2}))  # warm the shared server
        seq = 0
        for rnd in range(a.rounds):
            others = tools[1:]
            others = [*others[rnd % len(others):], *others[: rnd % len(others)]] if others else []
            order = ["alone"]
            for t in others:
                order += ["alone-fresh", t, "alone-fresh", "alone"] if t == "benchd-daemon" else [t, "alone"]
            for tool in order:
                if tool == "alone":
                    r = run_alone(srv, a)
                elif tool == "alone-fresh":
                    r = run_alone_fresh(model, ctx, a)
                elif tool == "benchd-daemon":
                    assert daemon is not None
                    r = run_daemon(daemon, a, model)
                elif tool == "benchd-probe":
                    r = run_probe_client(srv, a, model)
                else:
                    r = run_peer(tool, peers[tool], srv, a, hub)
                r["round"] = rnd
                r["seq"] = seq
                seq += 1
                results[tool].append(r)
                print(f"round {rnd} {tool:14s} " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                                             for k, v in r.items() if k != "round"})[:400],
                      file=sys.stderr, flush=True)
    summary = summarize(results, a)
    doc = {"machine": C.machine(), "workload": {k: getattr(a, k) for k in ("rounds", "probes", "context", "gen", "threads")},
           "server_argv": C.server_argv(C.llama_bin(), model, 0, ctx, a.threads), "peer_versions": versions,
           "skipped": skipped, "summary": summary, "raw": results}
    if a.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    return 0 if summary.get("goals_met") else 1


def summarize(results: dict[str, list[dict[str, Any]]], a: argparse.Namespace) -> dict[str, Any]:
    alone_by_seq = {r["seq"]: r.get("server_tps") for r in [*results["alone"], *results.get("alone-fresh", [])]}

    def neighbours(r: dict[str, Any]) -> float | None:
        """The unmeasured server speed around a tool's run: mean of the `alone` (for benchd-daemon:
        `alone-fresh`) runs just before and after it."""
        xs: list[float] = [x for x in (alone_by_seq.get(r["seq"] - 1), alone_by_seq.get(r["seq"] + 1)) if x]
        return sum(xs) / len(xs) if xs else None

    per_tool: dict[str, Any] = {}
    for tool, runs in results.items():
        ok = [r for r in runs if "error" not in r]
        cpu_per_k = [r["cpu_s"] / r["tokens"] * 1000 for r in ok if r.get("cpu_s") is not None and r.get("tokens")]
        server = [r["server_tps"] / nb for r in ok if r.get("server_tps") and (nb := neighbours(r))]
        if tool.startswith("alone"):
            server = [1.0 for r in ok]
        loop = [r["loop_cpu_s"] / r["loop_tokens"] * 1000 for r in ok if r.get("loop_tokens")]
        per_tool[tool] = {"runs_ok": len(ok), "errors": [r["error"] for r in runs if "error" in r][:2],
                          "cpu_s_per_1k_tokens": C.med(cpu_per_k), "cpu_spread": C.spread(cpu_per_k),
                          "server_decode_vs_alone": C.med(server), "server_spread": C.spread(server),
                          "server_tps": C.med([r["server_tps"] for r in ok if r.get("server_tps")]),
                          "probe_loop_cpu_s_per_1k_tokens": C.med(loop)}
    peer_cpus = {t: v["cpu_s_per_1k_tokens"] for t, v in per_tool.items() if t in PEERS and v["cpu_s_per_1k_tokens"]}
    best = min(peer_cpus.items(), key=lambda kv: kv[1]) if peer_cpus else None
    out: dict[str, Any] = {"per_tool": per_tool, "best_peer": best[0] if best else None}
    met = best is not None
    for b in ("benchd-daemon", "benchd-probe"):
        if b not in per_tool:
            continue
        mine = per_tool[b]["cpu_s_per_1k_tokens"]
        ratio = mine / best[1] if (best and mine) else None
        out[f"{b}_cpu_ratio_vs_best_peer"] = ratio
        srv = per_tool[b]["server_decode_vs_alone"]
        met = met and ratio is not None and ratio <= GOAL_CPU_RATIO and srv is not None and srv >= GOAL_SERVER
    out["goals_met"] = met
    return out


def print_table(doc: dict[str, Any]) -> None:
    m, w, s = doc["machine"], doc["workload"], doc["summary"]
    print(f"harness_overhead  {m['date_utc']} UTC  {m['cores_logical']} cores  {m['cpu_model']}  load {m['loadavg_1m']:.2f}")
    print(f"workload: {w['rounds']} rounds x {w['probes']} probes, prompt ~{w['context']} tokens, {w['gen']} generated, -t {w['threads']}")
    print(f"{'tool':15s} {'ok':>3s} {'CPU-s/1k tok':>13s} {'(min..max)':>16s} {'server/alone':>13s} {'(min..max)':>14s} {'server tok/s':>12s}")
    for tool, v in s["per_tool"].items():
        cs, ss = v["cpu_spread"], v["server_spread"]
        print(f"{tool:15s} {v['runs_ok']:>3d} {C.fmt(v['cpu_s_per_1k_tokens']):>13s} "
              f"{(f'{cs[0]:.3f}..{cs[1]:.3f}' if cs else ''):>16s} {C.fmt(v['server_decode_vs_alone']):>13s} "
              f"{(f'{ss[0]:.3f}..{ss[1]:.3f}' if ss else ''):>14s} {C.fmt(v['server_tps'], 0):>12s}")
        for e in v["errors"]:
            print(f"    error: {e[:300]}")
    for tool, why in doc["skipped"].items():
        print(f"{tool:15s} skipped: {why}")
    for t in ("benchd-daemon", "benchd-probe"):
        if t in s["per_tool"] and s["per_tool"][t]["probe_loop_cpu_s_per_1k_tokens"] is not None:
            print(f"{t}: probe loop alone (no interpreter start/imports) {C.fmt(s['per_tool'][t]['probe_loop_cpu_s_per_1k_tokens'])} CPU-s/1k tok")
    print(f"best peer: {s['best_peer']} {doc['peer_versions'].get(s['best_peer'] or '', '')}")
    for t in ("benchd-daemon", "benchd-probe"):
        key = f"{t}_cpu_ratio_vs_best_peer"
        if key in s:
            print(f"RATIO {t} CPU / best peer = {C.fmt(s[key])} (goal <= {GOAL_CPU_RATIO});"
                  f" server decode / alone = {C.fmt(s['per_tool'][t]['server_decode_vs_alone'])} (goal >= {GOAL_SERVER})")
    print(f"goals met: {s['goals_met']}")


if __name__ == "__main__":
    sys.exit(main())
