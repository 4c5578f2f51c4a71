"""How thin the evidence behind a lock is (`benchctl lock` warns, and still locks: the choice is the
person's): the candidate's cells whose verdict is "too few", and the frontier members it is still
undecided against (a pair of the Pareto view with an unresolved axis).

Reasons and facts: docs/locking.md#thin-evidence.
"""

from __future__ import annotations

from benchd.results.text import axis_word
from benchd.schemas import Runbook


def _unresolved(text: str) -> bool:
    """An older runbook's axis sentence (no `Tie.status`) that says the comparison is open."""
    return text.startswith("unresolved") or " is unresolved" in text


def thin_evidence(rb: Runbook, candidate: str) -> list[str]:
    """One warning a reason: cells with too few probes, then per context the frontier members the
    candidate is undecided against (and on which axes)."""
    out: list[str] = []
    few = sorted(c.context for c in rb.cells if c.candidate == candidate and c.verdict is not None
                 and c.verdict.verdict == "too few")
    if few:
        out.append(f"{candidate}'s cells at context{'s' if len(few) > 1 else ''} {', '.join(map(str, few))} have "
                   "too few probes for a cell verdict (the 95 % CI of a median needs 6)")
    for ctx in rb.pareto:
        for tie in ctx.ties:
            if candidate not in tie.pair:
                continue
            other = next(x for x in tie.pair if x != candidate)
            axes = (list(tie.unresolved_on) if tie.status is not None
                    else [axis for axis, text in tie.axes.items() if _unresolved(text)])
            if axes and other in ctx.frontier:
                out.append(f"at context {ctx.context} {candidate} is undecided against {other} (on the frontier) "
                           f"on {', '.join(axis_word(a) for a in axes)}: more rounds (or eval tasks) would decide it")
    return out
