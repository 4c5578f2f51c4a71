"""The engine's fast test seam: a fake server pool and a fake probe runner whose rows come from a table.

A test double, because what it stands in for is the engine's own decisions (designs, stop rule, fallback,
resume, cancellation) at scale and in milliseconds: a real server cannot be made to report a chosen rate,
to be over a memory budget on demand, or to hang exactly at the n-th probe. What the real parts do is
tested against real servers (`*_real.py`); these fakes only answer the engine's questions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from benchd.engine.groups import Group
from benchd.engine.pool import Pool, Resident
from benchd.engine.rows import Cell, ServerFacts, build_row
from benchd.engine.series import CellSeries
from benchd.schemas import Candidate, Row, Sweep
from benchd.sensors.memory.budget import Budget

if TYPE_CHECKING:
    from benchd.engine.recorder import Recorder
    from benchd.engine.scheduler import Seam

STARTED_AT = "2026-01-01T00:00:00.000000Z"


@dataclass
class FakeServer:
    candidate: Candidate
    pid: int
    ctx_size: int | None
    running: bool = True
    crashed: None = None
    binary: str = "/fake/llama-server"
    version: str = "fake b1"
    fit: str | None = None
    fit_note: str = ""
    layer_split: str | None = None
    split_note: str = ""
    start_no: int | None = None


@dataclass
class Script:
    """What the fakes answer. `rate[cand]`: a candidate's gen_tps (a number, or a function of the probe's
    number); `never`: candidates whose server never gets ready; `fit`: how many servers fit side by side
    (by measurement; None: any number); `hang_at`: the n-th recorded probe (0-based) waits until cancelled;
    `failing`: candidates every probe of which fails; `mem[cand]`: its rows' peak memory in bytes (absent:
    no memory figure); `sustain[cand]`: its sustained rows' sustain ratio (absent: none)."""

    rate: dict[str, float | Callable[[int], float]] = field(default_factory=dict)
    never: set[str] = field(default_factory=set)
    fit: int | None = None
    fit_estimate: bool = True
    hang_at: int | None = None
    failing: set[str] = field(default_factory=set)
    mem: dict[str, int] = field(default_factory=dict)
    sustain: dict[str, Callable[[int], float]] = field(default_factory=dict)
    probes: list[tuple[str, int, str, int]] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    closed: int = 0
    hanging: asyncio.Event = field(default_factory=asyncio.Event)


class FakePool(Pool):
    """`ServerPool` with no processes: the real pool's residency (ready, warm counts, releases) over servers
    that are records; their events are the real ones' minimum."""

    def __init__(self, recorder: Recorder, script: Script) -> None:
        self.recorder, self.script, self.sweep = recorder, script, recorder.sweep
        self.resident: dict[str, Resident] = {}
        self.never_started: set[tuple[str, int | None]] = set()
        self.budget = Budget(bytes=1 << 40, source="fake budget")
        self.pids = 1000
        self.start_counts: dict[str, int] | None = None

    async def start(self, cand: Candidate, g: Group, *, cold: bool = False, purpose: str = "sweep") -> Any:
        self.recorder.emit("server_starting", candidate=cand.id, runtime=cand.runtime, ctx_size=g.ctx_size)
        self.script.starts.append(cand.id)
        if cand.id in self.script.never:
            self.recorder.emit("server_crashed", candidate=cand.id, phase="startup", reason="exited",
                               error="fake: exits at once", exit_status="exit 1", log_tail="")
            self.recorder.fail_group(cand, g, "server never became ready (exited): fake: exits at once", None)
            return None
        self.pids += 1
        n = self.next_start(cand.id)
        self.recorder.emit("server_ready", candidate=cand.id, runtime=cand.runtime, pid=self.pids, port=0,
                           ctx_size=g.ctx_size, binary="/fake/llama-server", version="fake b1",
                           version_source="fake", ready_s=1.0, purpose=purpose, cold=cold, start=n)
        return FakeServer(cand, self.pids, g.ctx_size, start_no=n)

    async def stop(self, server: Any) -> None:
        server.running = False
        self.recorder.emit("server_stopped", candidate=server.candidate.id, pid=server.pid, exit_status=None,
                           crashed=False)

    async def kill(self, server: Any) -> None:
        server.running = False

    def hold_client_pin(self, cand: str) -> None:
        pass

    def over_budget_estimate(self) -> str | None:
        return None if self.script.fit_estimate else "fake: the estimate does not fit"

    def over_budget_measured(self) -> str | None:
        fit = self.script.fit
        return None if fit is None or len(self.resident) <= fit else f"fake: {len(self.resident)} > {fit} servers"

    async def close(self) -> None:
        """As the supervisor's stop_all: every server gone, no event."""
        self.script.closed += 1
        for res in self.resident.values():
            res.server.running = False


class FakeRunner:
    """`ProbeRunner` whose rows come from the script's table (no cooldown, no prompt, no request)."""

    def __init__(self, recorder: Recorder, script: Script, sweep: Sweep) -> None:
        self.recorder, self.script, self.sweep = recorder, script, sweep

    async def prepare(self, server: Any, cell: Cell, warm: int) -> Row | None:
        return None

    async def probe(self, server: Any, cell: Cell, gen_tokens: int, series: CellSeries | None = None,
                    warm: int | None = None) -> Row:
        cand = cell.candidate.id
        n = len(self.script.probes)
        self.script.probes.append((cand, cell.context, cell.kind, cell.probe))
        self.recorder.emit("probe_started", candidate=cand, context=cell.context, probe=cell.probe, kind=cell.kind,
                           round=cell.place.round, visit=cell.place.visit)
        facts = ServerFacts(server.ctx_size, server.binary, server.version, start=server.start_no)
        if self.script.hang_at == n:
            self.script.hanging.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.recorder.commit(build_row(cell, status="aborted", started_at=STARTED_AT, server=facts,
                                               error="cancelled while the probe was in flight"))
                raise
        if cand in self.script.failing:
            return build_row(cell, status="failed", started_at=STARTED_AT, server=facts, error="fake: failed")
        rate = self.script.rate.get(cand, 100.0)
        value = rate(cell.probe) if callable(rate) else rate
        row = build_row(cell, status="ok", started_at=STARTED_AT, server=facts)
        return msgspec.structs.replace(row, gen_tps=value, prompt_tps=10 * value, ttft_ms=1000.0 / value,
                                       e2e_ms=gen_tokens * 1000.0 / value, prompt_tokens=cell.context,
                                       gen_tokens=gen_tokens, mem_peak_bytes=self.script.mem.get(cand),
                                       sustain_ratio=(ratio(cell.probe) if (ratio := self.script.sustain.get(cand))
                                                      and cell.kind == "sustained" else None))

    async def vision(self, server: Any, cell: Cell, vc: Any, warm: bool) -> Row:
        return build_row(cell, status="failed", started_at=STARTED_AT, server=None, error="fake: no images")


def seam(script: Script, sweep: Sweep) -> Seam:
    from benchd.engine.scheduler import Seam

    return Seam(pool=lambda rec: FakePool(rec, script), runner=lambda rec, pool: FakeRunner(rec, script, sweep))
