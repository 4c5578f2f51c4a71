"""The session and parallel-request visits of one candidate, on server starts of their own
(docs/measuring.md#session-and-parallel-visits); `benchd.engine.tail.VisitHost` implements `Host`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from benchd.engine import parallel, session
from benchd.engine.prompts import Prompt
from benchd.engine.rows import Cell, ServerFacts, failed_row
from benchd.schemas import Candidate, CooldownRecord, Row, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS, RuntimeAdapter, SessionStart
from benchd.servers.server import Server
from benchd.store import utcnow


class Host(Protocol):
    """What the visits need from the engine."""

    job: str
    sweep: Sweep
    timeout_s: float
    memory_rate_hz: float

    def rows(self, cand: str, context: int, kind: str) -> list[Row]:
        """The rows stored for (candidate, context, kind)."""
        ...

    def commit(self, row: Row) -> None: ...

    def emit(self, type_: str, **payload: object) -> None: ...

    async def start(self, cand: Candidate, ctx_size: int | None, context: int) -> Server | str:
        """A ready, warmed server for `cand` with prompts sized for `context`, or why it never got ready."""
        ...

    async def stop(self, server: Server) -> None: ...

    async def cool_down(self, cand: Candidate, context: int, kind: str, probe: int) -> CooldownRecord: ...

    async def prompt(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int,
                     tag: str) -> tuple[Prompt, str]:
        """A unique prompt of `context` tokens and how it was sized."""
        ...


def _failed(host: Host, cand: Candidate, context: int, kind: str, probes: list[int], error: str,
            extra: Mapping[str, object]) -> None:
    for p in probes:
        host.commit(failed_row(Cell(host.job, cand, context, kind, p), error,  # type: ignore[arg-type]
                               started_at=utcnow(), server=ServerFacts(None, None, None),
                               extra={**extra, **({"turn": p} if kind == "session" else {})}))


async def sessions(host: Host, cand: Candidate) -> None:
    """One session per context of the grid (skipped when its rows are stored)."""
    plan = host.sweep.session
    if plan.turns == 0:
        return
    adapter = get_adapter(cand.runtime)
    start = adapter.sessions.session_start(cand)
    for context in host.sweep.contexts:
        if len({r.probe for r in host.rows(cand.id, context, "session")}) >= plan.turns:
            continue
        rows = await _one_session(host, adapter, start, cand, context)
        restarted = None
        if rows and rows[0].status != "ok" and "crashed" in (rows[0].error or ""):
            restarted = rows[0].error
            rows = await _one_session(host, adapter, start, cand, context)  # once more, from turn 1
        for row in rows:
            host.commit(row)
        host.emit("session_finished", candidate=cand.id, context=context, **_session_figures(rows),
                  restarted_after=restarted)


def _session_figures(rows: list[Row]) -> dict[str, object]:
    """The `session_finished` event's figures and status."""
    summary = session.session_summary(rows)
    return {"warm_ttft_ms": summary.warm_ttft_ms if summary else None,
            "reuse_fraction": summary.reuse_fraction if summary else None,
            "misses": summary.misses if summary else None, "status": rows[0].status if rows else "failed"}


async def _one_session(host: Host, adapter: RuntimeAdapter, start: SessionStart, cand: Candidate, context: int) -> list[Row]:
    plan = host.sweep.session
    gen = host.sweep.session_gen_tokens()
    ctx = adapter.launcher.server_ctx_size(cand, context + plan.turns * (plan.append_tokens + gen + 64), gen)
    server = await host.start(start.candidate, ctx, context)
    if isinstance(server, str):
        return _unstarted(host, cand, context, ctx, f"session server never became ready: {server}")
    need = context + plan.turns * (plan.append_tokens + gen + 64) + gen + CTX_MARGIN_TOKENS
    slot = server.external.slot_ctx if server.external is not None else None
    if slot is not None and need > slot:
        await host.stop(server)
        return _unstarted(host, cand, context, ctx, "context too large for the external server: the session "
                          f"needs about {need} tokens, one slot holds {slot}")
    try:
        prompt, sizing = await host.prompt(adapter, server, cand, context, f"{host.job}/{cand.id}/{context}/session")
        run = session.SessionRun(
            job=host.job, adapter=adapter, server=server, candidate=cand, context=context, sweep=host.sweep,
            plan=plan, timeout_s=host.timeout_s, first_prompt=prompt, sizing=sizing, cache_notes=start.notes,
            cool_down=lambda: host.cool_down(cand, context, "session", 1), memory_rate_hz=host.memory_rate_hz,
            on_turn=lambda t: host.emit("session_turn", candidate=cand.id, context=context, turn=t.number,
                                        ttft_ms=t.result.ttft_ms, cached_tokens=t.norm.cached_tokens))
        return await session.run_session(run)
    except Exception as exc:  # the server went away while sizing: the session fails as a whole
        return session.failed_rows(host.job, cand, context, plan.turns, server, 0, f"{type(exc).__name__}: {exc}")
    finally:
        await host.stop(server)


def _unstarted(host: Host, cand: Candidate, context: int, ctx: int | None, why: str) -> list[Row]:
    """A session's failed rows when its server did not start or cannot hold it."""
    return [failed_row(Cell(host.job, cand, context, "session", p), why, started_at=utcnow(),
                       server=ServerFacts(ctx, None, None), extra={"turn": p})
            for p in range(1, host.sweep.session.turns + 1)]


def _cooldown(host: Host, cand: Candidate, context: int, probe: int) -> Callable[[], Awaitable[CooldownRecord]]:
    return lambda: host.cool_down(cand, context, "parallel", probe)


async def levels(host: Host, cand: Candidate) -> None:
    """Per concurrency level N > 1 and context: one start, the sweep's count of batches of N requests."""
    sweep = host.sweep
    adapter = get_adapter(cand.runtime)
    batches = sweep.probe_plan().min
    for level in sweep.parallel_levels():
        for context in sweep.contexts:
            stored = {r.probe for r in host.rows(cand.id, context, "parallel")}
            todo = [b for b in range(batches)
                    if not all(parallel.probe_number(level, b, i) in stored for i in range(level))]
            if todo:
                await _level(host, adapter, cand, level, context, todo)


async def _level(host: Host, adapter: RuntimeAdapter, cand: Candidate, level: int, context: int,
                 todo: list[int]) -> None:
    """One level at one context on a server of its own: the batches `todo`, then `level_finished`."""
    sweep = host.sweep
    start = adapter.parallel.parallel_start(cand, level, adapter.launcher.server_ctx_size(cand, context, sweep.gen_tokens))
    server = await host.start(start.candidate, start.ctx_size, context)
    if isinstance(server, str):
        _failed(host, cand, context, "parallel",
                [parallel.probe_number(level, b, i) for b in todo for i in range(level)],
                f"concurrency-{level} server never became ready: {server}",
                {"concurrency": level})
        return
    try:
        run = parallel.ParallelRun(
            job=host.job, adapter=adapter, server=server, candidate=cand, context=context, sweep=sweep,
            level=level, timeout_s=host.timeout_s, notes=start.notes, serial=start.serial,
            slot_facts=await adapter.parallel.slot_facts(server.base_url), memory_rate_hz=host.memory_rate_hz)
        for b in todo:
            if not server.running:
                break
            prompts = [(await host.prompt(adapter, server, cand, context,
                                          f"{host.job}/{cand.id}/{context}/parallel{level}-{b}-{i}"))[0]
                       for i in range(level)]
            run.cool_down = _cooldown(host, cand, context, parallel.probe_number(level, b, 0))
            for row in await parallel.run_batch(run, b, prompts, sweep.gen_tokens):
                host.commit(row)
        _level_finished(host, cand, context, level)
    finally:
        await host.stop(server)


def _level_finished(host: Host, cand: Candidate, context: int, level: int) -> None:
    summary = parallel.parallel_summary([r for r in host.rows(cand.id, context, "parallel") if r.concurrency == level])
    host.emit("level_finished", candidate=cand.id, context=context, concurrency=level,
              agg_gen_tps=summary[level].agg_gen_tps if level in summary else None)
