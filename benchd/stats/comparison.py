"""The one comparison: how B differs from A on one axis — different, tied, or unresolved.

Every place that compares candidates or runbooks (Pareto, compare, report, tail, the page, recheck,
the drift sentinel, and each new axis) asks this module, so they all say the same thing.

Reasons and facts: docs/measuring.md#the-one-comparison.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from msgspec import Struct

from benchd.stats import ranktests as rt
from benchd.stats.axes import AXES, Axis, Direction, compare_metrics, pareto_axes, register_axis

__all__ = ["ALPHA", "AXES", "DEFAULT_MARGIN_PCT", "Axis", "AxisVerdict", "Direction", "PairDominance", "Samples", "compare_axis",
           "compare_metrics", "compare_outcomes", "compare_rows", "compare_to_history", "dominance", "paired_samples", "pareto_axes",
           "register_axis"]
Verdict = Literal["different", "tied", "unresolved"]
ALPHA = 0.05
DEFAULT_MARGIN_PCT = 2.0
#: Pass rates are compared within ±this many percentage points.
DEFAULT_OUTCOME_MARGIN_PCT = 5.0
#: rounds_to_resolve is not estimated beyond this many more rounds.
MAX_ROUNDS_ESTIMATE = 10_000
_MINUS = "\N{MINUS SIGN}"


class AxisVerdict(Struct, kw_only=True, frozen=True):
    """How B compares with A on one axis. `ratio` is B/A (geometric means; pass rates: B's over A's),
    `ci_low`/`ci_high` its (1 − alpha) interval, `b_better` the direction of the estimate (None when
    equal or unknown; it counts only when `verdict` is different), `guard_p` the rank test's p."""

    axis: str
    better: Direction
    verdict: Verdict
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    b_better: bool | None
    alpha: float
    margin_pct: float
    n_a: int
    n_b: int
    paired: bool
    guard_p: float | None
    method: str
    text: str
    rounds_to_resolve: int | None = None


def _pct(r: float) -> str:
    return f"{(r - 1) * 100:+.1f} %".replace("-", _MINUS)


def _ci_text(lo: float, hi: float) -> str:
    if 1 / 1.5 <= lo and hi <= 1.5:
        return f"[{_pct(lo)}, {_pct(hi)}]"
    return f"[{lo:.3g}×, {hi:.3g}×]"


def _x(f: float) -> str:
    return f"{f:.1f}" if f < 10 else f"{f:.0f}"


def _different_text(ratio: float, lo: float, hi: float, word: str) -> str:
    if ratio >= 1.5:
        return f"{_x(ratio)}× [{_x(lo)}–{_x(hi)}] {word}"
    if ratio <= 1 / 1.5:
        return f"{_x(1 / ratio)}× [{_x(1 / hi)}–{_x(1 / lo)}] {word}"
    return f"{_pct(ratio)} {_ci_text(lo, hi)} {word}"


def _alpha_text(alpha: float) -> str:
    return f"α = {alpha:.3g}"


def _unresolved(axis: str, better: Direction, why: str, *, alpha: float, margin_pct: float, n_a: int,
                n_b: int, paired: bool, method: str, ratio: float | None = None) -> AxisVerdict:
    return AxisVerdict(axis=axis, better=better, verdict="unresolved", ratio=ratio, ci_low=None, ci_high=None,
                       b_better=None, alpha=alpha, margin_pct=margin_pct, n_a=n_a, n_b=n_b, paired=paired,
                       guard_p=None, method=method, text=f"unresolved: {why} ({_alpha_text(alpha)})")


def _var(xs: Sequence[float]) -> float:
    return statistics.variance(xs) if len(xs) >= 2 else 0.0


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    qa, qb = va / na, vb / nb
    den = (qa * qa / (na - 1) if na > 1 else 0.0) + (qb * qb / (nb - 1) if nb > 1 else 0.0)
    return (qa + qb) ** 2 / den if den > 0 else float(max(na, nb) - 1)


def _rounds_needed(half_width: Any, target: float) -> int | None:
    """Fewest extra rounds k ≥ 1 with half_width(k) ≤ target (None beyond MAX_ROUNDS_ESTIMATE)."""
    if target <= 0:
        return None
    k = 1
    while half_width(k) > target:
        k *= 2
        if k > MAX_ROUNDS_ESTIMATE:
            return None
    lo = k // 2
    while lo + 1 < k:  # the first k with half_width(k) <= target lies in (lo, k]
        mid = (lo + k) // 2
        if half_width(mid) <= target:
            k = mid
        else:
            lo = mid
    return max(1, k)


def compare_axis(a: Sequence[float], b: Sequence[float], *, axis: str, better: Direction,
                 margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA, paired: bool = False) -> AxisVerdict:
    """B against A on one axis (see the module docstring). a, b: positive values; paired=True needs
    equal lengths with a[i] and b[i] from the same round."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', not {better!r}")
    if paired and len(a) != len(b):
        raise ValueError(f"paired comparison needs equal lengths (got {len(a)} and {len(b)})")
    n_a, n_b = len(a), len(b)
    kw: dict[str, Any] = dict(alpha=alpha, margin_pct=margin_pct, n_a=n_a, n_b=n_b, paired=paired)
    design = "paired log ratios" if paired else "Welch on log values"
    if not a or not b:
        return _unresolved(axis, better, "not measured on one side", method=design, **kw)
    if min(min(a), min(b)) <= 0:
        return _unresolved(axis, better, "a value ≤ 0 cannot be compared as a ratio", method=design, **kw)
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    lm = math.log1p(margin_pct / 100.0)
    q = 1.0 - alpha / 2.0
    if paired:
        d = [y - x for x, y in zip(la, lb, strict=True)]
        est = statistics.fmean(d)
        if len(d) < 2:
            return _unresolved(axis, better, "one pair: the noise is unknown", method=design,
                               ratio=math.exp(est), **kw)
        spread = statistics.stdev(d)
        guard_p, nz = rt.signed_rank_p(d)
        min_p = rt.signed_rank_min_p(nz)
        guard = "Wilcoxon signed-rank exact"
        n = len(d)

        def half_width(k: int) -> float:
            return rt.t_quantile(q, n + k - 1) * spread / math.sqrt(n + k)
    else:
        est = statistics.fmean(lb) - statistics.fmean(la)
        if n_a < 2 or n_b < 2:
            side = "A" if n_a < 2 else "B"
            return _unresolved(axis, better, f"one value on side {side}: its noise is unknown", method=design,
                               ratio=math.exp(est), **kw)
        va, vb = _var(la), _var(lb)
        spread = math.sqrt(va + vb)
        guard_p, exact = rt.mann_whitney_p(la, lb)
        min_p = rt.mann_whitney_min_p(n_a, n_b)
        guard = "Mann–Whitney " + ("exact" if exact else "normal approximation")

        def half_width(k: int) -> float:
            ka, kb = n_a + k, n_b + k
            return rt.t_quantile(q, _welch_df(va, ka, vb, kb)) * math.sqrt(va / ka + vb / kb)
    ratio = math.exp(est)
    b_better = None if est == 0 else ((est > 0) == (better == "higher"))
    word = AXES[axis].words[0 if est > 0 else 1] if axis in AXES else ("higher" if est > 0 else "lower")
    at = _alpha_text(alpha)
    if spread == 0:  # deterministic on both sides: the exact ratio against the margin
        method = "exact ratio (no spread)"
        if abs(est) > lm:
            return AxisVerdict(axis=axis, better=better, verdict="different", ratio=ratio, ci_low=ratio, ci_high=ratio,
                               b_better=b_better, guard_p=guard_p, method=method,
                               text=f"different: {_different_text(ratio, ratio, ratio, word)} (exact, no spread; {at})",
                               **kw)
        return AxisVerdict(axis=axis, better=better, verdict="tied", ratio=ratio, ci_low=ratio, ci_high=ratio,
                           b_better=b_better, guard_p=guard_p, method=method,
                           text=f"tied within ±{margin_pct:g} % (exact: {_pct(ratio)}, no spread; {at})", **kw)
    h = half_width(0)
    lo, hi = est - h, est + h
    rlo, rhi = math.exp(lo), math.exp(hi)
    method = f"{design}, {(1 - alpha) * 100:.4g} % CI; guard {guard}"
    guard_ok = guard_p <= max(alpha, min_p) * (1 + 1e-9)
    common: dict[str, Any] = dict(axis=axis, better=better, ratio=ratio, ci_low=rlo, ci_high=rhi, b_better=b_better,
                                  guard_p=guard_p, method=method, **kw)
    outside = lo > lm or hi < -lm
    if outside and guard_ok:
        return AxisVerdict(verdict="different", text=f"different: {_different_text(ratio, rlo, rhi, word)} ({at})",
                           **common)
    if lo >= -lm and hi <= lm:
        return AxisVerdict(verdict="tied", text=f"tied within ±{margin_pct:g} % {_ci_text(rlo, rhi)} ({at})", **common)
    target = abs(abs(est) - lm)
    more = _rounds_needed(half_width, target) if target > 0 else None
    if outside:
        why = (f"{_ci_text(rlo, rhi)} but the rank test's p = {guard_p:.2g} > {max(alpha, min_p):.2g} "
               "(the samples overlap)")
        more = max(more or 1, 1)
    else:
        why = _ci_text(rlo, rhi)
    tail = (f", about {more} more rounds would resolve ±{margin_pct:g} %" if more is not None else
            f", the estimate sits at the ±{margin_pct:g} % margin" if target == 0 else
            f", more than {MAX_ROUNDS_ESTIMATE} more rounds would be needed to resolve ±{margin_pct:g} %")
    return AxisVerdict(verdict="unresolved", text=f"unresolved: {why}{tail} ({at})", rounds_to_resolve=more, **common)


def compare_outcomes(a: Mapping[str, bool], b: Mapping[str, bool], *, axis: str = "eval_pass_rate",
                     margin_pct: float = DEFAULT_OUTCOME_MARGIN_PCT, alpha: float = ALPHA) -> AxisVerdict:
    """B's pass rate against A's over the tasks both ran (per-task pass/fail, paired by task id).

    The CI of the pass-rate difference (in percentage points, within ±`margin_pct` for tied) bounds
    the discordant share (Clopper–Pearson at 1 − α/2) and the share of those B won (likewise); the
    guard is the exact McNemar p ≤ max(α, its minimum at this many discordant tasks). `ci_low` /
    `ci_high` are that interval as a ratio of B's pass rate over A's (null when A passed none).
    """
    shared = sorted(set(a) & set(b))
    n = len(shared)
    better: Direction = AXES[axis].better if axis in AXES else "higher"
    kw: dict[str, Any] = dict(alpha=alpha, margin_pct=margin_pct, n_a=n, n_b=n, paired=True)
    method = "exact McNemar on shared tasks; Clopper–Pearson bounds"
    if n == 0:
        return _unresolved(axis, better, "no task ran on both sides", method=method, **kw)
    only_a = sum(1 for t in shared if a[t] and not b[t])
    only_b = sum(1 for t in shared if b[t] and not a[t])
    pa = sum(1 for t in shared if a[t]) / n
    pb = sum(1 for t in shared if b[t]) / n
    disc = only_a + only_b
    level = 1.0 - alpha / 2.0
    dlo, dhi = rt.clopper_pearson(disc, n, level)
    plo, phi = rt.clopper_pearson(only_b, disc, level) if disc else (0.0, 1.0)
    lo = min(dlo * (2 * plo - 1), dhi * (2 * plo - 1))
    hi = max(dlo * (2 * phi - 1), dhi * (2 * phi - 1))
    guard_p = rt.mcnemar_p(only_a, only_b)
    guard_ok = guard_p <= max(alpha, rt.signed_rank_min_p(disc)) * (1 + 1e-9)
    m = margin_pct / 100.0
    est = pb - pa
    ratio = pb / pa if pa > 0 else None
    rlo, rhi = (1 + lo / pa, 1 + hi / pa) if pa > 0 else (None, None)
    b_better = None if est == 0 else ((est > 0) == (better == "higher"))
    pp = f"{est * 100:+.0f} pp [{lo * 100:+.0f}, {hi * 100:+.0f} pp]".replace("-", _MINUS)
    what = f"pass rate {pa * 100:.0f} % → {pb * 100:.0f} % ({pp}) over {n} shared tasks"
    at = f"McNemar p = {guard_p:.2g}; {_alpha_text(alpha)}"
    common: dict[str, Any] = dict(axis=axis, better=better, ratio=ratio, ci_low=rlo, ci_high=rhi, b_better=b_better,
                                  guard_p=guard_p, method=method, **kw)
    if (lo > m or hi < -m) and guard_ok:
        return AxisVerdict(verdict="different", text=f"different: {what} ({at})", **common)
    if lo >= -m and hi <= m:
        return AxisVerdict(verdict="tied", text=f"tied within ±{margin_pct:g} pp: {what} ({at})", **common)
    return AxisVerdict(verdict="unresolved", text=f"unresolved: {what}; more shared tasks would resolve "
                       f"±{margin_pct:g} pp ({at})", **common)


def compare_to_history(history: Sequence[float], value: float, *, axis: str, better: Direction,
                       margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA) -> AxisVerdict:
    """One session's `value` (B) against earlier sessions' values `history` (A, three or more): the
    between-session spread. The ratio's interval is the prediction interval of one more session,
    exp(±t(k − 1) · s · √(1 + 1/k)) around value / the history's geometric mean; the guard is the exact
    rank of `value` among the k + 1 sessions, p = 2 · (its tail count) / (k + 1) ≤ max(α, 2 / (k + 1))."""
    k = len(history)
    kw: dict[str, Any] = dict(alpha=alpha, margin_pct=margin_pct, n_a=k, n_b=1, paired=False)
    method = "prediction interval of one more session on log values; guard exact rank among sessions"
    if k < 3:
        return _unresolved(axis, better, f"{k} earlier sessions: three are needed for their spread",
                           method=method, **kw)
    if value <= 0 or min(history) <= 0:
        return _unresolved(axis, better, "a value ≤ 0 cannot be compared as a ratio", method=method, **kw)
    lh = [math.log(x) for x in history]
    est = math.log(value) - statistics.fmean(lh)
    spread = statistics.stdev(lh)
    lm = math.log1p(margin_pct / 100.0)
    ratio = math.exp(est)
    b_better = None if est == 0 else ((est > 0) == (better == "higher"))
    word = AXES[axis].words[0 if est > 0 else 1] if axis in AXES else ("higher" if est > 0 else "lower")
    tail_count = min(sum(h >= value for h in history), sum(h <= value for h in history)) + 1
    guard_p = min(1.0, 2 * tail_count / (k + 1))
    at = f"{_alpha_text(alpha)}, {k} earlier sessions"
    if spread == 0:
        v = "different" if abs(est) > lm else "tied"
        text = (f"different: {_different_text(ratio, ratio, ratio, word)} (exact, no spread; {at})" if v == "different"
                else f"tied within ±{margin_pct:g} % (exact: {_pct(ratio)}, no spread; {at})")
        return AxisVerdict(axis=axis, better=better, verdict=v, ratio=ratio, ci_low=ratio, ci_high=ratio,  # type: ignore[arg-type]
                           b_better=b_better, guard_p=guard_p, method=method, text=text, **kw)
    h = rt.t_quantile(1.0 - alpha / 2.0, k - 1) * spread * math.sqrt(1 + 1 / k)
    lo, hi = est - h, est + h
    rlo, rhi = math.exp(lo), math.exp(hi)
    common: dict[str, Any] = dict(axis=axis, better=better, ratio=ratio, ci_low=rlo, ci_high=rhi, b_better=b_better,
                                  guard_p=guard_p, method=method, **kw)
    if (lo > lm or hi < -lm) and guard_p <= max(alpha, 2 / (k + 1)) * (1 + 1e-9):
        return AxisVerdict(verdict="different", text=f"different: {_different_text(ratio, rlo, rhi, word)} ({at})",
                           **common)
    if lo >= -lm and hi <= lm:
        return AxisVerdict(verdict="tied", text=f"tied within ±{margin_pct:g} % {_ci_text(rlo, rhi)} ({at})", **common)
    return AxisVerdict(verdict="unresolved", text=f"unresolved: {_ci_text(rlo, rhi)}, within the spread of earlier "
                       f"sessions ({at})", **common)


Sample = Sequence[float] | Mapping[str, bool]


class PairDominance(Struct, kw_only=True, frozen=True):
    """Whether A dominates B or B dominates A over the axes both have, with α split over the k axes
    compared (Bonferroni: each axis at `alpha_axis` = alpha / k). `winner` dominates when it is
    different-and-better on `better_on` and different-and-worse on none, with no axis unresolved."""

    winner: Literal["a", "b"] | None
    better_on: list[str]
    worse_on: list[str]
    tied_on: list[str]
    unresolved_on: list[str]
    skipped: dict[str, str]
    verdicts: dict[str, AxisVerdict]
    k: int
    alpha: float
    alpha_axis: float
    text: str


def _skip_reason(sa: Sample | None, sb: Sample | None) -> str | None:
    if not sa or not sb:
        return "not measured on " + ("either side" if not sa and not sb else "one side")
    if isinstance(sa, Mapping) or isinstance(sb, Mapping):
        return None
    if len(sa) < 2 or len(sb) < 2:
        return "one value on a side: its noise is unknown"
    return None


def dominance(a: Mapping[str, Sample], b: Mapping[str, Sample], *, axes: Iterable[str] | None = None,
              alpha: float = ALPHA, margin_pct: float | Mapping[str, float] = DEFAULT_MARGIN_PCT,
              paired: bool | Mapping[str, bool] = False, names: tuple[str, str] = ("A", "B")) -> PairDominance:
    """The Pareto question for one pair. `a`, `b`: axis -> values (per-task outcomes for outcome axes);
    `axes` defaults to the table's Pareto axes. An axis missing or with one value on a side is
    skipped (named, not counted in k); an unresolved axis blocks domination and is named."""
    names_ = list(axes) if axes is not None else [x.name for x in pareto_axes()]
    skipped: dict[str, str] = {}
    todo: list[str] = []
    for name in names_:
        why = _skip_reason(a.get(name), b.get(name))
        if why is None:
            todo.append(name)
        else:
            skipped[name] = why
    k = len(todo)
    alpha_axis = alpha / k if k else alpha
    verdicts: dict[str, AxisVerdict] = {}
    for name in todo:
        spec = AXES.get(name)
        margin = margin_pct.get(name, DEFAULT_MARGIN_PCT) if isinstance(margin_pct, Mapping) else margin_pct
        sa, sb = a[name], b[name]
        if isinstance(sa, Mapping) and isinstance(sb, Mapping):
            verdicts[name] = compare_outcomes(sa, sb, axis=name, alpha=alpha_axis,
                                              margin_pct=max(margin, DEFAULT_OUTCOME_MARGIN_PCT))
        else:
            pair = paired.get(name, False) if isinstance(paired, Mapping) else paired
            verdicts[name] = compare_axis(list(sa), list(sb), axis=name,  # type: ignore[arg-type]
                                          better=spec.better if spec else "higher", margin_pct=margin,
                                          alpha=alpha_axis, paired=pair and len(sa) == len(sb))
    diff = {n: v for n, v in verdicts.items() if v.verdict == "different"}
    b_wins = [n for n, v in diff.items() if v.b_better]
    a_wins = [n for n, v in diff.items() if not v.b_better]
    tied = [n for n, v in verdicts.items() if v.verdict == "tied"]
    unresolved = [n for n, v in verdicts.items() if v.verdict == "unresolved"]
    winner: Literal["a", "b"] | None = None
    if not unresolved and a_wins and not b_wins:
        winner = "a"
    elif not unresolved and b_wins and not a_wins:
        winner = "b"
    at = f"α = {alpha:.3g} over {k} axes, {alpha_axis:.3g} each" if k else f"α = {alpha:.3g}, no axis to compare"
    better_on, worse_on = (a_wins, b_wins) if winner != "b" else (b_wins, a_wins)
    if winner is not None:
        w, l_ = names if winner == "a" else names[::-1]
        text = f"{w} dominates {l_}: different and better on {', '.join(better_on)}"
        text += f"; tied on {', '.join(tied)}" if tied else ""
    elif unresolved and not (a_wins and b_wins):
        text = f"not dominated: unresolved on {', '.join(unresolved)}"
    elif a_wins and b_wins:
        text = f"neither dominates: {names[0]} better on {', '.join(a_wins)}, {names[1]} better on {', '.join(b_wins)}"
    elif k:
        text = "neither dominates: tied on every axis compared"
    else:
        text = "neither dominates: no axis to compare"
    return PairDominance(winner=winner, better_on=better_on, worse_on=worse_on, tied_on=tied,
                         unresolved_on=unresolved, skipped=skipped, verdicts=verdicts, k=k, alpha=alpha,
                         alpha_axis=alpha_axis, text=f"{text} ({at})")


class Samples(NamedTuple):
    """Two sides' values ready for `compare_axis`, whether they are paired, and how they were formed."""

    a: list[float]
    b: list[float]
    paired: bool
    design: str


def _value(row: Any, metric: str) -> float | None:
    v = getattr(row, metric, None)
    return None if v is None else float(v)


def paired_samples(rows_a: Sequence[Any], rows_b: Sequence[Any], metric: str, *, order: str | None = None) -> Samples:
    """The values of `metric` on two sets of rows (already filtered to the ones that count).

    With `order` "interleaved" or "blocked" and every row carrying its `round`, the rounds both sides
    have are paired, each side's value for a round being the median of its probes in that round (one
    probe when interleaved; the block median when blocked). Otherwise (sequential, rows without a
    round, or fewer than two shared rounds) the raw values, unpaired.
    """
    def by_round(rows: Sequence[Any]) -> dict[int, list[float]] | None:
        out: dict[int, list[float]] = {}
        for r in rows:
            rnd, v = getattr(r, "round", None), _value(r, metric)
            if rnd is None:
                return None
            if v is not None:
                out.setdefault(int(rnd), []).append(v)
        return out

    raw_a = [v for r in rows_a if (v := _value(r, metric)) is not None]
    raw_b = [v for r in rows_b if (v := _value(r, metric)) is not None]
    if order in ("interleaved", "blocked"):
        ga, gb = by_round(rows_a), by_round(rows_b)
        if ga is not None and gb is not None:
            shared = sorted(set(ga) & set(gb))
            if len(shared) >= 2:
                what = "block medians paired by round" if order == "blocked" else "probes paired by round"
                return Samples([statistics.median(ga[r]) for r in shared], [statistics.median(gb[r]) for r in shared],
                               True, what)
        return Samples(raw_a, raw_b, False, f"unpaired ({order} rows without two shared rounds)")
    if order == "sequential":
        return Samples(raw_a, raw_b, False, "unpaired, sequential order: not drift-protected")
    return Samples(raw_a, raw_b, False, "unpaired")


def compare_rows(rows_a: Sequence[Any], rows_b: Sequence[Any], metric: str, *, order: str | None = None,
                 margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA) -> AxisVerdict:
    """`compare_axis` on two sets of rows, paired by round where the order allows (`paired_samples`)."""
    s = paired_samples(rows_a, rows_b, metric, order=order)
    better = AXES[metric].better if metric in AXES else "higher"
    return compare_axis(s.a, s.b, axis=metric, better=better, margin_pct=margin_pct, alpha=alpha, paired=s.paired)
