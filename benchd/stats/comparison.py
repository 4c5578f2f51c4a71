"""The one comparison: how B differs from A on one axis — different, tied, or unresolved; every place that
compares asks it. Reasons and facts: docs/measuring.md#the-one-comparison."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, NamedTuple, Required, TypedDict, Unpack

from msgspec import Struct

from benchd.schemas import NotCompared
from benchd.stats import ranktests as rt
from benchd.stats.axes import AXES, Axis, Direction, compare_metrics, direction, pareto_axes, register_axis
from benchd.stats.axes import margin as axis_margin
from benchd.stats.notation import fmt_interval, fmt_signed, n_more, ratio_amount, ratio_interval

__all__ = [
    "ALPHA",
    "AXES",
    "DEFAULT_MARGIN_PCT",
    "Axis",
    "AxisStanding",
    "AxisVerdict",
    "Direction",
    "NotCompared",
    "PairDominance",
    "Samples",
    "compare_axis",
    "compare_metrics",
    "compare_outcomes",
    "compare_rows",
    "compare_to_history",
    "dominance",
    "paired_samples",
    "pareto_axes",
    "register_axis",
]
Verdict = Literal["different", "tied", "unresolved"]
ALPHA = 0.05
DEFAULT_MARGIN_PCT = 2.0
#: Pass rates are compared within ±this many percentage points.
DEFAULT_OUTCOME_MARGIN_PCT = 5.0
#: rounds_to_resolve is not estimated beyond this many more rounds.
MAX_ROUNDS_ESTIMATE = 10_000
#: No advice on more rounds before this many values (pairs) a side: the spread is not known well enough.
ADVICE_MIN_N = 5


class AxisVerdict(Struct, kw_only=True, frozen=True):
    """How B compares with A on one axis: `ratio` B/A with its (1 − alpha) interval, `b_better` the estimate's
    direction (counts only when different), `guard_p` the rank test's p."""

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
    #: Values left out as nulls (≤ 0: no ratio), and why.
    dropped: int = 0
    dropped_reason: str | None = None
    #: What adds this axis's samples: "rounds", "[ready] starts", "tasks" (None: nothing in the sweep does).
    lever: str | None = None
    #: Pass rates: B's rate − A's (a fraction) and its (1 − alpha) Newcombe interval.
    diff: float | None = None
    diff_low: float | None = None
    diff_high: float | None = None
    #: The server starts the values rest on: distinct starts on the side with fewer (None: not known, rows
    #: without a start). Paired rounds on one start a side share that start's luck (docs/measuring.md#server-starts).
    starts: int | None = None


def _pct(r: float) -> str:
    return f"{fmt_signed((r - 1) * 100)} %"


def _ci_text(r: float, lo: float, hi: float) -> str:
    return f"[{ratio_interval(r, lo, hi, signed=True)}]"


def _different_text(ratio: float, lo: float, hi: float, word: str) -> str:
    spread = f" [{ratio_interval(ratio, lo, hi, signed=False)}]" if lo != hi else ""
    return f"{ratio_amount(ratio)[0]}{spread} {word}"


def _alpha_text(alpha: float) -> str:
    return f"α = {alpha:.3g}"


class _Design(TypedDict, total=False):
    """The AxisVerdict fields a comparison fixes before it estimates anything (and the pass-rate difference)."""

    alpha: Required[float]
    margin_pct: Required[float]
    n_a: Required[int]
    n_b: Required[int]
    paired: Required[bool]
    dropped: int
    dropped_reason: str | None
    lever: str | None
    starts: int | None
    diff: float | None
    diff_low: float | None
    diff_high: float | None


class _Estimate(_Design, total=False):
    """The AxisVerdict fields every verdict of one estimate shares (all but `verdict` and `text`)."""

    axis: Required[str]
    better: Required[Direction]
    ratio: Required[float | None]
    ci_low: Required[float | None]
    ci_high: Required[float | None]
    b_better: Required[bool | None]
    guard_p: Required[float | None]
    method: Required[str]


def _unresolved(axis: str, better: Direction, why: str, *, method: str, ratio: float | None = None,
                **kw: Unpack[_Design]) -> AxisVerdict:
    return AxisVerdict(axis=axis, better=better, verdict="unresolved", ratio=ratio, ci_low=None, ci_high=None,
                       b_better=None, guard_p=None, method=method,
                       text=f"unresolved: {why} ({_alpha_text(kw['alpha'])})", **kw)


def lever(axis: str) -> str | None:
    """What adds samples to `axis` (the table's lever; "rounds" for an axis it lacks)."""
    return AXES[axis].lever if axis in AXES else "rounds"


def _above_zero(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if x > 0]


def positive(a: Sequence[float], b: Sequence[float], paired: bool) -> tuple[list[float], list[float], int]:
    """The values that can enter a ratio (> 0); paired: the pairs with both > 0. Returns (a, b, dropped)."""
    if not paired:
        ka, kb = _above_zero(a), _above_zero(b)
        return ka, kb, len(a) - len(ka) + len(b) - len(kb)
    kept = [(x, y) for x, y in zip(a, b, strict=True) if x > 0 and y > 0]
    return [x for x, _ in kept], [y for _, y in kept], len(a) - len(kept)


class LogStats(NamedTuple):
    """log(B/A): the estimate, its standard error and degrees of freedom (se 0: no spread)."""

    est: float
    se: float
    df: float


def log_stats(a: Sequence[float], b: Sequence[float], paired: bool) -> LogStats | None:
    """log(B/A) from positive values (paired: mean log ratio; else Welch); None when the noise is unknown."""
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    if paired:
        if len(la) < 2:
            return None
        d = [y - x for x, y in zip(la, lb, strict=True)]
        return LogStats(statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d) - 1)
    if len(la) < 2 or len(lb) < 2:
        return None
    va, vb = _var(la), _var(lb)
    return LogStats(statistics.fmean(lb) - statistics.fmean(la), math.sqrt(va / len(la) + vb / len(lb)),
                    _welch_df(va, len(la), vb, len(lb)))


def _var(xs: Sequence[float]) -> float:
    return statistics.variance(xs) if len(xs) >= 2 else 0.0


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    qa, qb = va / na, vb / nb
    den = (qa * qa / (na - 1) if na > 1 else 0.0) + (qb * qb / (nb - 1) if nb > 1 else 0.0)
    return (qa + qb) ** 2 / den if den > 0 else float(max(na, nb) - 1)


def _rounds_needed(half_width: Callable[[int], float], target: float) -> int | None:
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


def _b_better(est: float, better: Direction) -> bool | None:
    return None if est == 0 else ((est > 0) == (better == "higher"))


def _word(axis: str, est: float) -> str:
    if axis in AXES:
        return AXES[axis].words[0 if est > 0 else 1]
    return "higher" if est > 0 else "lower"


def _exact(axis: str, better: Direction, est: float, *, guard_p: float | None, method: str, at: str,
           **kw: Unpack[_Design]) -> AxisVerdict:
    """The verdict of values with no spread: the exact ratio against the margin."""
    ratio = math.exp(est)
    if abs(est) > math.log1p(kw["margin_pct"] / 100.0):
        verdict: Verdict = "different"
        text = f"different: {_different_text(ratio, ratio, ratio, _word(axis, est))} (exact, no spread; {at})"
    else:
        verdict, text = "tied", f"tied within ±{kw['margin_pct']:g} % (exact: {_pct(ratio)}, no spread; {at})"
    return AxisVerdict(axis=axis, better=better, verdict=verdict, ratio=ratio, ci_low=ratio, ci_high=ratio,
                       b_better=_b_better(est, better), guard_p=guard_p, method=method, text=text, **kw)


def _settled(common: _Estimate, est: float, h: float, guard_ok: bool, at: str) -> AxisVerdict | None:
    """Different (`est` ± `h` outside ±margin, `guard_ok`) or tied (inside); None: unresolved."""
    lo, hi = est - h, est + h
    lm = math.log1p(common["margin_pct"] / 100.0)
    rlo, rhi = math.exp(lo), math.exp(hi)
    if (lo > lm or hi < -lm) and guard_ok:
        text = f"different: {_different_text(math.exp(est), rlo, rhi, _word(common['axis'], est))} ({at})"
        return AxisVerdict(verdict="different", text=text, **common)
    if lo >= -lm and hi <= lm:
        text = f"tied within ±{common['margin_pct']:g} % {_ci_text(math.exp(est), rlo, rhi)} ({at})"
        return AxisVerdict(verdict="tied", text=text, **common)
    return None


class _Fit(NamedTuple):
    """A design's estimate of log(B/A), its spread, rank-test guard and CI half-width after k more rounds."""

    est: float
    spread: float
    guard_p: float
    min_p: float
    guard: str
    half_width: Callable[[int], float]


def _paired_fit(d: list[float], q: float) -> _Fit:
    spread = statistics.stdev(d)
    guard_p, nz = rt.signed_rank_p(d)
    n = len(d)

    def half_width(k: int) -> float:
        return rt.t_quantile(q, n + k - 1) * spread / math.sqrt(n + k)
    return _Fit(statistics.fmean(d), spread, guard_p, rt.signed_rank_min_p(nz), "Wilcoxon signed-rank exact",
                half_width)


def _welch_fit(la: list[float], lb: list[float], q: float) -> _Fit:
    n_a, n_b = len(la), len(lb)
    va, vb = _var(la), _var(lb)
    guard_p, exact = rt.mann_whitney_p(la, lb)

    def half_width(k: int) -> float:
        ka, kb = n_a + k, n_b + k
        return rt.t_quantile(q, _welch_df(va, ka, vb, kb)) * math.sqrt(va / ka + vb / kb)
    return _Fit(statistics.fmean(lb) - statistics.fmean(la), math.sqrt(va + vb), guard_p,
                rt.mann_whitney_min_p(n_a, n_b), "Mann–Whitney " + ("exact" if exact else "normal approximation"),
                half_width)


def _advice(fit: _Fit, lm: float, few: bool, outside: bool, margin_pct: float,
            unit: str | None) -> tuple[int | None, str]:
    """(rounds_to_resolve, the unresolved text's tail); `outside`: the interval is outside ±margin, the guard failed."""
    if few:
        return None, ""
    target = abs(abs(fit.est) - lm)
    more = _rounds_needed(fit.half_width, target) if target > 0 else None
    if outside:
        more = max(more or 1, 1)
    if more is not None:
        return more, (f", at the spread seen so far about {n_more(more, unit or 'rounds')} would give an even chance "
                      f"of resolving ±{margin_pct:g} %")
    if target == 0:
        return None, f", the estimate sits at the ±{margin_pct:g} % margin"
    return None, f", more than {MAX_ROUNDS_ESTIMATE:,} more {unit or 'rounds'} would be needed to resolve ±{margin_pct:g} %"


def _fit(la: list[float], lb: list[float], paired: bool, q: float) -> _Fit | tuple[str, float]:
    """The design's fit of log values, or (why not, the estimate) when a side's noise is unknown."""
    if paired:
        d = [y - x for x, y in zip(la, lb, strict=True)]
        return _paired_fit(d, q) if len(d) >= 2 else ("one pair: the noise is unknown", statistics.fmean(d))
    if len(la) < 2 or len(lb) < 2:
        return (f"one value on side {'A' if len(la) < 2 else 'B'}: its noise is unknown",
                statistics.fmean(lb) - statistics.fmean(la))
    return _welch_fit(la, lb, q)


def _check(a: Sequence[float], b: Sequence[float], better: Direction, paired: bool) -> None:
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', not {better!r}")
    if paired and len(a) != len(b):
        raise ValueError(f"paired comparison needs equal lengths (got {len(a)} and {len(b)})")


def compare_axis(a: Sequence[float], b: Sequence[float], *, axis: str, better: Direction,
                 margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA, paired: bool = False,
                 starts: int | None = None) -> AxisVerdict:
    """B against A on one axis (docs/measuring.md#the-one-comparison). a, b: positive values; paired=True needs
    equal lengths with a[i] and b[i] from the same round. Raises ValueError otherwise."""
    _check(a, b, better, paired)
    a, b, dropped = positive(a, b, paired)
    kw = _Design(alpha=alpha, margin_pct=margin_pct, n_a=len(a), n_b=len(b), paired=paired,
                 dropped=dropped, lever=lever(axis), starts=starts,
                 dropped_reason="a value ≤ 0 has no ratio: left out as a null" if dropped else None)
    design = "paired log ratios" if paired else "Welch on log values"
    if not a or not b:
        return _unresolved(axis, better, "not measured on one side", method=design, **kw)
    fit = _fit([math.log(x) for x in a], [math.log(x) for x in b], paired, 1.0 - alpha / 2.0)
    if isinstance(fit, _Fit):
        return _fitted_verdict(fit, axis, better, design, **kw)
    return _unresolved(axis, better, fit[0], method=design, ratio=math.exp(fit[1]), **kw)


def _fitted_verdict(fit: _Fit, axis: str, better: Direction, design: str, **kw: Unpack[_Design]) -> AxisVerdict:
    alpha, margin_pct = kw["alpha"], kw["margin_pct"]
    ratio = math.exp(fit.est)
    at = _alpha_text(alpha)
    if fit.spread == 0 and not _counter(axis):  # a rounded rate repeating: noise unseen
        return _unresolved(axis, better, "no spread in these values (a rounded rate?): the noise is unknown",
                           method=design, ratio=ratio, **kw)
    if fit.spread == 0:
        return _exact(axis, better, fit.est, guard_p=fit.guard_p, method="exact ratio (no spread)", at=at, **kw)
    h = fit.half_width(0)
    rlo, rhi = math.exp(fit.est - h), math.exp(fit.est + h)
    common = _Estimate(axis=axis, better=better, ratio=ratio, ci_low=rlo, ci_high=rhi,
                       b_better=_b_better(fit.est, better), guard_p=fit.guard_p,
                       method=f"{design}, {(1 - alpha) * 100:.4g} % CI; guard {fit.guard}", **kw)
    guard_ok = fit.guard_p <= max(alpha, fit.min_p) * (1 + 1e-9)
    settled = _settled(common, fit.est, h, guard_ok, at)
    if settled is not None:
        return settled
    lm = math.log1p(margin_pct / 100.0)
    outside = fit.est - h > lm or fit.est + h < -lm
    more, tail = _advice(fit, lm, min(kw["n_a"], kw["n_b"]) < ADVICE_MIN_N, outside, margin_pct, kw.get("lever"))
    why = _ci_text(ratio, rlo, rhi)
    if outside:
        why += f" but the rank test's p = {fit.guard_p:.2g} > {max(alpha, fit.min_p):.2g} (the samples overlap)"
    return AxisVerdict(verdict="unresolved", text=f"unresolved: {why}{tail} ({at})", rounds_to_resolve=more, **common)


def outcome_table(a: Mapping[str, bool], b: Mapping[str, bool]) -> tuple[int, int, int, int]:
    """(both passed, A only, B only, neither) over the tasks both sides ran."""
    shared = set(a) & set(b)
    both = sum(1 for t in shared if a[t] and b[t])
    only_a = sum(1 for t in shared if a[t] and not b[t])
    only_b = sum(1 for t in shared if b[t] and not a[t])
    return both, only_a, only_b, len(shared) - both - only_a - only_b


def tasks_needed(margin_pct: float, alpha: float) -> int:
    """The fewest shared tasks at which a pass-rate difference can be bounded within ±margin (one-sided
    1 − alpha) at all: with no discordant task, the score bound of the discordant share is z² / (n + z²)."""
    m = margin_pct / 100.0
    z = rt.normal_quantile(1.0 - alpha)
    return max(1, math.ceil(z * z * (1 - m) / m))


def compare_outcomes(a: Mapping[str, bool], b: Mapping[str, bool], *, axis: str = "eval_pass_rate",
                     margin_pct: float = DEFAULT_OUTCOME_MARGIN_PCT, alpha: float = ALPHA) -> AxisVerdict:
    """B's pass rate against A's over the tasks both ran (paired by task id): Newcombe's paired interval of
    B − A (`diff*`, fractions) against ±`margin_pct` pp, guarded by the exact McNemar p."""
    both, only_a, only_b, neither = outcome_table(a, b)
    n = both + only_a + only_b + neither
    better: Direction = direction(axis)
    kw = _Design(alpha=alpha, margin_pct=margin_pct, n_a=n, n_b=n, paired=True, lever=lever(axis))
    method = "Newcombe score interval (paired, method 10); guard exact McNemar on shared tasks"
    if n == 0:
        return _unresolved(axis, better, "no task ran on both sides", method=method, **kw)
    pa, pb = (both + only_a) / n, (both + only_b) / n
    lo, hi = rt.newcombe_paired(both, only_a, only_b, neither, 1.0 - alpha)
    guard_p = rt.mcnemar_p(only_a, only_b)
    guard_ok = guard_p <= alpha * (1 + 1e-9)  # no floor: a handful of tasks cannot be different at α
    m = margin_pct / 100.0
    est = pb - pa
    ratio, rlo, rhi = (pb / pa, 1 + lo / pa, 1 + hi / pa) if pa > 0 else (None, None, None)
    pp = f"{fmt_signed(est * 100, 0)} pp [{fmt_interval(lo * 100, hi * 100, 'pp', signed=True)}]"
    what = f"pass rate {pa * 100:.0f} % → {pb * 100:.0f} % ({pp}) over {n} shared tasks"
    at = f"McNemar p = {guard_p:.2g}; {_alpha_text(alpha)}"
    common = _Estimate(axis=axis, better=better, ratio=ratio, ci_low=rlo, ci_high=rhi, b_better=_b_better(est, better),
                       guard_p=guard_p, method=method, diff=est, diff_low=lo, diff_high=hi, **kw)
    if (lo > m or hi < -m) and guard_ok:
        return AxisVerdict(verdict="different", text=f"different: {what} ({at})", **common)
    if lo >= -m and hi <= m:
        return AxisVerdict(verdict="tied", text=f"tied within ±{margin_pct:g} pp: {what} ({at})", **common)
    need = tasks_needed(margin_pct, alpha)
    more = f"at least {need} shared tasks can resolve ±{margin_pct:g} pp" if n < need else \
        f"more shared tasks would resolve ±{margin_pct:g} pp"
    return AxisVerdict(verdict="unresolved", text=f"unresolved: {what}; {more} ({at})", **common)


def compare_to_history(history: Sequence[float], value: float, *, axis: str, better: Direction,
                       margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA) -> AxisVerdict:
    """One session's `value` (B) against earlier sessions' `history` (A, three or more): the prediction
    interval of one more session, guarded by `value`'s exact rank among the k + 1 sessions."""
    k = len(history)
    kw = _Design(alpha=alpha, margin_pct=margin_pct, n_a=k, n_b=1, paired=False)
    method = "prediction interval of one more session on log values; guard exact rank among sessions"
    if k < 3:
        return _unresolved(axis, better, f"{k} earlier sessions: three are needed for their spread",
                           method=method, **kw)
    if value <= 0 or min(history) <= 0:
        return _unresolved(axis, better, "a value ≤ 0 cannot be compared as a ratio", method=method, **kw)
    lh = [math.log(x) for x in history]
    est = math.log(value) - statistics.fmean(lh)
    spread = statistics.stdev(lh)
    tail_count = min(sum(h >= value for h in history), sum(h <= value for h in history)) + 1
    guard_p = min(1.0, 2 * tail_count / (k + 1))
    at = f"{_alpha_text(alpha)}, {k} earlier sessions"
    if spread == 0:
        return _exact(axis, better, est, guard_p=guard_p, method=method, at=at, **kw)
    h = rt.t_quantile(1.0 - alpha / 2.0, k - 1) * spread * math.sqrt(1 + 1 / k)
    rlo, rhi = math.exp(est - h), math.exp(est + h)
    common = _Estimate(axis=axis, better=better, ratio=math.exp(est), ci_low=rlo, ci_high=rhi,
                       b_better=_b_better(est, better), guard_p=guard_p, method=method, **kw)
    settled = _settled(common, est, h, guard_p <= max(alpha, 2 / (k + 1)) * (1 + 1e-9), at)
    if settled is not None:
        return settled
    return AxisVerdict(verdict="unresolved", text=f"unresolved: {_ci_text(math.exp(est), rlo, rhi)}, within the spread of earlier "
                       f"sessions ({at})", **common)


Sample = Sequence[float] | Mapping[str, bool]


#: Values a side a per-candidate axis (time to ready, the sustain ratio) needs before it is compared.
TAIL_MIN_N = 6
PairStatus = Literal["dominates", "trade-off", "undecided", "equivalent", "nothing to compare"]


class AxisStanding(Struct, kw_only=True, frozen=True):
    """One axis in the pair's Pareto question: `a_not_worse` / `b_not_worse` (one-sided non-inferiority at α;
    None: not compared), `favours` (the side favoured beyond the margin, if any)."""

    axis: str
    compared: bool
    margin: float
    a_not_worse: bool | None
    b_not_worse: bool | None
    favours: Literal["a", "b"] | None
    b_advantage: float | None
    b_advantage_high: float | None
    a_advantage_high: float | None


class PairDominance(Struct, kw_only=True, frozen=True):
    """Whether A dominates B or B dominates A: `winner` is different-and-better on `better_on` at
    `alpha_axis` = alpha / k and not worse on every other axis (Berger's intersection–union test; those unresolved
    at alpha / k: `not_worse_on`, the winner's or undecided's one side with wins). Rule: docs/measuring.md#the-one-comparison."""

    winner: Literal["a", "b"] | None
    status: PairStatus
    better_on: list[str]
    worse_on: list[str]
    tied_on: list[str]
    not_worse_on: list[str]
    unresolved_on: list[str]
    blocked_on: list[str]
    not_compared: dict[str, NotCompared]
    skipped: dict[str, str]
    verdicts: dict[str, AxisVerdict]
    standings: dict[str, AxisStanding]
    k: int
    alpha: float
    alpha_axis: float
    text: str


def _counter(name: str) -> bool:
    return name in AXES and AXES[name].counter


def _per_candidate(name: str) -> bool:
    return name in AXES and AXES[name].source == "candidate"


def _skip_reason(name: str, sa: Sample | None, sb: Sample | None) -> str | None:
    if not sa or not sb:
        return "not measured on " + ("one side" if sa or sb else "either side")
    if isinstance(sa, Mapping) or isinstance(sb, Mapping):
        return None if set(sa) & set(sb) else "no task ran on both sides"
    if min(len(sa), len(sb)) < 2 and not _per_candidate(name):
        return "one value on a side: its noise is unknown"
    return None


def _margin(name: str, margin_pct: float | Mapping[str, float] | None) -> float:
    outcomes = name in AXES and AXES[name].outcomes
    if isinstance(margin_pct, Mapping):
        return margin_pct.get(name, axis_margin(name))
    if margin_pct is None or outcomes:
        return axis_margin(name)
    return margin_pct


def _not_compared(name: str, sa: Sample, sb: Sample, margin: float, alpha: float) -> NotCompared | None:
    if isinstance(sa, Mapping) and isinstance(sb, Mapping):
        n, need = len(set(sa) & set(sb)), tasks_needed(margin, alpha)
        if n < need:
            return NotCompared(reason=f"{n} shared tasks: bounding ±{margin:g} pp needs {need}", have=n,
                               needed=need, lever=lever(name))
        return None
    if _per_candidate(name):
        n = min(len(sa), len(sb))
        if n < TAIL_MIN_N:
            return NotCompared(reason=f"{n} value{'' if n == 1 else 's'} a side: comparing needs {TAIL_MIN_N}", have=n,
                               needed=TAIL_MIN_N, lever=lever(name))
    return None


_Bounds = tuple[float, float | None, float | None, float | None]


def _outcome_bounds(sa: Mapping[str, bool], sb: Mapping[str, bool], margin: float, alpha: float,
                    higher: bool) -> _Bounds:
    """(limit, B's advantage, its one-sided upper bound for B, for A) on pass rates, as fractions."""
    both, only_a, only_b, neither = outcome_table(sa, sb)
    n = both + only_a + only_b + neither
    if not n:
        return margin / 100.0, None, None, None
    lo, hi = rt.newcombe_paired(both, only_a, only_b, neither, 1.0 - 2 * alpha)
    b_hi, a_hi = (hi, -lo) if higher else (-lo, hi)
    return margin / 100.0, (1.0 if higher else -1.0) * (only_b - only_a) / n, b_hi, a_hi


def _value_bounds(name: str, sa: Sequence[float], sb: Sequence[float], margin: float, alpha: float,
                  paired: bool, higher: bool) -> _Bounds:
    """(limit, B's advantage, its one-sided upper bound for B, for A) on log values."""
    sign = 1.0 if higher else -1.0
    xa, xb, _ = positive(list(sa), list(sb), paired and len(sa) == len(sb))
    lim = math.log1p(margin / 100.0)
    if not xa or not xb:
        return lim, None, None, None
    adv = sign * (statistics.fmean(map(math.log, xb)) - statistics.fmean(map(math.log, xa)))
    ls = log_stats(xa, xb, paired and len(xa) == len(xb))
    if ls is None or not (ls.se > 0 or _counter(name)):
        return lim, adv, None, None
    h = rt.t_quantile(1.0 - alpha, ls.df) * ls.se if ls.se > 0 else 0.0
    return lim, adv, sign * ls.est + h, -sign * ls.est + h


def _standing(name: str, sa: Sample, sb: Sample, *, margin: float, alpha: float, paired: bool,
              nc: NotCompared | None) -> AxisStanding:
    """B's advantage on `name` (> 0: better for B) and each side's one-sided bound, against the margin."""
    higher = direction(name) == "higher"
    if isinstance(sa, Mapping) and isinstance(sb, Mapping):
        lim, adv, b_hi, a_hi = _outcome_bounds(sa, sb, margin, alpha, higher)
    else:
        lim, adv, b_hi, a_hi = _value_bounds(name, sa, sb, margin, alpha, paired,  # type: ignore[arg-type]
                                             higher)
    favours: Literal["a", "b"] | None = None
    if adv is not None and abs(adv) > lim:
        favours = "b" if adv > 0 else "a"
    compared = nc is None
    return AxisStanding(axis=name, compared=compared, margin=margin, favours=favours, b_advantage=adv,
                        b_advantage_high=b_hi, a_advantage_high=a_hi,
                        a_not_worse=(b_hi is not None and b_hi <= lim) if compared else None,
                        b_not_worse=(a_hi is not None and a_hi <= lim) if compared else None)


class _Judged(NamedTuple):
    """Every axis of one pair judged: the axes taken part (`todo`, in order), the skipped ones with why."""

    todo: list[str]
    skipped: dict[str, str]
    verdicts: dict[str, AxisVerdict]
    standings: dict[str, AxisStanding]
    not_compared: dict[str, NotCompared]


def _split(a: Mapping[str, Sample], b: Mapping[str, Sample], names_: list[str]) -> tuple[list[str], dict[str, str]]:
    """(the axes to compare, in order; the skipped ones with why)."""
    skipped: dict[str, str] = {}
    todo: list[str] = []
    for name in names_:
        why = _skip_reason(name, a.get(name), b.get(name))
        if why is None:
            todo.append(name)
        else:
            skipped[name] = why
    return todo, skipped


def _axis_verdict(name: str, sa: Sample, sb: Sample, *, alpha: float, margin: float, paired: bool,
                  start: int | None) -> AxisVerdict:
    if isinstance(sa, Mapping) and isinstance(sb, Mapping):
        return compare_outcomes(sa, sb, axis=name, alpha=alpha, margin_pct=margin)
    return compare_axis(list(sa), list(sb), axis=name, better=direction(name),  # type: ignore[arg-type]
                        margin_pct=margin, alpha=alpha, paired=paired, starts=start)


def _judge(a: Mapping[str, Sample], b: Mapping[str, Sample], names_: list[str], *, alpha: float, k: int | None,
           margin_pct: float | Mapping[str, float] | None, paired: bool | Mapping[str, bool],
           starts: Mapping[str, int | None] | None) -> tuple[_Judged, int, float]:
    """Each axis's two-sided verdict at alpha / k and its one-sided standing at alpha (`dominance`'s parts)."""
    todo, skipped = _split(a, b, names_)
    k_ = max(k or 0, len(todo))
    starts = starts or {}
    alpha_axis = alpha / k_ if k_ else alpha
    judged = _Judged(todo=todo, skipped=skipped, verdicts={}, standings={}, not_compared={})
    for name in todo:
        margin = _margin(name, margin_pct)
        sa, sb = a[name], b[name]
        pair = paired.get(name, False) if isinstance(paired, Mapping) else paired
        pair = pair and len(sa) == len(sb)
        judged.verdicts[name] = _axis_verdict(name, sa, sb, alpha=alpha_axis, margin=margin, paired=pair,
                                              start=starts.get(name))
        nc = _not_compared(name, sa, sb, margin, alpha)
        if nc is not None:
            judged.not_compared[name] = nc
        judged.standings[name] = _standing(name, sa, sb, margin=margin, alpha=alpha, paired=pair, nc=nc)
    return judged, k_, alpha_axis


def _held_back(j: _Judged, diff: Mapping[str, AxisVerdict], x: Literal["a", "b"]) -> tuple[list[str], list[str]]:
    """The axes that stop `x` dominating: compared and not shown not worse; not compared and favouring the other."""
    other = "b" if x == "a" else "a"
    live = [(n, st) for n, st in j.standings.items() if n not in diff]
    unres = [n for n, st in live if st.compared and not getattr(st, f"{x}_not_worse")]
    return unres, [n for n, st in live if not st.compared and st.favours == other]


class _Outcome(NamedTuple):
    winner: Literal["a", "b"] | None
    status: PairStatus
    wins: dict[str, list[str]]
    unresolved: list[str]
    blocked: list[str]


SIDES: tuple[tuple[Literal["a", "b"], Literal["a", "b"]], ...] = (("a", "b"), ("b", "a"))


def _winner(j: _Judged, diff: Mapping[str, AxisVerdict],
            wins: dict[str, list[str]]) -> tuple[Literal["a", "b"] | None, list[str], list[str]]:
    """(the side with all the wins if nothing holds it back, the axes holding it back)."""
    for x, other in SIDES:
        if wins[x] and not wins[other]:
            unresolved, blocked = _held_back(j, diff, x)
            return (None if unresolved or blocked else x), unresolved, blocked
    return None, [], []


def _held_back_either(j: _Judged, diff: Mapping[str, AxisVerdict]) -> tuple[list[str], list[str]]:
    """With no win either way: the unresolved axes, else the axes holding back either side."""
    unresolved = [n for n, v in j.verdicts.items() if v.verdict == "unresolved" and n not in j.not_compared]
    ua, ba = _held_back(j, diff, "a")
    ub, bb = _held_back(j, diff, "b")
    if unresolved or not (ua or ub or ba or bb):
        return unresolved, []
    return sorted(set(ua) | set(ub), key=j.todo.index), sorted(set(ba) | set(bb), key=j.todo.index)


def _status(won: bool, wins: dict[str, list[str]], held: list[str], any_axis: bool) -> PairStatus:
    if won:
        return "dominates"
    if wins["a"] and wins["b"]:
        return "trade-off"
    if held:
        return "undecided"
    return "equivalent" if any_axis else "nothing to compare"


def _decide(j: _Judged) -> _Outcome:
    """The pair's status from its judged axes (the rule in `PairDominance`)."""
    diff = {n: v for n, v in j.verdicts.items() if v.verdict == "different"}
    wins = {"a": [n for n, v in diff.items() if not v.b_better], "b": [n for n, v in diff.items() if v.b_better]}
    winner, unresolved, blocked = _winner(j, diff, wins)
    if not wins["a"] and not wins["b"]:
        unresolved, blocked = _held_back_either(j, diff)
    status = _status(winner is not None, wins, unresolved or blocked, bool(j.todo))
    return _Outcome(winner=winner, status=status, wins=wins, unresolved=unresolved, blocked=blocked)


def _not_worse(o: _Outcome, j: _Judged, tied: list[str]) -> list[str]:
    """The winner's (or the one side with wins') axes unresolved at α / k yet within the margin one-sided."""
    side = o.winner or next((x for x, y in SIDES if o.wins[x] and not o.wins[y]), None)
    if side is None:
        return []
    return [n for n in j.todo if n not in (*o.wins[side], *tied) and n not in j.not_compared
            and getattr(j.standings[n], f"{side}_not_worse")]


def _dominance_text(o: _Outcome, j: _Judged, tied: list[str], names: tuple[str, str]) -> str:
    """The pair's sentence, before its α clause."""
    if o.winner is not None:
        w, l_ = names if o.winner == "a" else names[::-1]
        better_on = o.wins[o.winner]
        not_worse = _not_worse(o, j, tied)
        return f"{w} dominates {l_}: different and better on {', '.join(better_on)}" + (
            f"; tied on {', '.join(tied)}" if tied else "") + (
            f"; not worse on {', '.join(not_worse)}" if not_worse else "")
    if o.status == "trade-off":
        return (f"neither dominates: {names[0]} better on {', '.join(o.wins['a'])}, "
                f"{names[1]} better on {', '.join(o.wins['b'])}")
    if o.status == "undecided":
        held = [*o.unresolved, *(f"{n} (not compared: {j.not_compared[n].reason})" for n in o.blocked)]
        return f"not dominated: unresolved on {', '.join(held)}"
    if o.status == "equivalent":
        return "neither dominates: not worse either way on every axis compared"
    return "neither dominates: no axis to compare"


def dominance(a: Mapping[str, Sample], b: Mapping[str, Sample], *, axes: Iterable[str] | None = None,
              alpha: float = ALPHA, margin_pct: float | Mapping[str, float] | None = None,
              paired: bool | Mapping[str, bool] = False, names: tuple[str, str] = ("A", "B"),
              k: int | None = None, starts: Mapping[str, int | None] | None = None) -> PairDominance:
    """The Pareto question for one pair (see `PairDominance`). `a`, `b`: axis -> values (outcome axes:
    task -> passed); `axes`: default the Pareto axes; `margin_pct`: a number for per-value axes or a
    mapping per axis; `k`: the axes α is split over when more take part elsewhere. Axes missing or with
    one value on a side are skipped (not in k)."""
    names_ = list(axes) if axes is not None else [x.name for x in pareto_axes()]
    j, k_, alpha_axis = _judge(a, b, names_, alpha=alpha, k=k, margin_pct=margin_pct, paired=paired,
                               starts=starts)
    o = _decide(j)
    tied = [n for n, v in j.verdicts.items() if v.verdict == "tied"]
    better_on, worse_on = (o.wins["b"], o.wins["a"]) if o.winner == "b" else (o.wins["a"], o.wins["b"])
    at = f"α = {alpha:.3g} over {k_} axes, {alpha_axis:.3g} each" if k_ else f"α = {alpha:.3g}, no axis to compare"
    return PairDominance(winner=o.winner, status=o.status, better_on=better_on, worse_on=worse_on, tied_on=tied,
                         not_worse_on=_not_worse(o, j, tied), unresolved_on=o.unresolved, blocked_on=o.blocked,
                         not_compared=j.not_compared,
                         skipped=j.skipped, verdicts=j.verdicts, standings=j.standings, k=k_, alpha=alpha,
                         alpha_axis=alpha_axis, text=f"{_dominance_text(o, j, tied, names)} ({at})")


class Samples(NamedTuple):
    """Two sides' values ready for `compare_axis`, whether they are paired, and how they were formed."""

    a: list[float]
    b: list[float]
    paired: bool
    design: str
    #: Distinct server starts (rows' `start`) behind the values, on the side with fewer; None when a row
    #: carries none (a store written before rows recorded their start, or a row outside the engine).
    starts: int | None = None


def _value(row: object, metric: str) -> float | None:
    v = getattr(row, metric, None)
    return None if v is None else float(v)


def _by_round(rows: Sequence[object], metric: str) -> dict[int, list[float]] | None:
    """Round -> the values of `metric` in it; None when a row carries no round."""
    out: dict[int, list[float]] = {}
    for r in rows:
        rnd, v = getattr(r, "round", None), _value(r, metric)
        if rnd is None:
            return None
        if v is not None:
            out.setdefault(int(rnd), []).append(v)
    return out


def _starts(rows: Sequence[object], metric: str, rounds: set[int] | None = None) -> int | None:
    """Distinct starts of the rows with a value (in `rounds`); None when one carries none."""
    used = [r for r in rows if _value(r, metric) is not None
            and (rounds is None or getattr(r, "round", None) in rounds)]
    got = {getattr(r, "start", None) for r in used}
    return None if None in got or not got else len(got)


def _fewer(x: int | None, y: int | None) -> int | None:
    return None if x is None or y is None else min(x, y)


def _round_pairs(rows_a: Sequence[object], rows_b: Sequence[object], metric: str, order: str) -> Samples | None:
    ga, gb = _by_round(rows_a, metric), _by_round(rows_b, metric)
    if ga is None or gb is None:
        return None
    shared = sorted(set(ga) & set(gb))
    if len(shared) < 2:
        return None
    what = "block medians paired by round" if order == "blocked" else "probes paired by round"
    return Samples([statistics.median(ga[r]) for r in shared], [statistics.median(gb[r]) for r in shared],
                   True, what, _fewer(_starts(rows_a, metric, set(shared)), _starts(rows_b, metric, set(shared))))


def paired_samples(rows_a: Sequence[object], rows_b: Sequence[object], metric: str, *, order: str | None = None) -> Samples:
    """The values of `metric` on two sets of (counting) rows: with `order` "interleaved" or "blocked" and
    rows carrying `round`, the per-round medians of two or more shared rounds, paired; else the raw
    values, unpaired."""
    raw_a = [v for r in rows_a if (v := _value(r, metric)) is not None]
    raw_b = [v for r in rows_b if (v := _value(r, metric)) is not None]
    raw_starts = _fewer(_starts(rows_a, metric), _starts(rows_b, metric))
    if order in ("interleaved", "blocked"):
        pairs = _round_pairs(rows_a, rows_b, metric, order)
        if pairs is not None:
            return pairs
        return Samples(raw_a, raw_b, False, f"unpaired ({order} rows without two shared rounds)", raw_starts)
    if order == "sequential":
        return Samples(raw_a, raw_b, False, "unpaired, sequential order: not drift-protected", raw_starts)
    return Samples(raw_a, raw_b, False, "unpaired", raw_starts)


def compare_rows(rows_a: Sequence[object], rows_b: Sequence[object], metric: str, *, order: str | None = None,
                 margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA) -> AxisVerdict:
    """`compare_axis` on two sets of rows, paired by round where the order allows (`paired_samples`)."""
    s = paired_samples(rows_a, rows_b, metric, order=order)
    better = direction(metric)
    return compare_axis(s.a, s.b, axis=metric, better=better, margin_pct=margin_pct, alpha=alpha, paired=s.paired,
                        starts=s.starts)
