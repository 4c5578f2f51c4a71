"""Agent-shaped requests on the tiny models: warm-turn TTFT ÷ cold TTFT per runtime, and aggregate ÷
single-stream gen rate at concurrency 2 and 4.

    .venv/bin/python benchmarks/agentic.py [--turns 6] [--context 1024] [--append 256] [--batches 3] [--json]

Sessions: benchd's session start per runtime (`adapter.sessions.session_start`), one session of `--turns` turns
through `engine.session.run_session`; the cold reference is TTFT of unique prompts of the last turn's
total length on the same server (`probe.run_chat`, nothing of them cached but the template header).
Ratio = median warm-turn TTFT (turns >= 2) ÷ median cold TTFT, side by side in one run.

Parallel: per level a server start of its own (`adapter.parallel.parallel_start`), `--batches` batches through
`engine.parallel.run_batch`; single-stream = level 1 on the cold probes' start, the same prompts' shape.
Ratio = median batch aggregate ÷ median single-stream gen tok/s; also per-request ÷ single.

Prints the load average beside the figures: on a busy machine they are not the engine's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from benchd.config import Config, default_cache_dir
from benchd.engine import parallel, probe, session
from benchd.engine.prompts import PromptBuilder
from benchd.schemas import Candidate, Session, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.server import Server
from benchd.servers.supervisor import Supervisor

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")


def candidate(runtime: str, models: Any) -> Candidate:
    model = models.target if runtime == "llama-server" else models.mlx_dir
    return Candidate(id=f"b-{runtime.split('.')[0].replace('_', '-')}", runtime=runtime, model=str(model),  # type: ignore[arg-type]
                     args=["-t", "1"] if runtime == "llama-server" else [])


async def counter(cand: Candidate, server: Server) -> Any:
    adapter = get_adapter(cand.runtime)
    if await adapter.requests.count_tokens(server.base_url, "x") is None:
        return adapter.requests.local_token_counter(cand)

    async def count(text: str) -> int:
        n = await adapter.requests.count_tokens(server.base_url, text)
        assert n is not None
        return n

    return count


async def start(sup: Supervisor, cand: Candidate, ctx: int | None) -> Server:
    return await sup.start("agentic", cand, ctx)


async def sessions(cand: Candidate, sup: Supervisor, a: argparse.Namespace) -> dict[str, Any]:
    adapter = get_adapter(cand.runtime)
    st = adapter.sessions.session_start(cand)
    total = a.context + a.turns * (a.append + a.gen + 64)
    server = await start(sup, st.candidate, adapter.launcher.server_ctx_size(cand, total, a.gen))
    try:
        count = await counter(cand, server)
        builder = PromptBuilder()
        sw = Sweep(name="agentic", contexts=[a.context], gen_tokens=a.gen, candidates=[cand])
        for w in range(2):  # warm-up: unrecorded, unique
            p = await builder.build(a.context, f"warm/{w}/{uuid.uuid4().hex}", count, key=cand.id)
            await probe.run_chat(adapter, server.base_url, cand, prompt=p.text, settings=ChatSettings(4), timeout_s=300)
        first = await builder.build(a.context, f"agentic/{cand.id}/session", count, key=cand.id)
        rows = await session.run_session(session.SessionRun(
            job="agentic", adapter=adapter, server=server, candidate=cand, context=a.context, sweep=sw,
            plan=Session(turns=a.turns, append_tokens=a.append), timeout_s=300, first_prompt=first,
            sizing="tokenizer", cache_notes=st.notes))
        summary = session.session_summary(rows)
        assert summary is not None and summary.warm_ttft_ms is not None, [r.error for r in rows]
        cold = []
        for i in range(a.cold):
            p = await builder.build(rows[-1].prompt_tokens or a.context, f"cold/{i}/{uuid.uuid4().hex}", count,
                                    key=cand.id)
            r = await probe.run_chat(adapter, server.base_url, cand, prompt=p.text, settings=ChatSettings(4),
                                     timeout_s=300)
            assert r.ok and r.ttft_ms is not None, r.error
            cold.append(r.ttft_ms)
        return {"warm_ttft_ms": summary.warm_ttft_ms, "cold_ttft_ms": statistics.median(cold),
                "ratio": summary.warm_ttft_ms / statistics.median(cold), "reuse": summary.reuse_fraction,
                "misses": summary.misses, "turns": summary.turns, "last_prompt_tokens": rows[-1].prompt_tokens}
    finally:
        await sup.stop(server)


async def levels(cand: Candidate, sup: Supervisor, a: argparse.Namespace) -> dict[str, Any]:
    adapter = get_adapter(cand.runtime)
    out: dict[str, Any] = {}
    sw = Sweep(name="agentic", contexts=[a.context], gen_tokens=a.gen, candidates=[cand])
    single: float | None = None
    for level in (1, 2, 4):
        st = adapter.parallel.parallel_start(cand, level, adapter.launcher.server_ctx_size(cand, a.context, a.gen))
        server = await start(sup, st.candidate if level > 1 else cand,
                             st.ctx_size if level > 1 else adapter.launcher.server_ctx_size(cand, a.context, a.gen))
        try:
            count = await counter(cand, server)
            builder = PromptBuilder()
            run = parallel.ParallelRun(job="agentic", adapter=adapter, server=server, candidate=cand, context=a.context,
                                       sweep=sw, level=level, timeout_s=300, notes=st.notes, serial=st.serial)
            rows = []
            for b in range(a.batches + 1):  # batch 0 warms the start up and is not counted
                prompts = [await builder.build(a.context, f"par/{level}/{b}/{i}/{uuid.uuid4().hex}", count, key=cand.id)
                           for i in range(level)]
                got = await parallel.run_batch(run, b, prompts, a.gen)
                rows += got if b else []
            assert all(r.status == "ok" for r in rows), [r.error for r in rows]
            gens = [r.gen_tps for r in rows if r.gen_tps is not None]
            if level == 1:
                single = statistics.median(gens)
                out["single_gen_tps"] = single
                continue
            s = parallel.parallel_summary(rows)[level]
            assert single is not None
            out[f"x{level}"] = {"agg_gen_tps": s.agg_gen_tps, "per_request_gen_tps": s.per_request_gen_tps,
                                "agg_over_single": s.agg_gen_tps / single if s.agg_gen_tps else None,
                                "per_request_over_single": (s.per_request_gen_tps or 0) / single,
                                "ttft_p50_ms": s.ttft_p50_ms, "ttft_p95_ms": s.ttft_p95_ms,
                                "mem_peak_mib": (s.mem_peak_bytes or 0) / (1 << 20)}
        finally:
            await sup.stop(server)
    return out


async def main(a: argparse.Namespace) -> dict[str, Any]:
    from benchctl.tinymodels import ensure

    cache = default_cache_dir()
    models = ensure(cache, "small", 0)
    out: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as state:
        sup = Supervisor(Config.resolve(state_dir=Path(state), cache_dir=cache), grace_s=1.5)
        try:
            for runtime in RUNTIMES:
                cand = candidate(runtime, models)
                out[runtime] = {"session": await sessions(cand, sup, a), "parallel": await levels(cand, sup, a)}
        finally:
            await sup.stop_all()
    out["loadavg_after"] = os.getloadavg()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--append", type=int, default=256)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = asyncio.run(main(args))
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.exit(0)
    print(f"load average before {res['loadavg_before']}, after {res['loadavg_after']}")
    for rt in RUNTIMES:
        s, p = res[rt]["session"], res[rt]["parallel"]
        print(f"{rt}: warm-turn TTFT {s['warm_ttft_ms']:.1f} ms / cold {s['cold_ttft_ms']:.1f} ms = {s['ratio']:.3f} "
              f"(reuse {s['reuse']:.0%}, misses {s['misses']} of {s['turns'] - 1}, last prompt {s['last_prompt_tokens']})")
        for lv in ("x2", "x4"):
            q = p[lv]
            agg = "null" if q["agg_over_single"] is None else f"{q['agg_over_single']:.2f}"
            print(f"  {lv}: aggregate / single {agg}, per request / single {q['per_request_over_single']:.2f}, "
                  f"TTFT p50 {q['ttft_p50_ms']:.0f} ms p95 {q['ttft_p95_ms']:.0f} ms, peak {q['mem_peak_mib']:.0f} MiB")
