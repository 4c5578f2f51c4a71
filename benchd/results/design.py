"""The runbook's record of the measuring design: which order ran, why, and why each context stopped.

Read from the engine's events (`design_chosen`, `design_changed`, `context_finished`); a job that
recorded none (written before rounds existed) ran the sequential order.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchd.schemas import ContextStop, Event, Sweep, SweepDesign


def sweep_design(sweep: Sweep, events: Sequence[Event]) -> SweepDesign:
    chosen = next((e.payload for e in events if e.type == "design_chosen"), None)
    changed = [e.payload for e in events if e.type == "design_changed"]
    stops: dict[int, ContextStop] = {}
    for e in events:
        if e.type == "context_finished":  # a resumed job finishes a context again: the last word counts
            p = e.payload
            stops[int(p["context"])] = ContextStop(context=int(p["context"]), rounds=int(p["rounds"]),
                                                   order=str(p["design"]), why=str(p["why"]))
    if chosen is None:
        return SweepDesign(order="sequential", asked=sweep.order, why="no design recorded: the engine ran the "
                           "candidates one after the other", plan="sequential", drift_protected=False,
                           contexts=sorted(stops.values(), key=lambda s: s.context))
    order = str(changed[-1]["order"]) if changed else str(chosen["order"])
    return SweepDesign(
        order=order, asked=chosen.get("asked"), why=str(chosen["why"]), seed=chosen.get("seed"),
        plan=str(changed[-1].get("plan", chosen["plan"]) if changed else chosen["plan"]), drift_protected=order != "sequential",
        budget_bytes=chosen.get("budget_bytes"), budget_source=chosen.get("budget_source"),
        changed=[str(c["why"]) for c in changed], contexts=sorted(stops.values(), key=lambda s: s.context))
