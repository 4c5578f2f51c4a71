"""The sweep engine: one job, run in-process — candidates → server starts → cells → cooldown → probes.

Order: for each candidate, one server start per context size (llama-server restarts per
context unless `ctx_size` is pinned; the MLX servers start once), warm-up probes after every start,
then the probe series of each context, each probe preceded by the cooldown policy. A vision
candidate's image probes (`engine/vision.py`) run on the group planned for them (`groups`), after
its contexts: per resolution one unrecorded warm-up pair, then the sweep's probe count (its minimum,
when adaptive) of pairs, each after the cooldown, as rows of kind "vision". The sustained
generation and the eval tier run on the candidate's last server. A crash restarts the server for the
next cell; a server that never gets ready turns that group's cells into failed rows; the sweep goes on.

Durability: every row is committed with its `probe_finished` event before the next probe starts, and
`resume` skips the keys already stored (an `aborted` row is run again). Cancellation (the daemon
cancels the task) stores the probe in flight as `aborted`, tears the servers down, and re-raises.

The daemon writes the job lifecycle events (job_started … job_finished); this module writes
server_*, cooldown_* and probe_* events, and passes each stored Event to `notify`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from benchd.config import Config
from benchd.engine import cooldown as cooldown_mod
from benchd.engine import evalrun, evals, probe, suiterun, suites, sweepcheck, verdict, vision, visits
from benchd.engine import series as series_mod
from benchd.engine.energy import Delta, EnergySession
from benchd.engine.groups import Group, plan_groups
from benchd.engine.metrics import sustained_summary
from benchd.engine.prompts import Prompt
from benchd.engine.rows import Cell, ServerFacts, build_row, model_files, shortfall
from benchd.engine.series import CellSeries
from benchd.engine.sizing import PromptSizer
from benchd.schemas import Candidate, CooldownRecord, Event, Row, Sweep
from benchd.sensors.memory.sampler import MemorySampler
from benchd.sensors.suspend.sensor import open_clock
from benchd.sensors.thermal.sensor import ThermalSensor, open_sensor
from benchd.servers import affinity
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import RuntimeAdapter
from benchd.servers.supervisor import Server, ServerStartError, Supervisor
from benchd.store import Store, utcnow

#: Grace between SIGTERM and SIGKILL when the engine stops a server (cancel must finish within 2 s).
STOP_GRACE_S = 1.5


@dataclass(frozen=True)
class JobOutcome:
    state: Literal["succeeded", "failed"]
    error: str | None = None


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
        self.done = store.done_keys(job)
        self.plan = sweep.probe_plan()
        self.book = series_mod.SeriesBook(self.plan, store.rows(job))  # every cell's rows so far (resume)
        self.clock = open_clock()
        self.timeout_s = sweep.effective_probe_timeout_s()
        self.sizer = PromptSizer(job, sweep, self.timeout_s)
        self.prompts = self.sizer.prompts
        self.evals_done = {(e.candidate, e.task) for e in store.evals(job)}
        self.prompts_recorded = False
        self.client_pin = affinity.ClientPin()  # the sweep's pin_client: this (event loop) thread

    # -- events and rows ------------------------------------------------------------------------

    def emit(self, type_: str, **payload: Any) -> None:
        self.notify(self.store.append_event(self.job, type_, payload))

    def commit(self, row: Row) -> None:
        self.notify(self.store.commit_row(row))
        self.done.add((row.candidate, row.context, row.kind, row.probe))
        self.book.add(row)

    def pending(self, cand: Candidate, context: int, kind: str = "probe") -> list[int]:
        if kind == "sustained":
            return [0] if (cand.id, context, kind, 0) not in self.done else []
        return self.book.series(cand.id, context, kind).pending_floor()

    # -- the job --------------------------------------------------------------------------------

    async def run(self) -> JobOutcome:
        try:
            for cand in self.sweep.candidates:
                await self.run_candidate(cand)
            await self.run_sentinel()
        finally:
            await asyncio.shield(self.supervisor.stop_all())
            self.client_pin.release()
            self.energy.close()
        rows = self.store.rows(self.job)
        if any(r.status == "ok" for r in rows):
            return JobOutcome("succeeded")
        return JobOutcome("failed", "no probe succeeded; the rows say why")

    async def run_candidate(self, cand: Candidate) -> None:
        adapter = get_adapter(cand.runtime)
        problems = sweepcheck.adapter_problems(cand, self.sweep)
        groups = plan_groups(adapter, cand, self.sweep)
        if problems:
            for g in groups:
                self.fail_group(cand, g, "; ".join(p.message for p in problems), None)
            return
        for g in groups:
            if self.group_has_work(cand, g):
                await self.run_group(adapter, cand, g)
        host = visits.EngineHost(self)  # sessions and parallel levels: server starts of their own, nothing else resident
        await visits.sessions(host, cand)
        await visits.levels(host, cand)
        if groups and self.sweep.ready.starts:
            await self.measure_ready(cand, groups[0])

    async def measure_ready(self, cand: Candidate, g: Group) -> None:
        """`ready.starts` cold and as many warm starts of the candidate's server, alternating, each
        stopped once health answers: the time-to-ready axis's samples (no probe runs on them). A
        resumed job makes only the starts its events do not already hold."""
        made = sum(1 for e in self.store.events(self.job) if e.type == "server_ready"
                   and e.payload.get("candidate") == cand.id and e.payload.get("purpose") == "ready")
        for i in range(made, 2 * self.sweep.ready.starts):
            server = await self.start_server(cand, g, cold=i % 2 == 0, purpose="ready")
            if server is None:
                return
            await self.stop_server(server)

    async def run_sentinel(self) -> None:
        """Re-run the sweep's first cell (same candidate, context, probe count) to measure the drift."""
        cand, ctx = self.sweep.candidates[0], min(self.sweep.contexts)
        first, again = self.book.series(cand.id, ctx), self.book.series(cand.id, ctx, "sentinel")
        if self.sweep.sentinel_on() and first.values() and not again.done():
            adapter = get_adapter(cand.runtime)  # (no ok first run: nothing to compare, the runbook says so)
            g = next(g for g in plan_groups(adapter, cand, self.sweep) if ctx in g.contexts)
            await self.run_group(adapter, cand, Group(g.ctx_size, [ctx], False, False), kind="sentinel")

    def group_has_work(self, cand: Candidate, g: Group) -> bool:
        if any(self.book.series(cand.id, c).next_probe() is not None for c in g.contexts):
            return True
        if g.sustained and self.pending(cand, self.sustained_context(), "sustained"):
            return True
        if g.vision and self.vision_pending(cand):
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

    def fail_group(self, cand: Candidate, g: Group, error: str, exc: ServerStartError | None) -> None:
        """Every pending cell of a group becomes a failed row naming why the server is missing."""
        cells = [(c, "probe", p) for c in g.contexts for p in self.pending(cand, c)]
        if g.sustained:
            cells += [(self.sustained_context(), "sustained", p) for p in self.pending(cand, self.sustained_context(), "sustained")]
        if g.vision:
            cells += [(vc.context, "vision", n) for vc, n in self.vision_pending(cand)]
        for context, kind, p in cells:
            self.commit(build_row(
                Cell(self.job, cand, context, kind, p),  # type: ignore[arg-type]
                status="failed", started_at=utcnow(), server=ServerFacts(g.ctx_size, None, None), error=error,
                exit_status=exc.exit_status if exc else None, log_tail=exc.log_tail if exc else None,
            ))

    # -- servers --------------------------------------------------------------------------------

    def missing_models(self, cand: Candidate) -> str | None:
        """Checked before every server start: a model deleted after submit is named here, not left to
        the server's log tail ("exiting due to model loading error")."""
        paths = [("model file", cand.model)]
        if cand.spec is not None and cand.spec.draft_model:
            paths.append(("draft model file", cand.spec.draft_model))
        gone = [(what, p) for what, p in paths if not os.path.exists(p)]
        if not gone:
            return None
        queued = next((e.payload for e in self.store.events(self.job) if e.type == "job_queued"), {})
        at_submit = queued.get("missing_paths")
        return "; ".join(
            f"{what} {p} does not exist" if at_submit is None  # a job queued before this was recorded
            else f"{what} {p} no longer exists (it existed at submit)" if p not in at_submit
            else f"{what} {p} does not exist (nor did it at submit)" for what, p in gone)

    async def start_server(self, cand: Candidate, g: Group, *, cold: bool = False,
                           purpose: str = "sweep") -> Server | None:
        gone = self.missing_models(cand)
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
        pin = affinity.confirm(pin, server.pid)
        if pin.applied:
            self.client_pin.hold(pin.client_cpus)
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

    async def stop_server(self, server: Server) -> None:
        self.client_pin.release()
        info = await self.supervisor.stop(server)
        crashed = server.crashed
        self.emit("server_stopped", candidate=server.candidate.id, pid=server.pid,
                  exit_status=info.status if info else None, crashed=crashed is not None)

    async def run_group(self, adapter: RuntimeAdapter, cand: Candidate, g: Group, kind: str = "probe") -> None:
        server: Server | None = await self.start_server(cand, g)
        if server is None:
            return
        try:
            warm = self.sweep.warmup
            for context in g.contexts:
                while (p := (series := self.book.series(cand.id, context, kind)).next_probe()) is not None:
                    if not server.running:  # crashed or killed after a timeout: restart for the next cell
                        await self.stop_server(server)
                        server = await self.start_server(cand, g)
                        if server is None:
                            return
                        warm = self.sweep.warmup
                    cell = Cell(self.job, cand, context, kind, p)  # type: ignore[arg-type]
                    failed = await self.prepare(adapter, server, cell, warm)
                    warm = 0
                    row = failed or await self.run_probe(adapter, server, cell, self.sweep.gen_tokens, series)
                    self.commit(row)  # a failed prepare: the server broke before the probe, the row says how
                if series.rows:  # the cell is done: its verdict (shown by `tail`)
                    self.emit("cell_finished", candidate=cand.id, context=context, kind=kind, verdict=verdict.cell_verdict(series.rows, series.plan))
                warm = min(1, self.sweep.warmup)  # a server serving several contexts warms up at each new one
            if g.vision and server.running:
                await self.run_vision(adapter, server, cand)
            if g.sustained and server.running:
                ctx = self.sustained_context()
                for p in self.pending(cand, ctx, "sustained"):
                    self.commit(await self.run_probe(adapter, server, Cell(self.job, cand, ctx, "sustained", p), self.sweep.sustained.tokens))
            if g.evals and server.running:
                await self.run_evals(adapter, server, cand)
        finally:
            if server is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.stop_server(server))

    # -- probes ---------------------------------------------------------------------------------

    async def prepare(self, adapter: RuntimeAdapter, server: Server, cell: Cell, warm: int) -> Row | None:
        """Warm-up (`warm` probes: after a start; one at each new context of a multi-context server) and prompt sizing.

        A server that crashes or hangs here costs this cell (a failed / timeout row naming the cause,
        the server stopped so the next cell restarts it), never the job: found by the fault suite,
        where a SIGKILL/SIGSTOP right after `server_ready` ended the whole sweep with an engine error.
        """
        started_at = utcnow()
        facts = ServerFacts.of(server)
        budget = self.timeout_s * (self.sweep.warmup + 1)
        try:
            async with asyncio.timeout(budget):
                if warm:
                    await self.sizer.warm_up(adapter, server, cell.candidate, cell.context, warm)
                await self.sizer.size_prompts(adapter, server, cell.candidate, cell.context)
            return None
        except TimeoutError:
            await self.supervisor.stop(server, grace_s=0.5)
            return build_row(cell, status="timeout", started_at=started_at, server=facts, log_tail=server.log_tail(),
                             error=f"warm-up / prompt sizing timed out after {budget:g} s; the server was killed")
        except Exception as exc:
            row = await self.failed_row(cell, server, facts, None, started_at,
                                        f"warm-up / prompt sizing failed: {type(exc).__name__}: {exc}")
            if server.running:
                await self.supervisor.stop(server, grace_s=0.5)
            return row

    async def cool_down(self, adapter: RuntimeAdapter, server: Server, cell: Cell, series: CellSeries | None) -> CooldownRecord:
        self.emit("cooldown_started", candidate=cell.candidate.id, context=cell.context, probe=cell.probe, policy=self.sweep.cooldown.policy)
        record = await series_mod.extend_cooldown(  # after a throttle-suspect probe, with policy thermal
            await cooldown_mod.wait(self.sweep.cooldown, self.sensor), series, self.sweep.cooldown, self.plan,
            lambda: series_mod.check_rate(self.sizer, adapter, server, cell.candidate, cell.context, self.plan.metric))
        self.emit("cooldown_finished", candidate=cell.candidate.id, context=cell.context, probe=cell.probe, record=record)
        return record

    async def run_probe(self, adapter: RuntimeAdapter, server: Server, cell: Cell, gen_tokens: int,
                        series: CellSeries | None = None) -> Row:
        facts = ServerFacts(server.ctx_size, server.binary, server.version)
        prompt = await self.size_prompt(adapter, server, cell, facts)  # before the cooldown, not in the window
        if isinstance(prompt, Row):
            return prompt
        # the idle baseline: the mean power while cooling down
        cd, idle = await self.energy.over(self.cool_down(adapter, server, cell, series))
        started_at = utcnow()
        self.emit("probe_started", candidate=cell.candidate.id, context=cell.context, probe=cell.probe, kind=cell.kind)
        facts = ServerFacts.of(server)
        sampler = MemorySampler(server.pid, self.memory_rate_hz, model_paths=model_files(cell.candidate),
                                series=cell.kind == "sustained")
        watch = series_mod.Watch(self.clock, server.pid)  # a sleep or a stopped server invalidates the probe
        try:
            row = await self._probe(adapter, server, cell, gen_tokens, cd, started_at, facts, sampler, prompt, idle)
            return await watch.judge(row, series=series, plan=self.plan, sensor=self.sensor,
                                     target_celsius=self.sweep.cooldown.target_celsius)
        except asyncio.CancelledError:
            # A cancel or shutdown cut the probe short: store it as `aborted` (run again on resume).
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.gather(watch.cancel(), sampler.stop()))
            self.commit(build_row(cell, status="aborted", started_at=started_at, server=facts, cooldown=cd,
                                  error="cancelled while the probe was in flight"))
            raise

    async def size_prompt(self, adapter: RuntimeAdapter, server: Server, cell: Cell, facts: ServerFacts) -> Prompt | Row:
        """The cell's prompt, sized before its cooldown (the /tokenize round trips and their CPU fall
        before the wait, never inside the probe's window), or the row saying why it could not be."""
        cand, started_at = cell.candidate, utcnow()
        try:
            async with asyncio.timeout(self.timeout_s):  # a hung server must not stall sizing (SIGSTOP test)
                return await self.prompts.build(cell.context, f"{self.job}/{cand.id}/{cell.context}/{cell.kind}{cell.probe}",
                                                await self.sizer.counter(adapter, server), key=cand.id)
        except TimeoutError:
            await self.supervisor.stop(server, grace_s=0.5)
            return build_row(cell, status="timeout", started_at=started_at, server=facts,
                             error=f"probe timed out after {self.timeout_s:g} s while sizing the prompt (the server's "
                                   "tokenizer did not answer); the server was killed", log_tail=server.log_tail())
        except Exception as exc:  # the server (or its tokenizer) went away before the request
            return await self.failed_row(cell, server, facts, None, started_at, f"sizing the prompt failed: {type(exc).__name__}: {exc}")

    async def _probe(self, adapter: RuntimeAdapter, server: Server, cell: Cell, gen_tokens: int, cd: CooldownRecord,
                     started_at: str, facts: ServerFacts, sampler: MemorySampler, prompt: Prompt, idle: Delta) -> Row:
        cand = cell.candidate
        try:
            async with asyncio.timeout(self.timeout_s):
                counters = cand.spec is not None and adapter.reads_counters
                before = await probe.read_metrics(server.base_url) if counters else None
        except TimeoutError:
            await self.supervisor.stop(server, grace_s=0.5)
            return build_row(cell, status="timeout", started_at=started_at, server=facts, cooldown=cd,
                             error=f"probe timed out after {self.timeout_s:g} s reading /metrics before the request; "
                                   "the server was killed", log_tail=server.log_tail())
        except Exception as exc:  # the server went away before the request
            return await self.failed_row(cell, server, facts, cd, started_at, f"reading /metrics failed: {type(exc).__name__}: {exc}")
        sampler.reset_peak()
        await sampler.start()
        with self.energy.probe(idle, cell.kind == "sustained") as recording:
            result = await probe.run_chat(adapter, server.base_url, cand, prompt=prompt.text, max_tokens=gen_tokens,
                                          sampling=self.sweep.sampling, timeout_s=self.timeout_s,
                                          thinking=self.sweep.thinking, run_to_length=self.sweep.ignore_eos,
                                          marks=recording.marks)
        memory = await sampler.stop()
        norm = adapter.normalize(result, spec_configured=cand.spec is not None)
        if norm.prompt_tokens is not None:
            self.prompts.observe(prompt, norm.prompt_tokens)
        extra: dict[str, Any] = shortfall(adapter, cand, asked=gen_tokens, norm=norm, finish_reason=result.finish_reason,
                                          run_to_length=self.sweep.ignore_eos) if result.ok else {}
        sources: dict[str, str] = {"prompt": f"{self.sizer.method(prompt.method, server)}; target {cell.context} tokens"}
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
        status, error, tail = result.status, result.error, None
        if result.status == "timeout":
            await self.supervisor.stop(server, grace_s=0.5)
            error = f"{error}; the server was killed"
            tail = server.log_tail()
        elif server.crashed or (not result.ok and await server.wait_exit(0.3) is not None):
            return await self.failed_row(cell, server, facts, cd, started_at, error or "failed", norm, memory)
        elif result.ok and norm.cached_tokens not in (None, 0):
            status, error = "failed", f"prompt cache served {norm.cached_tokens} tokens: prompt throughput would be fake"
        elif not result.ok:
            tail = server.log_tail()
        return build_row(cell, status=status, started_at=started_at, server=facts, metrics=norm, memory=memory,
                         cooldown=cd, error=error, log_tail=tail, extra=extra, extra_sources=sources,
                         energy=recording.row(norm, result, self.sweep.sustained.window))

    async def failed_row(self, cell: Cell, server: Server, facts: ServerFacts, cd: CooldownRecord | None, started_at: str,
                         error: str, norm: Any = None, memory: Any = None) -> Row:
        """A failed row naming the cause: a crash (exit status + log tail, `server_crashed`) or the error."""
        info = server.crashed or await server.wait_exit(0.5)
        if info is None:
            return build_row(cell, status="failed", started_at=started_at, server=facts, metrics=norm, memory=memory,
                             cooldown=cd, error=error, log_tail=server.log_tail())
        self.emit("server_crashed", candidate=cell.candidate.id, phase="probe", exit_status=info.status,
                  log_tail=info.log_tail[-2000:])
        return build_row(cell, status="failed", started_at=started_at, server=facts, metrics=norm, memory=memory,
                         cooldown=cd, error=f"server crashed mid-probe ({info.status}): {error}",
                         exit_status=info.status, log_tail=info.log_tail)

    # -- image probes ---------------------------------------------------------------------------

    def vision_pending(self, cand: Candidate) -> list[tuple[vision.VisionCell, int]]:
        """(cell, row probe number) of the candidate's image probes not stored yet."""
        return [(vc, vc.probe_number(p)) for vc in vision.vision_cells(self.sweep, cand) for p in range(self.plan.min)
                if (cand.id, vc.context, "vision", vc.probe_number(p)) not in self.done]

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
        facts = ServerFacts(server.ctx_size, server.binary, server.version)
        prompt = await self.size_prompt(adapter, server, cell, facts)
        if isinstance(prompt, Row):
            return prompt
        probe_no = cell.probe % vision.VISION_PROBE_STRIDE

        async def pair(key: str, marks: Callable[[str], None] | None = None) -> vision.ImageProbe:
            return await vision.measure(
                adapter, server.base_url, cand, prompt=prompt.text, max_tokens=sweep.gen_tokens,
                generated=vision.make_images(sweep.sampling.seed, cand.id, vc.resolution, sweep.vision.images, key),
                sampling=sweep.sampling, timeout_s=self.timeout_s, thinking=sweep.thinking,
                run_to_length=sweep.ignore_eos, marks=marks)

        if warm:
            await pair(vc.key(probe_no) + "/warm-up")
        cd, idle = await self.energy.over(self.cool_down(adapter, server, cell, None))
        started_at = utcnow()
        self.emit("probe_started", candidate=cand.id, context=cell.context, probe=cell.probe, kind="vision")
        facts = ServerFacts.of(server)
        sampler = MemorySampler(server.pid, self.memory_rate_hz, model_paths=model_files(cand))
        sampler.reset_peak()
        await sampler.start()
        try:
            with self.energy.probe(idle, False) as recording:
                got = await pair(vc.key(probe_no), recording.marks)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(sampler.stop())
            self.commit(build_row(cell, status="aborted", started_at=started_at, server=facts, cooldown=cd,
                                  error="cancelled while the image probe was in flight"))
            raise
        memory = await sampler.stop()
        sources = {**got.sources, "prompt": f"{self.sizer.method(prompt.method, server)}; target {cell.context} "
                   "tokens of text beside the images"}
        status, error, tail = got.status, got.error, None
        if status == "timeout":
            await self.supervisor.stop(server, grace_s=0.5)
            error, tail = f"{error}; the server was killed", server.log_tail()
        elif server.crashed or (status != "ok" and await server.wait_exit(0.3) is not None):
            return await self.failed_row(cell, server, facts, cd, started_at, error or "failed", got.norm, memory)
        elif status != "ok":
            tail = server.log_tail()
        energy = recording.row(got.norm, got.image, sweep.sustained.window) if got.norm and got.image else None
        return build_row(cell, status=status, started_at=started_at, server=facts, metrics=got.norm, memory=memory,
                         cooldown=cd, error=error, log_tail=tail, extra=got.fields, extra_sources=sources,
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


async def run_job(job_id: str, sweep: Sweep, store: Store, config: Config, notify: Callable[[Event], None],
                  resume: bool = False) -> JobOutcome:
    """Run (or resume: rows already stored are skipped either way) one sweep to its end."""
    return await Engine(job_id, sweep, store, config, notify).run()
