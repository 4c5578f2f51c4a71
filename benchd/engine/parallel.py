"""Parallel requests: N simultaneous streams of the probe's shape on a server started for level N.

Row numbers: `probe` = level x PROBE_BASE + batch x level + stream, unique per (candidate, context).

Reasons and facts: docs/measuring.md#parallel-requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from benchd.engine import probe
from benchd.engine.prompts import Prompt
from benchd.engine.rows import Cell, ServerFacts, ServerRun, build_row, model_files, shortfall
from benchd.probe_result import ProbeResult
from benchd.schemas import CooldownRecord, Row
from benchd.sensors.memory.sampler import MemorySampler
from benchd.servers.runtimes.base import Normalized
from benchd.store import utcnow

PROBE_BASE = 100_000
AGG_SOURCE = "client: token chunks of all streams inside the window where all ran / the window"


def probe_number(level: int, batch: int, stream: int) -> int:
    return level * PROBE_BASE + batch * level + stream


@dataclass
class ParallelRun(ServerRun):
    """One level on its server: what every batch needs."""

    level: int
    timeout_s: float
    notes: str
    serial: str | None = None
    slot_facts: dict[str, str] | None = None
    cool_down: Callable[[], Awaitable[CooldownRecord]] | None = None
    memory_rate_hz: float = 10.0


def aggregate(results: Sequence[ProbeResult]) -> tuple[float | None, str]:
    """(aggregate gen tok/s over the window where every stream was generating, its source), or
    (None, why there is none)."""
    if len(results) < 2:
        return None, "one stream: no aggregate"
    if not all(r.ok for r in results):
        return None, "a stream of the batch failed: no window where all ran"
    firsts = [r.first_content for r in results]
    lasts = [r.last_content for r in results]
    if any(t is None for t in firsts) or any(t is None for t in lasts):
        return None, "a stream produced no token chunk"
    start = max(t for t in firsts if t is not None)
    end = min(t for t in lasts if t is not None)
    if end <= start:
        return None, "the streams did not overlap (served one after another): no window where all ran"
    inside = sum(1 for r in results for t in r.chunk_times if start < t <= end)
    return inside / (end - start), f"{AGG_SOURCE} ({inside} chunks in {end - start:.3f} s)"


async def run_batch(run: ParallelRun, batch: int, prompts: Sequence[Prompt], gen_tokens: int) -> list[Row]:
    """One batch: `len(prompts)` (= the level) requests sent at once; one row per request."""
    adapter, cand, sweep, server = run.adapter, run.candidate, run.sweep, run.server
    cooldown = await run.cool_down() if run.cool_down is not None else None
    bodies, changed = [], None
    for prompt in prompts:
        body = adapter.requests.request_body(model=adapter.requests.request_model(cand), prompt=prompt.text, max_tokens=gen_tokens,
                                    sampling=sweep.sampling, thinking=sweep.thinking)
        body.update(adapter.requests.length_fields(cand, sweep.ignore_eos))
        changed = adapter.parallel.parallel_body(body)
        bodies.append(adapter.requests.encode_body(body))
    url = server.base_url + adapter.requests.request_path()
    started_at = utcnow()
    facts = ServerFacts.of(server)
    sampler = MemorySampler(server.pid, run.memory_rate_hz, model_paths=model_files(cand), series=False)
    sampler.reset_peak()
    await sampler.start()
    try:
        results = await asyncio.gather(*(probe.run(url, b, adapter.requests.request_headers(cand), timeout_s=run.timeout_s)
                                         for b in bodies))
    finally:
        memory = await sampler.stop()
    agg, agg_note = aggregate(results)
    crashed = server.crashed
    rows = []
    for i, result in enumerate(results):
        norm = adapter.reader.normalize(result, spec_configured=cand.spec is not None)
        extra: dict[str, object] = {"concurrency": run.level, "batch": batch, "agg_gen_tps": agg}
        sources = {"concurrency": run.notes, "batch": f"{run.level} simultaneous unique prompts of {run.context} tokens",
                   "prompt": f"target {run.context} tokens, unique per request"}
        sources.update(run.slot_facts or {})
        if changed:
            sources["request"] = changed
        if run.serial:
            sources["batching"] = f"not batched: {run.serial}"
        reasons: dict[str, str] = {}
        if agg is not None:
            sources["agg_gen_tps"] = agg_note
        else:
            reasons["agg_gen_tps"] = agg_note
        if result.ok:
            extra.update(shortfall(adapter, cand, asked=gen_tokens, norm=norm, finish_reason=result.finish_reason,
                                   run_to_length=sweep.ignore_eos))
        error = result.error
        if crashed is not None and not result.ok:
            error = f"server crashed mid-batch ({crashed.status}): {error}"
        norm = _with_reasons(norm, reasons)
        rows.append(build_row(Cell(run.job, cand, run.context, "parallel", probe_number(run.level, batch, i)),
                              status=result.status, started_at=started_at, server=facts, metrics=norm, memory=memory,
                              cooldown=cooldown if i == 0 else None, error=error,
                              log_tail=server.log_tail() if not result.ok else None, extra=extra,
                              extra_sources=sources))
    return rows


def _with_reasons(norm: Normalized, reasons: dict[str, str]) -> Normalized:
    """The metrics with more null reasons (build_row keeps those of fields left null)."""
    return dataclasses.replace(norm, null_reasons={**norm.null_reasons, **reasons})


# ------------------------------------------------------------------------------------------ summary


@dataclass(frozen=True)
class LevelSummary:
    """One cell's figures at one level: the median over batches of the aggregate gen tok/s, the median
    per-request gen tok/s, TTFT p50 / p95 over the requests, the peak memory, and the counts."""

    level: int
    agg_gen_tps: float | None
    per_request_gen_tps: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    mem_peak_bytes: int | None
    batches: int
    requests: int
    failed: int


def _quantile(xs: Sequence[float], q: float) -> float | None:
    """Nearest-rank quantile (p95 of a handful of requests is their maximum, said as such)."""
    if not xs:
        return None
    s = sorted(xs)
    rank = max(1, -(-len(s) * q // 1))
    return s[int(rank) - 1]


def parallel_summary(rows: Sequence[Row]) -> dict[int, LevelSummary]:
    """Per level, the summary of one cell's parallel rows."""
    out: dict[int, LevelSummary] = {}
    levels = sorted({r.concurrency for r in rows if r.kind == "parallel" and r.concurrency is not None})
    for level in levels:
        mine = [r for r in rows if r.kind == "parallel" and r.concurrency == level]
        ok = [r for r in mine if r.status == "ok" and not r.short]
        by_batch: dict[int, float] = {}
        for r in ok:
            if r.batch is not None and r.agg_gen_tps is not None:
                by_batch[r.batch] = r.agg_gen_tps
        gens = [r.gen_tps for r in ok if r.gen_tps is not None]
        ttfts = [r.ttft_ms for r in ok if r.ttft_ms is not None]
        mems = [r.mem_peak_bytes for r in mine if r.mem_peak_bytes is not None]
        out[level] = LevelSummary(
            level=level,
            agg_gen_tps=statistics.median(by_batch.values()) if by_batch else None,
            per_request_gen_tps=statistics.median(gens) if gens else None,
            ttft_p50_ms=_quantile(ttfts, 0.5), ttft_p95_ms=_quantile(ttfts, 0.95),
            mem_peak_bytes=max(mems) if mems else None,
            batches=len({r.batch for r in mine}), requests=len(mine), failed=sum(1 for r in mine if r.status != "ok"),
        )
    return out
