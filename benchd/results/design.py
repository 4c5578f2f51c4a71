"""The runbook's record of the measuring design: which order ran, why, and why each context stopped.

Read from the engine's events (`design_chosen`, `design_changed`, `context_finished`); a job that
recorded none (written before rounds existed) ran the sequential order.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchd.schemas import ContextStop, Event, Sweep, SweepDesign
from benchd.schemas import events as ev


def sweep_design(sweep: Sweep, events: Sequence[Event]) -> SweepDesign:
    chosen = next((ev.decode(e, ev.DesignChosen) for e in events if e.type == "design_chosen"), None)
    changed = [ev.decode(e, ev.DesignChanged) for e in events if e.type == "design_changed"]
    stops: dict[int, ContextStop] = {}
    for e in events:
        if e.type == "context_finished":  # a resumed job finishes a context again: the last word counts
            p = ev.decode(e, ev.ContextFinished)
            stops[p.context] = ContextStop(context=p.context, rounds=p.rounds, order=p.design, why=p.why)
    if chosen is None:
        return SweepDesign(order="sequential", asked=sweep.order, why="no design recorded: the engine ran the "
                           "candidates one after the other", plan="sequential", drift_protected=False,
                           contexts=sorted(stops.values(), key=lambda s: s.context))
    order = changed[-1].order if changed else chosen.order
    return SweepDesign(
        order=order, asked=chosen.asked, why=chosen.why, seed=chosen.seed,
        plan=(changed[-1].plan or chosen.plan) if changed else chosen.plan, drift_protected=order != "sequential",
        budget_bytes=chosen.budget_bytes, budget_source=chosen.budget_source,
        changed=[c.why for c in changed], contexts=sorted(stops.values(), key=lambda s: s.context))

