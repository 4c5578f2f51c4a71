"""The job's servers: which is resident, starting (or attaching to) one, stopping it, and whether servers
fit in memory side by side (docs/architecture.md#the-sweep-engine). Every start and stop is an event."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from benchd.config import Config
from benchd.engine.energy import EnergySession
from benchd.engine.groups import Group, plan_groups
from benchd.engine.prompts import PromptBuilder
from benchd.engine.recorder import Recorder
from benchd.engine.rows import model_files
from benchd.schemas import Candidate, Sweep, events
from benchd.sensors.memory import budget as budget_mod
from benchd.servers import affinity
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import CTX_MARGIN_TOKENS
from benchd.servers.server import Server, ServerStartError
from benchd.servers.supervisor import Supervisor
from benchd.stats.notation import fmt_bytes

#: Grace between SIGTERM and SIGKILL when the engine stops a server (cancel must finish within 2 s).
STOP_GRACE_S = 1.5
#: KV bytes per context token in the side-by-side fit check (8B-class fp16 GQA: 32 x 8 x 128 x 2 x 2).
KV_BYTES_PER_TOKEN = 128 * 1024


class ServerPool(Protocol):
    """What the designs, the probe runner and the tail ask of the job's servers."""

    budget: budget_mod.Budget

    async def ready(self, cand: Candidate, g: Group) -> Server | None:
        """The candidate's running server for `g` (started when needed), or None: it never got ready."""
        ...

    def warm_count(self, cand: str, context: int) -> int: ...

    async def start(self, cand: Candidate, g: Group, *, cold: bool = False, purpose: str = "sweep") -> Server | None: ...

    async def stop(self, server: Server) -> None: ...

    async def kill(self, server: Server) -> None:
        """Stop a server that hung or failed (short grace): the next visit restarts it."""
        ...

    async def release(self, cand: str) -> None: ...

    async def release_all(self, keep: int | None = None) -> None:
        """Stop every resident server (`keep`: but those whose group serves that context)."""
        ...

    async def release_others(self, cand: str) -> None:
        """Stop every resident server but the candidate's own."""
        ...

    def hold_client_pin(self, cand: str) -> None: ...

    def over_budget_estimate(self) -> str | None: ...

    def over_budget_measured(self) -> str | None: ...

    async def close(self) -> None: ...


@dataclass
class Resident:
    """A candidate's running server, the group it was started for and the contexts it warmed at."""

    server: Server
    group: Group
    warmed: set[int] = field(default_factory=set)


class Pool:
    """`ServerPool` over the supervisor: one resident server per candidate at most."""

    def __init__(self, job: str, sweep: Sweep, config: Config, recorder: Recorder, energy: EnergySession,
                 prompts: PromptBuilder) -> None:
        self.job, self.sweep, self.recorder, self.energy, self.prompts = job, sweep, recorder, energy, prompts
        self.supervisor = Supervisor(config, grace_s=STOP_GRACE_S)
        self.client_pin = affinity.ClientPin()  # the sweep's pin_client: this (event loop) thread
        self.client_cpus: dict[str, list[int] | None] = {}  # per candidate: its pinned server's client cores
        self.resident: dict[str, Resident] = {}
        self.never_started: set[tuple[str, int | None]] = set()
        self.prompts_recorded = False
        self.budget = budget_mod.read_budget()
        self.start_counts: dict[str, int] | None = None

    async def ready(self, cand: Candidate, g: Group) -> Server | None:
        """The resident server for group `g`, else a (re)start; None when it never got ready (not retried)."""
        res = self.resident.get(cand.id)
        if res is not None and (res.group != g or not res.server.running):
            await self.release(cand.id)  # crashed or killed after a timeout: restart for the next cell
            res = None
        if res is not None:
            return res.server
        if (cand.id, g.ctx_size) in self.never_started:
            return None
        server = await self.start(cand, g)
        if server is None:
            self.never_started.add((cand.id, g.ctx_size))
            return None
        self.resident[cand.id] = Resident(server, g)
        return server

    def next_start(self, cand: str) -> int:
        """The number of the candidate's next server start in this job (1 = its first; resume-safe)."""
        if self.start_counts is None:
            self.start_counts = {}
            for e in self.recorder.past(events.ServerReady):
                self.start_counts[e.candidate] = self.start_counts.get(e.candidate, 0) + 1
        n = self.start_counts.get(cand, 0) + 1
        self.start_counts[cand] = n
        return n

    def warm_count(self, cand: str, context: int) -> int:
        """Warm-up probes now: the sweep's count after a start, one at each new context, else none."""
        res = self.resident.get(cand)
        if res is None or context in res.warmed:
            return 0
        n = self.sweep.warmup if not res.warmed else min(1, self.sweep.warmup)
        res.warmed.add(context)
        return n

    async def release(self, cand: str) -> None:
        res = self.resident.pop(cand, None)
        if res is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.stop(res.server))

    async def release_all(self, keep: int | None = None) -> None:
        for cid, res in list(self.resident.items()):
            if keep is None or keep not in res.group.contexts:
                await self.release(cid)

    async def release_others(self, cand: str) -> None:
        for cid in [c for c in self.resident if c != cand]:
            await self.release(cid)

    async def close(self) -> None:
        await asyncio.shield(self.supervisor.stop_all())
        self.client_pin.release()

    def over_budget_estimate(self) -> str | None:
        """Before any start: why the candidates' files plus a KV estimate exceed the budget (None: they fit)."""
        if self.budget.bytes is None:
            return self.budget.source
        total = 0
        for cand in self.sweep.candidates:
            files = sum(_size(p) for p in model_files(cand))
            groups = plan_groups(get_adapter(cand.runtime), cand, self.sweep)
            ctx = max((g.ctx_size or max(g.contexts or [0]) for g in groups), default=0)
            total += files + ctx * KV_BYTES_PER_TOKEN
        if total > self.budget.bytes:
            return (f"model files + KV estimate ({KV_BYTES_PER_TOKEN // 1024} KiB per context token) {fmt_bytes(total)} "
                    f"> budget {fmt_bytes(self.budget.bytes)} ({self.budget.source})")
        return None

    def over_budget_measured(self) -> str | None:
        """After each warmed start: the resident servers' measured footprints against the budget."""
        if self.budget.bytes is None:
            return self.budget.source
        sizes = {cid: budget_mod.footprint_bytes(r.server.pid) or 0 for cid, r in self.resident.items()}
        total = sum(sizes.values())
        if total > self.budget.bytes:
            each = ", ".join(f"{c} {fmt_bytes(b)}" for c, b in sizes.items())
            return (f"the warmed servers' measured resident sets {fmt_bytes(total)} ({each}) > budget "
                    f"{fmt_bytes(self.budget.bytes)} ({self.budget.source})")
        return None

    def missing_models(self, cand: Candidate) -> str | None:
        """The candidate's model files that are gone (checked before every start)."""
        paths = [("model file", cand.model)]
        if cand.spec is not None and cand.spec.draft_model:
            paths.append(("draft model file", cand.spec.draft_model))
        gone = [(what, p) for what, p in paths if not os.path.exists(p)]
        if not gone:
            return None
        at_submit = self._missing_at_submit()
        return "; ".join(_gone_text(what, p, at_submit) for what, p in gone)

    def _missing_at_submit(self) -> list[str] | None:
        """The paths the job's `job_queued` event found missing (None: not recorded then)."""
        queued = next((events.payload(e) for e in self.recorder.store.events.page(self.job, limit=1)
                       if e.type == "job_queued"), None)  # seq 1
        return queued.missing_paths if isinstance(queued, events.JobQueued) and queued.missing_paths else None

    async def start(self, cand: Candidate, g: Group, *, cold: bool = False, purpose: str = "sweep") -> Server | None:
        gone = None if cand.external else self.missing_models(cand)
        if gone:
            self.recorder.fail_group(cand, g, gone, None)
            return None
        extra: dict[str, object] = {}
        if not self.prompts_recorded:  # the prompt corpus/template hashes, once per run, for the runbook
            extra["prompts"] = self.prompts.provenance()
            self.prompts_recorded = True
        emit = self.recorder.emit
        emit("server_starting", candidate=cand.id, runtime=cand.runtime, ctx_size=g.ctx_size, **extra)
        pin = affinity.plan(self.sweep.pin_client, *get_adapter(cand.runtime).launcher.server_threads(cand))
        try:
            server = await self.supervisor.start(self.job, cand, g.ctx_size, cpus=pin.server_cpus or None, cold=cold)
        except ServerStartError as exc:
            emit("server_crashed", candidate=cand.id, phase="startup", reason=exc.reason,
                 error=exc.message, exit_status=exc.exit_status, log_tail=exc.log_tail[-2000:])
            self.recorder.fail_group(cand, g, f"server never became ready ({exc.reason}): {exc.message}", exc)
            return None
        if server.external is not None:
            return self.attached(cand, g, server, purpose)
        pin = affinity.confirm(pin, server.pid)
        server.start_no = self.next_start(cand.id)
        self.client_cpus[cand.id] = list(pin.client_cpus) if pin.applied else None
        self.hold_client_pin(cand.id)
        emit("server_ready", candidate=cand.id, runtime=cand.runtime, pid=server.pid, port=server.port,
             ctx_size=server.ctx_size, binary=server.binary, version=server.version,
             version_source=server.version_source, ready_s=round(server.ready_s, 3), ready_note=server.ready_note,
             stalled_s=server.ready_stalled_s, server_stopped_s=server.ready_stopped_s, purpose=purpose,
             load_s=None if server.load_s is None else round(server.load_s, 3), load_note=server.load_note,
             cache=server.cache, cache_note=server.cache_note, cold=server.cold_requested,
             resident_before=server.resident_before, argv=server.argv,
             affinity=msgspec.to_builtins(pin), env=server.env_passed, env_removed=server.env_removed,
             fit=server.fit, layer_split=server.layer_split, split_note=server.split_note,
             energy=self.energy.restart(), start=server.start_no)
        return server

    def attached(self, cand: Candidate, g: Group, server: Server, purpose: str) -> Server:
        """An external server's handle; the group's contexts larger than one of its slots are failed."""
        found = server.external
        assert found is not None
        self.client_cpus[cand.id] = None
        self.hold_client_pin(cand.id)
        server.start_no = self.next_start(cand.id)
        self.recorder.emit("server_ready", candidate=cand.id, runtime=cand.runtime, pid=cand.pid, port=server.port,
                           ctx_size=server.ctx_size, binary=server.binary, version=server.version,
                           version_source=server.version_source, purpose=purpose,
                           external=msgspec.to_builtins(found), energy=self.energy.restart(),
                           start=server.start_no)
        if found.slot_ctx is None:
            return server
        need = self.sweep.gen_tokens + CTX_MARGIN_TOKENS
        big = [c for c in g.contexts if c + need > found.slot_ctx]
        if big:
            slots = f" ({found.total_slots} slots share its context)" if found.total_slots and found.total_slots > 1 else ""
            self.recorder.fail_group(
                cand, Group(g.ctx_size, big, False, False),
                f"context too large for the external server: {found.kind} at {found.url} holds "
                f"{found.slot_ctx} tokens per slot{slots} ({found.sources.get('slot_ctx', 'detected')}), "
                f"and this cell needs its context + gen_tokens + {CTX_MARGIN_TOKENS}", None)
        return server

    def hold_client_pin(self, cand: str) -> None:
        """Put the probe client on the cores the candidate's pinned server leaves free (all when unpinned)."""
        cpus = self.client_cpus.get(cand)
        if cpus:
            self.client_pin.hold(cpus)
        else:
            self.client_pin.release()

    async def stop(self, server: Server) -> None:
        if not self.resident:
            self.client_pin.release()
        info = await self.supervisor.stop(server)
        self.recorder.emit("server_stopped", candidate=server.candidate.id, pid=server.pid,
                           exit_status=info.status if info else None, crashed=server.crashed is not None)

    async def kill(self, server: Server) -> None:
        await self.supervisor.stop(server, grace_s=0.5)


def _gone_text(what: str, path: str, at_submit: list[str] | None) -> str:
    if at_submit is None:  # a job queued before this was recorded
        return f"{what} {path} does not exist"
    if path not in at_submit:
        return f"{what} {path} no longer exists (it existed at submit)"
    return f"{what} {path} does not exist (nor did it at submit)"


def _size(path: str) -> int:
    """A model file's size, or an MLX model dir's files summed (0 when unreadable)."""
    try:
        if os.path.isdir(path):
            return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
        return os.path.getsize(path)
    except OSError:
        return 0


