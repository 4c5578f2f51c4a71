"""One probe against a running server, as a row (docs/architecture.md#the-sweep-engine). A timeout or an
error in any step is a row saying why, never the job's end; a cancel stores the probe as `aborted` and re-raises."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from benchd.engine import cooldown as cooldown_mod
from benchd.engine import probe, vision
from benchd.engine import series as series_mod
from benchd.engine.energy import EnergySession
from benchd.engine.metrics import sustained_summary
from benchd.engine.pool import ServerPool
from benchd.engine.prompts import Prompt
from benchd.engine.recorder import Recorder
from benchd.engine.rows import (
    EXTERNAL_CACHE_ALLOWANCE,
    Cell,
    Decision,
    Invalidation,
    ServerFacts,
    build_row,
    decide,
    model_files,
    shortfall,
)
from benchd.engine.series import CellSeries
from benchd.engine.sizing import PromptSizer
from benchd.probe_result import ProbeResult
from benchd.schemas import VISION_PROBE_STRIDE, Candidate, CooldownRecord, Row, Sweep
from benchd.sensors.energy.reader import Delta
from benchd.sensors.memory.sampler import MemorySampler
from benchd.sensors.suspend.sensor import SuspendClock
from benchd.sensors.thermal.sensor import ThermalSensor
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings, Normalized, RuntimeAdapter
from benchd.servers.server import Server
from benchd.store import utcnow

T = TypeVar("T")


class ProbeRunner(Protocol):
    """The probe steps designs and the tail ask for, as rows (`prepare`: None when fine; `probe` prepares if `warm`)."""

    async def prepare(self, server: Server, cell: Cell, warm: int) -> Row | None: ...

    async def probe(self, server: Server, cell: Cell, gen_tokens: int, series: CellSeries | None = None,
                    warm: int | None = None) -> Row: ...

    async def vision(self, server: Server, cell: Cell, vc: vision.VisionCell, warm: bool) -> Row: ...


@dataclass
class ProbeRun:
    """One probe in flight: its cell, server and series, and what is learned on the way."""

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


class Runner:
    """`ProbeRunner` over real servers."""

    def __init__(self, job: str, sweep: Sweep, recorder: Recorder, pool: ServerPool, sizer: PromptSizer,
                 energy: EnergySession, sensor: ThermalSensor, clock: SuspendClock, memory_rate_hz: float) -> None:
        self.job, self.sweep, self.recorder, self.pool, self.sizer = job, sweep, recorder, pool, sizer
        self.energy, self.sensor, self.clock, self.memory_rate_hz = energy, sensor, clock, memory_rate_hz
        self.plan = sweep.probe_plan()
        self.prompts = sizer.prompts
        self.timeout_s = sweep.effective_probe_timeout_s()

    async def guard(self, run: ProbeRun, step: Callable[[], Awaitable[T]], *, budget: float, timeout_text: str,
                    failure_text: str) -> T | Row:
        """One step within `budget` s: its result, or the row saying why not (the server stopped, restarted next)."""
        try:
            async with asyncio.timeout(budget):
                return await step()
        except TimeoutError:
            await self.pool.kill(run.server)
            return self.row(run, decide(result_status="timeout", error=timeout_text, killed=True),
                            log_tail=run.server.log_tail())
        except Exception as exc:
            row = await self.failed_row(run, f"{failure_text}: {type(exc).__name__}: {exc}")
            if run.server.running:
                await self.pool.kill(run.server)
            return row

    def run_of(self, server: Server, cell: Cell, gen_tokens: int, series: CellSeries | None = None) -> ProbeRun:
        return ProbeRun(get_adapter(cell.candidate.runtime), server, cell, gen_tokens, series, ServerFacts.of(server))

    async def prepare(self, server: Server, cell: Cell, warm: int) -> Row | None:
        """Warm-up (`warm` probes) and prompt sizing: None, or the failed row of this cell."""
        return await self._prepare(self.run_of(server, cell, self.sweep.gen_tokens), warm)

    async def _prepare(self, run: ProbeRun, warm: int) -> Row | None:
        adapter, server, cell = run.adapter, run.server, run.cell
        budget = self.timeout_s * (self.sweep.warmup + 1)

        async def step() -> None:
            if warm:
                await self.sizer.warm_up(adapter, server, cell.candidate, cell.context, warm)
            await self.sizer.size_prompts(adapter, server, cell.candidate, cell.context)

        got = await self.guard(run, step, budget=budget, failure_text="warm-up / prompt sizing failed",
                               timeout_text=f"warm-up / prompt sizing timed out after {budget:g} s")
        return got if isinstance(got, Row) else None

    async def sized_prompt(self, run: ProbeRun) -> Prompt | Row:
        """The probe's prompt sized through the server's tokenizer, or the guard's failed row."""
        return await self.guard(
            run, lambda: self.build_prompt(run.adapter, run.server, run.cell), budget=self.timeout_s,
            failure_text="sizing the prompt failed",
            timeout_text=f"probe timed out after {self.timeout_s:g} s while sizing the prompt (the server's "
                         "tokenizer did not answer)")

    async def probe(self, server: Server, cell: Cell, gen_tokens: int, series: CellSeries | None = None,
                    warm: int | None = None) -> Row:
        """One recorded probe: prepared (`warm` set), prompt sized, cooldown, the request watched, the row."""
        run = self.run_of(server, cell, gen_tokens, series)
        failed = None if warm is None else await self._prepare(run, warm)
        if failed is not None:
            return failed
        self.pool.hold_client_pin(cell.candidate.id)
        prompt = await self.sized_prompt(run)
        if isinstance(prompt, Row):
            return prompt
        run.prompt = prompt
        await self.begin(run)
        watch = series_mod.Watch(self.clock, server.pid)  # a sleep or a stopped server invalidates the probe
        try:
            row = await self.measure(run, watch)
            return await watch.annotate(row, series=series, plan=self.plan, sensor=self.sensor,
                                        target_celsius=self.sweep.cooldown.target_celsius)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(watch.cancel())
            self.recorder.commit(self.row(run, Decision("aborted", "cancelled while the probe was in flight")))
            raise

    async def begin(self, run: ProbeRun) -> None:
        """The cooldown (its energy the idle baseline), then the probe's start: clock and event."""
        cell, start = run.cell, self.energy.sample()
        run.cooldown = await self.cool_down(run)
        run.idle = self.energy.since(start)
        run.started_at = utcnow()
        self.recorder.emit("probe_started", candidate=cell.candidate.id, context=cell.context, probe=cell.probe,
                           kind=cell.kind, round=cell.place.round, visit=cell.place.visit)

    async def build_prompt(self, adapter: RuntimeAdapter, server: Server, cell: Cell) -> Prompt:
        cand = cell.candidate
        return await self.prompts.build(cell.context, f"{self.job}/{cand.id}/{cell.context}/{cell.kind}{cell.probe}",
                                        await self.sizer.counter(adapter, server), key=cand.id)

    async def cool_down(self, run: ProbeRun) -> CooldownRecord:
        """The policy's wait, then (after a throttle-suspect probe) its check probes, between the two events."""
        cell, policy = run.cell, self.sweep.cooldown
        events = cooldown_mod.CooldownEvents(self.recorder.emit, candidate=cell.candidate.id, context=cell.context,
                                             probe=cell.probe, kind=cell.kind)
        events.started(policy)
        record = await cooldown_mod.wait(policy, self.sensor)
        last = run.series.rows[-1] if run.series and run.series.rows else None
        checks = cooldown_mod.throttle_checks(policy, record, last=last, threshold_pct=self.plan.throttle_pct)
        while checks is not None and checks.due():
            checks.add(await self.check_rate(run.adapter, run.server, cell.candidate, cell.context))
            if checks.due():
                await asyncio.sleep(checks.pause())
        return events.finished(record if checks is None else checks.record())

    async def check_rate(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int) -> float | None:
        """An unrecorded check probe at the cell's context (≤ 32 tokens, the probes' thinking): its metric's rate."""
        prompt = await self.prompts.build(context, f"{self.job}/{cand.id}/{context}/check",
                                          await self.sizer.counter(adapter, server), key=cand.id)
        result = await probe.run_chat(adapter, server.base_url, cand, prompt=prompt.text,
                                      settings=ChatSettings.of(self.sweep, min(self.sweep.gen_tokens, 32), to_length=True),
                                      timeout_s=self.timeout_s)
        value = getattr(adapter.reader.normalize(result, spec_configured=cand.spec is not None), self.plan.metric, None)
        return float(value) if isinstance(value, (int, float)) else None

    async def measure(self, run: ProbeRun, watch: series_mod.Watch) -> Row:
        """The request itself, with the memory sampler and the energy marks around it, and its row."""
        adapter, server, cell, cand = run.adapter, run.server, run.cell, run.cell.candidate
        assert run.prompt is not None
        before = await self._counters_before(run)
        if isinstance(before, Row):
            return _invalidated(before, await watch.finish())
        sustained = cell.kind == "sustained"
        async with MemorySampler(server.pid, self.memory_rate_hz, model_paths=model_files(cand),
                                 series=sustained) as sampler:
            with self.energy.probe(run.idle, sustained) as recording:
                result = await probe.run_chat(adapter, server.base_url, cand, prompt=run.prompt.text,
                                              settings=ChatSettings.of(self.sweep, run.gen_tokens),
                                              timeout_s=self.timeout_s, marks=recording.client_marks)
        memory = sampler.result
        norm = adapter.reader.normalize(result, spec_configured=cand.spec is not None)
        if norm.prompt_tokens is not None:
            self.prompts.observe(run.prompt, norm.prompt_tokens)
        sources = self._sources(run, run.prompt, norm)
        if before is not None and result.ok:
            sources.update(adapter.reader.acceptance_check(before, await probe.read_metrics(server.base_url)))
        extra = self._extra(run, result, norm, sources)
        crashed, tail = await self._ended(server, result.status)
        if crashed:
            gone = await watch.finish()
            return await self.failed_row(run, result.error or "failed", norm, memory, gone)
        allowance = _cache_allowance(cand, norm.cached_tokens, sources)
        d = decide(result_status=result.status, error=result.error, cached_tokens=norm.cached_tokens if result.ok else None,
                   killed=result.status == "timeout", invalidation=await watch.finish(), cache_allowance=allowance)
        return self.row(run, d, metrics=norm, memory=memory, log_tail=tail, extra=extra, extra_sources=sources,
                        energy=recording.row(norm, result, self.sweep.sustained.window))

    async def _counters_before(self, run: ProbeRun) -> dict[str, float] | Row | None:
        """The server's counters before a speculative probe's request (None when not read), or a failed row."""
        counters = run.cell.candidate.spec is not None and run.adapter.reads_counters
        return await self.guard(
            run, lambda: probe.read_metrics(run.server.base_url) if counters else _none(), budget=self.timeout_s,
            failure_text="reading /metrics failed",
            timeout_text=f"probe timed out after {self.timeout_s:g} s reading /metrics before the request")

    def _extra(self, run: ProbeRun, result: ProbeResult, norm: Normalized, sources: dict[str, str]) -> dict[str, object]:
        """A probe row's shortfall fields, and a sustained row's window figures (their sources into `sources`)."""
        extra: dict[str, object] = shortfall(
            run.adapter, run.cell.candidate, asked=run.gen_tokens, norm=norm, finish_reason=result.finish_reason,
            run_to_length=self.sweep.ignore_eos) if result.ok else {}
        if run.cell.kind == "sustained":
            extra_sustained, more = sustained_summary(result.chunk_times, self.sweep.sustained.window, norm.gen_tokens)
            extra.update(extra_sustained, thermal_after=self.sensor.read())
            sources.update(more)
        return extra

    def _sources(self, run: ProbeRun, prompt: Prompt, norm: Normalized) -> dict[str, str]:
        """A probe row's sources for its prompt, thinking and load mode."""
        sources = {"prompt": f"{self.sizer.method(prompt.method, run.server)}; target {run.cell.context} tokens"}
        if "thinking" in norm.sources:
            sources["thinking"] = f"{norm.sources['thinking']}; sweep asked: {self.sweep.thinking}"
        load_mode = run.adapter.launcher.memory_note(run.cell.candidate)
        if load_mode:
            sources["mem_load_mode"] = load_mode
        return sources

    async def _ended(self, server: Server, status: str) -> tuple[bool, str | None]:
        """Whether the server died under a request, and the log tail its row keeps (a timeout kills it)."""
        if status == "timeout":
            await self.pool.kill(server)
            return False, server.log_tail()
        if server.crashed or (status != "ok" and await server.wait_exit(0.3) is not None):
            return True, None
        return False, None if status == "ok" else server.log_tail()

    async def failed_row(self, run: ProbeRun, error: str, norm: Any = None, memory: Any = None,
                         gone: Any = None) -> Row:
        """A failed row naming the cause: a crash (exit status + log tail, `server_crashed`) or the error."""
        server = run.server
        info = server.crashed or await server.wait_exit(0.5)
        if info is None:
            return self.row(run, decide(result_status="failed", error=error, invalidation=gone), metrics=norm,
                            memory=memory, log_tail=server.log_tail())
        self.recorder.emit("server_crashed", candidate=run.cell.candidate.id, phase="probe", exit_status=info.status,
                  log_tail=info.log_tail[-2000:])
        return self.row(run, decide(result_status="failed", error=error, crash=info.status, invalidation=gone),
                        metrics=norm, memory=memory, exit_status=info.status, log_tail=info.log_tail)

    def row(self, run: ProbeRun, d: Decision, **kw: Any) -> Row:
        """The probe's row with the status `decide` gave it."""
        row = build_row(run.cell, status=d.status, started_at=run.started_at, server=run.facts,
                        cooldown=run.cooldown, error=d.error, **kw)
        return msgspec.structs.replace(row, invalidated=d.invalidated) if d.invalidated else row

    async def vision(self, server: Server, cell: Cell, vc: vision.VisionCell, warm: bool) -> Row:
        """One image pair as a row (after an unrecorded warm pair when `warm`)."""
        cand, sweep = cell.candidate, self.sweep
        run = self.run_of(server, cell, sweep.gen_tokens)
        adapter = run.adapter
        prompt = await self.sized_prompt(run)
        if isinstance(prompt, Row):
            return prompt
        probe_no = cell.probe % VISION_PROBE_STRIDE

        async def pair(key: str, marks: Callable[[str], None] | None = None) -> vision.ImageProbe:
            images = await asyncio.to_thread(  # CPU-heavy PNG encoding, kept off the event loop
                vision.make_images, sweep.sampling.seed, cand.id, vc.resolution, sweep.vision.images, key)
            return await vision.measure(
                adapter, server.base_url, cand, prompt=prompt.text, generated=images,
                settings=ChatSettings.of(sweep), timeout_s=self.timeout_s, marks=marks)

        if warm:
            await pair(vc.key(probe_no) + "/warm-up")
        await self.begin(run)
        try:
            async with MemorySampler(server.pid, self.memory_rate_hz, model_paths=model_files(cand),
                                     series=False) as sampler:
                with self.energy.probe(run.idle, False) as recording:
                    got = await pair(vc.key(probe_no), recording.client_marks)
        except asyncio.CancelledError:
            self.recorder.commit(self.row(run, Decision("aborted", "cancelled while the image probe was in flight")))
            raise
        memory = sampler.result
        sources = {**got.sources, "prompt": f"{self.sizer.method(prompt.method, server)}; target {cell.context} "
                   "tokens of text beside the images"}
        crashed, tail = await self._ended(server, got.status)
        if crashed:
            return await self.failed_row(run, got.error or "failed", got.norm, memory)
        energy = recording.row(got.norm, got.image, sweep.sustained.window) if got.norm and got.image else None
        return self.row(run, decide(result_status=got.status, error=got.error, killed=got.status == "timeout"),
                        metrics=got.norm, memory=memory, log_tail=tail, extra=got.fields, extra_sources=sources,
                        energy=energy, extra_reasons=got.null_reasons)


async def _none() -> None:
    return None


def _invalidated(row: Row, gone: Invalidation | None) -> Row:
    """A step's failed row, invalidated when the machine slept or the server was stopped meanwhile."""
    if gone is None:
        return row
    d = decide(result_status=row.status, error=row.error, invalidation=gone)
    return msgspec.structs.replace(row, status=d.status, error=d.error, invalidated=d.invalidated)


def _cache_allowance(cand: Candidate, cached_tokens: int | None, sources: dict[str, str]) -> int:
    """The cached prompt tokens a probe may report and stay ok (an external server's), named in `sources`."""
    allowance = EXTERNAL_CACHE_ALLOWANCE if cand.external else 0
    if allowance and cached_tokens:
        sources["cached_tokens_allowed"] = (f"up to {allowance} cached tokens allowed: the chat template's shared "
                                            "header, served by the external server's own prompt cache")
    return allowance
