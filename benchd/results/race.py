"""The race as the runbook, report and page show it: who left, when, by whom, on which axes, and the
survivors. Reasons and facts: docs/measuring.md#racing."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from benchd.schemas import Event, RaceDrop, RaceSettled, Runbook
from benchd.stats.notation import plural

#: The race table's columns (report and page).
HEADER = ["candidate", "context", "after round", "by", "on axes", "why"]


def race_drops(events: Iterable[Event]) -> list[RaceDrop]:
    """The job's `candidate_dropped` events as the runbook's race table (in the order they happened)."""
    return [msgspec.convert(e.payload, RaceDrop) for e in events if e.type == "candidate_dropped"]


def race_settled(events: Iterable[Event]) -> list[RaceSettled]:
    """The job's `candidate_settled` events (in the order they happened)."""
    return [msgspec.convert(e.payload, RaceSettled) for e in events if e.type == "candidate_settled"]


def race_rows(rb: Runbook) -> list[list[str]]:
    return [[d.candidate, str(d.context), str(d.round), ", ".join(d.by),
             "; ".join(f"{b}: {', '.join(axes)}" for b, axes in sorted(d.better_on.items())) or "—", d.why]
            for d in rb.race]


def survivors(rb: Runbook) -> list[str]:
    gone = {d.candidate for d in rb.race}
    return [c.id for c in rb.sweep.candidates if c.id not in gone]


def race_text(rb: Runbook) -> str:
    """One paragraph: whether the sweep raced, who is still in, and whose rounds of a context ended early."""
    settled = _settled_text(rb)
    if not rb.race:
        on = rb.sweep.racing_on()
        return ((f"Racing on: no candidate was dominated at a look.{settled}" if settled else
                 "Racing on: no candidate was dominated at a look, every one ran to the end.") if on else
                "Racing off: every candidate ran every round of every context.")
    alpha = next((d.alpha for d in rb.race if d.alpha is not None), None)
    at = f" (each look at α = {alpha:.3g}: the race's α over a context's looks)" if alpha is not None else ""
    return (f"{plural(len(rb.race), 'candidate')} left the race{at}; still in at the end: {', '.join(survivors(rb))}. "
            f"A dropped candidate ran no later round, no larger context and no tail.{settled}")


def _settled_text(rb: Runbook) -> str:
    if not rb.race_settled:
        return ""
    who = "; ".join(f"{s.candidate} at context {s.context} after round {s.round}" for s in rb.race_settled)
    return (f" Rounds ended early while others went on ({who}): each pair of theirs was resolved or could not "
            "resolve in the rounds left; they stayed in the race.")
