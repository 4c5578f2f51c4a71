"""The sweep engine: one job, run in-process, as the plan of visits `Engine.run` reads top to bottom.
Durability and resume: docs/architecture.md#sweep-engine-contracts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from benchd.config import Config
from benchd.engine import designs, kld, racing, sweepcheck
from benchd.engine.cells import Cells
from benchd.engine.energy import EnergySession
from benchd.engine.evalvisit import EvalVisits
from benchd.engine.plan import job_seed
from benchd.engine.pool import Pool, ServerPool
from benchd.engine.recorder import Recorder
from benchd.engine.runner import ProbeRunner, Runner
from benchd.engine.series import SeriesBook
from benchd.engine.sizing import PromptSizer
from benchd.engine.stoprule import StopRule
from benchd.engine.tail import Tail, VisitHost
from benchd.schemas import Event, Sweep
from benchd.sensors.suspend.sensor import open_clock
from benchd.sensors.thermal.sensor import ThermalSensor, open_sensor
from benchd.store import Store


@dataclass(frozen=True)
class JobOutcome:
    state: Literal["succeeded", "failed"]
    error: str | None = None


@dataclass(frozen=True)
class Seam:
    """Replacements for the parts that talk to servers (tests: a fake pool and runner, rows from a table)."""

    pool: Callable[[Recorder], ServerPool]
    runner: Callable[[Recorder, ServerPool], ProbeRunner]


class Engine:
    """One job's collaborators, each constructed with only what it touches, and the plan that runs them."""

    def __init__(self, job: str, sweep: Sweep, store: Store, config: Config, notify: Callable[[Event], None], *,
                 sensor: ThermalSensor | None = None, memory_rate_hz: float = 10.0,
                 seam: Seam | None = None) -> None:
        self.job, self.sweep, self.store, self.config, self.memory_rate_hz = job, sweep, store, config, memory_rate_hz
        sensor = sensor or open_sensor()
        self.energy = EnergySession()  # the counter ($BENCHD_POWERCAP_ROOT in tests), reopened per server start
        self.book = SeriesBook(sweep.probe_plan(), store.results.iter_rows(job), ci_stop=not designs.pair_stop(sweep),
                               sustained_runs=sweep.sustained.runs)
        self.recorder = Recorder(job, sweep, store, notify, self.book)
        self.race = racing.open_race(sweep, designs.pair_stop(sweep), store.events.iterate(job), store.results.iter_rows(job))
        self.recorder.race = self.race
        sizer = PromptSizer(job, sweep, sweep.effective_probe_timeout_s())
        self.pool: ServerPool = (seam.pool(self.recorder) if seam else
                                 Pool(job, sweep, config, self.recorder, self.energy, sizer.prompts))
        self.runner: ProbeRunner = (seam.runner(self.recorder, self.pool) if seam else
                                    Runner(job, sweep, self.recorder, self.pool, sizer, self.energy, sensor,
                                           open_clock(), memory_rate_hz))
        self.cells = Cells(job, sweep, self.book, self.pool, self.runner, self.recorder)
        self.evals = EvalVisits(job, sweep, config, self.recorder)
        host = VisitHost(job, sweep, self.recorder, self.pool, sizer, sensor, memory_rate_hz)
        self.tail = Tail(job, sweep, self.cells, self.pool, self.runner, self.recorder, self.evals, host)
        stop = StopRule(sweep, self.book, pairs=designs.pair_stop(sweep))
        stop.race = self.race
        self.parts = designs.Parts(sweep, job_seed(job), self.cells, self.pool, self.recorder, stop, self.tail,
                                   self.race)

    async def run(self) -> JobOutcome:
        """The design's contexts (its rounds), every candidate's tail, the drift sentinel, then `[kld]`."""
        try:
            design = designs.choose(self.parts)
            for context in design.contexts():
                design = await design.run(context)
            await design.finish()
            await self.tail.sentinel(self.race.dropped)
            await kld.tail_step(self.job, self.sweep, self.config, self.recorder, self.pool, self.memory_rate_hz)
        finally:
            await self.pool.close()
            self.energy.close()
        if self.store.results.has_ok_row(self.job):
            return JobOutcome("succeeded")
        return JobOutcome("failed", "no probe succeeded; the rows say why")


async def run_job(job_id: str, sweep: Sweep, store: Store, config: Config, notify: Callable[[Event], None],
                  *, seam: Seam | None = None) -> JobOutcome:
    """Run (or resume) one sweep, its candidate matrices expanded, to its end. `seam`: test fakes."""
    expanded = sweepcheck.expand(sweep)
    if expanded.problems:
        return JobOutcome("failed", "; ".join(p.message for p in expanded.problems))
    return await Engine(job_id, expanded.sweep, store, config, notify, seam=seam).run()
