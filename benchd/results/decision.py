"""The decision records every writer shows, in order (per context the frontier, dominated, trade-offs,
undecided; the candidates; the deferred axes), read from the runbook: nothing is judged again here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from benchd.results.text import STATE_WORDS, and_list, axis_word
from benchd.schemas import Candidate, CandidateProvenance, ContextPareto, NotCompared, Runbook, Tie
from benchd.stats.comparison import lever as lever_of
from benchd.stats.notation import n_more, plural


@dataclass(frozen=True)
class RuledOut:
    candidate: str
    by: str
    axes: list[str]  # labels of the axes `by` is better on
    text: str  # the one comparison's sentence (or the axes, for a runbook without one)


@dataclass(frozen=True)
class Undecided:
    pair: tuple[str, str]
    status: str  # tied | unresolved
    text: str
    decide: list[str]  # what would decide it: more rounds where an interval overlaps the margin, a line per thin axis


@dataclass(frozen=True)
class ContextDecision:
    context: int
    frontier: list[str]
    ruled_out: list[RuledOut]
    undecided: list[Undecided]
    excluded: dict[str, str]
    caveats: dict[str, str] = field(default_factory=dict)
    pairs_compared: int | None = None
    #: The pairs each better than the other on some axis (`ContextPareto.tradeoffs`): (pair, its one line).
    tradeoffs: list[tuple[tuple[str, str], str]] = field(default_factory=list)

    def pairs_text(self) -> str | None:
        """How many pair questions this context's view asked, and that each kept its own α."""
        n = self.pairs_compared
        if not n:
            return None
        return f"{plural(n, 'pair')} compared, each on its own (its verdict keeps its α; no correction across pairs)"


def _overlap(axes: list[str], more: Mapping[str, int]) -> list[str]:
    """More rounds narrow every interval still over the margin; per axis the count for an even chance, if known."""
    if not axes:
        return []
    words = and_list([axis_word(a) for a in axes])
    counts = ", ".join(f"about {n_more(more[a], lever_of(a) or 'rounds')} on {axis_word(a)}" for a in axes if a in more)
    return [f"more rounds: the interval{'s' if len(axes) > 1 else ''} on {words} still overlap"
            f"{'' if len(axes) > 1 else 's'} the margin" + (f" (an even chance at the spread so far: {counts})"
                                                            if counts else "")]


def _lever(axis: str, nc: NotCompared) -> str:
    lever = nc.lever or lever_of(axis)  # a runbook written before the axis had a lever: today's
    if lever is None:
        return f"{axis_word(axis)}: {nc.reason}, and no setting adds values: your judgement"
    more = n_more(nc.needed - nc.have, lever) if nc.needed > nc.have else "more values"
    return f"{axis_word(axis)}: {more} ({nc.reason})"


def tie_status(t: Tie) -> str:
    """A tie's status; a runbook written before `status` existed said it in its sentence."""
    return t.status or ("unresolved" if t.text and "unresolved on" in t.text else "tied")


def open_axes(t: Tie) -> list[str]:
    """The axes a tie is open on; a runbook written before `status` existed said them in its sentences."""
    if t.status is not None:
        return list(t.unresolved_on)
    return [axis for axis, text in t.axes.items() if text.startswith("unresolved") or " is unresolved" in text]


def undecided(t: Tie) -> Undecided:
    """A tie as the decision shows it: its status, its one line, what would decide it."""
    status = tie_status(t)
    if status == "tied":
        decide = ["no more of the same: equal within the margins on every axis compared; only an axis not "
                  "measured here could"]
    else:
        keys = list(dict.fromkeys([*t.unresolved_on, *t.blocked_on]))
        few = [_lever(a, nc) for a in keys if (nc := t.not_compared.get(a)) is not None]
        decide = (_overlap([a for a in keys if a not in t.not_compared], t.rounds_to_resolve) + few
                  or [_lever(a, nc) for a, nc in t.not_compared.items()] or ["more rounds"])
    return Undecided((t.pair[0], t.pair[1]), status, t.text or f"{t.pair[0]} against {t.pair[1]}: neither dominates",
                     decide)


def context_decision(p: ContextPareto) -> ContextDecision:
    """One context's decision from its Pareto view."""
    ruled = [RuledOut(cand, d.by, [axis_word(a) for a in d.better_on],
                      d.text or f"{cand} is dominated by {d.by} on {', '.join(axis_word(a) for a in d.better_on)}")
             for cand, doms in p.dominated.items() for d in doms]
    caveats = {c: why for c, why in p.caveats.items() if c in p.frontier}
    tradeoffs = [((o.pair[0], o.pair[1]), o.text) for o in p.tradeoffs]
    return ContextDecision(p.context, list(p.frontier), ruled, [undecided(t) for t in p.ties], dict(p.excluded),
                           caveats, p.pairs_compared, tradeoffs)


def decisions(rb: Runbook) -> list[ContextDecision]:
    return [context_decision(p) for p in rb.pareto]


def decision_lines(rb: Runbook) -> list[str]:
    """The decision as lines (the terminal and Markdown share them); `no pick` said once."""
    out = [f"Decision per context ({NO_PICK})"]
    if not rb.pareto:
        return [*out, "  no context has a successful probe: nothing to decide"]
    for d in decisions(rb):
        out += _context_lines(d)
    return out


def ruled_out_text(r: RuledOut) -> str:
    """`B by A: better on …; tied on …` (the dominance sentence said once), or `B by A on …` and the sentence."""
    head, plain = f"{r.by} dominates {r.candidate}: ", f"{r.candidate} by {r.by}"
    if r.text.startswith(head):
        return f"{plain}: {r.text[len(head):]}"
    return f"{plain} on {', '.join(r.axes) or 'the compared axes'} ({r.text})"


def undecided_text(u: Undecided) -> str:
    """`A against B: unresolved on …` (the tie's sentence said once, without naming the pair again)."""
    head, yet = f"{u.pair[0]} against {u.pair[1]}", f"neither {u.pair[0]} nor {u.pair[1]} is dominated yet: "
    if u.text.startswith(head):
        return u.text
    return f"{head}: {u.text[len(yet):]}" if u.text.startswith(yet) else f"{head} ({u.text})"


def _undecided_lines(u: Undecided) -> list[str]:
    return [f"  {STATE_WORDS[u.status]}: {undecided_text(u)}",
            *(f"    would decide it: {x}" for x in u.decide)]


def _frontier_lines(d: ContextDecision) -> list[str]:
    out = [f"context {d.context}:", f"  {STATE_WORDS['frontier']}: {', '.join(d.frontier) or '(none)'}"]
    out += [f"  {x}" for x in [d.pairs_text()] if x]
    return out + [f"  {c}: {STATE_WORDS['frontier']} with a caveat: {why}" for c, why in d.caveats.items()]


def _context_lines(d: ContextDecision) -> list[str]:
    out = _frontier_lines(d)
    out += [f"  {STATE_WORDS['dominated']}: {ruled_out_text(r)}" for r in d.ruled_out]
    out += [f"  {STATE_WORDS['trade-off']}: {text}" for _, text in d.tradeoffs]
    for u in d.undecided:
        out += _undecided_lines(u)
    out += [f"  {STATE_WORDS['excluded']}: {c} ({why})" for c, why in d.excluded.items()]
    if not d.ruled_out and not d.undecided and len(d.frontier) > 1:
        out.append(f"  {plural(len(d.frontier), 'candidate')} on the frontier, each better on some axis")
    return out


NO_PICK = "benchd does not pick among the frontier: the trade-off is yours"


def decision_json(rb: Runbook) -> dict[str, object]:
    """The decision block as data (`report --json`): each state's word (`word`) beside its wire value."""
    contexts = []
    for d in decisions(rb):
        contexts.append({
            "context": d.context, "frontier": d.frontier, "caveats": d.caveats, "pairs_compared": d.pairs_compared,
            "ruled_out": [{"candidate": r.candidate, "by": r.by, "axes": r.axes, "text": r.text} for r in d.ruled_out],
            "undecided": [{"pair": list(u.pair), "status": u.status, "word": STATE_WORDS[u.status], "text": u.text,
                           "would_decide": u.decide} for u in d.undecided],
            "tradeoffs": [{"pair": list(pair), "text": text} for pair, text in d.tradeoffs],
            "excluded": d.excluded,
        })
    return {"no_pick": NO_PICK, "contexts": contexts,
            "note": None if rb.pareto else "no context has a successful probe: nothing to decide"}


def candidates_json(rb: Runbook) -> list[dict[str, str]]:
    """`candidate_rows` as objects keyed by the table's header (spaces as underscores)."""
    keys = [h.replace(" / ", "_").replace(" ", "_") for h in CANDIDATE_HEADER]
    return [dict(zip(keys, row, strict=True)) for row in candidate_rows(rb)]


CANDIDATE_HEADER = ["candidate", "runtime", "model", "model sha256", "args", "spec / draft model", "binary",
                    "server version"]


def candidate_rows(rb: Runbook) -> list[list[str]]:
    """What each candidate is (runtime, model and sha256, args, spec, binary, server version), null with why."""
    prov = {c.candidate: c for c in rb.provenance.candidates}
    return [_candidate_row(c, prov.get(c.id)) for c in rb.sweep.candidates]


def _or_null(value: str | None, null_reasons: dict[str, str], key: str) -> str:
    return value or f"null ({null_reasons.get(key, 'not read')})"


def _spec_text(c: Candidate, p: CandidateProvenance | None) -> str:
    if c.spec is None:
        return "-"
    draft = (p.draft_model.path if p is not None and p.draft_model is not None else c.spec.draft_model)
    return f"{c.spec.kind}" + (f", draft {draft}" if draft else "") + (
        f", draft_max {c.spec.draft_max}" if c.spec.draft_max else "")


def _candidate_row(c: Candidate, p: CandidateProvenance | None) -> list[str]:
    if p is None:
        return [c.id, c.runtime, c.model or "-", "null", " ".join(c.args) or "-", _spec_text(c, p), "null", "null"]
    return [c.id, c.runtime, p.model.path or c.model or "-", _or_null(p.model.sha256, p.model.null_reasons, "sha256"),
            " ".join(c.args) or "-", _spec_text(c, p), _or_null(p.binary, p.null_reasons, "binary"),
            _or_null(p.server_version, p.null_reasons, "server_version")]


def candidate_lines(rb: Runbook) -> list[str]:
    """`candidate_rows` for a terminal: a block per candidate, every path and hash whole."""
    out = ["Candidates"]
    for cand, runtime, model, sha, args, spec, binary, version in candidate_rows(rb):
        out += [f"  {cand}: {runtime}", f"    model {model}", f"    sha256 {sha}", f"    args {args}; spec {spec}",
                f"    binary {binary}; server version {version}"]
    return out


@dataclass(frozen=True)
class DeferredRow:
    axis: str
    reasons: list[str]
    origin: str  # "the sweep file", "benchd" or both


def deferred_rows(rb: Runbook) -> list[DeferredRow]:
    """One row per deferred axis: its distinct reasons together, who declared it."""
    by_axis: dict[str, tuple[list[str], list[str]]] = {}
    for origin, items in (("the sweep file", rb.deferred.declared), ("benchd", rb.deferred.automatic)):
        for x in items:
            reasons, origins = by_axis.setdefault(x.axis, ([], []))
            if x.reason not in reasons:
                reasons.append(x.reason)
            if origin not in origins:
                origins.append(origin)
    return [DeferredRow(a, r, " and ".join(o)) for a, (r, o) in by_axis.items()]
