"""How thin the evidence behind a lock is: cells with too few probes, frontier members still undecided.
Reasons: docs/locking.md#thin-evidence.
"""

from __future__ import annotations

from benchd.results.decision import open_axes, undecided
from benchd.results.text import and_list, axis_word
from benchd.schemas import ContextPareto, Runbook


def _too_few(rb: Runbook, candidate: str) -> list[str]:
    few = sorted(c.context for c in rb.cells if c.candidate == candidate and c.verdict is not None
                 and c.verdict.verdict == "too few")
    if not few:
        return []
    return [f"{candidate}'s cells at context{'s' if len(few) > 1 else ''} {', '.join(map(str, few))} have "
            "too few probes for a cell verdict (the 95 % CI of a median needs 6)"]


def _undecided(ctx: ContextPareto, candidate: str) -> list[str]:
    out = []
    for tie in (t for t in ctx.ties if candidate in t.pair):
        other = next(x for x in tie.pair if x != candidate)
        axes = open_axes(tie)
        if axes and other in ctx.frontier:  # what would decide it names the axes; an older tie's does not
            on = f" on {and_list([axis_word(a) for a in axes])}" if tie.status is None else ""
            out.append(f"at context {ctx.context} {candidate} is undecided against {other} (on the frontier)"
                       f"{on}; would decide it: {'; '.join(undecided(tie).decide)}")
    return out


def thin_evidence(rb: Runbook, candidate: str) -> list[str]:
    """One warning a reason: too few probes, then frontier members the candidate is undecided against."""
    return _too_few(rb, candidate) + [line for ctx in rb.pareto for line in _undecided(ctx, candidate)]
