"""Parallel requests on the REAL servers: a level-2 start (llama-server `-np 2` with `-c` = 2 x one
request's context; mlx_lm.server `--decode-concurrency 2`, no seed in the requests; mlx_vlm.server
`--max-num-seqs 2` on its continuous batch, the seed kept: it seeds per row) and batches of
two simultaneous streams through `parallel.run_batch`: two rows per batch with their batch ids,
overlapping stream windows, the aggregate and per-request rates both present with their sources, and
the level's summary computed from the rows."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from testlib import loopback_app

from benchd.config import Config
from benchd.engine import parallel
from benchd.engine.prompts import PromptBuilder
from benchd.schemas import Candidate, Row, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.server import Server
from benchd.servers.supervisor import Supervisor

pytestmark = [pytest.mark.slow]

CONTEXT, GEN = 256, 256


def candidate(runtime: str, models: Any) -> Candidate:
    model = models.target if runtime == "llama-server" else models.mlx_dir
    args = ["-t", "1"] if runtime == "llama-server" else []
    return Candidate(id=f"p-{runtime.split('.')[0].replace('_', '-')}", runtime=runtime, model=str(model), args=args)


@contextlib.asynccontextmanager
async def level_server(cand: Candidate, level: int, state: Path, cache_dir: Path) -> AsyncIterator[tuple[Server, Any]]:
    adapter = get_adapter(cand.runtime)
    start = adapter.parallel.parallel_start(cand, level, adapter.launcher.server_ctx_size(cand, CONTEXT, GEN))
    sup = Supervisor(Config.resolve(state_dir=state, cache_dir=cache_dir), grace_s=1.5)
    server = await sup.start("parallel", start.candidate, start.ctx_size)
    try:
        yield server, start
    finally:
        await sup.stop_all()


async def batches(cand: Candidate, server: Server, start: Any, level: int, n: int) -> list[Row]:
    adapter = get_adapter(cand.runtime)
    sw = Sweep(name="parallel", contexts=[CONTEXT], gen_tokens=GEN, candidates=[cand])
    run = parallel.ParallelRun(job="parallel", adapter=adapter, server=server, candidate=cand, context=CONTEXT,
                               sweep=sw, level=level, timeout_s=300.0, notes=start.notes, serial=start.serial,
                               slot_facts=await adapter.parallel.slot_facts(server.base_url))
    if await adapter.requests.count_tokens(server.base_url, "x") is not None:
        async def counter(text: str) -> int:
            n = await adapter.requests.count_tokens(server.base_url, text)
            assert n is not None
            return n
    else:
        counter = adapter.requests.local_token_counter(cand)
    builder = PromptBuilder()
    rows: list[Row] = []
    for b in range(n):
        prompts = [await builder.build(CONTEXT, f"parallel/{cand.id}/{CONTEXT}/{b}-{i}-{uuid.uuid4().hex[:6]}",
                                       counter, key=cand.id) for i in range(level)]
        rows += await parallel.run_batch(run, b, prompts, GEN)
    return rows


@pytest.mark.parametrize("runtime", ["llama-server", "mlx_lm.server", "mlx_vlm.server"])
def test_level_two_rows_per_request(runtime: str, tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    cand = candidate(runtime, tiny_models)

    async def go() -> tuple[list[Row], Any]:
        async with level_server(cand, 2, tmp_path, cache_dir) as (server, start):
            return await batches(cand, server, start, 2, 3), start

    rows, start = asyncio.run(go())
    assert start.serial is None
    assert len(rows) == 6 and all(r.status == "ok" and r.kind == "parallel" for r in rows), [r.error for r in rows]
    assert [(r.batch, r.concurrency) for r in rows] == [(b, 2) for b in (0, 0, 1, 1, 2, 2)]
    assert len({r.probe for r in rows}) == 6
    overlapped = 0
    for b in (0, 1, 2):
        pair = [r for r in rows if r.batch == b]
        assert pair[0].agg_gen_tps == pair[1].agg_gen_tps  # one figure per batch
        if pair[0].agg_gen_tps is None:  # a loaded client (or the runtime) let one stream finish first: said so
            assert "did not overlap" in pair[0].null_reasons["agg_gen_tps"]
            continue
        overlapped += 1
        # both were generating at once: each stream's first token came before the other's end
        assert max(r.ttft_ms or 0 for r in pair) < min(r.e2e_ms or 0 for r in pair)
        assert pair[0].sources["agg_gen_tps"].startswith(parallel.AGG_SOURCE)
    assert overlapped >= 1
    for r in rows:
        assert r.gen_tps is not None and "gen_tps" in r.sources
        assert r.mem_peak_bytes is not None and "concurrency" in r.sources
    if runtime == "llama-server":
        assert "-np 2" in rows[0].sources["concurrency"]
        slot = int(rows[0].sources["slot_n_ctx"].split()[0])
        assert slot >= CONTEXT + GEN  # each slot holds one request
        assert rows[0].sources["slots"].startswith("2 ")
    elif runtime == "mlx_lm.server":
        assert "no seed sent" in rows[0].sources["request"] and "greedy" in rows[0].sources["request"]
    else:
        assert "continuous batching, --max-num-seqs 2" in rows[0].sources["concurrency"]
        assert "request" not in rows[0].sources and "batching" not in rows[0].sources
    summary = parallel.parallel_summary(rows)[2]
    assert summary.batches == 3 and summary.requests == 6 and summary.failed == 0
    assert summary.agg_gen_tps is not None and summary.per_request_gen_tps is not None
    assert summary.ttft_p50_ms is not None and summary.ttft_p95_ms is not None
    assert summary.ttft_p50_ms <= summary.ttft_p95_ms


@contextlib.asynccontextmanager
async def dropping_proxy(upstream: str) -> AsyncIterator[str]:
    """A test double in front of the real server: forwards every request, but cuts the second stream
    halfway through its first read (a real server cannot be made to drop one of two streams on demand)."""
    from aiohttp import ClientSession, TCPConnector, web

    seen = 0

    async def forward(request: web.Request) -> web.StreamResponse:
        nonlocal seen
        seen += 1
        mine = seen
        body = await request.read()
        async with ClientSession(connector=TCPConnector(force_close=True)) as s, \
                s.post(upstream + request.path, data=body, headers={"Content-Type": "application/json"}) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            async for data in up.content.iter_any():
                if mine == 2:
                    await resp.write(data[: len(data) // 2])
                    assert request.transport is not None
                    request.transport.close()  # the connection drops mid-stream
                    return resp
                await resp.write(data)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", forward)
    async with loopback_app(app) as url:
        yield url


def test_a_dropped_stream_fails_its_row_and_the_other_stands(tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    import dataclasses

    cand = candidate("llama-server", tiny_models)

    async def go() -> list[Row]:
        async with level_server(cand, 2, tmp_path, cache_dir) as (server, start), \
                dropping_proxy(server.base_url) as proxied:
            return await batches(cand, dataclasses.replace(server, base_url=proxied), start, 2, 1)

    rows = asyncio.run(go())
    assert len(rows) == 2 and sorted(r.status for r in rows) == ["failed", "ok"], [r.error for r in rows]
    failed = next(r for r in rows if r.status == "failed")
    assert failed.error is not None and "stream closed early" in failed.error
    ok = next(r for r in rows if r.status == "ok")
    assert ok.gen_tps is not None and ok.batch == failed.batch == 0
    assert ok.agg_gen_tps is None and "a stream of the batch failed" in ok.null_reasons["agg_gen_tps"]
