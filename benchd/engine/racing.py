"""Racing: at each look, a candidate another one dominates leaves the race (docs/measuring.md#racing).
Hooks: `open_race`, `Race.add` (every committed row), `after_round` (each look), `Race.alive` (who runs the
next context and the tail).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benchd.engine.plan import RoundPlan, requested_order, round_plan
from benchd.schemas import Candidate, Row, Sweep
from benchd.schemas.sweep import DEFAULT_PROBES
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
    """One candidate leaving the race at a look: `by` its dominators (each with the axes it wins), or `why`."""

    candidate: str
    context: int
    round: int
    by: dict[str, list[str]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    alpha: float | None = None
    why: str | None = None
    #: The candidate's planned rows it will not run (low, high); the job's planned rows from this drop on.
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
    """One candidate's rounds of a context ending at a look while others go on; `pairs`: other -> words."""

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
    """The race of one job (`on` False: `look` never drops anyone). `look_rounds`: the rounds it looks at;
    `settles` False (a fixed count): no candidate's rounds end before the count."""

    on: bool
    alpha: float
    order: str
    #: The sweep's `margins` (axis -> %), else the axis table's: the Pareto view's and the stop rule's own.
    margins: dict[str, float] = field(default_factory=dict)
    look_rounds: tuple[int, ...] = tuple(looks(3, 12))
    settles: bool = True
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
        """Count a committed row as done (unless aborted); keep a valid probe row of the rounds for the looks."""
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
        """The drops of this look. `done`: candidates with no cell left to run; `compare` False: only those with
        no ok probe leave."""
        if not self.on:
            return []
        alive = self.alive(rows)
        out = _no_ok_probe(context, rnd, [c for c in alive if not rows[c]], done)
        racing = [c for c in alive if rows[c]]
        if compare and len(racing) > 1:
            out += self._dominated(context, rnd, rows, racing)
        return [self.with_plan(drop) for drop in out]

    def _dominated(self, context: int, rnd: int, rows: Mapping[str, Sequence[Row]], racing: list[str]) -> list[Drop]:
        """Every loser of a pair of `racing` with its dominators; none when nobody would stay (a cycle)."""
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
        return [beaten[c] for c in racing if c in beaten] if len(beaten) < len(racing) else []

    def unrun(self, candidate: str, bound: str) -> int:
        """The candidate's planned rows (`benchd.store.candidate_planned`) not stored yet."""
        cand = next((c for c in self.sweep.candidates if c.id == candidate), None) if self.sweep else None
        if self.sweep is None or cand is None:
            return 0
        plan = candidate_planned(self.sweep, cand.vision, "max" if bound == "max" else "min")
        per_cell = plan["probe"] // max(1, len(self.sweep.contexts))
        left = sum(max(0, per_cell - len(self.stored.get((candidate, ctx, "probe"), ()))) for ctx in self.sweep.contexts)
        return left + sum(max(0, plan[kind] - self._stored_count(candidate, kind)) for kind in ("sustained", "vision"))

    def _stored_count(self, candidate: str, kind: str) -> int:
        return sum(len(v) for (c, _, k), v in self.stored.items() if c == candidate and k == kind)

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
        """Each racing pair's ("resolved" | "futile" | "open", the look's words) (futile: `stuck_axes`)."""
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
        """Why the rounds of a context end at this look (every pair resolved or futile, one futile), or None."""
        if not self._early_look(rnd, min_rounds, max_rounds):
            return None
        kinds = self.pair_kinds(rnd, rows, max_rounds)
        seen = {k for k, _ in kinds.values()}
        if "open" in seen or "futile" not in seen:
            return None
        return (f"race settled at the planned look after {rnd} rounds: every pair resolved or not resolvable in the "
                f"rounds left ({'; '.join(w for _, w in kinds.values())}; α = {self.alpha:.3g} a look)")

    def settle(self, context: int, rnd: int, rows: Mapping[str, Sequence[Row]], min_rounds: int,
               max_rounds: int) -> list[Settle]:
        """The candidates whose every pair is resolved or futile at this look while another pair is open."""
        if not self._early_look(rnd, min_rounds, max_rounds):
            return []
        kinds = self.pair_kinds(rnd, rows, max_rounds)
        still = {c for pair, (k, _) in kinds.items() if k == "open" for c in pair}
        if not still:
            return []
        out = []
        for c in [c for c in self.alive(rows) if rows[c] and c not in still]:
            out.append(Settle(candidate=c, context=context, round=rnd, alpha=self.alpha, pairs=_pairs_of(c, kinds)))
            self.settled_at.setdefault(context, {})[c] = rnd
        return out

    def _early_look(self, rnd: int, min_rounds: int, max_rounds: int) -> bool:
        """A racing planned look before the last round, where rounds may end early."""
        return self.on and self.settles and rnd in looks(min_rounds, max_rounds) and rnd < max_rounds

    def cells(self, context: int, cands: Iterable[Candidate]) -> dict[str, list[Row]]:
        """Each candidate's valid probe rows of `context`."""
        return {c.id: self.cell_rows(c.id, context) for c in cands}

    def pair(self, rows_a: Sequence[Row], rows_b: Sequence[Row], a: str, b: str) -> PairDominance:
        """The dominance verdict of one pair over the per-probe axes, paired by round as the order allows."""
        sa: dict[str, list[float]] = {}
        sb: dict[str, list[float]] = {}
        paired: dict[str, bool] = {}
        starts: dict[str, int | None] = {}
        for axis in PROBE_AXES:
            s = paired_samples(rows_a, rows_b, axis, order=self.order)
            sa[axis], sb[axis], paired[axis], starts[axis] = s.a, s.b, s.paired, s.starts
        return dominance(sa, sb, axes=list(PROBE_AXES), alpha=self.alpha, margin_pct=self.margins,
                              paired=paired, names=(a, b), starts=starts)


def _no_ok_probe(context: int, rnd: int, empty: list[str], done: Iterable[str]) -> list[Drop]:
    """The drops of the candidates without an ok probe that have no cell left (`done`)."""
    finished = set(done)
    return [Drop(candidate=c, context=context, round=rnd, why="no ok probe at this context (its server did "
                 "not start or every probe failed: the rows say why); it leaves the race")
            for c in empty if c in finished]


def _pairs_of(c: str, kinds: Mapping[tuple[str, str], tuple[str, str]]) -> dict[str, str]:
    """The other candidate of each pair of `c` -> the look's words."""
    return {(b if a == c else a): words for (a, b), (_, words) in kinds.items() if c in (a, b)}


def race_looks(sweep: Sweep, rplan: RoundPlan) -> tuple[int, int]:
    """(first, last) round of the race's looks (`benchd.stats.stop.looks` between them): the stop rule's
    own with adaptive probes; with a fixed count, from the default first look (DEFAULT_PROBES) up to the count."""
    if sweep.probe_plan().adaptive:
        return rplan.min_rounds, rplan.max_rounds
    return min(DEFAULT_PROBES, rplan.max_rounds), rplan.max_rounds


def open_race(sweep: Sweep, pairs: bool, events: Iterable[Any] = (), rows: Iterable[Row] = ()) -> Race:
    """The job's race (on when the sweep races; `pairs`: the pair stop rule ends its rounds, so a candidate's
    may end early too), resumed from its events and rows."""
    order = requested_order(sweep)
    first, last = race_looks(sweep, round_plan(sweep, order))
    race = Race(on=sweep.racing_on(), alpha=look_alpha(first, last, RACE_ALPHA),
                margins=dict(sweep.margins), order=order, look_rounds=tuple(looks(first, last)),
                settles=pairs, sweep=sweep)
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
    """The race's look after round `rnd`: drops, then settled candidates, emitted and their servers released;
    returns the candidates of the next round. `done`: the candidates with no cell left."""
    if not race.on or rnd < race.look_rounds[0]:
        return cands
    planned = rnd in race.look_rounds
    for drop in race.look(context, rnd, race.cells(context, cands), done, compare=planned):
        emit("candidate_dropped", **drop.payload())
        await release(drop.candidate)
    cands = [c for c in cands if c.id not in race.dropped]
    for s in race.settle(context, rnd, race.cells(context, cands), rplan.min_rounds, rplan.max_rounds):
        emit("candidate_settled", **s.payload())
        await release(s.candidate)
    return [c for c in cands if c.id not in race.settled_at.get(context, {})]
