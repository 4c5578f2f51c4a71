"""Pareto view over cell medians: which candidates no other candidate beats, per context.

Pure (no I/O). The tool never picks: it only says which candidates are dominated, by whom, and on
which axes, so the human choosing in `benchctl lock` sees every tradeoff that is left.

Rules: A dominates B when A is at least as good on every axis both have and strictly better
on at least one. An axis that is null for either of the two is skipped for that pair and named in the
output (never treated as 0). Equal on all compared axes, or no axis to compare, means neither
dominates. Candidates with no successful probe row in a context are excluded from that context with
a reason, never silently dropped.

Ties are ties: over rows, "better" means better beyond the noise (`compare.beyond_noise`:
the cells' 95 % CIs apart (below six probes: an exact Mann–Whitney p < 0.05), and more than the sweep's
`target_ci_pct`); a smaller difference is a tie on that axis, named with why. Axes with one value per
candidate: the eval pass rate (greedy, deterministic answers) compares exactly; the sustain ratio
(one run each, noise unknown) is never beyond the noise. Frontier candidates whose cell is drifting or
unsteady carry a caveat, so they are never silently on the frontier.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from benchd.engine.metrics import median_ci
from benchd.engine.verdict import cell_verdict
from benchd.results.agentic import SESSION_AXIS
from benchd.results.agentic import samples as agentic_samples
from benchd.results.compare import DEFAULT_MARGIN_PCT, beyond_noise
from benchd.results.comparison import compare_outcomes
from benchd.results.evalcompare import SUITE_AXES, suite_outcomes
from benchd.results.text import verdict_text
from benchd.schemas import ContextPareto, Domination, EvalResult, Point, ProbePlan, Row, SkippedPair, Tie

Direction = Literal["higher", "lower"]

#: The axes, in display order, with the direction that is better.
AXES: tuple[tuple[str, Direction], ...] = (
    ("gen_tps", "higher"),
    ("prompt_tps", "higher"),
    ("mem_peak_bytes", "lower"),
    ("eval_pass_rate", "higher"),
    ("sustain_ratio", "higher"),
    ("j_per_gen_token", "lower"),
)
AXIS_NAMES: tuple[str, ...] = tuple(a for a, _ in AXES)
#: Axes a sweep measures only when it asks for them (sessions, concurrency levels, image resolutions): they join a pair's
#: comparison when either point has a value (directions from the axis table, `results.axes`); the session
#: axis is `agentic.SESSION_AXIS`.
#: Per-candidate axes compared exactly (deterministic: greedy answers pass or fail the same way each time).
EXACT_AXES = frozenset({"eval_pass_rate"})

#: (axis, a, b) -> (differs beyond the noise?, why). None compares medians exactly (points without rows).
Noise = Callable[[str, Point, Point], tuple[bool, str]]


def _val(p: Point, axis: str) -> float | None:
    return p.values.get(axis)


def axes_of(points: Iterable[Point]) -> list[tuple[str, Direction]]:
    """The fixed axes, then the public eval suites', session and level axes any of `points` has a value for."""
    from benchd.results.axes import AXES as TABLE
    from benchd.results.axes import IMAGE_AXIS_PREFIX, LEVEL_AXIS_PREFIX

    present = {k for p in points for k, v in p.values.items() if v is not None}
    extra = [a for a in SUITE_AXES.values() if a in present]
    extra += [SESSION_AXIS] if SESSION_AXIS in present else []
    extra += sorted((k for k in present if k.startswith(LEVEL_AXIS_PREFIX)), key=lambda k: int(k.split("@")[1]))
    extra += sorted((k for k in present if k.startswith(IMAGE_AXIS_PREFIX)), key=_pixels)
    return [*AXES, *((k, TABLE[k].better if k in TABLE else "higher") for k in extra)]


def _pixels(axis: str) -> int:
    w, _, h = axis.split("@", 1)[1].partition("x")
    return int(w) * int(h)


def skipped_axes(a: Point, b: Point) -> list[str]:
    return [axis for axis, _ in axes_of((a, b)) if _val(a, axis) is None or _val(b, axis) is None]


def judge_pair(a: Point, b: Point, noise: Noise | None = None) -> tuple[list[str], list[str], dict[str, str], int]:
    """(axes a is better on, axes b is better on — beyond the noise —, axes tied with why, axes compared)."""
    a_better: list[str] = []
    b_better: list[str] = []
    tied: dict[str, str] = {}
    compared = 0
    for axis, direction in axes_of((a, b)):
        va, vb = _val(a, axis), _val(b, axis)
        if va is None or vb is None:
            continue
        compared += 1
        if va == vb:
            tied[axis] = "equal"
            continue
        beyond, why = noise(axis, a, b) if noise else (True, "")
        if not beyond:
            tied[axis] = why
        elif (va > vb) == (direction == "higher"):
            a_better.append(axis)
        else:
            b_better.append(axis)
    return a_better, b_better, tied, compared


def dominates(a: Point, b: Point, noise: Noise | None = None) -> Domination | None:
    """Domination of `b` by `a`, or None. Skipped and tied axes are named in the result."""
    better, worse, tied, compared = judge_pair(a, b, noise)
    if compared == 0 or not better or worse:
        return None
    return Domination(by=a.candidate, better_on=better, skipped_axes=skipped_axes(a, b),
                      tied_on=[x for x in tied if tied[x] != "equal"])


def frontier(points: Sequence[Point], context: int, excluded: Mapping[str, str] | None = None,
             noise: Noise | None = None) -> ContextPareto:
    """The frontier of one context, every dominated candidate with all its dominators, and the ties."""
    dominated: dict[str, list[Domination]] = {}
    skipped: list[SkippedPair] = []
    ties: list[Tie] = []
    for i, b in enumerate(points):
        doms = [d for a in points if a is not b and (d := dominates(a, b, noise)) is not None]
        if doms:
            dominated[b.candidate] = sorted(doms, key=lambda d: d.by)
        for a in points[i + 1 :]:
            axes = skipped_axes(a, b)
            if axes:
                skipped.append(SkippedPair(pair=sorted([a.candidate, b.candidate]), axes=axes))
            a_better, b_better, tied, _ = judge_pair(a, b, noise)
            if not a_better and not b_better and tied:
                ties.append(Tie(pair=sorted([a.candidate, b.candidate]), axes=tied))
    front = sorted(p.candidate for p in points if p.candidate not in dominated)
    by_cand = {p.candidate: p for p in points}
    caveats = {c: f"cell verdict {by_cand[c].verdict}" for c in front
               if (by_cand[c].verdict or "").startswith(("drifting", "unsteady"))}
    return ContextPareto(
        context=context,
        frontier=front,
        dominated=dict(sorted(dominated.items())),
        excluded=dict(sorted((excluded or {}).items())),
        skipped_pairs=skipped,
        points=sorted(points, key=lambda p: p.candidate),
        ties=ties,
        caveats=caveats,
    )


def _median(values: Iterable[float | int | None]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.median(got) if got else None


def eval_pass_rates(evals: Iterable[EvalResult]) -> dict[str, float]:
    """Passed / total per candidate over the eval tier's tasks (the public suites are their own axes)."""
    total: dict[str, int] = defaultdict(int)
    passed: dict[str, int] = defaultdict(int)
    for e in evals:
        if e.tier in SUITE_AXES:
            continue
        total[e.candidate] += 1
        passed[e.candidate] += int(e.passed)
    return {c: passed[c] / total[c] for c in total}


def _rate(outcomes: Mapping[str, bool] | None) -> float | None:
    return sum(outcomes.values()) / len(outcomes) if outcomes else None


def sustain_ratios(rows: Iterable[Row]) -> dict[str, float]:
    """Median sustain_ratio of a candidate's successful sustained rows (one per candidate, usually)."""
    by_cand: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.kind == "sustained" and r.status == "ok" and r.sustain_ratio is not None:
            by_cand[r.candidate].append(r.sustain_ratio)
    return {c: statistics.median(v) for c, v in by_cand.items()}


def cell_samples(rows: Sequence[Row]) -> dict[tuple[int, str], dict[str, list[float]]]:
    """Per (context, candidate): each per-probe axis's values over the ok probe rows (the noise's input);
    an image resolution's axis over its image probes' TTFTs; the session and level axes' samples from
    `agentic.samples`."""
    from benchd.results.axes import image_axis

    out: dict[tuple[int, str], dict[str, list[float]]] = defaultdict(dict)
    for r in rows:
        if r.status != "ok" or r.short:
            continue
        if r.kind == "probe":
            for axis in AXIS_NAMES:
                v = getattr(r, axis, None) if axis in Row.__struct_fields__ else None
                if v is not None:
                    out[(r.context, r.candidate)].setdefault(axis, []).append(float(v))
        elif r.kind == "vision" and r.image_ttft_ms is not None and r.image_width and r.image_height:
            out[(r.context, r.candidate)].setdefault(image_axis(r.image_width, r.image_height).name, []).append(r.image_ttft_ms)
    for key, axes in agentic_samples(rows).items():
        out[key].update(axes)
    return out


def noise_rule(samples: Mapping[tuple[int, str], Mapping[str, Sequence[float]]], context: int,
               margin_pct: float = DEFAULT_MARGIN_PCT,
               outcomes: Mapping[str, Mapping[str, Mapping[str, bool]]] | None = None) -> Noise:
    """The tie rule over one context's probe values (see the module docstring). The public suites'
    axes are judged by the one comparison on the per-task outcomes both candidates share
    (`compare_outcomes`: exact McNemar); only "different" counts as better or worse."""

    def noise(axis: str, a: Point, b: Point) -> tuple[bool, str]:
        if outcomes is not None and axis in SUITE_AXES.values():
            oa, ob = outcomes.get(a.candidate, {}).get(axis), outcomes.get(b.candidate, {}).get(axis)
            if oa and ob:
                v = compare_outcomes(oa, ob, axis=axis)
                return v.verdict == "different", v.text
            return False, "no per-task outcomes on one side"
        sa = samples.get((context, a.candidate), {}).get(axis)
        sb = samples.get((context, b.candidate), {}).get(axis)
        if sa and sb:
            return beyond_noise(sa, sb, margin_pct)
        if axis in EXACT_AXES:
            return True, "exact"
        return False, "one value per candidate: noise unknown"

    return noise


def points_from_rows(
    rows: Sequence[Row], evals: Sequence[EvalResult], plan: ProbePlan | None = None
) -> tuple[dict[int, list[Point]], dict[int, dict[str, str]]]:
    """Cell medians of successful probe rows per context, plus the candidates excluded per context.

    Eval pass rate and sustain ratio are per candidate, so they apply to every context of it. Each
    point carries the 95 % CI of its per-probe axes and, given the sweep's plan, its cell verdict.
    """
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
            ok = [r for r in cells[ctx][cand] if r.status == "ok" and not r.short]
            if not ok:
                excluded[ctx][cand] = "no successful probe rows in this context"
                continue
            values: dict[str, float | None] = {
                "gen_tps": _median(r.gen_tps for r in ok),
                "prompt_tps": _median(r.prompt_tps for r in ok),
                "mem_peak_bytes": _median(r.mem_peak_bytes for r in ok),
                "eval_pass_rate": rates.get(cand),
            **{axis: _rate(per.get(cand, {}).get(axis)) for axis in SUITE_AXES.values() if suite_run[axis]},
                "sustain_ratio": sustain.get(cand),
                "j_per_gen_token": _median(r.j_per_gen_token for r in ok),
            }
            for axis, vals in samples.get((ctx, cand), {}).items():
                if axis not in values:  # the session and level axes: their medians
                    values[axis] = statistics.median(vals)
            ci = {axis: [lo, hi] for axis, vals in samples.get((ctx, cand), {}).items()
                  if (got := median_ci(vals)) is not None for lo, hi in [got[:2]]}
            verdict = verdict_text(cell_verdict(cells[ctx][cand], plan)) if plan is not None else None
            points[ctx].append(Point(candidate=cand, values=values, ci95=ci, verdict=verdict))
    return points, excluded


def pareto_from_rows(rows: Sequence[Row], evals: Sequence[EvalResult],
                     plan: ProbePlan | None = None) -> list[ContextPareto]:
    """The Pareto view per context with the tie rule (`plan`'s `target_ci_pct` as margin, its verdicts)."""
    points, excluded = points_from_rows(rows, evals, plan)
    samples = cell_samples(rows)
    margin = plan.target_ci_pct if plan is not None else DEFAULT_MARGIN_PCT
    per = suite_outcomes(evals)
    return [frontier(points[ctx], ctx, excluded[ctx], noise_rule(samples, ctx, margin, per)) for ctx in sorted(points)]


def dominators(results: Sequence[ContextPareto], candidate: str) -> dict[int, list[Domination]]:
    """Per context, who dominates `candidate` (empty when it is on every frontier)."""
    return {r.context: r.dominated[candidate] for r in results if candidate in r.dominated}
