"""The runbook's record of the measuring design (which order ran, why, why each context stopped), read
from the `design_chosen`, `design_changed` and `context_finished` events; none recorded means sequential."""

from __future__ import annotations

from collections.abc import Sequence

from benchd.schemas import ContextStop, Event, Sweep, SweepDesign
from benchd.schemas import events as ev


def _context_stops(events: Sequence[Event]) -> list[ContextStop]:
    stops: dict[int, ContextStop] = {}
    for e in events:
        if e.type == "context_finished":  # a resumed job finishes a context again: the last word counts
            p = ev.decode(e, ev.ContextFinished)
            stops[p.context] = ContextStop(context=p.context, rounds=p.rounds, order=p.design, why=p.why)
    return sorted(stops.values(), key=lambda s: s.context)


def sweep_design(sweep: Sweep, events: Sequence[Event]) -> SweepDesign:
    chosen = next((ev.decode(e, ev.DesignChosen) for e in events if e.type == "design_chosen"), None)
    changed = [ev.decode(e, ev.DesignChanged) for e in events if e.type == "design_changed"]
    contexts = _context_stops(events)
    if chosen is None:
        return SweepDesign(order="sequential", asked=sweep.order, why="no design recorded: the engine ran the "
                           "candidates one after the other", plan="sequential", drift_protected=False,
                           contexts=contexts)
    last = changed[-1] if changed else chosen
    order = last.order
    return SweepDesign(
        order=order, asked=chosen.asked, why=chosen.why, seed=chosen.seed,
        plan=last.plan or chosen.plan, drift_protected=order != "sequential",
        budget_bytes=chosen.budget_bytes, budget_source=chosen.budget_source,
        changed=[c.why for c in changed], contexts=contexts)

