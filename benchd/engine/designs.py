"""The measuring orders (`Design`): interleaved, blocked, sequential; `choose` picks one per job, once.
What each order does and why: docs/measuring.md#measurement-design."""

from __future__ import annotations

from typing import Protocol

from benchd.engine.cells import Cells
from benchd.engine.plan import block_order, requested_order, round_order, round_plan
from benchd.engine.pool import ServerPool
from benchd.engine.racing import Race, after_round
from benchd.engine.recorder import Recorder
from benchd.engine.rows import SEQUENTIAL, Placement
from benchd.engine.stoprule import StopRule
from benchd.engine.tail import Tail
from benchd.schemas import Candidate, Sweep
from benchd.schemas.events import DesignChanged, DesignChosen


class Design(Protocol):
    name: str

    def contexts(self) -> list[int]:
        """The contexts this design runs one after the other (their rounds), before `finish`."""
        ...

    async def run(self, context: int) -> Design:
        """The rounds of one context; the design that runs the next context (a fallback, or itself)."""
        ...

    async def finish(self) -> None:
        """After the contexts: each candidate's tail."""
        ...


class Parts:
    """What every design works with (each constructed once per job)."""

    def __init__(self, sweep: Sweep, seed: int, cells: Cells, pool: ServerPool, recorder: Recorder, stop: StopRule,
                 tail: Tail, race: Race | None = None) -> None:
        self.sweep, self.seed, self.cells, self.pool, self.recorder, self.stop, self.tail = (
            sweep, seed, cells, pool, recorder, stop, tail)
        self.race = race or Race(on=False, alpha=0.0, order="")  # racing.py: who is still in

    def runnable(self, context: int) -> list[Candidate]:
        """The candidates the cells can run at `context`, still racing, whose rounds there have not ended."""
        ended = self.race.settled_at.get(context, {})
        return [c for c in self.cells.runnable(context) if c.id not in self.race.dropped and c.id not in ended]


class _Rounds:
    """The rounds of a context until the stop rule ends them, then the cells' verdicts."""

    name = ""
    bounded = False  # the rounds end at the plan's max_rounds (blocked)

    def __init__(self, parts: Parts) -> None:
        self.p = parts
        self.rplan = round_plan(parts.sweep, self.name)

    def contexts(self) -> list[int]:
        return sorted(self.p.sweep.contexts)

    async def finish(self) -> None:
        for cand in self.p.sweep.candidates:
            if cand.id not in self.p.race.dropped:  # the tail is for the race's survivors
                await self.p.tail.run(cand)

    def why(self) -> str:
        raise NotImplementedError

    def visits(self, ids: list[str], context: int, rnd: int) -> list[str]:
        raise NotImplementedError

    def size(self, rnd: int) -> int:
        return 1

    def owes(self, cand: str, context: int, rnd: int, size: int) -> bool:
        """Does round `rnd` still owe this candidate probes (a resumed round may hold some)?"""
        return self.p.cells.in_round(cand, context, rnd, valid=False) < size

    async def visit(self, cand: Candidate, context: int, place: Placement, size: int) -> int:
        return await self.p.cells.visit(cand, context, "probe", place)

    async def rounds(self, context: int, cands: list[Candidate], rnd: int) -> None:
        p = self.p
        while (stop := p.stop.reason(context, cands, rnd, self.rplan, bounded=self.bounded, design=self.name)) is None:
            needed, probed = await self._round(context, cands, rnd)
            rnd += 1
            if needed and not probed:
                stop = "no candidate could be probed in the last round"
                break
            cands = await self._look(context, cands, rnd)
        await self.after()
        p.recorder.emit("context_finished", context=context, rounds=rnd, design=self.name, why=stop)
        for cand in cands:
            p.cells.finished(cand, context, "probe")

    async def _round(self, context: int, cands: list[Candidate], rnd: int) -> tuple[bool, int]:
        """Round `rnd`: whether it owed anyone probes, and how many it ran."""
        p = self.p
        visits = self.visits([c.id for c in cands], context, rnd)
        size = self.size(rnd)
        needed = [cid for cid in visits if self.owes(cid, context, rnd, size)
                  and p.cells.book.series(cid, context).next_probe() is not None]
        if needed:
            p.recorder.emit("round_started", context=context, round=rnd, order=visits, seed=p.seed, design=self.name)
        probed = 0
        for pos, cid in enumerate(visits):
            if cid in needed:
                probed += await self.visit(next(c for c in cands if c.id == cid), context,
                                           Placement(rnd, pos, self.why()), size)
        return bool(needed), probed

    async def _look(self, context: int, cands: list[Candidate], rnd: int) -> list[Candidate]:
        """The race's look after a round; the candidates of the next one (the settled ones' cells finished)."""
        p = self.p
        racing = await after_round(p.race, context, cands, rnd, self.rplan,
                                   [c.id for c in cands if not p.stop.active(c, context)],
                                   p.recorder.emit, p.pool.release)
        for cand in cands:
            if cand.id in p.race.settled_at.get(context, {}):
                p.cells.finished(cand, context, "probe")
        return racing

    async def after(self) -> None:
        """When a context's rounds end."""


class Blocked(_Rounds):
    name = "blocked"
    bounded = True

    def why(self) -> str:
        return (f"order blocked: round = the block (one server start per candidate), visit = its turn "
                f"({self.p.sweep.rounds or 3} rounds asked)")

    def visits(self, ids: list[str], context: int, rnd: int) -> list[str]:
        return block_order(ids, rnd)

    def size(self, rnd: int) -> int:
        return self.rplan.block_size(rnd)

    def owes(self, cand: str, context: int, rnd: int, size: int) -> bool:
        """A block owes `size` valid probes (an invalidated one is re-run on the same start)."""
        return self.p.cells.in_round(cand, context, rnd, valid=True) < size

    async def run(self, context: int) -> Design:
        cands = self.p.runnable(context)
        await self.p.pool.release_all()
        await self.rounds(context, cands, self.p.cells.current_round(context))
        return self

    async def visit(self, cand: Candidate, context: int, place: Placement, size: int) -> int:
        """One block on a fresh server start: probes until it holds `size` valid ones, the server stopped."""
        assert place.round is not None
        await self.p.pool.release_all()
        probed = 0
        while self.p.cells.in_round(cand.id, context, place.round, valid=True) < size:
            n = await self.p.cells.visit(cand, context, "probe", place)
            if not n:
                break
            probed += n
        await self.p.pool.release(cand.id)
        return probed

    async def after(self) -> None:
        await self.p.pool.release_all()


class Interleaved(_Rounds):
    """Its invalidated probe is re-run in a later round (the cell is not done)."""

    name = "interleaved"

    @property
    def per_round(self) -> bool:
        """A fresh server start for every visit (`starts = "round"`)."""
        return self.p.sweep.starts_mode() == "round"

    def why(self) -> str:
        starts = ("a fresh server start per candidate every round" if self.per_round
                  else "one server start per candidate, resident for the rounds")
        return f"order interleaved: round and visit from the job's seeded round orders (seed {self.p.seed}); {starts}"

    def visits(self, ids: list[str], context: int, rnd: int) -> list[str]:
        return round_order(ids, seed=self.p.seed, context=context, round_=rnd)

    async def visit(self, cand: Candidate, context: int, place: Placement, size: int) -> int:
        """`starts = "round"`: the visit's own server start, every other server stopped first."""
        if not self.per_round:
            return await super().visit(cand, context, place, size)
        await self.p.pool.release_all()
        probed = await self.p.cells.visit(cand, context, "probe", place)
        await self.p.pool.release(cand.id)
        return probed

    async def after(self) -> None:
        if self.per_round:
            await self.p.pool.release_all()

    async def run(self, context: int) -> Design:
        """Start and warm every candidate's server (unless `starts = "round"`), then run the rounds; blocked
        instead (`design_changed`) when the warmed servers exceed the budget."""
        p = self.p
        cands = p.runnable(context)
        first = p.cells.current_round(context)
        if self.per_round:
            await p.pool.release_all()
            await self.rounds(context, cands, first)
            return self
        await p.pool.release_all(keep=context)  # servers of the previous context that do not serve this one
        order = self.visits([c.id for c in cands], context, first)
        for cand in sorted(cands, key=lambda c: order.index(c.id)):
            if p.stop.active(cand, context):
                await p.cells.warm(cand, context, Placement(first, order.index(cand.id), self.why()))
            over = p.pool.over_budget_measured()
            if over:
                await p.pool.release_all()
                p.recorder.emit("design_changed", order="blocked", context=context,
                                plan=round_plan(p.sweep, "blocked").text(),
                                why=f"interleaved fell back to blocked at context {context}: {over}")
                return await Blocked(p).run(context)
        await self.rounds(context, cands, first)
        return self


class Sequential:
    name = "sequential"

    def __init__(self, parts: Parts) -> None:
        self.p = parts

    def contexts(self) -> list[int]:
        return []

    async def run(self, context: int) -> Design:
        return self

    async def finish(self) -> None:
        """One candidate after the other: each of its server starts, its cells' probes, then its tail."""
        p = self.p
        for cand in p.sweep.candidates:
            groups = p.cells.groups(cand)
            for i, g in enumerate(groups):
                for context in g.contexts:
                    while await p.cells.visit(cand, context, "probe", SEQUENTIAL, group=g):
                        pass
                    p.cells.finished(cand, context, "probe")
                if i < len(groups) - 1:  # the last start also serves the tail
                    await p.pool.release(cand.id)
            await p.tail.run(cand)


DESIGNS: dict[str, type[Blocked] | type[Interleaved] | type[Sequential]] = {
    "interleaved": Interleaved, "blocked": Blocked, "sequential": Sequential}


def pair_stop(sweep: Sweep) -> bool:
    """Does the pair stop rule apply (adaptive probes, more than one candidate, not sequential)?"""
    return sweep.probe_plan().adaptive and len(sweep.candidates) > 1 and requested_order(sweep) != "sequential"


def _first_choice(parts: Parts) -> tuple[str, str]:
    """The order a new job runs and why: the asked one, blocked when servers resident side by side would not fit."""
    sweep = parts.sweep
    order = requested_order(sweep)
    why = f"order {order} asked for in the sweep" if sweep.order else "the default order"
    if len(sweep.candidates) == 1 and order != "sequential":
        why += "; one candidate: nothing to interleave, its probes run back to back"
    if order == "interleaved" and len(sweep.candidates) > 1 and sweep.starts_mode() == "once":
        over = parts.pool.over_budget_estimate()
        if over:
            order, why = "blocked", f"{why}, but the servers do not fit side by side: {over}"
    return order, why


def choose(parts: Parts) -> Design:
    """The order that runs and why (recorded once; a resumed job keeps what it decided)."""
    sweep, rec = parts.sweep, parts.recorder
    changed, chosen = rec.past(DesignChanged), rec.past(DesignChosen)
    if changed or chosen:  # (a change always follows the choice)
        return DESIGNS[changed[-1].order if changed else chosen[-1].order](parts)
    order, why = _first_choice(parts)
    budget = parts.pool.budget
    rec.emit("design_chosen", order=order, asked=sweep.order, why=why, seed=parts.seed, plan=round_plan(sweep, order).text(),
             budget_bytes=budget.bytes, budget_source=budget.source, drift_protected=order != "sequential")
    return DESIGNS[order](parts)
