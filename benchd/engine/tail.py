"""A candidate's work after its cold probes (image probes, sustained run, evals, sessions, levels, time to
ready), and the drift sentinel after the sweep (docs/architecture.md#the-sweep-engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from benchd.engine import cooldown as cooldown_mod
from benchd.engine import visits
from benchd.engine.cells import Cells
from benchd.engine.evalvisit import EvalVisits
from benchd.engine.groups import Group, plan_groups
from benchd.engine.pool import ServerPool
from benchd.engine.prompts import Prompt
from benchd.engine.recorder import Recorder
from benchd.engine.rows import Cell, Placement
from benchd.engine.runner import ProbeRunner
from benchd.engine.sizing import PromptSizer
from benchd.schemas import Candidate, CooldownRecord, Row, Sweep
from benchd.schemas.events import ServerReady
from benchd.sensors.thermal.sensor import ThermalSensor
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import RuntimeAdapter
from benchd.servers.server import Server

SUSTAINED = Placement(None, None, "sustained generation: outside the rounds")
SENTINEL = Placement(None, None, "drift sentinel: the first cell again after the sweep, outside the rounds")


class Tail:
    """Per candidate, `run` after its cells' rounds; `sentinel` once, after every candidate's tail."""

    def __init__(self, job: str, sweep: Sweep, cells: Cells, pool: ServerPool, runner: ProbeRunner,
                 recorder: Recorder, evals: EvalVisits, host: visits.Host) -> None:
        self.job, self.sweep, self.cells, self.pool, self.runner = job, sweep, cells, pool, runner
        self.recorder, self.evals, self.host = recorder, evals, host
        self.book = cells.book

    async def run(self, cand: Candidate) -> None:
        groups = self.cells.groups(cand)
        await self.pool.release_others(cand.id)
        await self.vision_starts(cand, groups)
        if groups and self.has_work(cand, groups[-1]):
            await self.last_start(cand, groups[-1])
        await self.pool.release(cand.id)
        await visits.sessions(self.host, cand)
        await visits.levels(self.host, cand)
        if groups and self.sweep.ready.starts and not cand.external:  # benchd does not start an external server
            await self.ready_starts(cand, groups[0])

    async def vision_starts(self, cand: Candidate, groups: list[Group]) -> None:
        """The image probes still pending, on each server start that serves them."""
        for vg in [x for x in groups if x.vision]:
            if self.recorder.vision_pending(cand) and (server := await self.pool.ready(cand, vg)) is not None:
                await self.vision(server, cand)

    async def sustained_runs(self, cand: Candidate, g: Group) -> None:
        """The sustained generations still planned (`[sustained] runs`), back to back, while its server serves."""
        context = min(self.sweep.contexts)
        while await self.cells.visit(cand, context, "sustained", SUSTAINED, group=g) == 1:
            continue

    async def last_start(self, cand: Candidate, g: Group) -> None:
        """The sustained generation and the evals, on the candidate's last server start."""
        if g.sustained:
            await self.sustained_runs(cand, g)
        server = await self.pool.ready(cand, g) if g.evals else None
        if server is not None:
            await self.evals.run_evals(get_adapter(cand.runtime), server, cand)

    def has_work(self, cand: Candidate, g: Group) -> bool:
        if g.sustained and self.book.series(cand.id, min(self.sweep.contexts), "sustained").next_probe() is not None:
            return True
        return g.evals and self.evals.pending(cand)

    async def vision(self, server: Server, cand: Candidate) -> None:
        """The candidate's image probes not stored yet (an unrecorded warm pair at each new resolution)."""
        warmed: set[int] = set()
        for vc, number in self.recorder.vision_pending(cand):
            if not server.running:
                return  # the planned rows that did not run are named in the runbook's deferred lines
            cell = Cell(self.job, cand, vc.context, "vision", number)
            self.recorder.commit(await self.runner.vision(server, cell, vc, warm=vc.index not in warmed))
            warmed.add(vc.index)

    async def ready_starts(self, cand: Candidate, g: Group) -> None:
        """The time-to-ready samples: `ready.starts` cold and as many warm starts, alternating (resume-safe)."""
        made = sum(1 for e in self.recorder.past(ServerReady) if e.candidate == cand.id and e.purpose == "ready")
        for i in range(made, 2 * self.sweep.ready.starts):
            server = await self.pool.start(cand, g, cold=i % 2 == 0, purpose="ready")
            if server is None:
                return
            await self.pool.stop(server)

    async def sentinel(self, dropped: Collection[str] = ()) -> None:
        """Re-run the sweep's first cell of a candidate still in the race, to measure the drift."""
        cand = next((c for c in self.sweep.candidates if c.id not in dropped), None)
        if cand is None:
            return
        ctx = min(self.sweep.contexts)
        first, again = self.book.series(cand.id, ctx), self.book.series(cand.id, ctx, "sentinel")
        if self.sweep.sentinel_on() and first.values() and not again.done():
            await self.pool.release_all()  # (no ok first run: nothing to compare, the runbook says so)
            g = next(g for g in plan_groups(get_adapter(cand.runtime), cand, self.sweep) if ctx in g.contexts)
            g = Group(g.ctx_size, [ctx], False, False)
            while await self.cells.visit(cand, ctx, "sentinel", SENTINEL, group=g):
                pass
            self.cells.finished(cand, ctx, "sentinel")
            await self.pool.release(cand.id)


class VisitHost:
    """`visits.Host` over the pool, the prompt sizer, the cooldown policy and the recorder."""

    def __init__(self, job: str, sweep: Sweep, recorder: Recorder, pool: ServerPool, sizer: PromptSizer,
                 sensor: ThermalSensor, memory_rate_hz: float) -> None:
        self.job, self.sweep, self.recorder, self.pool, self.sizer, self.sensor = job, sweep, recorder, pool, sizer, sensor
        self.timeout_s = sweep.effective_probe_timeout_s()
        self.memory_rate_hz = memory_rate_hz

    def rows(self, cand: str, context: int, kind: str) -> list[Row]:
        return list(self.recorder.book.cells.get((cand, context, kind), []))

    def commit(self, row: Row) -> None:
        self.recorder.commit(row)

    def emit(self, type_: str, **payload: object) -> None:
        self.recorder.emit(type_, **payload)

    async def start(self, cand: Candidate, ctx_size: int | None, context: int) -> Server | str:
        server = await self.pool.start(cand, Group(ctx_size, [], False, False))
        if server is None:
            return "see the server_crashed event for its exit status and log tail"
        adapter = get_adapter(cand.runtime)
        try:
            async with asyncio.timeout(self.timeout_s * (self.sweep.warmup + 1)):
                await self.sizer.warm_up(adapter, server, cand, context)
                await self.sizer.size_prompts(adapter, server, cand, context)
        except Exception as exc:
            await self.stop(server)
            return f"warm-up / prompt sizing failed: {type(exc).__name__}: {exc}"
        return server

    async def stop(self, server: Server) -> None:
        await asyncio.shield(self.pool.stop(server))

    async def cool_down(self, cand: Candidate, context: int, kind: str, probe: int) -> CooldownRecord:
        return await cooldown_mod.cool_down(self.sweep.cooldown, self.sensor, cooldown_mod.CooldownEvents(
            self.emit, candidate=cand.id, context=context, probe=probe, kind=kind))

    async def prompt(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int,
                     tag: str) -> tuple[Prompt, str]:
        async with asyncio.timeout(self.timeout_s):
            counter = await self.sizer.counter(adapter, server)
            prompt = await self.sizer.prompts.build(context, tag, counter, key=cand.id)
        return prompt, f"{self.sizer.method(prompt.method, server)}"
