"""Rendering a runbook for people and tools: plain/rich tables, Markdown, JSON, CSV, the Pareto view.
Every figure comes from the runbook; a null prints as `null [n]` with its reason in a numbered note."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from benchd.results import agentic, images
from benchd.results.decision import (
    CANDIDATE_HEADER,
    candidate_lines,
    candidate_rows,
    candidates_json,
    decision_json,
    decision_lines,
    deferred_rows,
)
from benchd.results.kldview import kld_lines
from benchd.results.pareto import axes_of
from benchd.results.records import (
    DERIVED_PROMPT_NOTE,
    ENERGY_COLUMNS,
    ReadyFigure,
    derived_prompt_tps,
    energy_cells,
    pareto_points,
    ready_rows,
)
from benchd.results.text import (
    STATE_WORDS,
    axis_word,
    fmt_counts,
    fmt_median,
    fmt_range,
    fmt_value,
    machine_line,
    verdict_text,
)
from benchd.schemas import (
    CandidateProvenance,
    CellStats,
    ContextPareto,
    EvalSummary,
    MetricStats,
    Runbook,
    RunbookFlag,
    SkippedPair,
    SleepInfo,
    Sweep,
)
from benchd.sensors.suspend.sensor import stall_text
from benchd.stats.comparison import AXES, TAIL_MIN_N

if TYPE_CHECKING:
    from rich.table import Table

    from benchd.results.compare import Comparison, MetricComparison

#: Columns of the cell table: metric, header.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("gen_tps", "gen tok/s"), ("prompt_tps", "prompt tok/s"), ("ttft_ms", "TTFT ms"), ("mem_peak_bytes", "peak mem"),
    ("j_per_gen_token", "J/gen tok"),
)
#: A runbook written before energy was measured has no J/token statistics.
NOT_IN_RUNBOOK = "not in this runbook (written before benchd measured energy)"
NOISY_MARK = "~noisy"
VERDICT_NOTE = ("verdict: steady = 95 % CI of the median within the target, no trend; unsteady ±w = the CI's "
                "half-width, w %, wider than the target; drifting ±d = significant monotone trend of d % over the series; "
                "too few = fewer than 6 ok probes (the CI needs six)")


def probes_text(sweep: Sweep) -> str:
    """`3` or `auto: 6-30 until the 95 % CI of gen_tps is within ±2 %`."""
    p = sweep.probe_plan()
    if not p.adaptive:
        return str(p.min)
    return f"auto: {p.min}-{p.max} until the 95 % CI of the median {p.metric} is within ±{p.target_ci_pct:g} %"


def drift_text(rb: Runbook) -> str:
    if rb.drift is not None:
        return ("DRIFT: " if rb.drift.drifted else "") + rb.drift.summary
    return f"drift sentinel: not run ({rb.drift_null_reason or 'not recorded'})"


class Notes:
    """Numbered reasons for nulls, deduplicated, printed under a table."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def ref(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return f"[{self.items.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{i}] {t}" for i, t in enumerate(self.items, 1)]


def metric_text(ms: MetricStats, notes: Notes) -> str:
    """`median (min–max, cv x%)` or `null [n]`; `~noisy` when the CV exceeds the threshold."""
    if ms.median is None:
        return f"null {notes.ref(f'{ms.metric}: ' + ms.null_reasons.get('value', 'no value'))}"
    spread = fmt_range(ms.metric, ms.min, ms.max)
    cv = f", cv {ms.cv * 100:.1f}%" if ms.cv is not None else ""
    text = f"{fmt_value(ms.metric, ms.median)} ({spread}{cv})"
    if ms.n_null:
        text += f" {notes.ref(f'{ms.metric}: ' + ms.null_reasons.get('value', 'some probes null'))}"
    return text + (f" {NOISY_MARK}" if ms.noisy else "")


def _probes_used(rb: Runbook, c: CellStats, notes: Notes) -> str:
    """The probes the verdict used; re-runs and stalled probes counted beside, each one's reason in a note."""
    v = c.verdict
    if v is None:
        return str(c.n_ok + c.n_failed)
    mine = [r for r in rb.rows if r.kind == "probe" and r.candidate == c.candidate and r.context == c.context]
    why = [f"probe {r.probe}: {r.error}" for r in mine if r.invalidated]
    stalled = [f"probe {r.probe}: {t}" for r in mine if r.status == "ok" and (t := stall_text(r.stalled_s))]
    counts = [f"+{v.invalidated} re-run"] if v.invalidated else []
    counts += [f"{len(stalled)} stalled"] if stalled else []
    text = str(v.probes_used) + (f" ({', '.join(counts)})" if counts else "")
    return text + (f" {notes.ref(f'{c.candidate}@{c.context}: ' + '; '.join(why + stalled))}" if why + stalled else "")


def _verdict_cell(c: CellStats, notes: Notes) -> str:
    v = c.verdict
    if v is None:
        return "null"
    text = verdict_text(v)
    if v.verdict != "steady":
        text += f" {notes.ref(f'{c.candidate}@{c.context}: {v.reason}')}"
    if v.throttle_suspects:
        text += f" ({v.throttle_suspects} throttle-suspect)"
    return text


def _ok_failed(c: CellStats, notes: Notes) -> str:
    failed = f"{c.n_ok}/{c.n_failed}"
    if c.n_short:
        failed += f" +{c.n_short} short {notes.ref(f'{c.candidate}@{c.context}: short probes are kept out of the medians (runbook flags say why)')}"
    if c.n_ok == 0 and c.errors:
        failed += f" {notes.ref(f'{c.candidate}@{c.context}: ' + '; '.join(c.errors))}"
    return failed


def cell_table(rb: Runbook) -> tuple[list[str], list[list[str]], Notes]:
    notes = Notes()
    drafts = any(c.draft_acceptance is not None for c in rb.cells)
    header = ["candidate", "context", "ok/failed", "verdict", "probes", *(h for _, h in COLUMNS),
              *(["draft acceptance"] if drafts else [])]
    body = []
    for c in rb.cells:
        failed = _ok_failed(c, notes)
        draft = [] if not drafts else ["-" if c.draft_acceptance is None else metric_text(c.draft_acceptance, notes)]
        body.append([c.candidate, str(c.context), failed, _verdict_cell(c, notes), _probes_used(rb, c, notes),
                     *(_metric_cell(rb, c, m, notes) for m, _ in COLUMNS), *draft])
    return header, body, notes


def _metric_cell(rb: Runbook, c: CellStats, metric: str, notes: Notes) -> str:
    """A cell's figure; a null prompt rate gets the rate derived from TTFT beside it, its source named."""
    text = metric_text(cell_metric(c, metric), notes)
    if metric != "prompt_tps" or cell_metric(c, metric).median is not None:
        return text
    derived = derived_prompt_tps([r for r in rb.rows if r.kind == "probe" and r.status == "ok" and not r.short
                                  and r.candidate == c.candidate and r.context == c.context])
    if derived is None:
        return text
    median, n = derived
    return f"{text} ≈{fmt_value(metric, median)} {notes.ref(DERIVED_PROMPT_NOTE.format(n=n))}"


def cell_metric(c: CellStats, metric: str) -> MetricStats:
    """A cell's statistics of `metric`; an empty one with the reason when the runbook predates it."""
    got = getattr(c, metric, None)
    return got if got is not None else MetricStats(metric=metric, n=0, null_reasons={"value": NOT_IN_RUNBOOK})


def plain_table(header: list[str], body: list[list[str]]) -> str:
    """Columns padded to their widest cell, a dashed rule under the header."""
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in body]
    return "\n".join(line.rstrip() for line in lines)


def _md_table(header: list[str], body: list[list[str]]) -> str:
    esc = [[cell.replace("|", "\\|") for cell in row] for row in [header, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def _axis_order(per_axis: dict[str, str]) -> list[tuple[str, str]]:
    order = list(AXES)
    return sorted(per_axis.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))


#: How a runbook written before the comparison sentences begins its per-axis texts.
_VERDICT_WORDS = ("different", "tied", "unresolved", "not dominated", "neither dominates")


def _axis_line(axis: str, text: str) -> str:
    """One axis of a pair: its sentence (which names the axis), or an older runbook's `axis: verdict`."""
    return f"    {axis}: {text}" if text.startswith(_VERDICT_WORDS) else f"    {text}"


def _pair_lines(head: str, verdicts: dict[str, str], skipped: SkippedPair | None) -> list[str]:
    out = [f"  {head}", *(_axis_line(axis, text) for axis, text in _axis_order(verdicts))]
    if skipped is not None:
        out.append("    not compared: " + "; ".join(f"{axis_word(a)} ({skipped.why[a]})" if a in skipped.why
                                                  else axis_word(a) for a in skipped.axes))
    return out


def pareto_lines(p: ContextPareto, flags: Sequence[RunbookFlag] = ()) -> list[str]:
    out = [f"context {p.context}: frontier = {', '.join(p.frontier) or '(none)'}"]
    out += [f"  unlike work: {f.detail}" for f in flags if f.flag == "thinking_mixed" and f.context == p.context]
    for cand, caveat in p.caveats.items():
        out.append(f"  {cand} is on the frontier with a caveat: {caveat}")
    out += _pairs_lines(p)
    for cand, reason in p.excluded.items():
        out.append(f"  {cand} excluded: {reason}")
    return out


def _pairs_lines(p: ContextPareto) -> list[str]:
    out: list[str] = []
    skipped = {tuple(sp.pair): sp for sp in p.skipped_pairs}
    for cand, doms in p.dominated.items():
        for d in doms:
            out += _pair_lines(d.text or f"{cand} is dominated by {d.by} on {', '.join(d.better_on)}", d.verdicts,
                               skipped.get(tuple(sorted([cand, d.by]))))
    for t in p.ties:
        head = (t.text if t.text and not t.text.startswith(_VERDICT_WORDS)
                else f"{t.pair[0]} against {t.pair[1]}: {t.text or 'neither dominates'}")
        out += _pair_lines(head, t.axes, skipped.get(tuple(sorted(t.pair))))
    for o in p.tradeoffs:
        out += _pair_lines(o.text, o.axes, skipped.get(tuple(sorted(o.pair))))
    return out


def pareto_points_table(p: ContextPareto, rb: Runbook) -> tuple[list[str], list[list[str]]]:
    """One line per candidate: its state as the page shows it, the cell verdict and every axis's value."""
    axes = axes_of(p.points)
    header = ["candidate", "state", "verdict", *(f"{axis_word(a)} ({d})" for a, d in axes)]
    statuses = {r.candidate: r.status for r in pareto_points(rb, p)}
    body = []
    for pt in p.points:
        status = STATE_WORDS[statuses[pt.candidate]]
        if statuses[pt.candidate] == "dominated":
            status += " by " + ", ".join(d.by for d in p.dominated.get(pt.candidate, []))
        if pt.candidate in p.caveats:
            status += " (caveat)"
        body.append([pt.candidate, status, pt.verdict or "-", *(fmt_value(a, pt.values.get(a)) for a, _ in axes)])
    return header, body


#: The Pareto rule as the report states it (stats.comparison.dominance; docs/measuring.md#the-one-comparison).
DOMINANCE_RULE = ("A dominates B when A is different and better on at least one axis (two-sided, α split over the "
                  "axes compared) and not worse on every other (one-sided, within the axis's margin, at α); an axis "
                  "that shows neither blocks domination. An axis not measured on a side (or a per-probe axis with one value "
                  f"there) is skipped; one too small to compare (a per-candidate axis under {TAIL_MIN_N} values a side, "
                  "pass rates on too few shared tasks) blocks only when its estimate favours the other side beyond its margin; "
                  "each is named")


def render_pareto_text(rb: Runbook) -> str:
    parts = [f"Pareto view (per context; each pair judged by the one comparison: {DOMINANCE_RULE})"]
    for p in rb.pareto:
        parts.append("")
        parts.extend(pareto_lines(p, rb.flags))
        h, b = pareto_points_table(p, rb)
        parts.append(plain_table(h, b))
    return "\n".join(parts)


def header_lines(rb: Runbook) -> list[str]:
    m = rb.provenance.machine
    return [
        f"runbook {rb.id}  outcome: {rb.outcome}  sweep: {rb.sweep.name}",
        f"started {rb.job.started_at or 'never'}  finished {rb.job.finished_at or '-'}",
        f"machine: {machine_line(m)}",
        f"grid: contexts {rb.sweep.contexts}, probes {probes_text(rb.sweep)} + {rb.sweep.warmup} warm-up, "
        f"gen_tokens {rb.sweep.gen_tokens}, eval tier {rb.sweep.eval_tier}, cooldown {rb.sweep.cooldown.policy}, "
        f"thinking {rb.sweep.thinking}, ignore_eos {str(rb.sweep.ignore_eos).lower()}",
        *(f"flag {f.flag}{' (' + f.candidate + ')' if f.candidate else ''}: {f.detail}" for f in rb.flags),
        drift_text(rb),
    ]


READY_HEADER = ["candidate", "warm ready_s", "cold ready_s", "cold / warm", "load_s", "starts"]
READY_NOTE = ("time to ready: spawn -> health answers, median (min–max, n) over the starts with the model files "
              "≥ 99 % in (warm) / ≤ 1 % in (cold) the page cache; load_s: spawn -> the model-loaded log line")


def _ready_figure(f: ReadyFigure, notes: Notes) -> str:
    return f"null {notes.ref(f.why)}" if f.median is None else fmt_median(f.median, f.low, f.high, f.n)


def ready_table(rb: Runbook, notes: Notes) -> list[list[str]]:
    return [[r.candidate, _ready_figure(r.warm, notes), _ready_figure(r.cold, notes),
             f"{r.cold_over_warm:.2f}" if r.cold_over_warm is not None else f"null {notes.ref('needs a warm and a cold start')}",
             f"{r.load_s:.2f}" if r.load_s is not None else f"null {notes.ref(r.load_why)}", str(r.starts)]
            for r in ready_rows(rb)]


def answer_lines(rb: Runbook) -> list[str]:
    return [f"runbook {rb.id}  outcome: {rb.outcome}  sweep: {rb.sweep.name}", "", *decision_lines(rb), "",
            *candidate_lines(rb)]


def deferred_lines(rb: Runbook) -> list[str]:
    rows = deferred_rows(rb)
    return ["Deferred axes (not measured, one line per axis)",
            *(f"  {d.axis} ({d.origin}): {'; '.join(d.reasons)}" for d in rows)] if rows else []


def render_text(rb: Runbook, pareto: bool = False) -> str:
    header, body, notes = cell_table(rb)
    parts = [*answer_lines(rb), "", *header_lines(rb)[1:], *deferred_lines(rb), "", "medians (min–max, cv) of ok probes; ~noisy = CV > 5 %", VERDICT_NOTE,
             plain_table(header, body)]
    if rb.ready_summary:
        parts += ["", READY_NOTE, plain_table(READY_HEADER, ready_table(rb, notes))]
    if notes.items:
        parts += ["", *notes.lines()]
    for section in (agentic.session_lines(rb.rows), agentic.level_lines(rb.rows), images.image_lines(rb.sweep, rb.rows),
                    kld_lines(rb)):
        if section:
            parts += ["", *section]
    if pareto:
        parts += ["", render_pareto_text(rb)]
    return "\n".join(parts) + "\n"


def _rich_cells(header: list[str], body: list[list[str]]) -> Table:
    from rich.table import Table

    table = Table(title="medians (min–max, cv) of ok probes; ~noisy = CV > 5 %")
    widest = max((len(r[0]) for r in body), default=len(header[0]))
    # the id is what the next command takes: never cut; the other columns wrap to make room
    table.add_column(header[0], no_wrap=True, min_width=max(widest, len(header[0])))
    for h in header[1:]:
        table.add_column(h)
    for row in body:
        table.add_row(*(f"[yellow]{c}[/yellow]" if NOISY_MARK in c else c for c in row))
    return table


def print_rich(rb: Runbook, pareto: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for line in [*decision_lines(rb), "", *candidate_lines(rb), ""]:
        console.print(line, highlight=False, soft_wrap=True)
    for line in [*header_lines(rb), *deferred_lines(rb)]:
        console.print(line, highlight=False, soft_wrap=True)
    header, body, notes = cell_table(rb)
    console.print(VERDICT_NOTE, highlight=False, soft_wrap=True)  # the legend, on a terminal too
    console.print(_rich_cells(header, body))
    if rb.ready_summary:
        ready = Table(title=READY_NOTE)
        for h in READY_HEADER:
            ready.add_column(h)
        for row in ready_table(rb, notes):
            ready.add_row(*row)
        console.print(ready)
    for line in notes.lines():
        console.print(line, highlight=False, soft_wrap=True)
    for line in [*agentic.session_lines(rb.rows), *agentic.level_lines(rb.rows), *images.image_lines(rb.sweep, rb.rows),
                 *kld_lines(rb)]:
        console.print(line, highlight=False, soft_wrap=True)
    if pareto:
        console.print(render_pareto_text(rb), highlight=False, soft_wrap=True)


def cooldown_waited_s(payload: Mapping[str, object]) -> float:
    """Seconds a `cooldown_finished` event waited (its CooldownRecord is under `record`)."""
    record = payload.get("record") if isinstance(payload.get("record"), dict) else payload
    waited = record.get("waited_s") if isinstance(record, dict) else None
    return float(waited) if isinstance(waited, (int, float)) else 0.0


def _md_outline(lines: list[str]) -> list[str]:
    """Indented lines as Markdown: unindented ones as headings, the others as (nested) list items."""
    out: list[str] = []
    for x in lines:
        depth = (len(x) - len(x.lstrip(" "))) // 2
        if depth == 0:
            out += ["", f"### {x.strip().rstrip(':').capitalize()}", ""]
        else:
            out.append("  " * (depth - 1) + f"- {x.strip()}")
    return out


def render_markdown(rb: Runbook) -> str:
    """The runbook for a person: the JSON's figures, with provenance and the Pareto view."""
    lines: list[str] = []
    for section in (_md_head, _md_machine, _md_sweep, _md_files, _md_flags, _md_results, _md_sustained,
                    energy_lines, _md_kinds, _md_evals, _md_race, _md_pareto):
        lines += section(rb)
    return "\n".join(lines)


def _md_head(rb: Runbook) -> list[str]:
    lines = [f"# Runbook {rb.id}", "", f"- Sweep: **{rb.sweep.name}** — outcome: **{rb.outcome}**"
             + (f" ({rb.job.error})" if rb.job.error else ""),
             f"- Job `{rb.job.id}`: created {rb.job.created_at}, started {rb.job.started_at or 'never'}, "
             f"finished {rb.job.finished_at or '-'}",
             f"- benchd {rb.provenance.benchd.version} (Python {rb.provenance.benchd.python}); written {rb.generated_at}",
             f"- {'**' + drift_text(rb) + '**' if rb.drift and rb.drift.drifted else drift_text(rb)}", ""]
    decision = decision_lines(rb)
    lines += ["## Decision", "", decision[0] + "."]
    lines += [*_md_outline(decision[1:]), ""]
    cands = [[f"`{c}`" if i == 3 and not c.startswith("null") else c for i, c in enumerate(r)] for r in candidate_rows(rb)]
    return [*lines, "## Candidates", "", _md_table(CANDIDATE_HEADER, cands), ""]


def _md_machine(rb: Runbook) -> list[str]:
    m = rb.provenance.machine
    lines = ["## Machine", ""]
    for field in ("hardware_model", "chip", "cpu_model", "cores_logical", "cores_physical", "memory_bytes",
                  "os", "os_version", "kernel", "arch", "power_source", "battery_percent"):
        v = getattr(m, field)
        lines.append(f"- {field}: {v if v is not None else 'null — ' + m.null_reasons.get(field, 'not reported')}")
    return lines


def _md_sweep(rb: Runbook) -> list[str]:
    s = rb.sweep
    return ["", "## Sweep", "", f"- contexts: {s.contexts}", f"- probes: {probes_text(s)}, warm-up: {s.warmup}, "
            f"gen_tokens: {s.gen_tokens}, eval tier: {s.eval_tier}",
            f"- sampling: temperature {s.sampling.temperature}, seed {s.sampling.seed}",
            f"- thinking: {s.thinking}; ignore_eos: {str(s.ignore_eos).lower()}; evals: thinking "
            f"{s.eval_thinking}, +{s.eval_reasoning_budget} tokens when cut off while reasoning",
            f"- sustained: {s.sustained.tokens} tokens, window {s.sustained.window}",
            f"- cooldown (configured): {msgspec.json.encode(s.cooldown).decode()}",
            f"- cooldowns as they happened: {len(rb.cooldowns)}, total "
            f"{sum(cooldown_waited_s(c.payload) for c in rb.cooldowns):.1f} s waited",
            f"- prompts: corpus sha256 {rb.provenance.prompts.corpus_sha256 or 'null'}, template sha256 "
            f"{rb.provenance.prompts.template_sha256 or 'null'}",
            f"- sleep prevented while running: {_sleep_text(rb.provenance.sleep)}", ""]


def _licence(c: CandidateProvenance) -> str:
    if c.model.license:
        return f"{c.model.license} ({c.model.license_source})"
    return f"null ({c.model.null_reasons.get('license', 'not read')})"


def _sha256_methods(rb: Runbook) -> list[str]:
    return sorted({c.model.sha256_method for c in rb.provenance.candidates if c.model.sha256_method})


def _md_files(rb: Runbook) -> list[str]:
    lines = ["## Candidates' files, licences and environment", ""]
    lines += [f"- {c.candidate} model: {c.model.bytes if c.model.bytes is not None else 'null'} bytes"
              for c in rb.provenance.candidates] + [""]
    lines += [f"sha256 method: {mm}" for mm in _sha256_methods(rb)] + [""]
    lines += [f"- {c.candidate} model licence: {_licence(c)}" for c in rb.provenance.candidates] + [""]
    for c in rb.provenance.candidates:
        env = ", ".join(f"{k}={v}" for k, v in c.server_env.items()) or "none"
        removed = ", ".join(c.env_removed) or "none"
        lines.append(f"- {c.candidate} server environment: passed {env}; inherited knobs removed: {removed}")
    return lines


def _md_flags(rb: Runbook) -> list[str]:
    lines = ["", "## Flags", ""] + ([f"- **{f.flag}**{' (' + f.candidate + ')' if f.candidate else ''}: {f.detail}"
                                    for f in rb.flags] or ["- none"]) + [""]
    deferred = deferred_rows(rb)
    lines += ["## Deferred axes", "", "One row per axis: what this sweep did not measure, and why.", ""]
    lines += [_md_table(["axis", "why it was not measured", "declared by"],
                        [[d.axis, "; ".join(d.reasons), d.origin] for d in deferred])] if deferred else ["- none"]
    return [*lines, ""]


def _md_results(rb: Runbook) -> list[str]:
    lines = ["## Results", "", f"Medians (min–max, cv) over ok probes; `~noisy` = CV > 5 %; {VERDICT_NOTE}.", ""]
    header, rows, notes = cell_table(rb)
    lines += [_md_table(header, rows), ""]
    if rb.ready_summary:
        lines += ["## Time to ready", "", READY_NOTE, "", _md_table(READY_HEADER, ready_table(rb, notes)), ""]
    return lines + [f"{n}  " for n in notes.lines()] + ([""] if notes.items else [])


def _md_sustained(rb: Runbook) -> list[str]:
    if not rb.sustained:
        return []
    sbody = [[x.candidate, x.status, fmt_value("sustain_ratio", x.sustain_ratio),
              ", ".join(fmt_value("gen_tps", w) for w in (x.window_tps or [])) or "null"] for x in rb.sustained]
    return ["## Sustained", "", _md_table(["candidate", "status", "sustain_ratio", "window tok/s"], sbody), ""]


def _md_kinds(rb: Runbook) -> list[str]:
    lines: list[str] = []
    for title, section in (("Sessions", agentic.session_lines(rb.rows)), ("Parallel requests", agentic.level_lines(rb.rows)),
                           ("Image probes", images.image_lines(rb.sweep, rb.rows)),
                           ("KL divergence", kld_lines(rb))):
        if section:
            lines += [f"## {title}", "", *(f"- {ln.strip()}" for ln in section[1:]), ""]
    return lines


def _md_eval_row(e: EvalSummary) -> list[str]:
    done = e.completed if e.completed is not None else e.total
    return [e.candidate, e.tier, f"{e.passed}/{done}" + (f" of {e.planned} (partial)" if e.partial else ""),
            fmt_value("eval_pass_rate", e.pass_rate), fmt_range("eval_pass_rate", e.ci_low, e.ci_high),
            f"{e.completed}/{e.total} ({e.errors} server errors)" if e.completed is not None else "-",
            fmt_counts(e.failures), e.parser or "-", str(e.unsandboxed)]


def _md_aggregate(e: EvalSummary) -> str:
    cats = "; ".join(f"{k} {fmt_value('tool_pass_rate', v.pass_rate)} ({v.passed}/{v.completed})"
                     for k, v in e.categories.items() if k != "irrelevance")
    irr = e.categories.get("irrelevance")
    return (f"- {e.candidate}: {e.aggregate_label}: {fmt_value('tool_pass_rate', e.aggregate)} ({cats})"
            + (f"; irrelevance apart: {fmt_value('tool_pass_rate', irr.pass_rate)} ({irr.passed}/{irr.completed})"
               if irr is not None else ""))


def _md_evals(rb: Runbook) -> list[str]:
    if not rb.eval_summary:
        return []
    lines = ["## Evals", "", _md_table(["candidate", "tier / suite", "passed / completed", "pass rate",
                                        "95 % CI (Clopper–Pearson)", "completed", "failure classes", "tool parser",
                                        "unsandboxed"], [_md_eval_row(e) for e in rb.eval_summary]), ""]
    aggregates = [_md_aggregate(e) for e in rb.eval_summary if e.aggregate_label]
    lines += [*aggregates, ""] if aggregates else []
    for src in rb.eval_sources:
        lines.append(f"- {src.suite}: {src.package} {src.version} ({src.file}, sha256 {src.sha256[:16]}…), "
                     f"license {src.license}; {len(src.task_ids)} tasks")
    return lines + ([""] if rb.eval_sources else [])


def _md_race(rb: Runbook) -> list[str]:
    if not (rb.race or rb.sweep.racing_on()):
        return []
    from benchd.results.race import HEADER, race_rows, race_text

    return ["## Race", "", race_text(rb), ""] + ([_md_table(HEADER, race_rows(rb)), ""] if rb.race else [])


def _md_pareto(rb: Runbook) -> list[str]:
    lines = ["", "## Pareto view", "", "Per context; each pair is judged by the one comparison: per axis different "
             "(the CI of the ratio lies outside ±the axis's margin and the exact rank test agrees), tied (inside it) or "
             f"unresolved. {DOMINANCE_RULE}. The tool never picks: `benchctl lock` is "
             "yours.", ""]
    for p in rb.pareto:
        lines += [f"### Context {p.context}", ""]
        lines += [f"- {x.strip()}" for x in pareto_lines(p, rb.flags)]
        ph, pb = pareto_points_table(p, rb)
        lines += ["", _md_table(ph, pb), ""]
    charts = f"{rb.id}.pareto.png"
    return [*lines, f"Chart (when matplotlib is installed): `{charts}` / `{rb.id}.pareto.svg`", ""]


def _energy_table(rb: Runbook) -> list[str]:
    notes = Notes()
    body = [[c.candidate, str(c.context), *(metric_text(s, notes) for s in c.stats)] for c in energy_cells(rb)]
    lines = [_md_table(["candidate", "context", *(h for _, h in ENERGY_COLUMNS)], body), ""]
    return lines + [f"{n}  " for n in notes.lines()] + ([""] if notes.items else [])


def energy_lines(rb: Runbook) -> list[str]:
    e = rb.provenance.energy
    lines = ["## Energy", ""]
    if not e.available:
        tried = f" (tried: {e.source})" if e.source else ""
        return [*lines, f"- not measured: {e.reason or 'the job recorded no energy source'}{tried}", ""]
    lines += [f"- source: `{e.source}`", f"- granularity: {e.granularity}", f"- scope: {e.scope}", ""]
    lines += _energy_table(rb)
    windows = [(r.candidate, r.window_j) for r in rb.rows if r.kind == "sustained" and r.window_j]
    lines += [f"- sustained {c}: J per window {', '.join(f'{j:.3g}' for j in w)}" for c, w in windows]
    return lines + ([""] if windows else [])


COMPARE_HEADER = ["candidate", "context", "metric", "A median (n)", "B median (n)", "B/A", "verdict"]


def compare_rows(cmp: Comparison, notes: list[str] | None = None) -> list[list[str]]:
    """The table's rows; with `notes`, a not-measured reason goes there once and its rows read `not measured [k]`."""
    def verdict(m: MetricComparison) -> str:
        if notes is None or m.null_reason is None:
            return m.text
        if m.null_reason not in notes:
            notes.append(m.null_reason)
        return f"not measured [{notes.index(m.null_reason) + 1}]"
    header = dict(COLUMNS)  # the cell table's name for each metric
    return [[cell.candidate, str(cell.context), header.get(m.metric, m.metric), f"{fmt_value(m.metric, m.median_a)} ({m.n_a})",
             f"{fmt_value(m.metric, m.median_b)} ({m.n_b})",
             f"{m.ratio_b_over_a:.3f}" if m.ratio_b_over_a is not None else "null", verdict(m)]
            for cell in cmp.cells for m in cell.metrics]


def report_json(rb: Runbook, pareto: bool = False) -> dict[str, object]:
    out: dict[str, object] = {"runbook": rb.id, "outcome": rb.outcome, "sweep": rb.sweep.name,
                           "decision": decision_json(rb), "candidates": candidates_json(rb),
                           "deferred": [{"axis": d.axis, "reasons": d.reasons, "origin": d.origin}
                                        for d in deferred_rows(rb)],
                           "cells": msgspec.to_builtins(rb.cells), "drift": msgspec.to_builtins(rb.drift),
                           "drift_null_reason": rb.drift_null_reason,
                           "ready": msgspec.to_builtins(rb.ready_summary)}
    if pareto:
        out["pareto"] = msgspec.to_builtins(rb.pareto)
    return out


def render_csv(rb: Runbook) -> str:
    """One line per candidate × context × metric; a null has its reason in `null_reason`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["runbook", "candidate", "runtime", "context", "n_ok", "n_failed", "metric", "n", "median", "min",
                "max", "cv", "ci95_low", "ci95_high", "noisy", "null_reason", "verdict", "probes_used"])
    for c in rb.cells:
        for m, _ in COLUMNS:
            ms = cell_metric(c, m)
            reason = "; ".join(f"{k}: {v}" for k, v in ms.null_reasons.items())
            w.writerow([rb.id, c.candidate, c.runtime, c.context, c.n_ok, c.n_failed, m, ms.n,
                        *("null" if v is None else v for v in (ms.median, ms.min, ms.max, ms.cv, ms.ci95_low, ms.ci95_high)),
                        ms.noisy, reason, verdict_text(c.verdict), c.verdict.probes_used if c.verdict else "null"])
    return buf.getvalue()


def _sleep_text(sleep: SleepInfo) -> str:
    if sleep.prevented is None:
        return "unknown — " + "; ".join(sleep.reasons or ["not recorded"])
    how = ", ".join(sleep.methods) or "no method"
    return f"{'yes' if sleep.prevented else 'no'} ({how}{'; ' + '; '.join(sleep.reasons) if sleep.reasons else ''})"
