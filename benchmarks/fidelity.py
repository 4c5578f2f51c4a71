"""Fidelity: does benchd's client-side generation rate agree with what the server says it did?

    .venv/bin/python benchmarks/fidelity.py [--probes 15] [--gen 64,256] [--runtimes llama-server,mlx_vlm.server] [--json]

Per probe: benchd's row value `gen_tps_client` (the stream window, `(completion_tokens - 1) / (last -
first content chunk)`, exactly as the engine computes it via the adapter's `normalize`) ÷ the server's
own `timings.predicted_per_second` (the row's `gen_tps`). Median and spread per runtime and gen length.

Servers are started by benchd's own `Supervisor` (same argv as a sweep: llama-server `-t 1`, the tiny
"small" GGUF; mlx_vlm.server on the tiny MLX dir) and probed through benchd's probe path in this process
(`PromptBuilder` + `probe.run_chat` + `adapter.reader.normalize`).

Where systematic offsets come from (checked in the servers' source and measured here):
- Which tokens count. llama.cpp b1-0c1e570 (`server-common.h`, `n_gen_tps`) reports
  `(n_gen - 1) / (t_gen_last - t_prompt_last)`: the first token is free (it comes from the prompt
  batch). benchd's window also counts N-1 tokens over N-1 intervals. Counting the first token
  (`n / window`, column `1st-counted`) would inflate by N/(N-1): +1.6 % at 64 tokens, +0.4 % at 256.
  mlx_vlm 0.7.10 has several code paths (`generate/dispatch.py` counts n+1 tokens after the first;
  `server/schemas.py` derives `(len(token_times) - 1) / elapsed`); measured, its figure matches the
  N-1 definition within the noise.
- Coalesced reads. A busy client reads several SSE chunks at once and they share one timestamp; when
  that happens to the FIRST content chunk the window shrinks and the rate inflates (column `classic`:
  first-to-last chunk, benchd's old definition; outliers of 1.2-1.4x on this loaded machine). benchd
  now times from the end of the first read to the end of the second-to-last read
  (`ProbeResult.gen_tps_client`), both points fresh while the server is producing.
Column `arrivals/chunk`: the share of content chunks that arrived in a socket read of their own.

Exit 0 when every (runtime, gen) median ratio is within 1.00 ± 0.01.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from benchd.config import Config
from benchd.engine import probe
from benchd.engine.prompts import PromptBuilder
from benchd.probe_result import read_ends
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.supervisor import Supervisor

GOAL = 0.01


def candidate(runtime: str, models: Any) -> Candidate:
    if runtime == "llama-server":
        return Candidate(id="fid-llama", runtime="llama-server", model=str(models.target), args=["-t", "1"])
    return Candidate(id="fid-vlm", runtime="mlx_vlm.server", model=str(models.mlx_dir))


async def measure(runtime: str, gens: list[int], probes: int, context: int, models: Any, state: Path) -> list[dict[str, Any]]:
    config = Config.resolve(state_dir=state)
    sup = Supervisor(config, grace_s=1.5)
    cand = candidate(runtime, models)
    adapter = get_adapter(runtime)
    ctx = adapter.launcher.server_ctx_size(cand, context, max(gens))
    server = await sup.start("fidelity", cand, ctx)
    rows: list[dict[str, Any]] = []
    try:
        builder = PromptBuilder()
        count = None
        if await adapter.requests.count_tokens(server.base_url, "hello") is not None:
            async def count(text: str) -> int:
                n = await adapter.requests.count_tokens(server.base_url, text)
                assert n is not None
                return n
        i = 0
        for _ in range(2):  # warm-up (also calibrates prompts without a tokenizer)
            p = await builder.build(context, f"fid/{cand.id}/{context}/w{i}", count, key=cand.id)
            r = await probe.run_chat(adapter, server.base_url, cand, prompt=p.text, settings=ChatSettings(16),
                                     timeout_s=300)
            n = adapter.reader.normalize(r, spec_configured=False)
            if n.prompt_tokens:
                builder.observe(p, n.prompt_tokens)
            i += 1
        for rnd in range(probes):
            for gen in gens:  # interleaved, so both lengths see the same machine
                p = await builder.build(context, f"fid/{cand.id}/{context}/{rnd}-{gen}", count, key=cand.id)
                r = await probe.run_chat(adapter, server.base_url, cand, prompt=p.text, settings=ChatSettings(gen),
                                         timeout_s=300)
                if not r.ok:
                    rows.append({"gen": gen, "error": r.error})
                    continue
                norm = adapter.reader.normalize(r, spec_configured=False)
                if norm.prompt_tokens:
                    builder.observe(p, norm.prompt_tokens)
                ntok = norm.gen_tokens or 0
                rows.append({
                    "gen": gen, "tokens": ntok, "client": norm.gen_tps_client, "server": norm.gen_tps,
                    "chunks": r.content_chunks, "arrivals": r.arrivals,
                    "client_from_2nd_read": from_second_read(r.chunk_times, ntok),
                    "client_classic": ((ntok - 1) / (r.last_content - r.first_content))
                    if r.last_content and r.first_content and r.last_content > r.first_content else None,
                    "client_first_counted": (ntok / (r.last_content - r.first_content))
                    if r.last_content and r.first_content and r.last_content > r.first_content else None,
                })
    finally:
        await sup.stop_all()
    return rows


def from_second_read(times: list[float], tokens: int) -> float | None:
    """Diagnostic: the window from the end of the SECOND read to the end of the second-to-last read,
    i.e. without the first chunk's delivery latency (headers + the HTTP thread's first wake-up)."""
    ends = read_ends(times)
    if len(ends) < 4 or tokens < 2:
        return None
    (t0, c0), (t1, c1) = ends[1], ends[-2]
    return (c1 - c0) / (t1 - t0) * (tokens - 1) / (len(times) - 1) if t1 > t0 else None


def stats(xs: list[float]) -> dict[str, Any]:
    xs = sorted(xs)
    if not xs:
        return {"n": 0, "median": None}
    q = statistics.quantiles(xs, n=4) if len(xs) >= 4 else [xs[0], statistics.median(xs), xs[-1]]
    return {"n": len(xs), "median": statistics.median(xs), "p25": q[0], "p75": q[2], "min": xs[0], "max": xs[-1]}


def summarize(runtime: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for gen in sorted({r["gen"] for r in rows}):
        ok = [r for r in rows if r["gen"] == gen and r.get("client") and r.get("server")]
        raw = [r["client"] / r["server"] for r in ok]
        classic = [r["client_classic"] / r["server"] for r in ok if r.get("client_classic")]
        first = [r["client_first_counted"] / r["server"] for r in ok if r.get("client_first_counted")]
        second = [r["client_from_2nd_read"] / r["server"] for r in ok if r.get("client_from_2nd_read")]
        arr = [r["arrivals"] / r["chunks"] for r in ok if r["chunks"]]
        out.append({"runtime": runtime, "gen": gen, "errors": [r["error"] for r in rows if r["gen"] == gen and "error" in r][:2],
                    "ratio": stats(raw), "ratio_classic_first_to_last_chunk": stats(classic),
                    "ratio_if_first_token_counted": stats(first), "ratio_from_2nd_read": stats(second), "arrivals_per_chunk": stats(arr)})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probes", type=int, default=15)
    p.add_argument("--gen", default="64,256")
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--runtimes", default="llama-server,mlx_vlm.server")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    gens = [int(x) for x in a.gen.split(",")]
    models = C.tiny("small")
    results: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="benchd-fid-") as tmp:
        for runtime in [x.strip() for x in a.runtimes.split(",") if x.strip()]:
            try:
                rows = asyncio.run(measure(runtime, gens, a.probes, a.context, models, Path(tmp) / runtime))
            except Exception as exc:  # a runtime that cannot start is reported, the other still runs
                skipped[runtime] = f"{type(exc).__name__}: {exc}"[:500]
                continue
            raw[runtime] = rows
            results += summarize(runtime, rows)
    ok = bool(results) and all(r["ratio"]["median"] is not None and abs(r["ratio"]["median"] - 1) <= GOAL
                               for r in results)
    doc = {"machine": C.machine(), "probes": a.probes, "context": a.context, "results": results,
           "skipped": skipped, "goal": f"1.00 +/- {GOAL}", "goal_met": ok, "raw": raw}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0 if ok else 1
    m = doc["machine"]
    print(f"fidelity  {m['date_utc']} UTC  {m['cores_logical']} cores  load {m['loadavg_1m']:.2f}  "
          f"{a.probes} probes per (runtime, gen), prompt ~{a.context} tokens")
    print(f"{'runtime':16s} {'gen':>4s} {'median':>7s} {'[p25..p75]':>16s} {'[min..max]':>16s} "
          f"{'| classic median':>15s} {'[min..max]':>16s} {'1st-counted':>11s} {'from-2nd-read':>13s} {'arrivals/chunk':>14s}")
    for r in results:
        s, c, f, ar = r["ratio"], r["ratio_classic_first_to_last_chunk"], r["ratio_if_first_token_counted"], r["arrivals_per_chunk"]
        if not s["n"]:
            print(f"{r['runtime']:16s} {r['gen']:>4d} no ok probes: {r['errors']}")
            continue
        print(f"{r['runtime']:16s} {r['gen']:>4d} {s['median']:>7.4f} {s['p25']:>7.4f}..{s['p75']:<7.4f} "
              f"{s['min']:>7.4f}..{s['max']:<7.4f} {C.fmt(c['median'], 4):>15s} {C.fmt(c.get('min'), 4):>7s}..{C.fmt(c.get('max'), 4):<7s} "
              f"{C.fmt(f['median'], 4):>11s} {C.fmt(r['ratio_from_2nd_read']['median'], 4):>13s} {C.fmt(ar['median'], 2):>14s}")
    for k, v in skipped.items():
        print(f"{k}: skipped: {v}")
    print(f"goal: median within 1.00 +/- {GOAL}: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
