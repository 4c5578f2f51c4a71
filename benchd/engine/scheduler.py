"""The sweep engine: one job, run in-process, as the plan of visits `Engine.run` reads top to bottom.

Durability: every row is committed with its `probe_finished` event before the next probe starts; the
progress record (`SeriesBook`) is rebuilt from the stored rows on resume, so finished keys are skipped
and an `aborted` row runs again; a round's order is drawn from the job's seed, so a resumed round
visits the candidates it had not visited yet in the same order. Cancellation stores the probe in flight
as `aborted`, tears the servers down, and re-raises.

Reasons and facts: docs/architecture.md#the-sweep-engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import msgspec

from benchd.config import Config
from benchd.engine import cooldown as cooldown_mod
from benchd.engine import evalrun, evals, probe, suiterun, suites, sweepcheck, verdict, vision, visits
from benchd.engine import series as series_mod
from benchd.engine.energy import Delta, EnergySession
from benchd.engine.groups import Group, plan_groups
from benchd.engine.metrics import sustained_summary
from benchd.engine.plan import block_order, job_seed, requested_order, round_order, round_plan
from benchd.engine.prompts import Prompt
from benchd.engine.rows import (
    EXTERNAL_CACHE_ALLOWANCE,
    SEQUENTIAL,
    Cell,
    Decision,
    Placement,
    ServerFacts,
    build_row,
    decide,
    model_files,
    shortfall,
)
from benchd.engine.series import CellSeries
from benchd.engine.sizing import PromptSizer
from benchd.schemas import Candidate, CooldownRecord, Event, Row, Sweep
from benchd.sensors.memory import budget as budget_mod
from benchd.sensors.memory.sampler import MemorySampler
from benchd.sensors.suspend.sensor import open_clock
from benchd.sensors.thermal.sensor import ThermalSensor, open_sensor
from benchd.servers import affinity
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS, RuntimeAdapter
from benchd.servers.supervisor import Server, ServerStartError, Supervisor
from benchd.stats.axes import direction
from benchd.stats.stop import stop_verdict
from benchd.store import Store, utcnow

#: Grace between SIGTERM and SIGKILL when the engine stops a server (cancel must finish within 2 s).
STOP_GRACE_S = 1.5
#: The KV estimate of the fit check before servers start side by side: an 8B-class GQA model's fp16
#: KV cache (32 layers x 8 KV heads x 128 dims x K and V x 2 bytes) per token of the server's context.
KV_BYTES_PER_TOKEN = 128 * 1024

T = TypeVar("T")


#: The events every probe writes (its row is in the rows table): a scan for server starts skips them.
PROBE_EVENTS = ("probe_started", "probe_finished", "cooldown_started", "cooldown_finished", "cell_finished")


@dataclass(frozen=True)
class JobOutcome:
    state: Literal["succeeded", "failed"]
    error: str | None = None


@dataclass
class Resident:
    """A candidate's running server, the group it was started for and the contexts it warmed at."""

    server: Server
    group: Group
    warmed: set[int] = field(default_factory=set)


@dataclass
class ProbeRun:
    """One probe in flight: its cell, server and series, and what is learned on the way (the sized
    prompt, the cooldown record and the idle power over it, the start time, the server's facts)."""

    adapter: RuntimeAdapter
    server: Server
    cell: Cell
    gen_tokens: int
    series: CellSeries | None
    facts: ServerFacts
    started_at: str = field(default_factory=utcnow)
    prompt: Prompt | None = None
    cooldown: CooldownRecord | None = None
    idle: Delta | None = None


class Engine:
    def __init__(
        self,
        job: str,
        sweep: Sweep,
        store: Store,
        config: Config,
        notify: Callable[[Event], None],
        *,
        sensor: ThermalSensor | None = None,
        memory_rate_hz: float = 10.0,
    ) -> None:
        self.job = job
        self.sweep = sweep
        self.store = store
        self.config = config
        self.notify = notify
        self.sensor = sensor or open_sensor()
        self.memory_rate_hz = memory_rate_hz
        self.energy = EnergySession()  # the counter ($BENCHD_POWERCAP_ROOT in tests), reopened per server start
        self.supervisor = Supervisor(config, grace_s=STOP_GRACE_S)
        self.plan = sweep.probe_plan()
        self.seed = job_seed(job)
        self.order = requested_order(sweep)
        self.pair_stop = self.plan.adaptive and len(sweep.candidates) > 1 and self.order != "sequential"
        # the job's one progress record: every cell's rows so far (resume), as committed
        self.book = series_mod.SeriesBook(self.plan, store.iter_rows(job), ci_stop=not self.pair_stop)
        self.clock = open_clock()
        self.timeout_s = sweep.effective_probe_timeout_s()
        self.sizer = PromptSizer(job, sweep, self.timeout_s)
        self.prompts = self.sizer.prompts
        self.evals_done = {(e.candidate, e.task) for e in store.evals(job)}
        self.prompts_recorded = False
        self.client_pin = affinity.ClientPin()  # the sweep's pin_client: this (event loop) thread
        self.client_cpus: dict[str, list[int] | None] = {}  # per candidate: its pinned server's client cores
        self.resident: dict[str, Resident] = {}
        self.never_started: set[tuple[str, int | None]] = set()
        self.budget = budget_mod.read_budget()

    # -- the plan -------------------------------------------------------------------------------

    async def run(self) -> JobOutcome:
        try:
            order = self.design()
            for context in sorted(self.sweep.contexts) if order != "sequential" else []:
                if order == "interleaved" and not await self.interleaved(context):
                    order = "blocked"  # they did not fit side by side (recorded): this and every later context
                if order == "blocked":
                    await self.blocked(context)
            if order == "sequential":
                for cand in self.sweep.candidates:
                    await self.sequential(cand)
            else:
                for cand in self.sweep.candidates:
                    await self.tail(cand)
            await self.sentinel()
        finally:
            await asyncio.shield(self.supervisor.stop_all())
            self.client_pin.release()
            self.energy.close()
        if self.store.has_ok_row(self.job):
            return JobOutcome("succeeded")
        return JobOutcome("failed", "no probe succeeded; the rows say why")

    def design(self) -> str:
        """The order that runs and why (recorded once; a resumed job keeps what it decided)."""
        before = [e.payload for e in self.store.iter_events(self.job, exclude_types=PROBE_EVENTS)
                  if e.type in ("design_chosen", "design_changed")]
        if before:
            return str(before[-1]["order"])
        asked = self.sweep.order
        order, why = self.order, f"order {self.order} asked for in the sweep" if asked else "the default order"
        if len(self.sweep.candidates) == 1 and order != "sequential":
            why += "; one candidate: nothing to interleave, its probes run back to back"
        if order == "interleaved" and len(self.sweep.candidates) > 1:
            over = self.over_budget_estimate()
            if over:
                order, why = "blocked", f"{why}, but the servers do not fit side by side: {over}"
        plan = round_plan(self.sweep, order)
        self.emit("design_chosen", order=order, asked=asked, why=why, seed=self.seed, plan=plan.text(),
                  budget_bytes=self.budget.bytes, budget_source=self.budget.source,
                  drift_protected=order != "sequential")
        return order

    async def interleaved(self, context: int) -> bool:
        """Start and warm every candidate's server for `context`, then run its rounds. False (nothing
        probed, servers stopped, `design_changed` recorded) when the warmed servers exceed the budget."""
        cands = self.runnable(context)
        first = self.current_round(context)
        for cid, res in list(self.resident.items()):  # servers of the previous context that do not serve this one
            if context not in res.group.contexts:
                await self.release_id(cid)
        order = round_order([c.id for c in cands], seed=self.seed, context=context, round_=first)
        for cand in sorted(cands, key=lambda c: order.index(c.id)):
            if self.active(cand, context):
                await self.warm(cand, context, Placement(first, order.index(cand.id), self.place_why("interleaved")))
            over = self.over_budget_measured()
            if over:
                await self.release_all()
                self.emit("design_changed", order="blocked", context=context, plan=round_plan(self.sweep, "blocked").text(),
                          why=f"interleaved fell back to blocked at context {context}: {over}")
                return False
        await self.rounds(context, cands, "interleaved", first)
        return True

    async def blocked(self, context: int) -> None:
        """Rounds of one server start per candidate (a block of probes each), in the mirrored order."""
        cands = self.runnable(context)
        await self.release_all()
        await self.rounds(context, cands, "blocked", self.current_round(context))

    async def rounds(self, context: int, cands: list[Candidate], order: str, rnd: int) -> None:
        """The rounds of one context until `stop_reason` ends them; the cells' verdicts after."""
        rplan = round_plan(self.sweep, order)
        while (stop := self.stop_reason(context, cands, rnd, order)) is None:
            ids = [c.id for c in cands]
            visits = (round_order(ids, seed=self.seed, context=context, round_=rnd) if order == "interleaved"
                      else block_order(ids, rnd))
            size = rplan.block_size(rnd) if order == "blocked" else 1
            needed = [cid for cid in visits if self.needs(cid, context, rnd, size, order)]
            if needed:  # (a resumed round visits only the candidates it had not visited yet)
                self.emit("round_started", context=context, round=rnd, order=visits, seed=self.seed, design=order)
            probed = 0
            for pos, cid in enumerate(visits):
                if cid not in needed:
                    continue
                cand = next(c for c in cands if c.id == cid)
                place = Placement(rnd, pos, self.place_why(order))
                if order == "blocked":
                    probed += await self.visit_block(cand, context, place, size)
                else:
                    probed += await self.visit_probe(cand, context, "probe", place)
            rnd += 1
            if needed and not probed:
                stop = "no candidate could be probed in the last round"
                break
        if order == "blocked":
            await self.release_all()
        self.emit("context_finished", context=context, rounds=rnd, design=order, why=stop)
        for cand in cands:
            self.cell_finished(cand, context, "probe")

    async def sequential(self, cand: Candidate) -> None:
        """One candidate after the other: each of its server starts, its cells' probes, then its tail."""
        groups = self.groups(cand)
        for i, g in enumerate(groups):
            for context in g.contexts:
                while await self.visit_probe(cand, context, "probe", SEQUENTIAL, group=g):
                    pass
                self.cell_finished(cand, context, "probe")
            if i < len(groups) - 1:  # the last start also serves the tail
                await self.release(cand)
        await self.tail(cand)

    async def tail(self, cand: Candidate) -> None:
        """The candidate's work after its cold probes, nothing else resident: the sustained generation and
        the eval tier on its last server start, then sessions and parallel levels (`visits`, on server
        starts of their own), then the time-to-ready starts."""
        groups = self.groups(cand)
        for other in [c for c in self.resident if c != cand.id]:
            await self.release_id(other)
        for vg in [x for x in groups if x.vision]:
            if self.vision_pending(cand) and (server := await self.ready(cand, vg)) is not None:
                await self.run_vision(get_adapter(cand.runtime), server, cand)
        g = groups[-1] if groups else None
        if g is not None and self.tail_has_work(cand, g):
            await self.tail_on(cand, g)
        await self.release(cand)
        host = visits.EngineHost(self)
        await visits.sessions(host, cand)
        await visits.levels(host, cand)
        if groups and self.sweep.ready.starts and not cand.external:  # benchd does not start an external server
            await self.measure_ready(cand, groups[0])

    async def tail_on(self, cand: Candidate, g: Group) -> None:
        ctx = self.sustained_context()
        sustained = Placement(None, None, "sustained generation: one per candidate, outside the rounds")
        if g.sustained:
            await self.visit_probe(cand, ctx, "sustained", sustained, group=g)
        server = await self.ready(cand, g) if g.evals else None
        if server is not None:
            await self.run_evals(get_adapter(cand.runtime), server, cand)

    async def measure_ready(self, cand: Candidate, g: Group) -> None:
        """`ready.starts` cold and as many warm starts of the candidate's server, alternating, each
        stopped once health answers: the time-to-ready axis's samples (no probe runs on them). A
        resumed job makes only the starts its events do not already hold."""
        made = sum(1 for e in self.store.iter_events(self.job, exclude_types=PROBE_EVENTS) if e.type == "server_ready"
                   and e.payload.get("candidate") == cand.id and e.payload.get("purpose") == "ready")
        for i in range(made, 2 * self.sweep.ready.starts):
            server = await self.start_server(cand, g, cold=i % 2 == 0, purpose="ready")
            if server is None:
                return
            await self.stop_server(server)

    async def sentinel(self) -> None:
        """Re-run the sweep's first cell (same candidate, context, probe count) to measure the drift."""
        cand, ctx = self.sweep.candidates[0], min(self.sweep.contexts)
        first, again = self.book.series(cand.id, ctx), self.book.series(cand.id, ctx, "sentinel")
        if self.sweep.sentinel_on() and first.values() and not again.done():
            await self.release_all()  # (no ok first run: nothing to compare, the runbook says so)
            adapter = get_adapter(cand.runtime)
            g = next(g for g in plan_groups(adapter, cand, self.sweep) if ctx in g.contexts)
            g = Group(g.ctx_size, [ctx], False, False)
            again_place = Placement(None, None, "drift sentinel: the first cell again after the sweep, outside the rounds")
            while await self.visit_probe(cand, ctx, "sentinel", again_place, group=g):
                pass
            self.cell_finished(cand, ctx, "sentinel")
            await self.release(cand)

    # -- the stop rule --------------------------------------------------------------------------

    def stop_reason(self, context: int, cands: list[Candidate], rnd: int, order: str) -> str | None:
        """Why the rounds of a context end now, or None to go on.

        A fixed count ends when every candidate's cell has its probes; `probes = "auto"` with more than
        one candidate ends, after `min` rounds, once every pair's verdict on the plan's metric is
        resolved (different or tied: the comparison of the rounds' paired values, or block medians, at
        the α the Pareto view gives each axis),
        or at `max`; a single candidate keeps the CI-width stop of its cell."""
        active = [c for c in cands if self.active(c, context)]
        rplan = round_plan(self.sweep, order)
        if not active:
            if not self.plan.adaptive:
                return f"fixed count: every candidate has its {self.plan.min} probes"
            if len(cands) == 1:
                return self.cell_stop_text(cands[0], context)
            return f"max {self.plan.max} probes reached or no ok value to compare"
        if rnd >= rplan.max_rounds and order == "blocked":
            return f"max {rplan.max_rounds} blocked rounds reached"
        if not self.pair_stop or rnd < rplan.min_rounds:
            return None
        verdicts = self.pair_verdicts(context, cands, order)
        if verdicts and all(v.verdict in ("different", "tied") for _, _, v in verdicts):
            words = "; ".join(f"{a} vs {b}: {v.verdict}" for a, b, v in verdicts)
            return f"every pair's {self.plan.metric} verdict resolved after {rnd} rounds ({words})"
        return None

    def pair_verdicts(self, context: int, cands: list[Candidate], order: str) -> list[tuple[str, str, Any]]:
        """Each pair's verdict on the plan's metric (`stats.stop.stop_verdict`), given the pair's valid probe rows of
        the context (ok, full length, not invalidated, in a round); empty until every pair shares two rounds."""
        per = {c.id: self.round_rows(c.id, context) for c in cands}
        out = []
        for i, a in enumerate(cands):
            for b in cands[i + 1:]:
                if len({r.round for r in per[a.id]} & {r.round for r in per[b.id]}) < 2:
                    return []
                try:
                    v = stop_verdict(per[a.id], per[b.id], metric=self.plan.metric, order=order,
                                     better=direction(self.plan.metric), margin_pct=self.plan.target_ci_pct)
                except ValueError:
                    return []
                out.append((a.id, b.id, v))
        return out

    def round_rows(self, cand: str, context: int) -> list[Row]:
        """The candidate's probe rows of the context that the stop rule compares."""
        return [r for r in self.book.rows(cand, context)
                if r.round is not None and r.status == "ok" and r.invalidated is None and not r.short
                and getattr(r, self.plan.metric, None)]

    def cell_stop_text(self, cand: Candidate, context: int) -> str:
        v = verdict.cell_verdict(self.book.rows(cand.id, context), self.plan)
        return f"single candidate: {v.reason}"

    def current_round(self, context: int) -> int:
        """The round a (resumed) context continues with: the last one any row records, else 0."""
        rounds = [r.round for c in self.sweep.candidates for r in self.book.rows(c.id, context) if r.round is not None]
        return max(rounds, default=0)

    def active(self, cand: Candidate, context: int) -> bool:
        return self.book.series(cand.id, context).next_probe() is not None

    def needs(self, cand: str, context: int, rnd: int, size: int, order: str) -> bool:
        """Does round `rnd` still owe this candidate probes (`size` per round; a resumed round may hold some)?"""
        return (self.in_round(cand, context, rnd, valid=order == "blocked") < size
                and self.book.series(cand, context).next_probe() is not None)

    def in_round(self, cand: str, context: int, rnd: int, *, valid: bool) -> int:
        """The candidate's rows of round `rnd` (`valid`: only those not invalidated by a sleep or a stopped
        server). A block owes `size` valid probes: an invalidated one is re-run in the same block, on the
        same server start, so a fixed count spread over the blocks is met. An interleaved round visits
        each candidate once; its invalidated probe is re-run in a later round (the cell is not done)."""
        return sum(1 for r in self.book.rows(cand, context) if r.round == rnd and (not valid or r.invalidated is None))

    # -- visits ---------------------------------------------------------------------------------

    async def visit_probe(self, cand: Candidate, context: int, kind: str, place: Placement,
                          group: Group | None = None) -> int:
        """One probe of a cell (1), or nothing (0): the cell is done, its round already visited it, or its
        server could not be had (its cells then fail in `fail_group`)."""
        series = self.book.series(cand.id, context, kind)
        p = series.next_probe()
        if p is None:
            return 0
        g = group or self.group_for(cand, context)
        server = await self.ready(cand, g)
        if server is None:
            return 0
        adapter = get_adapter(cand.runtime)
        cell = Cell(self.job, cand, context, kind, p, place)  # type: ignore[arg-type]
        gen = self.sweep.sustained.tokens if kind == "sustained" else self.sweep.gen_tokens
        warm = 0 if kind == "sustained" else self.warm_count(cand.id, context)
        row = (await self.prepare(adapter, server, cell, warm) if kind != "sustained" else None) \
            or await self.run_probe(adapter, server, cell, gen, series if kind != "sustained" else None)
        self.commit(row)  # a failed prepare: the server broke before the probe, the row says how
        return 1

    async def visit_block(self, cand: Candidate, context: int, place: Placement, size: int) -> int:
        """One block: a fresh server start for the candidate, probes until the block holds `size` valid ones
        (an invalidated probe is re-run here, within the cell's re-run allowance; fewer when the cell is
        done), the server stopped."""
        assert place.round is not None
        await self.release_all()
        probed = 0
        while self.in_round(cand.id, context, place.round, valid=True) < size:
            n = await self.visit_probe(cand, context, "probe", place)
            if not n:
                break
            probed += n
        await self.release(cand)
        return probed

    async def warm(self, cand: Candidate, context: int, place: Placement) -> None:
        """Start the candidate's server for `context` and warm it before the rounds (a failure costs the
        candidate's first probe of the round, as a row saying why)."""
        server = await self.ready(cand, self.group_for(cand, context))
        p = self.book.series(cand.id, context).next_probe()
        if server is None or p is None:
            return
        failed = await self.prepare(get_adapter(cand.runtime), server, Cell(self.job, cand, context, "probe", p, place),
                                    self.warm_count(cand.id, context))
        if failed is not None:
            self.commit(failed)

    def place_why(self, order: str) -> str:
        if order == "blocked":
            return f"order blocked: round = the block (one server start per candidate), visit = its turn ({self.sweep.rounds or 3} rounds asked)"
        return f"order interleaved: round and visit from the job's seeded round orders (seed {self.seed})"

    def runnable(self, context: int) -> list[Candidate]:
        """Candidates whose runtime accepts them; a refused one's cells fail here, once, with the reasons."""
        out = []
        for cand in self.sweep.candidates:
            problems = sweepcheck.adapter_problems(cand, self.sweep)
            if not problems:
                out.append(cand)
                continue
            g = self.group_for(cand, context)
            self.fail_group(cand, Group(g.ctx_size, [context], False, False), "; ".join(p.message for p in problems), None)
        return out

    def groups(self, cand: Candidate) -> list[Group]:
        adapter = get_adapter(cand.runtime)
        groups = plan_groups(adapter, cand, self.sweep)
        problems = sweepcheck.adapter_problems(cand, self.sweep)
        if problems:
            for g in groups:
                self.fail_group(cand, g, "; ".join(p.message for p in problems), None)
            return []
        return groups

    def group_for(self, cand: Candidate, context: int) -> Group:
        return next(g for g in plan_groups(get_adapter(cand.runtime), cand, self.sweep) if context in g.contexts)

    def tail_has_work(self, cand: Candidate, g: Group) -> bool:
        if g.sustained and self.book.series(cand.id, self.sustained_context(), "sustained").next_probe() is not None:
            return True
        if g.evals and any((cand.id, t.id) not in self.evals_done for t in evals.tasks(self.sweep.eval_tier)):
            return True
        return g.evals and any((cand.id, t.id) not in self.evals_done
                               for s in self.sweep.evals for t in self.suite_tasks(s))

    def suite_tasks(self, suite: str) -> list[suites.Task]:
        """The suite's fixed subset for this sweep (loaded from the cache; checked at submit)."""
        return suites.subset(suites.load(suite, self.config.cache_dir), self.sweep.eval_limit.of(suite))

    def sustained_context(self) -> int:
        return min(self.sweep.contexts)

    def cell_finished(self, cand: Candidate, context: int, kind: str) -> None:
        rows = self.book.rows(cand.id, context, kind)
        if rows:  # the cell's verdict (shown by `tail`)
            self.emit("cell_finished", candidate=cand.id, context=context, kind=kind,
                      verdict=verdict.cell_verdict(rows, self.book.series(cand.id, context, kind).plan))

    # -- events and rows ------------------------------------------------------------------------

    def emit(self, type_: str, **payload: Any) -> None:
        self.notify(self.store.append_event(self.job, type_, payload))

    def commit(self, row: Row) -> None:
        cand = next((c for c in self.sweep.candidates if c.id == row.candidate), None)
        if cand is not None and cand.external:
            row = external_row(row, cand)
        self.notify(self.store.commit_row(row))
        self.book.add(row)

    def fail_group(self, cand: Candidate, g: Group, error: str, exc: ServerStartError | None) -> None:
        """Every pending cell of a group becomes a failed row naming why the server is missing."""
        cells = [(c, "probe", p) for c in g.contexts for p in self.book.series(cand.id, c).pending_floor()]
        if g.sustained:
            ctx = self.sustained_context()
            cells += [(ctx, "sustained", p) for p in self.book.series(cand.id, ctx, "sustained").pending_floor()]
        if g.vision:
            cells += [(vc.context, "vision", n) for vc, n in self.vision_pending(cand)]
        d = decide(result_status="failed", error=error)
        for context, kind, p in cells:
            self.commit(build_row(
                Cell(self.job, cand, context, kind, p),  # type: ignore[arg-type]
                status=d.status, started_at=utcnow(), server=ServerFacts(g.ctx_size, None, None), error=d.error,
                exit_status=exc.exit_status if exc else None, log_tail=exc.log_tail if exc else None,
            ))

    def row(self, run: ProbeRun, d: Decision, **kw: Any) -> Row:
        """The probe's row with the status `decide` gave it."""
        row = build_row(run.cell, status=d.status, started_at=run.started_at, server=run.facts,
                        cooldown=run.cooldown, error=d.error, **kw)
        return msgspec.structs.replace(row, invalidated=d.invalidated) if d.invalidated else row

    # -- servers --------------------------------------------------------------------------------

    async def ready(self, cand: Candidate, g: Group) -> Server | None:
        """The candidate's running server for group `g`: the resident one, else a (re)start (another
        group's server of the candidate is stopped first). None when it never got ready (its cells are
        failed rows then, and it is not tried again for this group)."""
        res = self.resident.get(cand.id)
        if res is not None and (res.group != g or not res.server.running):
            await self.release(cand)  # crashed or killed after a timeout: restart for the next cell
            res = None
        if res is not None:
            return res.server
        if (cand.id, g.ctx_size) in self.never_started:
            return None
        server = await self.start_server(cand, g)
        if server is None:
            self.never_started.add((cand.id, g.ctx_size))
            return None
        self.resident[cand.id] = Resident(server, g)
        return server

    def warm_count(self, cand: str, context: int) -> int:
        """Warm-up probes now: the sweep's count after a start, one at each new context of a server
        that serves several, none after that."""
        res = self.resident.get(cand)
        if res is None or context in res.warmed:
            return 0
        n = self.sweep.warmup if not res.warmed else min(1, self.sweep.warmup)
        res.warmed.add(context)
        return n

    async def release(self, cand: Candidate) -> None:
        await self.release_id(cand.id)

    async def release_id(self, cand: str) -> None:
        res = self.resident.pop(cand, None)
        if res is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.stop_server(res.server))

    async def release_all(self) -> None:
        for cid in list(self.resident):
            await self.release_id(cid)

    def over_budget_estimate(self) -> str | None:
        """Before any start: the candidates' model files plus a KV estimate at their largest server
        context, against the budget (None: they fit)."""
        if self.budget.bytes is None:
            return self.budget.source
        total = 0
        for cand in self.sweep.candidates:
            files = sum(_size(p) for p in model_files(cand))
            groups = plan_groups(get_adapter(cand.runtime), cand, self.sweep)
            ctx = max((g.ctx_size or max(g.contexts or [0]) for g in groups), default=0)
            total += files + ctx * KV_BYTES_PER_TOKEN
        if total > self.budget.bytes:
            return (f"model files + KV estimate ({KV_BYTES_PER_TOKEN // 1024} KiB per context token) {_mib(total)} "
                    f"> budget {_mib(self.budget.bytes)} ({self.budget.source})")
        return None

    def over_budget_measured(self) -> str | None:
        """After each warmed start: the resident servers' measured footprints against the budget."""
        if self.budget.bytes is None:
            return self.budget.source
        sizes = {cid: budget_mod.footprint_bytes(r.server.pid) or 0 for cid, r in self.resident.items()}
        total = sum(sizes.values())
        if total > self.budget.bytes:
            each = ", ".join(f"{c} {_mib(b)}" for c, b in sizes.items())
            return (f"the warmed servers' measured resident sets {_mib(total)} ({each}) > budget "
                    f"{_mib(self.budget.bytes)} ({self.budget.source})")
        return None

    def missing_models(self, cand: Candidate) -> str | None:
        """Checked before every server start: a model deleted after submit is named here, not left to
        the server's log tail ("exiting due to model loading error")."""
        paths = [("model file", cand.model)]
        if cand.spec is not None and cand.spec.draft_model:
            paths.append(("draft model file", cand.spec.draft_model))
        gone = [(what, p) for what, p in paths if not os.path.exists(p)]
        if not gone:
            return None
        queued = next((e.payload for e in self.store.events(self.job, limit=1) if e.type == "job_queued"), {})  # seq 1
        at_submit = queued.get("missing_paths")
        return "; ".join(
            f"{what} {p} does not exist" if at_submit is None  # a job queued before this was recorded
            else f"{what} {p} no longer exists (it existed at submit)" if p not in at_submit
            else f"{what} {p} does not exist (nor did it at submit)" for what, p in gone)

    async def start_server(self, cand: Candidate, g: Group, *, cold: bool = False,
                           purpose: str = "sweep") -> Server | None:
        gone = None if cand.external else self.missing_models(cand)
        if gone:
            self.fail_group(cand, g, gone, None)
            return None
        extra: dict[str, Any] = {}
        if not self.prompts_recorded:  # the prompt corpus/template hashes, once per run, for the runbook
            extra["prompts"] = self.prompts.provenance()
            self.prompts_recorded = True
        self.emit("server_starting", candidate=cand.id, runtime=cand.runtime, ctx_size=g.ctx_size, **extra)
        pin = affinity.plan(self.sweep.pin_client, *get_adapter(cand.runtime).server_threads(cand))
        try:
            server = await self.supervisor.start(self.job, cand, g.ctx_size, cpus=pin.server_cpus or None, cold=cold)
        except ServerStartError as exc:
            self.emit("server_crashed", candidate=cand.id, phase="startup", reason=exc.reason,
                      error=exc.message, exit_status=exc.exit_status, log_tail=exc.log_tail[-2000:])
            self.fail_group(cand, g, f"server never became ready ({exc.reason}): {exc.message}", exc)
            return None
        if server.external is not None:
            return self.attached(cand, g, server, purpose)
        pin = affinity.confirm(pin, server.pid)
        self.client_cpus[cand.id] = list(pin.client_cpus) if pin.applied else None
        self.hold_client_pin(cand.id)
        self.emit("server_ready", candidate=cand.id, runtime=cand.runtime, pid=server.pid, port=server.port,
                  ctx_size=server.ctx_size, binary=server.binary, version=server.version,
                  version_source=server.version_source, ready_s=round(server.ready_s, 3), purpose=purpose,
                  load_s=None if server.load_s is None else round(server.load_s, 3), load_note=server.load_note,
                  cache=server.cache, cache_note=server.cache_note, cold=server.cold_requested,
                  resident_before=server.resident_before, argv=server.argv,
                  affinity=msgspec.to_builtins(pin), env=server.env_passed, env_removed=server.env_removed,
                  fit=server.fit, layer_split=server.layer_split, split_note=server.split_note,
                  energy=self.energy.restart())
        return server

    def attached(self, cand: Candidate, g: Group, server: Server, purpose: str) -> Server:
        """An external server's handle: its detection recorded (a `server_ready` event without a time to
        ready: benchd did not start it), and the group's contexts larger than one of its slots holds
        failed with the reason (their rows are written, so no probe visits them)."""
        found = server.external
        assert found is not None
        self.client_cpus[cand.id] = None
        self.hold_client_pin(cand.id)
        self.emit("server_ready", candidate=cand.id, runtime=cand.runtime, pid=cand.pid, port=server.port,
                  ctx_size=server.ctx_size, binary=server.binary, version=server.version,
                  version_source=server.version_source, purpose=purpose, external=msgspec.to_builtins(found),
                  energy=self.energy.restart())
        if found.slot_ctx is None:
            return server
        need = self.sweep.gen_tokens + CTX_MARGIN_TOKENS
        big = [c for c in g.contexts if c + need > found.slot_ctx]
        if big:
            slots = f" ({found.total_slots} slots share its context)" if found.total_slots and found.total_slots > 1 else ""
            self.fail_group(cand, Group(g.ctx_size, big, False, False),
                            f"context too large for the external server: {found.kind} at {found.url} holds "
                            f"{found.slot_ctx} tokens per slot{slots} ({found.sources.get('slot_ctx', 'detected')}), "
                            f"and this cell needs its context + gen_tokens + {CTX_MARGIN_TOKENS}", None)
        return server

    def hold_client_pin(self, candidate: str) -> None:
        """Put the probe client on the cores its candidate's pinned server leaves free, or back on all of
        them for an unpinned one (interleaved rounds visit pinned and unpinned servers in turn)."""
        cpus = self.client_cpus.get(candidate)
        if cpus:
            self.client_pin.hold(cpus)
        else:
            self.client_pin.release()

    async def stop_server(self, server: Server) -> None:
        if not self.resident:
            self.client_pin.release()
        info = await self.supervisor.stop(server)
        crashed = server.crashed
        self.emit("server_stopped", candidate=server.candidate.id, pid=server.pid,
                  exit_status=info.status if info else None, crashed=crashed is not None)

    # -- one probe ------------------------------------------------------------------------------

    async def guard(self, run: ProbeRun, step: Callable[[], Awaitable[T]], *, budget: float, timeout_text: str,
                    failure_text: str) -> T | Row:
        """Run one step against the server within `budget` seconds: its result, or the row saying why
        not (a timeout kills the server; an error is a failed row naming a crash when there was one;
        either way the server is stopped so the next visit restarts it, never the job's end)."""
        try:
            async with asyncio.timeout(budget):
                return await step()
        except TimeoutError:
            await self.supervisor.stop(run.server, grace_s=0.5)
            return self.row(run, decide(result_status="timeout", error=timeout_text, killed=True),
                            log_tail=run.server.log_tail())
        except Exception as exc:
            row = await self.failed_row(run, f"{failure_text}: {type(exc).__name__}: {exc}")
            if run.server.running:
                await self.supervisor.stop(run.server, grace_s=0.5)
            return row

    async def prepare(self, adapter: RuntimeAdapter, server: Server, cell: Cell, warm: int) -> Row | None:
        """Warm-up (`warm` probes: after a start; one at each new context of a multi-context server) and
        prompt sizing; a server that crashes or hangs here costs this cell, never the job."""
        run = ProbeRun(adapter, server, cell, self.sweep.gen_tokens, None, ServerFacts.of(server))
        budget = self.timeout_s * (self.sweep.warmup + 1)

        async def step() -> None:
            if warm:
                await self.sizer.warm_up(adapter, server, cell.candidate, cell.context, warm)
            await self.sizer.size_prompts(adapter, server, cell.candidate, cell.context)

        got = await self.guard(run, step, budget=budget, failure_text="warm-up / prompt sizing failed",
                               timeout_text=f"warm-up / prompt sizing timed out after {budget:g} s; the server was killed")
        return got if isinstance(got, Row) else None

    async def sized_prompt(self, run: ProbeRun) -> Prompt | Row:
        """The probe's prompt sized through the server's tokenizer, or the failed row the guard made of a
        sizing error or timeout."""
        return await self.guard(
            run, lambda: self.build_prompt(run.adapter, run.server, run.cell), budget=self.timeout_s,
            failure_text="sizing the prompt failed",
            timeout_text=f"probe timed out after {self.timeout_s:g} s while sizing the prompt (the server's "
                         "tokenizer did not answer); the server was killed")

    async def run_probe(self, adapter: RuntimeAdapter, server: Server, cell: Cell, gen_tokens: int,
                        series: CellSeries | None = None) -> Row:
        """One recorded probe: its prompt sized before the cooldown (the /tokenize round trips fall
        outside the probe's window), the cooldown, the request watched, the row."""
        run = ProbeRun(adapter, server, cell, gen_tokens, series, ServerFacts(server.ctx_size, server.binary, server.version))
        self.hold_client_pin(cell.candidate.id)
        cand = cell.candidate
        prompt = await self.sized_prompt(run)
        if isinstance(prompt, Row):
            return prompt
        run.prompt = prompt
        run.cooldown, run.idle = await self.energy.over(self.cool_down(run))  # the idle baseline: power while cooling
        run.started_at = utcnow()
        self.emit("probe_started", candidate=cand.id, context=cell.context, probe=cell.probe, kind=cell.kind,
                  round=cell.place.round, visit=cell.place.visit)
        run.facts = ServerFacts.of(server)
        sampler = MemorySampler(server.pid, self.memory_rate_hz, model_paths=model_files(cand),
                                series=cell.kind == "sustained")
        watch = series_mod.Watch(self.clock, server.pid)  # a sleep or a stopped server invalidates the probe
        try:
            row = await self.measure(run, sampler, watch)
            return await watch.annotate(row, series=series, plan=self.plan, sensor=self.sensor,
                                        target_celsius=self.sweep.cooldown.target_celsius)
        except asyncio.CancelledError:
            # A cancel or shutdown cut the probe short: store it as `aborted` (run again on resume).
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.gather(watch.cancel(), sampler.stop()))
            self.commit(self.row(run, Decision("aborted", "cancelled while the probe was in flight")))
            raise

    async def build_prompt(self, adapter: RuntimeAdapter, server: Server, cell: Cell) -> Prompt:
        cand = cell.candidate
        return await self.prompts.build(cell.context, f"{self.job}/{cand.id}/{cell.context}/{cell.kind}{cell.probe}",
                                        await self.sizer.counter(adapter, server), key=cand.id)

    async def cool_down(self, run: ProbeRun) -> CooldownRecord:
        cell = run.cell
        self.emit("cooldown_started", candidate=cell.candidate.id, context=cell.context, probe=cell.probe,
                  policy=self.sweep.cooldown.policy)
        last = run.series.rows[-1] if run.series and run.series.rows else None
        record = await cooldown_mod.before_probe(
            self.sweep.cooldown, self.sensor, last=last, threshold_pct=self.plan.throttle_pct,
            check=lambda: self.check_rate(run.adapter, run.server, cell.candidate, cell.context))
        self.emit("cooldown_finished", candidate=cell.candidate.id, context=cell.context, probe=cell.probe, record=record)
        return record

    async def check_rate(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int) -> float | None:
        """A short unrecorded check probe at the cell's context (32 tokens at most): its rate of the metric."""
        prompt = await self.prompts.build(context, f"{self.job}/{cand.id}/{context}/check",
                                          await self.sizer.counter(adapter, server), key=cand.id)
        result = await probe.run_chat(adapter, server.base_url, cand, prompt=prompt.text,
                                      max_tokens=min(self.sweep.gen_tokens, 32), sampling=self.sweep.sampling,
                                      timeout_s=self.timeout_s)
        value = getattr(adapter.normalize(result, spec_configured=cand.spec is not None), self.plan.metric, None)
        return float(value) if isinstance(value, (int, float)) else None

    async def measure(self, run: ProbeRun, sampler: MemorySampler, watch: series_mod.Watch) -> Row:
        """The request itself, with the memory sampler and the energy marks around it, and its row."""
        adapter, server, cell, cand = run.adapter, run.server, run.cell, run.cell.candidate
        assert run.prompt is not None
        counters = cand.spec is not None and adapter.reads_counters
        before = await self.guard(
            run, lambda: probe.read_metrics(server.base_url) if counters else _none(), budget=self.timeout_s,
            failure_text="reading /metrics failed",
            timeout_text=f"probe timed out after {self.timeout_s:g} s reading /metrics before the request; "
                         "the server was killed")
        if isinstance(before, Row):
            gone = await watch.finish()
            if gone is None:
                return before
            d = decide(result_status=before.status, error=before.error, invalidation=gone)
            return msgspec.structs.replace(before, status=d.status, error=d.error, invalidated=d.invalidated)
        sampler.reset_peak()
        await sampler.start()
        with self.energy.probe(run.idle, cell.kind == "sustained") as recording:
            result = await probe.run_chat(adapter, server.base_url, cand, prompt=run.prompt.text, max_tokens=run.gen_tokens,
                                          sampling=self.sweep.sampling, timeout_s=self.timeout_s,
                                          thinking=self.sweep.thinking, run_to_length=self.sweep.ignore_eos,
                                          marks=recording.marks)
        memory = await sampler.stop()
        norm = adapter.normalize(result, spec_configured=cand.spec is not None)
        if norm.prompt_tokens is not None:
            self.prompts.observe(run.prompt, norm.prompt_tokens)
        extra: dict[str, Any] = shortfall(adapter, cand, asked=run.gen_tokens, norm=norm, finish_reason=result.finish_reason,
                                          run_to_length=self.sweep.ignore_eos) if result.ok else {}
        sources: dict[str, str] = {"prompt": f"{self.sizer.method(run.prompt.method, server)}; target {cell.context} tokens"}
        if "thinking" in norm.sources:
            sources["thinking"] = f"{norm.sources['thinking']}; sweep asked: {self.sweep.thinking}"
        load_mode = adapter.memory_note(cand)
        if load_mode:
            sources["mem_load_mode"] = load_mode
        if before is not None and result.ok:
            sources.update(adapter.acceptance_check(before, await probe.read_metrics(server.base_url)))
        if cell.kind == "sustained":
            extra_sustained, more = sustained_summary(result.chunk_times, self.sweep.sustained.window, norm.gen_tokens)
            extra.update(extra_sustained, thermal_after=self.sensor.read())
            sources.update(more)
        tail = None
        if result.status == "timeout":
            await self.supervisor.stop(server, grace_s=0.5)
            tail = server.log_tail()
        elif server.crashed or (not result.ok and await server.wait_exit(0.3) is not None):
            gone = await watch.finish()
            return await self.failed_row(run, result.error or "failed", norm, memory, gone)
        elif not result.ok:
            tail = server.log_tail()
        allowance = EXTERNAL_CACHE_ALLOWANCE if cell.candidate.external else 0
        if allowance and norm.cached_tokens:
            sources["cached_tokens_allowed"] = (f"up to {allowance} cached tokens allowed: the chat template's shared "
                                                "header, served by the external server's own prompt cache")
        d = decide(result_status=result.status, error=result.error, cached_tokens=norm.cached_tokens if result.ok else None,
                   killed=result.status == "timeout", invalidation=await watch.finish(), cache_allowance=allowance)
        return self.row(run, d, metrics=norm, memory=memory, log_tail=tail, extra=extra, extra_sources=sources,
                        energy=recording.row(norm, result, self.sweep.sustained.window))

    async def failed_row(self, run: ProbeRun, error: str, norm: Any = None, memory: Any = None,
                         gone: Any = None) -> Row:
        """A failed row naming the cause: a crash (exit status + log tail, `server_crashed`) or the error."""
        server = run.server
        info = server.crashed or await server.wait_exit(0.5)
        if info is None:
            return self.row(run, decide(result_status="failed", error=error, invalidation=gone), metrics=norm,
                            memory=memory, log_tail=server.log_tail())
        self.emit("server_crashed", candidate=run.cell.candidate.id, phase="probe", exit_status=info.status,
                  log_tail=info.log_tail[-2000:])
        return self.row(run, decide(result_status="failed", error=error, crash=info.status, invalidation=gone),
                        metrics=norm, memory=memory, exit_status=info.status, log_tail=info.log_tail)

    # -- image probes ---------------------------------------------------------------------------

    def vision_pending(self, cand: Candidate) -> list[tuple[vision.VisionCell, int]]:
        """(cell, row probe number) of the candidate's image probes not stored yet."""
        return [(vc, vc.probe_number(p)) for vc in vision.vision_cells(self.sweep, cand) for p in range(self.plan.min)
                if vc.probe_number(p) not in {r.probe for r in self.book.rows(cand.id, vc.context, "vision")}]

    async def run_vision(self, adapter: RuntimeAdapter, server: Server, cand: Candidate) -> None:
        warmed: set[int] = set()
        for vc, number in self.vision_pending(cand):
            if not server.running:
                return  # the planned rows that did not run are named in the runbook's deferred lines
            self.commit(await self.vision_probe(adapter, server, Cell(self.job, cand, vc.context, "vision", number), vc,
                                                warm=vc.index not in warmed))
            warmed.add(vc.index)

    async def vision_probe(self, adapter: RuntimeAdapter, server: Server, cell: Cell, vc: vision.VisionCell,
                           warm: bool) -> Row:
        """One image pair as a row: prompt sized, an unrecorded warm pair at a new resolution, the
        cooldown, then the pair with memory sampled and energy marked around the image request."""
        cand, sweep = cell.candidate, self.sweep
        run = ProbeRun(adapter, server, cell, sweep.gen_tokens, None, ServerFacts(server.ctx_size, server.binary, server.version))
        prompt = await self.sized_prompt(run)
        if isinstance(prompt, Row):
            return prompt
        probe_no = cell.probe % vision.VISION_PROBE_STRIDE

        async def pair(key: str, marks: Callable[[str], None] | None = None) -> vision.ImageProbe:
            images = await asyncio.to_thread(  # CPU-heavy PNG encoding, kept off the event loop
                vision.make_images, sweep.sampling.seed, cand.id, vc.resolution, sweep.vision.images, key)
            return await vision.measure(
                adapter, server.base_url, cand, prompt=prompt.text, max_tokens=sweep.gen_tokens,
                generated=images,
                sampling=sweep.sampling, timeout_s=self.timeout_s, thinking=sweep.thinking,
                run_to_length=sweep.ignore_eos, marks=marks)

        if warm:
            await pair(vc.key(probe_no) + "/warm-up")
        run.cooldown, idle = await self.energy.over(self.cool_down(run))
        run.started_at = utcnow()
        self.emit("probe_started", candidate=cand.id, context=cell.context, probe=cell.probe, kind="vision")
        run.facts = ServerFacts.of(server)
        sampler = MemorySampler(server.pid, self.memory_rate_hz, model_paths=model_files(cand))
        sampler.reset_peak()
        await sampler.start()
        try:
            with self.energy.probe(idle, False) as recording:
                got = await pair(vc.key(probe_no), recording.marks)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(sampler.stop())
            self.commit(self.row(run, Decision("aborted", "cancelled while the image probe was in flight")))
            raise
        memory = await sampler.stop()
        sources = {**got.sources, "prompt": f"{self.sizer.method(prompt.method, server)}; target {cell.context} "
                   "tokens of text beside the images"}
        tail = None
        if got.status == "timeout":
            await self.supervisor.stop(server, grace_s=0.5)
            tail = server.log_tail()
        elif server.crashed or (got.status != "ok" and await server.wait_exit(0.3) is not None):
            return await self.failed_row(run, got.error or "failed", got.norm, memory)
        elif got.status != "ok":
            tail = server.log_tail()
        energy = recording.row(got.norm, got.image, sweep.sustained.window) if got.norm and got.image else None
        return self.row(run, decide(result_status=got.status, error=got.error, killed=got.status == "timeout"),
                        metrics=got.norm, memory=memory, log_tail=tail, extra=got.fields, extra_sources=sources,
                        energy=energy, extra_reasons=got.null_reasons)

    # -- evals ----------------------------------------------------------------------------------

    async def run_evals(self, adapter: RuntimeAdapter, server: Server, cand: Candidate) -> None:
        """The eval tier's tasks through the candidate's server (each result stored as it lands)."""
        for task in evals.tasks(self.sweep.eval_tier):
            if (cand.id, task.id) not in self.evals_done:
                self.store.put_eval(await evalrun.run_task(self.job, adapter, server.base_url, cand, task,
                                                           self.sweep, self.timeout_s))
                self.evals_done.add((cand.id, task.id))
        for suite in self.sweep.evals:
            await self.run_suite(adapter, server, cand, suite)

    async def run_suite(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, suite: str) -> None:
        """One public suite through the server, each result stored as it lands. `eval_budget_s` counts the
        wall-clock seconds of this run's tasks (asking and grading) plus the request seconds of results
        stored before a resume; once reached, the suite stops after the task in flight (the runbook
        marks it partial). The tool parser is asked once, after the first tool request."""
        tasks = self.suite_tasks(suite)
        if not any((cand.id, t.id) not in self.evals_done for t in tasks):
            return
        data = suites.load(suite, self.config.cache_dir)
        self.emit("eval_suite", **data.provenance([t.id for t in tasks]))
        spent = sum(e.latency_s or 0.0 for e in self.store.evals(self.job) if e.candidate == cand.id and e.tier == suite)
        budget = self.sweep.eval_budget_s
        parser: str | None = None
        asked = False
        for task in tasks:
            if (cand.id, task.id) in self.evals_done:
                continue
            if budget is not None and spent >= budget:
                self.emit("eval_budget_reached", candidate=cand.id, suite=suite, budget_s=budget)
                return
            if not server.running:
                return
            t0 = time.monotonic()
            if suite == "code":
                result = await suiterun.run_code_task(self.job, adapter, server.base_url, cand, task, self.sweep,
                                                      self.timeout_s)
            else:
                result = await suiterun.run_tool_task(self.job, adapter, server.base_url, cand, task, self.sweep,
                                                      self.timeout_s, log_path=server.log_path, parser=parser)
                if not asked:
                    asked = True
                    parser = await adapter.tool_parser(server.base_url, cand, server.command)
                    if parser is not None:
                        result = msgspec.structs.replace(
                            result, parser=parser, sources={**result.sources, "parser": "adapter.tool_parser"},
                            null_reasons={k: v for k, v in result.null_reasons.items() if k != "parser"})
            self.store.put_eval(result)
            self.evals_done.add((cand.id, task.id))
            spent += time.monotonic() - t0


async def _none() -> None:
    return None


def _size(path: str) -> int:
    """A model file's size, or an MLX model dir's files summed (0 when unreadable)."""
    try:
        if os.path.isdir(path):
            return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
        return os.path.getsize(path)
    except OSError:
        return 0


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MiB"


#: What no row of an external candidate can know, and why (benchd did not start its server).
EXTERNAL_UNKNOWN = {
    "server_args": "an external server: benchd does not start it, so its arguments are unknown",
    "server_env": "an external server: its environment is unknown",
    "restart_memory": "an external server serves every context from one start: no memory figure per fresh start",
    "fit": "an external server: its --fit (if any) is unknown",
    "layer_split": "an external server: its layer split is unknown (it was not started by benchd)",
}
_MEMORY_FIELDS = ("mem_peak_bytes", "mem_rss_anon_bytes", "mem_rss_file_bytes", "swap_in_bytes", "swap_out_bytes",
                  "mem_footprint_peak_bytes", "mem_resident_peak_bytes", "mem_model_resident_bytes")


def external_row(row: Row, cand: Candidate) -> Row:
    """An external candidate's row with what it cannot know null with the reason, and the server's
    detection named as the source of its binary and version."""
    nulls = {**row.null_reasons, **EXTERNAL_UNKNOWN}
    sources = dict(row.sources)
    if cand.pid is None:
        for name in _MEMORY_FIELDS:
            if getattr(row, name) is None:
                nulls[name] = "an external server without `pid` / `process`: benchd cannot sample its memory"
    else:
        sources.setdefault("pid", f"the candidate's pid {cand.pid}" + (f" (process {cand.process!r}, resolved at "
                                                                        "submit)" if cand.process else ""))
    if row.ctx_size is not None:
        sources.setdefault("ctx_size", "external: the server's context per slot, as detected at the candidate's url")
    else:
        nulls.setdefault("ctx_size", "the external server reports no context size")
    if row.binary is not None:
        sources.setdefault("binary", "external: detected at the candidate's url")
    if row.server_version is not None:
        sources.setdefault("server_version", "external: detected at the candidate's url")
    return msgspec.structs.replace(row, null_reasons=nulls, sources=sources)


async def run_job(job_id: str, sweep: Sweep, store: Store, config: Config, notify: Callable[[Event], None],
                  ) -> JobOutcome:
    """Run (or resume: rows already stored are skipped) one sweep to its end. A sweep's
    candidate matrices are expanded first (a submitted sweep is stored expanded: nothing is left)."""
    expanded = sweepcheck.expand(sweep)
    if expanded.problems:
        return JobOutcome("failed", "; ".join(p.message for p in expanded.problems))
    return await Engine(job_id, expanded.sweep, store, config, notify).run()
