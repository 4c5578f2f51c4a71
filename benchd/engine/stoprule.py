"""When the rounds of a context end (docs/measuring.md#measurement-design)."""

from __future__ import annotations

from benchd.engine import verdict
from benchd.engine.plan import RoundPlan
from benchd.engine.racing import Race
from benchd.engine.series import SeriesBook
from benchd.schemas import Candidate, Row, Sweep
from benchd.stats import stop


class StopRule:
    """The stop rule over the job's progress record; `pairs` is False for one candidate or `sequential`."""

    def __init__(self, sweep: Sweep, book: SeriesBook, *, pairs: bool) -> None:
        self.sweep, self.book, self.pairs = sweep, book, pairs
        self.plan = sweep.probe_plan()
        self.race: Race | None = None  # racing (the engine sets it): one candidate left ends the rounds

    def active(self, cand: Candidate, context: int) -> bool:
        return self.book.series(cand.id, context).next_probe() is not None

    def reason(self, context: int, cands: list[Candidate], rnd: int, rplan: RoundPlan, *, bounded: bool,
               design: str) -> str | None:
        """Why the rounds of a context end now (a fixed count done, every pair resolved at a planned look,
        `max`, or a single candidate's CI-width stop), or None. `bounded`: ends at `rplan.max_rounds`."""
        if not any(self.active(c, context) for c in cands):
            return self._cells_done(cands, context)
        if bounded and rnd >= rplan.max_rounds:
            return f"max {rplan.max_rounds} blocked rounds reached"
        if not self.pairs or rnd < rplan.min_rounds:
            return None
        if (alone := self._alone(cands, rnd)) is not None:
            return alone
        per = {c.id: self.round_rows(c.id, context) for c in cands}
        why = stop.stop_reason(per, rnd, min_rounds=rplan.min_rounds, max_rounds=rplan.max_rounds, order=design,
                               sweep=self.sweep)
        return why if why is not None else self._settled(context, cands, rnd, rplan)

    def _cells_done(self, cands: list[Candidate], context: int) -> str:
        """Why the rounds end when no candidate's cell needs another probe."""
        if not self.plan.adaptive:
            return f"fixed count: every candidate has its {self.plan.min} probes"
        if len(cands) == 1:
            v = verdict.cell_verdict(self.book.rows(cands[0].id, context), self.plan)
            return f"single candidate: {v.reason}"
        return f"max {self.plan.max} probes reached or no ok value to compare"

    def _alone(self, cands: list[Candidate], rnd: int) -> str | None:
        """Why the rounds end when the others left the race (None: they did not)."""
        if self.race is not None and len(cands) == 1 and self.race.dropped:
            return f"one candidate left in the race ({cands[0].id}) after {rnd} rounds"
        return None

    def _settled(self, context: int, cands: list[Candidate], rnd: int, rplan: RoundPlan) -> str | None:
        """Racing: why undecided pairs the rounds left cannot resolve end the rounds (None: go on)."""
        if self.race is None:
            return None
        return self.race.settled(rnd, self.race.cells(context, cands), rplan.min_rounds, rplan.max_rounds)

    def round_rows(self, cand: str, context: int) -> list[Row]:
        """The candidate's probe rows of the context that the stop rule compares."""
        return [r for r in self.book.rows(cand, context)
                if r.round is not None and r.status == "ok" and r.invalidated is None and not r.short
                and getattr(r, self.plan.metric, None)]
