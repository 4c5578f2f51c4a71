"""Pareto view over cell medians: which candidates no other candidate beats, per context.

Pure (no I/O). The tool never picks: it only says which candidates are dominated, by whom, and on
which axes, so the human choosing in `benchctl lock` sees every tradeoff that is left.

Rules (issue 6): A dominates B when A is at least as good on every axis both have and strictly better
on at least one. An axis that is null for either of the two is skipped for that pair and named in the
output (never treated as 0). Equal on all compared axes, or no axis to compare, means neither
dominates. Candidates with no successful probe row in a context are excluded from that context with
a reason, never silently dropped.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from benchd.schemas import ContextPareto, Domination, EvalResult, Point, Row, SkippedPair

Direction = Literal["higher", "lower"]

#: The axes, in display order, with the direction that is better.
AXES: tuple[tuple[str, Direction], ...] = (
    ("gen_tps", "higher"),
    ("prompt_tps", "higher"),
    ("mem_peak_bytes", "lower"),
    ("eval_pass_rate", "higher"),
    ("sustain_ratio", "higher"),
)
AXIS_NAMES: tuple[str, ...] = tuple(a for a, _ in AXES)


def _val(p: Point, axis: str) -> float | None:
    return p.values.get(axis)


def skipped_axes(a: Point, b: Point) -> list[str]:
    return [axis for axis in AXIS_NAMES if _val(a, axis) is None or _val(b, axis) is None]


def dominates(a: Point, b: Point) -> Domination | None:
    """Domination of `b` by `a`, or None. Skipped axes are named in the result."""
    better: list[str] = []
    compared = 0
    for axis, direction in AXES:
        va, vb = _val(a, axis), _val(b, axis)
        if va is None or vb is None:
            continue
        compared += 1
        if va == vb:
            continue
        a_better = va > vb if direction == "higher" else va < vb
        if not a_better:
            return None
        better.append(axis)
    if compared == 0 or not better:
        return None
    return Domination(by=a.candidate, better_on=better, skipped_axes=skipped_axes(a, b))


def frontier(points: Sequence[Point], context: int, excluded: Mapping[str, str] | None = None) -> ContextPareto:
    """The frontier of one context, every dominated candidate with all its dominators."""
    dominated: dict[str, list[Domination]] = {}
    skipped: list[SkippedPair] = []
    for i, b in enumerate(points):
        doms = [d for a in points if a is not b and (d := dominates(a, b)) is not None]
        if doms:
            dominated[b.candidate] = sorted(doms, key=lambda d: d.by)
        for a in points[i + 1 :]:
            axes = skipped_axes(a, b)
            if axes:
                skipped.append(SkippedPair(pair=sorted([a.candidate, b.candidate]), axes=axes))
    front = sorted(p.candidate for p in points if p.candidate not in dominated)
    return ContextPareto(
        context=context,
        frontier=front,
        dominated=dict(sorted(dominated.items())),
        excluded=dict(sorted((excluded or {}).items())),
        skipped_pairs=skipped,
        points=sorted(points, key=lambda p: p.candidate),
    )


def _median(values: Iterable[float | int | None]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.median(got) if got else None


def eval_pass_rates(evals: Iterable[EvalResult]) -> dict[str, float]:
    """Passed / total per candidate (over every tier recorded)."""
    total: dict[str, int] = defaultdict(int)
    passed: dict[str, int] = defaultdict(int)
    for e in evals:
        total[e.candidate] += 1
        passed[e.candidate] += int(e.passed)
    return {c: passed[c] / total[c] for c in total}


def sustain_ratios(rows: Iterable[Row]) -> dict[str, float]:
    """Median sustain_ratio of a candidate's successful sustained rows (one per candidate, usually)."""
    by_cand: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.kind == "sustained" and r.status == "ok" and r.sustain_ratio is not None:
            by_cand[r.candidate].append(r.sustain_ratio)
    return {c: statistics.median(v) for c, v in by_cand.items()}


def points_from_rows(
    rows: Sequence[Row], evals: Sequence[EvalResult]
) -> tuple[dict[int, list[Point]], dict[int, dict[str, str]]]:
    """Cell medians of successful probe rows per context, plus the candidates excluded per context.

    Eval pass rate and sustain ratio are per candidate, so they apply to every context of it.
    """
    rates = eval_pass_rates(evals)
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
                "sustain_ratio": sustain.get(cand),
            }
            points[ctx].append(Point(candidate=cand, values=values))
    return points, excluded


def pareto_from_rows(rows: Sequence[Row], evals: Sequence[EvalResult]) -> list[ContextPareto]:
    points, excluded = points_from_rows(rows, evals)
    return [frontier(points[ctx], ctx, excluded[ctx]) for ctx in sorted(points)]


def dominators(results: Sequence[ContextPareto], candidate: str) -> dict[int, list[Domination]]:
    """Per context, who dominates `candidate` (empty when it is on every frontier)."""
    return {r.context: r.dominated[candidate] for r in results if candidate in r.dominated}
