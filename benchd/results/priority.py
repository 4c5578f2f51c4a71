"""Choose a priority (`benchctl report --priority NAME`): the axis that answers it, the candidates in order
with verdicts against the leader, and its costs; no pick. Reasons: docs/metrics.md#choosing-a-priority."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from benchd.results.evalcompare import suite_outcomes
from benchd.results.pareto import eval_outcomes
from benchd.results.text import axis_word, comparison_sentence, fmt_with_unit
from benchd.schemas import ContextPareto, Row, Runbook, Tie, TradeOff
from benchd.stats.axes import AXES, IMAGE_AXIS_PREFIX
from benchd.stats.comparison import compare_outcomes, compare_rows
from benchd.stats.rows import usable


class Priority(NamedTuple):
    """A question a person asks, the axis that answers it (`context`: the largest context served) and why."""

    name: str
    question: str
    axis: str
    why: str


PRIORITIES: dict[str, Priority] = {p.name: p for p in (
    Priority("first-token", "fastest first token at my context", "ttft_ms",
             "time to first token is what you wait before the first word; at a long prompt it is mostly prompt "
             "processing (prefill), which decides a coding agent fed a repository"),
    Priority("generation", "fastest generation", "gen_tps",
             "tokens per second while decoding, timed by the server: how fast a long answer streams"),
    Priority("memory", "least memory", "mem_peak_bytes",
             "the server's peak resident memory over the probes: what else still fits beside it"),
    Priority("context", "largest context that fits", "context",
             "the largest context of the grid at which the candidate's probes succeeded; beyond it the server "
             "failed, or it was not measured"),
    Priority("tools", "best tool calls", "tool_pass_rate",
             "BFCL tasks passed, graded on the tool calls the server parsed"),
    Priority("code", "best code", "code_pass_rate",
             "HumanEval tasks passed, the model's code run in the eval sandbox"),
    Priority("vision", "vision", IMAGE_AXIS_PREFIX,
             "time to first token with the sweep's images, per resolution (vision candidates only)"),
    Priority("energy", "energy", "j_per_gen_token",
             "joules per generated token from the machine's energy counter"),
    Priority("kld", "least quality lost", "kld",
             "the KL divergence of the candidate's token distributions from the reference model's: how much "
             "quantization (or a draft) changed what the model would say"),
)}
ALPHA = 0.05


def _rows(rb: Runbook, cand: str, ctx: int) -> list[Row]:
    return [r for r in rb.rows if usable(r) and r.candidate == cand and r.context == ctx]


def _value(rb: Runbook, view: ContextPareto, cand: str, axis: str) -> float | None:
    """The candidate's median on `axis` at the view's context: the Pareto point's, else the cell's."""
    pt = next((p for p in view.points if p.candidate == cand), None)
    if pt is not None and pt.values.get(axis) is not None:
        return pt.values[axis]
    cell = next((c for c in rb.cells if c.candidate == cand and c.context == view.context), None)
    stats = getattr(cell, axis, None) if cell is not None else None
    return getattr(stats, "median", None)


def _verdict(rb: Runbook, ctx: int, axis: str, leader: str, cand: str, medians: tuple[float, float]) -> str:
    """`cand` against the leader on `axis`, in the one comparison's sentence (cand the subject)."""
    spec = AXES.get(axis)
    if spec is not None and spec.outcomes:
        out = suite_outcomes(rb.evals)
        a, b = out.get(leader, {}).get(axis), out.get(cand, {}).get(axis)
        if not a or not b:
            return "not compared: per-task outcomes missing on a side"
        v = compare_outcomes(a, b, axis=axis, alpha=ALPHA)
    elif axis in ("gen_tps", "prompt_tps", "ttft_ms", "mem_peak_bytes", "j_per_gen_token"):
        order = rb.design.order if rb.design is not None else None
        v = compare_rows(_rows(rb, leader, ctx), _rows(rb, cand, ctx), axis, order=order, alpha=ALPHA)
    else:
        return "compared in the Pareto view (per-candidate samples)"
    return comparison_sentence(v, leader, cand, medians=medians)


def _tasks(rb: Runbook, axis: str, cand: str) -> Mapping[str, bool] | None:
    """The candidate's per-task outcomes behind a pass-rate axis (the eval tier's or a public suite's)."""
    if axis == "eval_pass_rate":
        return eval_outcomes(rb.evals).get(cand)
    return suite_outcomes(rb.evals).get(cand, {}).get(axis) if AXES[axis].outcomes else None


def _shown(rb: Runbook, axis: str, cand: str, v: float) -> str:
    """A pass rate as `k/n tasks (p %)`, any other value with its unit."""
    if not (tasks := _tasks(rb, axis, cand)):
        return fmt_with_unit(axis, v)
    passed = sum(tasks.values())
    return f"{passed}/{len(tasks)} tasks ({100 * passed / len(tasks):.0f} %)"


def _axes_for(p: Priority, rb: Runbook) -> list[str]:
    if p.axis != IMAGE_AXIS_PREFIX:
        return [p.axis]
    return sorted({k for v in rb.pareto for pt in v.points for k in pt.values if k.startswith(IMAGE_AXIS_PREFIX)})


def _pair_sentence(view: ContextPareto, a: str, b: str, axis: str) -> str | None:
    """The Pareto view's sentence on `axis` for the pair {a, b} (its α split over the pair's axes), if compared."""
    rels: list[Tie | TradeOff] = [*view.ties, *view.tradeoffs]
    for rel in rels:
        if set(rel.pair) == {a, b}:
            return rel.axes.get(axis)
    return next((d.verdicts.get(axis) for c, ds in view.dominated.items() for d in ds if {c, d.by} == {a, b}), None)


def _cost_line(rb: Runbook, view: ContextPareto, other: str, leader: str, vals: dict[str, float]) -> str:
    spec, mine = AXES.get(other), vals[leader]
    if spec is None:
        return f"{axis_word(other)}: {fmt_with_unit(other, mine)}"
    best = (max if spec.better == "higher" else min)(vals.values())
    who = [c for c, v in vals.items() if v == best]
    if mine == best:
        level = [c for c in who if c != leader]
        place = ("the same for every candidate" if level and len(who) == len(vals) else "the best measured"
                 + (f" (level with {', '.join(level)})" if level else ""))
        rest = {c: v for c, v in vals.items() if v != best}
        nearest = (max if spec.better == "higher" else min)(rest, key=rest.__getitem__) if rest and not level else None
        said = _pair_sentence(view, leader, nearest, other) if nearest else None
        return f"{axis_word(other)}: {_shown(rb, other, leader, mine)}, {place}" + (f" — {said}" if said else "")
    said = _pair_sentence(view, leader, who[0], other)
    return (f"{axis_word(other)}: {_shown(rb, other, leader, mine)} against the best "
            f"{_shown(rb, other, who[0], best)} ({', '.join(who)})" + (f" — {said}" if said else ""))


def _costs(rb: Runbook, view: ContextPareto, leader: str, axis: str, others: Sequence[str]) -> list[str]:
    """The leader's median or pass rate on each other axis beside the best one, under a header naming which."""
    out, unmeasured = [], []
    names = [a for a in (view.points[0].values if view.points else {}) if a != axis]
    rates = sum(a in AXES and AXES[a].outcomes for a in names)
    kinds = "medians" if not rates else "pass rates" if rates == len(names) else "medians, pass rates"
    for other in names:
        vals = {c: v for c in others if (v := _value(rb, view, c, other)) is not None}
        if leader in vals:
            out.append(_cost_line(rb, view, other, leader, vals))
        else:
            unmeasured.append(axis_word(other))
    out += [f"not measured for {leader}: {', '.join(unmeasured)}"] if unmeasured else []
    return [f"  what {leader} costs on the other axes ({kinds}):", *(f"    {x}" for x in out)]


def _ranked(vals: dict[str, float], higher: bool) -> tuple[list[str], dict[str, int]]:
    """Best first (equal values by name) and each one's place: 1 + how many are strictly better."""
    ranked = sorted(vals, key=lambda c: (-vals[c] if higher else vals[c], c))
    return ranked, {c: 1 + sum(vals[o] != vals[c] and (vals[o] > vals[c]) == higher for o in ranked) for c in ranked}


def _leader_line(rb: Runbook, axis: str, ranked: list[str], vals: dict[str, float]) -> str:
    """`1. a: 130.0 tok/s — first by median`, naming the candidates level with it."""
    leader = ranked[0]
    level = [c for c in ranked[1:] if vals[c] == vals[leader]]
    by = "pass rate" if AXES[axis].outcomes else "median"
    return (f"  1. {leader}: {_shown(rb, axis, leader, vals[leader])} — first by {by}"
            + (f", level with {', '.join(level)} (the order among them is by name, not measured)" if level else ""))


def _view_lines(rb: Runbook, view: ContextPareto, axis: str, higher: bool) -> list[str]:
    cands = [pt.candidate for pt in view.points]
    vals = {c: v for c in cands if (v := _value(rb, view, c, axis)) is not None}
    out = [f"context {view.context}:"]
    if not vals:
        return [*out, f"  {axis_word(axis)} was not measured at this context for any candidate"]
    ranked, place = _ranked(vals, higher)
    leader = ranked[0]
    out.append(_leader_line(rb, axis, ranked, vals))
    out += [f"  {place[c]}. {c}: {_shown(rb, axis, c, vals[c])} — "
            f"{_verdict(rb, view.context, axis, leader, c, (vals[leader], vals[c]))}"
            for c in ranked[1:]]
    out += [f"  not measured: {c}" for c in cands if c not in vals]
    out += [f"  {c}: excluded ({why})" for c, why in view.excluded.items()]
    return out + _costs(rb, view, leader, axis, cands)


def priority_lines(rb: Runbook, name: str) -> list[str]:
    """The priority's answer: the axis and why, then per context the order with verdicts and the leader's costs."""
    p = PRIORITIES[name]
    what = {"context": "the largest context served", IMAGE_AXIS_PREFIX: "time to first token with images"}
    head = [f"priority: {p.question} ({p.name})",
            f"  answered by {what.get(p.axis) or axis_word(p.axis)}: {p.why}",
            "  the tool does not pick: the leader on this axis may cost on the others (listed), and only you "
            "know what they are worth"]
    if p.axis == "context":
        return head + _context_lines(rb)
    out = list(head)
    axes = _axes_for(p, rb)
    if not axes:
        out.append("  not measured: no candidate ran image probes (a candidate's vision = true, the [vision] table)")
    for axis in axes:
        spec = AXES.get(axis)
        if spec is None:
            out.append(f"  {axis_word(axis)}: not an axis of this benchd")
            continue
        for view in rb.pareto:
            out += _view_lines(rb, view, axis, spec.better == "higher")
    return out


def _context_lines(rb: Runbook) -> list[str]:
    served: dict[str, int] = {}
    failed: dict[str, list[int]] = {}
    for c in rb.cells:
        if c.n_ok > 0:
            served[c.candidate] = max(served.get(c.candidate, 0), c.context)
        else:
            failed.setdefault(c.candidate, []).append(c.context)
    ranked = sorted(served, key=lambda c: -served[c])
    out = [f"  {i}. {c}: {served[c]:,} tokens" + (f" (failed at {', '.join(map(str, failed[c]))})" if c in failed else "")
           for i, c in enumerate(ranked, 1)]
    out += [f"  {c}: no context served (failed at {', '.join(map(str, ctxs))})" for c, ctxs in failed.items()
            if c not in served]
    if rb.sweep.contexts:
        out.append(f"  the grid stopped at {max(rb.sweep.contexts):,}: a larger context was not measured")
    return out
