"""Racing: at each look of the stop rule, a candidate another one dominates leaves the race.

`Race` holds who left, when, by whom and on which axes. The engine asks it at each look (after each round
from the plan's `min` on, interleaved or blocked) with every candidate's valid probe rows of the context so
far; it asks the one dominance function (`benchd.stats.comparison.dominance`, the Pareto view's question) of every pair of the
candidates still in the race, over the per-probe axes both sides measured, paired by round as the order
allows, at α / L (L = the looks a context may have: the α of the whole race is spent over its looks). A
candidate is dropped only when a pair's answer names a winner (every axis compared resolved: different or
tied, none unresolved), never on an undecided look; one that no longer has a cell to run and no ok value
(its server did not start) leaves too, by benchd, with the reason. A dropped candidate gets no more rounds,
no larger context and no tail (sessions, evals, levels, sustained run, time to ready).

Hooks: `open_race` (the engine, once per job), `Race.add` (the recorder, every committed row), `after_round`
(the designs' rounds, at each look), `Race.alive` (the designs: who runs the next context and the tail).
Resume: the drops and the rows a look reads are rebuilt from the job's events and rows.
Reasons and facts: docs/measuring.md#racing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benchd.engine.plan import RoundPlan, requested_order, round_plan
from benchd.schemas import Candidate, Row, Sweep
from benchd.stats.axes import probe_axes
from benchd.stats.comparison import ALPHA, PairDominance, dominance, paired_samples
from benchd.stats.stop import RESOLVED, look_alpha, looks, stuck_axes
from benchd.store import candidate_planned, planned_probes

#: The per-probe axes a look compares (the Pareto view's core axes a probe row carries).
PROBE_AXES = tuple(a.name for a in probe_axes() if a.name in Row.__struct_fields__)
#: The race's α: the Pareto view's, split over the stop rule's planned looks (`benchd.stats.stop.look_alpha`).
RACE_ALPHA = ALPHA
#: What leaving without a dominator says in `by`.
BY_BENCHD = "benchd"


@dataclass(frozen=True)
class Drop:
    """One candidate leaving the race: at `context` after `round` rounds (the look), `by` the candidates that
    dominate it (each with the axes it is better on), the dominance texts, the α of the look; `why` when
    benchd took it out (no dominator)."""

    candidate: str
    context: int
    round: int
    by: dict[str, list[str]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    alpha: float | None = None
    why: str | None = None
    #: The candidate's planned rows (low and high end of the plan) it will not run now; the job's planned
    #: rows from this drop on (`benchd.store.planned_probes` less every drop's unrun rows so far).
    unrun_rows: int = 0
    unrun_rows_max: int = 0
    planned_rows: int | None = None
    planned_rows_max: int | None = None

    def payload(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "context": self.context, "round": self.round,
                "by": sorted(self.by) or [BY_BENCHD], "better_on": self.by, "texts": self.texts,
                "alpha": self.alpha, "why": self.why or self.summary(), "unrun_rows": self.unrun_rows,
                "unrun_rows_max": self.unrun_rows_max, "planned_rows": self.planned_rows,
                "planned_rows_max": self.planned_rows_max}

    def summary(self) -> str:
        if self.why:
            return self.why
        return "; ".join(f"dominated by {b} (better on {', '.join(axes)})" for b, axes in sorted(self.by.items()))

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> Drop:
        return cls(candidate=p["candidate"], context=p["context"], round=p["round"], by=dict(p.get("better_on") or {}),
                   texts=dict(p.get("texts") or {}), alpha=p.get("alpha"),
                   why=p.get("why") if not p.get("better_on") else None, unrun_rows=int(p.get("unrun_rows") or 0),
                   unrun_rows_max=int(p.get("unrun_rows_max") or 0), planned_rows=p.get("planned_rows"),
                   planned_rows_max=p.get("planned_rows_max"))


@dataclass(frozen=True)
class Settle:
    """One candidate's rounds of a context ending at a look while others go on (`Race.settle`): every pair
    of it with the candidates still racing there resolved or futile, in the look's words (`pairs`: the
    other candidate -> words), at the look's α."""

    candidate: str
    context: int
    round: int
    alpha: float
    pairs: dict[str, str]

    def payload(self) -> dict[str, object]:
        return {"candidate": self.candidate, "context": self.context, "round": self.round, "alpha": self.alpha,
                "pairs": self.pairs}


@dataclass
class Race:
    """The race of one job (`on` False: `look` never drops anyone)."""

    on: bool
    alpha: float
    margin_pct: float
    order: str
    dropped: dict[str, Drop] = field(default_factory=dict)
    #: (candidate, context) -> the valid probe rows so far, of the axes a look compares (`add`).
    rows: dict[tuple[str, int], dict[int, Row]] = field(default_factory=dict)
    #: The sweep whose planned rows a drop subtracts from (None: no planned rows in the drops).
    sweep: Sweep | None = None
    #: (candidate, context, kind) -> the probe numbers of its stored rows that count as done (not aborted).
    stored: dict[tuple[str, int, str], set[int]] = field(default_factory=dict)
    #: context -> {candidate: the round its rounds there ended} (`settle`).
    settled_at: dict[int, dict[str, int]] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        """Keep what a look reads of a committed probe row (identity, round and the compared axes);
        a row that does not count (failed, short, invalidated, outside the rounds) is forgotten. Every
        stored row that counts as done (not aborted) is counted, for the rows a dropped candidate leaves unrun."""
        if not self.on:
            return
        done = self.stored.setdefault((row.candidate, row.context, row.kind), set())
        if row.status == "aborted":
            done.discard(row.probe)
        else:
            done.add(row.probe)
        if row.kind != "probe":
            return
        cell = self.rows.setdefault((row.candidate, row.context), {})
        if row.round is None or row.status != "ok" or row.invalidated is not None or row.short:
            cell.pop(row.probe, None)
            return
        cell[row.probe] = Row(job=row.job, candidate=row.candidate, runtime=row.runtime, context=row.context,
                              kind=row.kind, probe=row.probe, status=row.status, round=row.round,
                              start=row.start, **{a: getattr(row, a) for a in PROBE_AXES})

    def cell_rows(self, candidate: str, context: int) -> list[Row]:
        return [r for _, r in sorted(self.rows.get((candidate, context), {}).items())]

    def resume(self, payloads: Iterable[Mapping[str, Any]]) -> None:
        for p in payloads:
            drop = Drop.from_payload(p)
            self.dropped.setdefault(drop.candidate, drop)

    def alive(self, ids: Iterable[str]) -> list[str]:
        return [c for c in ids if c not in self.dropped]

    def look(self, context: int, rnd: int, rows: Mapping[str, Sequence[Row]], done: Iterable[str] = (),
             compare: bool = True) -> list[Drop]:
        """The drops of this look. `rows`: each racing candidate's valid probe rows of the context; `done`:
        the candidates with no cell left to run in it (a failed start, or every probe spent); `compare`
        False (a round that is not a planned look): only those with no ok probe leave, no pair is compared."""
        if not self.on:
            return []
        alive = self.alive(rows)
        finished = set(done)
        out = [Drop(candidate=c, context=context, round=rnd, why="no ok probe at this context (its server did "
                    "not start or every probe failed: the rows say why); it leaves the race")
               for c in alive if c in finished and not rows[c]]
        racing = [c for c in alive if rows[c]]
        if compare and len(racing) > 1:
            beaten: dict[str, Drop] = {}
            for i, a in enumerate(racing):
                for b in racing[i + 1:]:
                    d = self.pair(rows[a], rows[b], a, b)
                    if d.winner is None:
                        continue
                    win, lose = (a, b) if d.winner == "a" else (b, a)
                    prev = beaten.get(lose) or Drop(candidate=lose, context=context, round=rnd, alpha=self.alpha)
                    prev.by[win] = list(d.better_on)
                    prev.texts[win] = d.text
                    beaten[lose] = prev
            if len(beaten) < len(racing):  # someone stays (a cycle of verdicts drops nobody)
                out += [beaten[c] for c in racing if c in beaten]
        out = [self.with_plan(drop) for drop in out]
        return out

    def unrun(self, candidate: str, bound: str) -> int:
        """The candidate's planned rows (`benchd.store.candidate_planned`) not stored yet: per context its
        probe count less its probe rows there, its sustained row and image probes less those stored."""
        if self.sweep is None:
            return 0
        cand = next((c for c in self.sweep.candidates if c.id == candidate), None)
        if cand is None:
            return 0
        plan = candidate_planned(self.sweep, cand.vision, "max" if bound == "max" else "min")
        per_cell = plan["probe"] // max(1, len(self.sweep.contexts))
        left = sum(max(0, per_cell - len(self.stored.get((candidate, ctx, "probe"), ()))) for ctx in self.sweep.contexts)
        for kind in ("sustained", "vision"):
            have = sum(len(v) for (c, _, k), v in self.stored.items() if c == candidate and k == kind)
            left += max(0, plan[kind] - have)
        return left

    def with_plan(self, drop: Drop) -> Drop:
        """The drop with its unrun rows and the job's planned rows after it, recorded as dropped."""
        if self.sweep is not None:
            lo, hi = self.unrun(drop.candidate, "min"), self.unrun(drop.candidate, "max")
            gone_lo = sum(d.unrun_rows for d in self.dropped.values()) + lo
            gone_hi = sum(d.unrun_rows_max for d in self.dropped.values()) + hi
            adaptive = self.sweep.probe_plan().adaptive
            drop = replace(drop, unrun_rows=lo, unrun_rows_max=hi,
                           planned_rows=max(0, planned_probes(self.sweep) - gone_lo),
                           planned_rows_max=max(0, planned_probes(self.sweep, "max") - gone_hi) if adaptive else None)
        self.dropped[drop.candidate] = drop
        return drop

    def pair_kinds(self, rnd: int, rows: Mapping[str, Sequence[Row]],
                   max_rounds: int) -> dict[tuple[str, str], tuple[str, str]]:
        """Each pair of the candidates still racing with rows: ("resolved" | "futile" | "open", the look's
        words). Resolved at the look's α (`stats.stop.RESOLVED`); futile: undecided with no even chance of
        resolving in the rounds left (`stats.stop.stuck_axes`); open: undecided and resolvable in them."""
        ids = [c for c in self.alive(rows) if rows[c]]
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                d = self.pair(rows[a], rows[b], a, b)
                if d.status in RESOLVED:
                    out[a, b] = "resolved", f"{a} vs {b}: {d.status}"
                elif stuck := stuck_axes(d, max_rounds - rnd):
                    need = ", ".join(f"{x} ~{d.verdicts[x].rounds_to_resolve or 'too many'}" for x in stuck)
                    out[a, b] = "futile", (f"{a} vs {b}: undecided, more rounds than the {max_rounds - rnd} left "
                                           f"for an even chance on {need}")
                else:
                    out[a, b] = "open", f"{a} vs {b}: undecided, resolvable in the rounds left"
        return out

    def settled(self, rnd: int, rows: Mapping[str, Sequence[Row]], min_rounds: int, max_rounds: int) -> str | None:
        """Why the race's rounds of a context end at this planned look, or None: every pair of the candidates
        still racing is resolved or futile (`pair_kinds`), one pair futile at least (all resolved: the stop
        rule's own answer). `rows`: each racing candidate's valid probe rows of the context."""
        if not self.on or rnd not in looks(min_rounds, max_rounds) or rnd >= max_rounds:
            return None
        kinds = self.pair_kinds(rnd, rows, max_rounds)
        seen = {k for k, _ in kinds.values()}
        if "open" in seen or "futile" not in seen:
            return None
        return (f"race settled at the planned look after {rnd} rounds: every pair resolved or not resolvable in the "
                f"rounds left ({'; '.join(w for _, w in kinds.values())}; α = {self.alpha:.3g} a look)")

    def settle(self, context: int, rnd: int, rows: Mapping[str, Sequence[Row]], min_rounds: int,
               max_rounds: int) -> list[Settle]:
        """The candidates whose rounds of `context` end at this planned look while others go on: each pair of
        theirs resolved or futile (`pair_kinds`), while some pair elsewhere is still open (none open: the
        whole context ends by `settled` or the stop rule). Such a candidate stays in the race (the next
        context, the tail); its pairs keep the rounds they share."""
        if not self.on or rnd not in looks(min_rounds, max_rounds) or rnd >= max_rounds:
            return []
        kinds = self.pair_kinds(rnd, rows, max_rounds)
        still = {c for pair, (k, _) in kinds.items() if k == "open" for c in pair}
        if not still:
            return []
        out = []
        for c in [c for c in self.alive(rows) if rows[c] and c not in still]:
            mine = [p for p in kinds if c in p]
            out.append(Settle(candidate=c, context=context, round=rnd, alpha=self.alpha,
                              pairs={(b if a == c else a): kinds[a, b][1] for a, b in mine}))
            self.settled_at.setdefault(context, {})[c] = rnd
        return out

    def pair(self, rows_a: Sequence[Row], rows_b: Sequence[Row], a: str, b: str) -> PairDominance:
        """The dominance verdict of one pair over the per-probe axes, paired by round as the order allows."""
        sa: dict[str, list[float]] = {}
        sb: dict[str, list[float]] = {}
        paired: dict[str, bool] = {}
        starts: dict[str, int | None] = {}
        for axis in PROBE_AXES:
            s = paired_samples(rows_a, rows_b, axis, order=self.order)
            sa[axis], sb[axis], paired[axis], starts[axis] = s.a, s.b, s.paired, s.starts
        return dominance(sa, sb, axes=list(PROBE_AXES), alpha=self.alpha, margin_pct=self.margin_pct,
                              paired=paired, names=(a, b), starts=starts)


def open_race(sweep: Sweep, pairs: bool, events: Iterable[Any] = (), rows: Iterable[Row] = ()) -> Race:
    """The job's race: on when the sweep races (`Sweep.racing_on`) and its rounds stop by the pair rule
    (`pairs`); a resumed job's drops from its `candidate_dropped` events, the rows a look reads from its rows."""
    order = requested_order(sweep)
    rplan = round_plan(sweep, order)
    race = Race(on=sweep.racing_on() and pairs, alpha=look_alpha(rplan.min_rounds, rplan.max_rounds, RACE_ALPHA),
                margin_pct=sweep.probe_plan().target_ci_pct, order=order, sweep=sweep)
    if race.on:
        events = list(events)
        race.resume(e.payload for e in events if e.type == "candidate_dropped")
        for e in events:
            if e.type == "candidate_settled":
                race.settled_at.setdefault(e.payload["context"], {})[e.payload["candidate"]] = e.payload["round"]
        for r in rows:
            race.add(r)
    return race


async def after_round(race: Race, context: int, cands: list[Candidate], rnd: int, rplan: RoundPlan,
                      done: Iterable[str], emit: Any, release: Any) -> list[Candidate]:
    """The race's look after round `rnd` (pairs compared only at the stop rule's planned looks, `looks`, with
    α split over them as the stop rule does; a candidate with no ok probe leaves at any round): each drop
    recorded (`emit("candidate_dropped", ...)`) and its server stopped (`await release(id)`), then each
    candidate whose rounds of the context end here (`Race.settle`, `emit("candidate_settled", ...)`, its
    server stopped); the candidates that run the next round. `done`: the candidates with no cell left to
    run at this context."""
    if not race.on or rnd < rplan.min_rounds:
        return cands
    planned = rnd in looks(rplan.min_rounds, rplan.max_rounds)
    for drop in race.look(context, rnd, {c.id: race.cell_rows(c.id, context) for c in cands}, done, compare=planned):
        emit("candidate_dropped", **drop.payload())
        await release(drop.candidate)
    cands = [c for c in cands if c.id not in race.dropped]
    for s in race.settle(context, rnd, {c.id: race.cell_rows(c.id, context) for c in cands}, rplan.min_rounds,
                         rplan.max_rounds):
        emit("candidate_settled", **s.payload())
        await release(s.candidate)
    return [c for c in cands if c.id not in race.settled_at.get(context, {})]
