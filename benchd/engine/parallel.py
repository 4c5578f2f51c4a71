"""Parallel requests: N simultaneous streams of the probe's shape on a server started for level N
(docs/measuring.md#parallel-requests). Row `probe` = level x PROBE_BASE + batch x level + stream."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from benchd.engine import probe
from benchd.engine.prompts import Prompt
from benchd.engine.rows import Cell, ServerFacts, ServerRun, build_row, decide, model_files, shortfall
from benchd.probe_result import ProbeResult
from benchd.schemas import CooldownRecord, Row
from benchd.sensors.memory.sampler import MemorySampler
from benchd.servers.runtimes.base import ChatSettings, Normalized
from benchd.stats.rows import usable
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
    """(aggregate gen tok/s over the window where every stream generated, its source), or (None, why)."""
    if len(results) < 2:
        return None, "one stream: no aggregate"
    if not all(r.ok for r in results):
        return None, "a stream of the batch failed: no window where all ran"
    window = _common_window(results)
    if isinstance(window, str):
        return None, window
    start, end = window
    inside = sum(1 for r in results for t in r.chunk_times if start < t <= end)
    return inside / (end - start), f"{AGG_SOURCE} ({inside} chunks in {end - start:.3f} s)"


def _common_window(results: Sequence[ProbeResult]) -> tuple[float, float] | str:
    """(start, end) of the time every stream was generating, or why there is none."""
    firsts = [r.first_content for r in results if r.first_content is not None]
    lasts = [r.last_content for r in results if r.last_content is not None]
    if len(firsts) < len(results) or len(lasts) < len(results):
        return "a stream produced no token chunk"
    if min(lasts) <= max(firsts):
        return "the streams did not overlap (served one after another): no window where all ran"
    return max(firsts), min(lasts)


async def run_batch(run: ParallelRun, batch: int, prompts: Sequence[Prompt], gen_tokens: int) -> list[Row]:
    """One batch: `len(prompts)` (= the level) requests sent at once; one row per request."""
    adapter, cand, sweep, server = run.adapter, run.candidate, run.sweep, run.server
    cooldown = await run.cool_down() if run.cool_down is not None else None
    bodies, changed = _bodies(run, prompts, gen_tokens)
    url = server.base_url + adapter.requests.request_path()
    started_at = utcnow()
    facts = ServerFacts.of(server)
    async with MemorySampler(server.pid, run.memory_rate_hz, model_paths=model_files(cand), series=False) as sampler:
        results = await asyncio.gather(*(probe.run(url, b, adapter.requests.request_headers(cand), timeout_s=run.timeout_s)
                                         for b in bodies))
    memory = sampler.result
    agg, agg_note = aggregate(results)
    crashed = server.crashed
    rows = []
    for i, result in enumerate(results):
        norm = adapter.reader.normalize(result, spec_configured=cand.spec is not None)
        extra: dict[str, object] = {"concurrency": run.level, "batch": batch, "agg_gen_tps": agg}
        sources = _batch_sources(run, changed)
        reasons: dict[str, str] = {}
        (sources if agg is not None else reasons)["agg_gen_tps"] = agg_note
        if result.ok:
            extra.update(shortfall(adapter, cand, asked=gen_tokens, norm=norm, finish_reason=result.finish_reason,
                                   run_to_length=sweep.ignore_eos))
        crash = crashed.status if crashed is not None and not result.ok else None
        d = decide(result_status=result.status, error=result.error, crash=crash, during="batch")
        norm = _with_reasons(norm, reasons)
        rows.append(build_row(Cell(run.job, cand, run.context, "parallel", probe_number(run.level, batch, i)),
                              status=d.status, started_at=started_at, server=facts, metrics=norm, memory=memory,
                              cooldown=cooldown if i == 0 else None, error=d.error,
                              log_tail=server.log_tail() if not result.ok else None, extra=extra,
                              extra_sources=sources))
    return rows


def _bodies(run: ParallelRun, prompts: Sequence[Prompt], gen_tokens: int) -> tuple[list[bytes], str | None]:
    """The encoded request bodies, and what the adapter changed in them for parallel serving."""
    adapter, cand, sweep = run.adapter, run.candidate, run.sweep
    bodies, changed, settings = [], None, ChatSettings.of(sweep, gen_tokens)
    for prompt in prompts:
        body = adapter.requests.probe_body(cand, prompt=prompt.text, settings=settings)
        changed = adapter.parallel.parallel_body(body)
        bodies.append(adapter.requests.encode_body(body))
    return bodies, changed


def _batch_sources(run: ParallelRun, changed: str | None) -> dict[str, str]:
    sources = {"concurrency": run.notes, "batch": f"{run.level} simultaneous unique prompts of {run.context} tokens",
               "prompt": f"target {run.context} tokens, unique per request"}
    sources.update(run.slot_facts or {})
    if changed:
        sources["request"] = changed
    if run.serial:
        sources["batching"] = f"not batched: {run.serial}"
    return sources


def _with_reasons(norm: Normalized, reasons: dict[str, str]) -> Normalized:
    """The metrics with more null reasons (build_row keeps those of fields left null)."""
    return dataclasses.replace(norm, null_reasons={**norm.null_reasons, **reasons})


@dataclass(frozen=True)
class LevelSummary:
    """One cell's figures at one level: batch-aggregate and per-request gen tok/s, TTFT p50/p95, memory, counts."""

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
    levels = sorted({r.concurrency for r in rows if r.kind == "parallel" and r.concurrency is not None})
    return {level: _level_summary(level, [r for r in rows if r.kind == "parallel" and r.concurrency == level])
            for level in levels}


def _level_summary(level: int, mine: list[Row]) -> LevelSummary:
    ok = [r for r in mine if usable(r, None)]
    gens, ttfts = _present(ok, "gen_tps"), _present(ok, "ttft_ms")
    mems = [r.mem_peak_bytes for r in mine if r.mem_peak_bytes is not None]
    by_batch = _batch_aggregates(ok)
    return LevelSummary(
        level=level,
        agg_gen_tps=statistics.median(by_batch.values()) if by_batch else None,
        per_request_gen_tps=statistics.median(gens) if gens else None,
        ttft_p50_ms=_quantile(ttfts, 0.5), ttft_p95_ms=_quantile(ttfts, 0.95),
        mem_peak_bytes=max(mems) if mems else None,
        batches=len({r.batch for r in mine}), requests=len(mine), failed=sum(r.status != "ok" for r in mine),
    )


def _present(rows: Sequence[Row], metric: str) -> list[float]:
    return [v for v in (getattr(r, metric) for r in rows) if v is not None]


def _batch_aggregates(ok: Sequence[Row]) -> dict[int, float]:
    """Each batch's aggregate gen tok/s (the last row's, as every row of a batch carries it)."""
    return {r.batch: r.agg_gen_tps for r in ok if r.batch is not None and r.agg_gen_tps is not None}
