"""Pareto view per context: which candidates no other dominates, by whom, and why not. Pure; the tool
never picks. Reasons and facts: docs/measuring.md#pareto-view."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from benchd.engine.verdict import cell_verdict
from benchd.results.agentic import SESSION_AXIS
from benchd.results.agentic import samples as agentic_samples
from benchd.results.evalcompare import suite_outcomes
from benchd.results.text import comparison_sentence, dominance_sentence, verdict_text
from benchd.schemas import (
    ContextPareto,
    Domination,
    EvalResult,
    Point,
    ProbePlan,
    RaceDrop,
    Row,
    SkippedPair,
    Sweep,
    Tie,
    TradeOff,
)
from benchd.stats.axes import SUITE_AXES, core_axes
from benchd.stats.cells import median_ci
from benchd.stats.comparison import (
    ALPHA,
    AXES,
    Direction,
    PairDominance,
    dominance,
    paired_samples,
)
from benchd.stats.rows import usable

#: Per-candidate values of an axis that is not a probe row field: axis -> candidate -> values.
PerCandidate = Mapping[str, Mapping[str, Sequence[float]]]
#: (a, b) -> the dominance verdict of the pair.
Judge = Callable[[Point, Point], PairDominance]
#: The axes every Pareto view names (skipped with why where unmeasured), in display order.
CORE_AXES: tuple[str, ...] = tuple(a.name for a in core_axes())
#: The warm-start time-to-ready axis (per candidate; joins a pair when measured).
READY_AXIS = "ready_s"
#: KL divergence against the `[kld]` reference (per candidate; joins a pair when both were scored).
KLD_AXIS = "kld"


def axis_names() -> list[str]:
    return list(CORE_AXES)


def axes_of(points: Iterable[Point]) -> list[tuple[str, Direction]]:
    """The core axes, then the optional ones (suites, sessions, ready, levels, images) any point has."""
    from benchd.stats.axes import IMAGE_AXIS_PREFIX, LEVEL_AXIS_PREFIX

    present = {k for p in points for k, v in p.values.items() if v is not None}
    extra = [a for a in SUITE_AXES.values() if a in present]
    extra += [x for x in (SESSION_AXIS, READY_AXIS, KLD_AXIS) if x in present]
    extra += sorted((k for k in present if k.startswith(LEVEL_AXIS_PREFIX)), key=lambda k: int(k.split("@")[1]))
    extra += sorted((k for k in present if k.startswith(IMAGE_AXIS_PREFIX)), key=_pixels)
    return [(k, AXES[k].better if k in AXES else "higher") for k in (*CORE_AXES, *extra)]


def _pixels(axis: str) -> int:
    w, _, h = axis.split("@", 1)[1].partition("x")
    return int(w) * int(h)


def frontier(points: Sequence[Point], context: int, judge: Judge,
             excluded: Mapping[str, str] | None = None, alpha: float = ALPHA) -> ContextPareto:
    """One context's frontier, every dominated candidate with its dominators, and the undecided pairs
    (tied or unresolved) and trade-offs, each with its axes' verdicts."""
    dominated: dict[str, list[Domination]] = defaultdict(list)
    skipped: list[SkippedPair] = []
    ties: list[Tie] = []
    tradeoffs: list[TradeOff] = []
    order = [x for x, _ in axes_of(points)]
    for i, a in enumerate(points):
        for b in points[i + 1:]:
            d = judge(a, b)
            pair = sorted([a.candidate, b.candidate])
            skip = [x for x in order if x in d.skipped]
            if skip:
                skipped.append(SkippedPair(pair=pair, axes=skip, why={x: d.skipped[x] for x in skip}))
            if d.winner is not None:
                win, lose = (a, b) if d.winner == "a" else (b, a)
                if d.winner == "a":  # judged again as (loser, winner): each axis's sentence has the loser as subject
                    d = judge(lose, win)
                dominated[lose.candidate].append(Domination(
                    by=win.candidate, better_on=d.better_on, skipped_axes=skip, tied_on=d.tied_on, alpha=d.alpha,
                    verdicts=_sentences(d, lose, win), text=dominance_sentence(d, lose.candidate, win.candidate),
                    not_compared=d.not_compared, not_worse_on=d.not_worse_on))
            else:
                x, y = (a, b) if a.candidate == pair[0] else (b, a)  # each axis's sentence has pair[0] as subject
                if x is not a:
                    d = judge(x, y)
                if d.better_on and d.worse_on:
                    tradeoffs.append(TradeOff(pair=pair, axes=_sentences(d, x, y),
                                              text=dominance_sentence(d, x.candidate, y.candidate)))
                    continue
                ties.append(Tie(pair=pair, axes=_sentences(d, x, y), text=dominance_sentence(d, x.candidate, y.candidate),
                                status="unresolved" if d.status == "undecided" else "tied",
                                unresolved_on=d.unresolved_on, blocked_on=d.blocked_on, not_compared=d.not_compared,
                                not_worse_on=d.not_worse_on, rounds_to_resolve={
                                    ax: v.rounds_to_resolve for ax in d.unresolved_on
                                    if (v := d.verdicts.get(ax)) is not None and v.rounds_to_resolve is not None}))
    pairs = len(points) * (len(points) - 1) // 2
    front = sorted(p.candidate for p in points if p.candidate not in dominated)
    by_cand = {p.candidate: p for p in points}
    caveats = {c: f"cell verdict {by_cand[c].verdict}" for c in front
               if (by_cand[c].verdict or "").startswith(("drifting", "unsteady"))}
    return ContextPareto(
        context=context,
        frontier=front,
        dominated={c: sorted(ds, key=lambda d: d.by) for c, ds in sorted(dominated.items())},
        excluded=dict(sorted((excluded or {}).items())),
        skipped_pairs=skipped,
        points=sorted(points, key=lambda p: p.candidate),
        ties=ties,
        tradeoffs=tradeoffs,
        caveats=caveats,
        alpha=alpha,
        pairs_compared=pairs,
    )


def _sentences(d: PairDominance, a: Point, b: Point) -> dict[str, str]:
    """Axis -> the comparison's sentence with `a` as its subject."""
    return {x: comparison_sentence(v, a.candidate, b.candidate, subject="a",
                                   medians=(a.values.get(x), b.values.get(x))) for x, v in d.verdicts.items()}


def eval_outcomes(evals: Iterable[EvalResult]) -> dict[str, dict[str, bool]]:
    """Per candidate: `tier/task` -> passed (the per-task outcomes the pass rate is compared on)."""
    out: dict[str, dict[str, bool]] = defaultdict(dict)
    for e in evals:
        if e.tier not in SUITE_AXES:  # the public suites are their own axes
            out[e.candidate][f"{e.tier}/{e.task}"] = e.passed
    return dict(out)


def eval_pass_rates(evals: Iterable[EvalResult]) -> dict[str, float]:
    """Passed / total per candidate over the eval tier's tasks (the public suites are their own axes)."""
    return {c: sum(o.values()) / len(o) for c, o in eval_outcomes(evals).items()}


def _sustained(rows: Iterable[Row]) -> dict[str, list[float]]:
    by_cand: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.kind == "sustained" and r.status == "ok" and r.sustain_ratio is not None:
            by_cand[r.candidate].append(r.sustain_ratio)
    return by_cand


def sustain_ratios(rows: Iterable[Row]) -> dict[str, float]:
    """Median sustain_ratio of a candidate's successful sustained rows (`[sustained] runs` of them)."""
    return {c: statistics.median(v) for c, v in _sustained(rows).items()}


def cell_rows(rows: Sequence[Row]) -> dict[tuple[int, str], list[Row]]:
    """Per (context, candidate): the ok, full-length probe rows (the comparison's input)."""
    out: dict[tuple[int, str], list[Row]] = defaultdict(list)
    for r in rows:
        if usable(r):
            out[(r.context, r.candidate)].append(r)
    return out


def cell_samples(rows: Sequence[Row]) -> dict[tuple[int, str], dict[str, list[float]]]:
    """Per (context, candidate): image, session and level axes' samples."""
    from benchd.stats.axes import image_axis

    out: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(dict)
    for key, per_axis in agentic_samples(rows).items():
        out[key].update(per_axis)
    for r in rows:
        if r.status == "ok" and not r.short and r.kind == "vision" and r.image_ttft_ms is not None \
                and r.image_width and r.image_height:
            out[(r.context, r.candidate)].setdefault(image_axis(r.image_width, r.image_height).name, []).append(r.image_ttft_ms)
    return out


def row_judge(rows: Sequence[Row], evals: Sequence[EvalResult], context: int, *, order: str | None = None,
              margin_pct: float | Mapping[str, float] | None = None, alpha: float = ALPHA,
              extra: PerCandidate | None = None, k: int | None = None) -> Judge:
    """The pair judge over one context's rows: per-probe axes (paired by round when the order allows),
    pass rates from per-task outcomes, and the sustained, session, level, image and `extra` axes."""
    cells = cell_rows(rows)
    samples = cell_samples(rows)
    outcomes = eval_outcomes(evals)
    suites = suite_outcomes(evals)
    per_cand: dict[str, Mapping[str, Any]] = {"sustain_ratio": _sustained(rows), **(extra or {})}

    def judge(a: Point, b: Point) -> PairDominance:
        ra, rb = cells.get((context, a.candidate), []), cells.get((context, b.candidate), [])
        sa: dict[str, Any] = {}
        sb: dict[str, Any] = {}
        paired: dict[str, bool] = {}
        starts: dict[str, int | None] = {}
        names = [x for x, _ in axes_of((a, b))]
        for axis in names:
            if axis == "eval_pass_rate":
                sa[axis], sb[axis] = outcomes.get(a.candidate), outcomes.get(b.candidate)
            elif axis in SUITE_AXES.values():
                sa[axis], sb[axis] = suites.get(a.candidate, {}).get(axis), suites.get(b.candidate, {}).get(axis)
            elif axis in per_cand:
                sa[axis], sb[axis] = per_cand[axis].get(a.candidate), per_cand[axis].get(b.candidate)
            elif axis in Row.__struct_fields__:
                s = paired_samples(ra, rb, axis, order=order)
                sa[axis], sb[axis], paired[axis], starts[axis] = s.a, s.b, s.paired, s.starts
            else:
                sa[axis] = samples.get((context, a.candidate), {}).get(axis)
                sb[axis] = samples.get((context, b.candidate), {}).get(axis)
        return dominance(sa, sb, axes=names, alpha=alpha, margin_pct=margin_pct, paired=paired, k=k,
                         names=(a.candidate, b.candidate), starts=starts)

    return judge


def points_from_rows(
    rows: Sequence[Row], evals: Sequence[EvalResult], plan: ProbePlan | None = None, extra: PerCandidate | None = None
) -> tuple[dict[int, list[Point]], dict[int, dict[str, str]]]:
    """Cell medians of ok probe rows per context (with 95 % CI and, given `plan`, the cell verdict),
    and the candidates excluded per context; per-candidate axes apply to every context."""
    ok_cells = cell_rows(rows)
    samples = cell_samples(rows)
    rates = eval_pass_rates(evals)
    per = suite_outcomes(evals)
    suite_run = {axis: any(axis in got for got in per.values()) for axis in SUITE_AXES.values()}
    sustain = sustain_ratios(rows)
    cells: dict[int, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.kind == "probe":
            cells[r.context][r.candidate].append(r)
    points: dict[int, list[Point]] = {}
    excluded: dict[int, dict[str, str]] = {}
    for ctx in sorted(cells):
        points[ctx] = []
        excluded[ctx] = {}
        for cand in sorted(cells[ctx]):
            ok = ok_cells.get((ctx, cand), [])
            if not ok:
                excluded[ctx][cand] = "no successful probe rows in this context"
                continue
            values: dict[str, float | None] = {}
            ci: dict[str, list[float]] = {}
            for axis in CORE_AXES:
                if axis == "eval_pass_rate":
                    values[axis] = rates.get(cand)
                elif axis == "sustain_ratio":
                    values[axis] = sustain.get(cand)
                else:
                    vals = [float(v) for r in ok if (v := getattr(r, axis, None)) is not None]
                    values[axis] = statistics.median(vals) if vals else None
                    if (got := median_ci(vals)) is not None:
                        ci[axis] = [got[0], got[1]]
            for axis in SUITE_AXES.values():
                if suite_run[axis]:
                    got_o = per.get(cand, {}).get(axis)
                    values[axis] = sum(got_o.values()) / len(got_o) if got_o else None
            for axis, vals in samples.get((ctx, cand), {}).items():
                values[axis] = statistics.median(vals)
                if (got := median_ci(vals)) is not None:
                    ci[axis] = [got[0], got[1]]
            for axis, by_cand in (extra or {}).items():
                if (got_x := by_cand.get(cand)):
                    values[axis] = statistics.median(got_x)
            verdict = verdict_text(cell_verdict(cells[ctx][cand], plan)) if plan is not None else None
            points[ctx].append(Point(candidate=cand, values=values, ci95=ci, verdict=verdict))
    return points, excluded


def pareto_from_rows(rows: Sequence[Row], evals: Sequence[EvalResult], plan: ProbePlan | None = None, *,
                     order: str | None = None, alpha: float = ALPHA, extra: PerCandidate | None = None,
                     margins: Mapping[str, float] | None = None, k: int | None = None,
                     alpha_source: str | None = None, left: Sequence[RaceDrop] = ()) -> list[ContextPareto]:
    """The Pareto view per context (`margins` override the axis table's; `order` for pairing by round;
    `extra` per-candidate axes; `k` the least axes α is split over), over the candidates still racing
    there: one that left the race (`left`) is excluded from its context on, with the race's reason."""
    points, excluded = points_from_rows(rows, evals, plan, extra)
    _exclude_left(points, excluded, left)
    out = []
    for ctx in sorted(points):
        judge = row_judge(rows, evals, ctx, order=order, margin_pct=dict(margins or {}), alpha=alpha, extra=extra,
                          k=k)
        view = frontier(points[ctx], ctx, judge, excluded[ctx], alpha)
        out.append(msgspec.structs.replace(view, alpha_source=alpha_source, planned_axes=k))
    return out


def _exclude_left(points: dict[int, list[Point]], excluded: dict[int, dict[str, str]],
                  left: Sequence[RaceDrop]) -> None:
    for d in left:
        for ctx in (c for c in points if c >= d.context):
            points[ctx] = [p for p in points[ctx] if p.candidate != d.candidate]
            excluded[ctx][d.candidate] = f"{d.left()}: {d.why}"


def view_alpha(sweep: Sweep, order: str | None) -> tuple[float, str]:
    """The view's α and its source: the stop rule's α when the rounds stopped at planned looks."""
    from benchd.engine.plan import round_plan
    from benchd.stats.stop import look_alpha, looks

    plan = sweep.probe_plan()
    if not plan.adaptive or len(sweep.candidates) < 2 or order in (None, "sequential"):
        return ALPHA, "fixed"
    rp = round_plan(sweep, order)
    n = len(looks(rp.min_rounds, rp.max_rounds))
    return look_alpha(rp.min_rounds, rp.max_rounds), f"the stop rule's: α = {ALPHA:g} over {n} planned looks"


def dominators(results: Sequence[ContextPareto], candidate: str) -> dict[int, list[Domination]]:
    """Per context, who dominates `candidate` (empty when it is on every frontier)."""
    return {r.context: r.dominated[candidate] for r in results if candidate in r.dominated}
