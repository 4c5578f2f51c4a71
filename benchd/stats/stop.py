"""The pair stop rule: planned looks with α split over them, asking the Pareto view's question of one pair
with the view's α and axes. Reasons and facts: docs/measuring.md#when-a-context-stops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchd.schemas import Row, Sweep
from benchd.stats.axes import IMAGE_AXIS_PREFIX, LEVEL_AXIS_PREFIX, SUITE_AXES, Direction, probe_axes
from benchd.stats.comparison import (
    ADVICE_MIN_N,
    ALPHA,
    AxisVerdict,
    PairDominance,
    compare_axis,
    dominance,
    paired_samples,
)

#: The pair statuses that end a pair's rounds: more rounds cannot change them into another answer.
RESOLVED = ("dominates", "trade-off", "equivalent")


def looks(min_rounds: int, max_rounds: int) -> list[int]:
    """The rounds at which the stop rule asks: `min_rounds`, doubling, and `max_rounds` (3, 6, 12)."""
    out = [max(1, min_rounds)]
    while out[-1] * 2 < max_rounds:
        out.append(out[-1] * 2)
    if max_rounds > out[-1]:
        out.append(max_rounds)
    return out


def look_alpha(min_rounds: int, max_rounds: int, alpha: float = ALPHA) -> float:
    """The α of each look: `alpha` split over the planned looks (Bonferroni)."""
    return alpha / len(looks(min_rounds, max_rounds))


def stuck_axes(d: PairDominance, rounds_left: int) -> list[str]:
    """The axes that keep an undecided pair undecided past `rounds_left` (stuck: more rounds needed than are
    left), or [] when the rounds left may still resolve it. Decides nothing: the pair's rounds only end.
    The rule: docs/measuring.md#when-a-context-stops."""
    if d.status != "undecided" or d.blocked_on:
        return []
    open_ = _open_axes(d)
    if open_ is None:
        return []
    resolving = [axis for axis, v in open_.items()
                 if v.rounds_to_resolve is not None and v.rounds_to_resolve <= rounds_left]
    stuck = [axis for axis in open_ if axis not in resolving]
    return stuck if _futile(d, resolving, stuck) else []


def _open_axes(d: PairDominance) -> dict[str, AxisVerdict] | None:
    """The unresolved compared axes; None when one has too few values to say what more rounds would do."""
    open_ = {axis: v for axis, v in d.verdicts.items() if v.verdict == "unresolved" and axis not in d.not_compared}
    if any((v.n_a if v.paired else min(v.n_a, v.n_b)) < ADVICE_MIN_N for v in open_.values()):
        return None
    return open_


def _futile(d: PairDominance, resolving: list[str], stuck: list[str]) -> bool:
    """Whether the pair stays undecided with `resolving` resolved the way their estimates point."""
    sides = {x for x, wins in (("a", d.better_on), ("b", d.worse_on)) if wins}
    sides |= {f for axis in resolving if (f := d.standings[axis].favours)}
    if not stuck or len(sides) == 2:
        return False
    return not (sides and all(getattr(d.standings[a], f"{next(iter(sides))}_not_worse") for a in stuck))


def planned_axes(sweep: Sweep) -> list[str]:
    """The Pareto axes the sweep's view can compare, known before it runs (α is split over them)."""
    out = [a.name for a in probe_axes()]
    out.append("ready_s")
    if sweep.eval_tier != "none":
        out.append("eval_pass_rate")
    out += [SUITE_AXES[s] for s in sweep.evals]
    out += [name for name, on in (("sustain_ratio", sweep.sustained.tokens > 0), ("kld", sweep.kld.reference is not None),
                                  ("session_ttft_ms", sweep.session.turns > 1)) if on]
    out += [f"{LEVEL_AXIS_PREFIX}{n}" for n in sweep.parallel_levels()]
    if any(c.vision for c in sweep.candidates):
        out += [f"{IMAGE_AXIS_PREFIX}{w}x{h}" for w, h in sweep.vision.resolutions]
    return out


def pair_dominance(rows_a: Sequence[Row], rows_b: Sequence[Row], *, order: str, alpha: float, k: int,
                   margins: Mapping[str, float] | None = None) -> PairDominance:
    """The view's question over the per-probe axes of one pair's rows so far (paired by round as `order`
    allows), with α split over `k` axes (the view's planned count)."""
    names = [a.name for a in probe_axes() if a.name in Row.__struct_fields__]
    sa: dict[str, Any] = {}
    sb: dict[str, Any] = {}
    paired: dict[str, bool] = {}
    starts: dict[str, int | None] = {}
    for axis in names:
        s = paired_samples(rows_a, rows_b, axis, order=order)
        sa[axis], sb[axis], paired[axis], starts[axis] = s.a, s.b, s.paired, s.starts
    return dominance(sa, sb, axes=names, alpha=alpha, margin_pct=dict(margins or {}), paired=paired, k=k,
                     starts=starts)


def stop_verdict(rows_a: Sequence[Row], rows_b: Sequence[Row], *, metric: str, better: Direction, order: str,
                 margin_pct: float | None = None, alpha: float = ALPHA, k: int | None = None,
                 margins: Mapping[str, float] | None = None) -> AxisVerdict:
    """B against A on `metric` as the view asks it: the `pair_dominance` verdict on that axis (α / k each),
    or `compare_axis` at that α when `metric` is not a per-probe Pareto axis."""
    m = dict(margins or {})
    if margin_pct is not None:
        m.setdefault(metric, margin_pct)
    names = [a.name for a in probe_axes() if a.name in Row.__struct_fields__]
    d = pair_dominance(rows_a, rows_b, order=order, alpha=alpha, k=k or len(names), margins=m)
    if metric in d.verdicts:
        return d.verdicts[metric]
    s = paired_samples(rows_a, rows_b, metric, order=order)
    return compare_axis(s.a, s.b, axis=metric, better=better, margin_pct=m.get(metric, 2.0), alpha=d.alpha_axis,
                        paired=s.paired, starts=s.starts)


def stop_reason(per_candidate: Mapping[str, Sequence[Row]], rnd: int, *, min_rounds: int, max_rounds: int,
                order: str, sweep: Sweep, alpha: float = ALPHA) -> str | None:
    """Why a context's rounds end after round `rnd` (every pair's question resolved at a planned look's α),
    or None to go on; `per_candidate`: each candidate's valid probe rows so far."""
    if rnd not in looks(min_rounds, max_rounds) or rnd >= max_rounds:
        return None
    a_look = look_alpha(min_rounds, max_rounds, alpha)
    k = len(planned_axes(sweep))
    ids = list(per_candidate)
    words = []
    for i, x in enumerate(ids):
        for y in ids[i + 1:]:
            if len({r.round for r in per_candidate[x]} & {r.round for r in per_candidate[y]}) < 2:
                return None
            d = pair_dominance(per_candidate[x], per_candidate[y], order=order, alpha=a_look, k=k,
                               margins=sweep.margins)
            if d.status not in RESOLVED:
                return None
            words.append(f"{x} vs {y}: {d.status}")
    return (f"every pair resolved at the planned look after {rnd} rounds ({'; '.join(words)}; "
            f"α = {alpha:g} over {len(looks(min_rounds, max_rounds))} looks, {a_look:.3g} each)")
