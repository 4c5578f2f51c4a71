"""The sweep's cells as the designs and the tail visit them (docs/architecture.md#the-sweep-engine)."""

from __future__ import annotations

from benchd.engine import sweepcheck, verdict
from benchd.engine.groups import Group, plan_groups
from benchd.engine.pool import ServerPool
from benchd.engine.recorder import Recorder
from benchd.engine.rows import Cell, Placement
from benchd.engine.runner import ProbeRunner
from benchd.engine.series import SeriesBook
from benchd.schemas import Candidate, Sweep
from benchd.servers.runtimes import get_adapter


class Cells:
    """One probe at a time: the next probe of a cell on its server, through the pool, the runner and the recorder."""

    def __init__(self, job: str, sweep: Sweep, book: SeriesBook, pool: ServerPool, runner: ProbeRunner,
                 recorder: Recorder) -> None:
        self.job, self.sweep, self.book, self.pool, self.runner, self.recorder = job, sweep, book, pool, runner, recorder

    async def visit(self, cand: Candidate, context: int, kind: str, place: Placement, group: Group | None = None) -> int:
        """One probe of a cell (1), or nothing (0: the cell is done, or its server could not be had)."""
        series = self.book.series(cand.id, context, kind)
        p = series.next_probe()
        if p is None:
            return 0
        g = group or self.group_for(cand, context)
        server = await self.pool.ready(cand, g)
        if server is None:
            return 0
        cell = Cell(self.job, cand, context, kind, p, place)  # type: ignore[arg-type]
        if kind == "sustained":
            row = await self.runner.probe(server, cell, self.sweep.sustained.tokens)
        else:
            row = await self.runner.probe(server, cell, self.sweep.gen_tokens, series,
                                          warm=self.pool.warm_count(cand.id, context))
        self.recorder.commit(row)
        return 1

    async def warm(self, cand: Candidate, context: int, place: Placement) -> None:
        """Start and warm the candidate's server for `context` before the rounds."""
        server = await self.pool.ready(cand, self.group_for(cand, context))
        p = self.book.series(cand.id, context).next_probe()
        if server is None or p is None:
            return
        cell = Cell(self.job, cand, context, "probe", p, place)
        failed = await self.runner.prepare(server, cell, self.pool.warm_count(cand.id, context))
        if failed is not None:
            self.recorder.commit(failed)

    def runnable(self, context: int) -> list[Candidate]:
        """Candidates whose runtime accepts them; a refused one's cells fail here, once, with the reasons."""
        out = []
        for cand in self.sweep.candidates:
            problems = sweepcheck.adapter_problems(cand, self.sweep)
            if not problems:
                out.append(cand)
                continue
            g = self.group_for(cand, context)
            self.recorder.fail_group(cand, Group(g.ctx_size, [context], False, False),
                                     "; ".join(p.message for p in problems), None)
        return out

    def groups(self, cand: Candidate) -> list[Group]:
        """The candidate's server starts (none, its cells failed, when its runtime refuses it)."""
        groups = plan_groups(get_adapter(cand.runtime), cand, self.sweep)
        problems = sweepcheck.adapter_problems(cand, self.sweep)
        if problems:
            for g in groups:
                self.recorder.fail_group(cand, g, "; ".join(p.message for p in problems), None)
            return []
        return groups

    def group_for(self, cand: Candidate, context: int) -> Group:
        return next(g for g in plan_groups(get_adapter(cand.runtime), cand, self.sweep) if context in g.contexts)

    def in_round(self, cand: str, context: int, rnd: int, *, valid: bool) -> int:
        """The candidate's rows of round `rnd` (`valid`: only those not invalidated by a sleep or a stopped server)."""
        return sum(1 for r in self.book.rows(cand, context) if r.round == rnd and (not valid or r.invalidated is None))

    def current_round(self, context: int) -> int:
        """The round a (resumed) context continues with: the last one any row records, else 0."""
        rounds = [r.round for c in self.sweep.candidates for r in self.book.rows(c.id, context) if r.round is not None]
        return max(rounds, default=0)

    def finished(self, cand: Candidate, context: int, kind: str) -> None:
        rows = self.book.rows(cand.id, context, kind)
        if rows:  # the cell's verdict (shown by `tail`)
            self.recorder.emit("cell_finished", candidate=cand.id, context=context, kind=kind,
                               verdict=verdict.cell_verdict(rows, self.book.series(cand.id, context, kind).plan))
