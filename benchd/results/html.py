"""The runbook as one self-contained HTML page, `<runbook-id>.html`: pure (`render_page`), the Vega runtime
inlined when the `html` extra is installed, and no network request (a CSP forbids it); without the
extra the page has the tables and says how to get the charts."""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Sequence
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchd.atomic import atomic_write
from benchd.results import pagecharts, records
from benchd.results.decision import (
    CANDIDATE_HEADER,
    ContextDecision,
    Undecided,
    candidate_rows,
    decisions,
    deferred_rows,
    ruled_out_text,
    undecided_text,
)
from benchd.results.records import axis_label
from benchd.results.report import COMPARE_HEADER, compare_rows
from benchd.results.text import STATE_WORDS, fmt_counts, fmt_median, fmt_range, fmt_value, margin_words
from benchd.schemas import ContextPareto, EvalResult, EvalSummary, KldResult, Runbook

if TYPE_CHECKING:
    from benchd.results.compare import Comparison

Doc = dict[str, Any]

MISSING = ("the interactive charts need the html extra (pip install 'benchd[html]': vl-convert-python, which "
           "carries the Vega runtime); every chart's table is on this page")
#: No request may leave the page: scripts and styles are inline, images only data: URLs.
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data:; font-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")


class Runtime:
    """The inlined charting runtime (or its absence, with the reason the page prints)."""

    def __init__(self, script: str | None, about: str) -> None:
        self.script, self.about = script, about


def available() -> bool:
    """Whether the `html` extra (vl-convert-python: the Vega runtime) is installed."""
    try:
        metadata.version("vl-convert-python")
    except metadata.PackageNotFoundError:
        return False
    return True


@functools.lru_cache(maxsize=4)
def vega_runtime(cache_dir: Path | None = None) -> Runtime:
    """Vega + Vega-Lite + vega-embed as one script, from vl-convert-python's bundler, cached in
    `<cache>/html/vega-<version>.js` (bundling costs CPU seconds)."""
    try:
        version = metadata.version("vl-convert-python")
    except metadata.PackageNotFoundError:
        return Runtime(None, MISSING)
    cached = cache_dir / "html" / f"vega-bundle-{version}.js" if cache_dir else None
    if cached is not None and cached.is_file():
        script = cached.read_text()
    else:
        import vl_convert

        script = vl_convert.javascript_bundle()  # type: ignore[call-arg]  # (the stub omits the default)
        if cached is not None:
            atomic_write(cached, script)
    if "</script" in script.lower():  # would end the inline <script> early
        return Runtime(None, f"vl-convert-python {version}'s bundle cannot be inlined (it contains '</script')")
    return Runtime(script, f"Vega-Lite via vl-convert-python {version}, inlined")


def esc(v: object) -> str:
    return html.escape("null" if v is None else str(v))


def table(header: list[str], rows: Sequence[Sequence[object]], caption: str = "", cls: str = "") -> str:
    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, Raw) else esc(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f"<table class='{cls}'>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Raw(str):
    ...


def value_html(v: str | list[str]) -> str:
    """A sweep-level fact: one line, or a list of them."""
    if isinstance(v, list):
        return "<ul class='facts'>" + "".join(f"<li>{esc(x)}</li>" for x in v) + "</ul>"
    return esc(v)


def chart_div(chart_id: str, label: str) -> str:
    return (f"<div class='chart' id='{esc(chart_id)}' role='img' aria-label='{esc(label)}'>"
            "<p class='nochart'>chart not rendered (see the note at the top)</p></div>")


def _asset(name: str) -> str:
    return resources.files("benchd").joinpath("data", name).read_text()


def _json_script(element_id: str, obj: object) -> str:
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return f"<script type='application/json' id='{element_id}'>{text}</script>"


def page(title: str, body: str, charts: list[Doc], extra: Doc, runtime: Runtime) -> bytes:
    """The HTML document around a body: styles, chart specs, the runtime and the page script."""
    notice = "" if runtime.script else f"<div class='notice' role='note'><b>No charts:</b> {esc(runtime.about)}.</div>"
    runtime_js = f"<script>{runtime.script}</script>" if runtime.script else ""
    doc = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{_asset('page.css')}</style></head><body>"
        f"{notice}{body}"
        f"<footer><p>Written by benchd from the runbook JSON; charts: {esc(runtime.about)}. "
        "The page loads nothing from the network.</p></footer>"
        f"{_json_script('benchd-charts', {'charts': charts, **extra})}{runtime_js}"
        f"<script>{_asset('page.js')}</script></body></html>\n"
    )
    return doc.encode()


def _summary(rb: Runbook) -> str:
    s = records.summary(rb)
    facts = [("sweep", s.name), ("outcome", s.outcome), ("machine", s.machine),
             ("started", s.started_at), ("finished", s.finished_at), ("runbook written", s.generated_at),
             ("grid", s.grid), ("candidates", ", ".join(s.candidates))]
    if s.error:
        facts.insert(2, ("error", s.error))
    dl = "".join(f"<dt>{esc(k)}</dt><dd class='{esc(k.replace(' ', '-'))}'>{esc(v)}</dd>" for k, v in facts)
    verdicts = ("".join(f"<h4 class='{'alarm' if v.alarm else ''}'>{esc(v.key)}</h4>{value_html(v.value)}"
                        for v in s.verdicts)
                or "<p>No sweep-level verdict in this runbook (no drift sentinel ran).</p>")
    deferred = table(["axis", "why it was not measured", "declared by"],
                     [[d.axis, Raw("<br>".join(esc(r) for r in d.reasons)), d.origin] for d in deferred_rows(rb)],
                     "What this sweep did not measure, and why (one row per axis)", "deferred")
    return (f"<section id='summary'><h2>Summary</h2><dl class='summary'>{dl}</dl>"
            f"<h3>Sweep-level verdicts and flags</h3>{verdicts}<h3>Deferred axes</h3>{deferred}</section>")


def _priorities(rb: Runbook) -> str:
    """The `benchctl report --priority` selector: every answer in the page, shown client-side."""
    from benchd.results.priority import PRIORITIES, priority_lines

    opts = "".join(f"<option value='{esc(p.name)}'>{esc(p.question)}</option>" for p in PRIORITIES.values())
    answers = "".join(f"<article class='priority' data-priority='{esc(name)}' hidden>"
                      f"<pre class='priority-lines'>{esc(chr(10).join(priority_lines(rb, name)))}</pre></article>"
                      for name in PRIORITIES)
    return ("<section id='priority'><h2>Choose a priority</h2><div class='controls'><label>priority "
            f"<select id='priority-choice'><option value=''>none: the decision per context below</option>{opts}"
            "</select></label></div><p>Which axis answers the question and why, the candidates in order on it with "
            "their verdicts against the first, and what the first costs on every other axis (the same as "
            f"<code>benchctl report --priority NAME</code>). benchd does not pick.</p>{answers}</section>")


def _decision(rb: Runbook) -> str:
    """Per context: the frontier, the dominated, the undecided and what would decide them; no pick."""
    parts = [_decision_context(d) for d in decisions(rb)]
    body = "".join(parts) or "<p>No context has a successful probe: nothing to decide.</p>"
    return ("<section id='decision'><h2>Decision</h2><p>Per context: the frontier (no candidate beats these on every "
            "axis), who is dominated and by whom, which pairs are trade-offs, which stay undecided and what would "
            "decide them. benchd "
            f"does not pick among the frontier: the trade-off is yours.</p>{body}</section>")


def _undecided_item(u: Undecided) -> str:
    return (f"<li class='state-{esc(u.status)}'><b>{esc(STATE_WORDS[u.status])}</b>: {esc(undecided_text(u))}<ul>"
            + "".join(f"<li>would decide it: {esc(x)}</li>" for x in u.decide) + "</ul></li>")


def _decision_context(d: ContextDecision) -> str:
    words = STATE_WORDS
    items = [f"<li class='state-frontier'><b>{esc(words['frontier'])}</b>: {esc(', '.join(d.frontier) or '(none)')}</li>"]
    items += [f"<li class='state-frontier'>{esc(c)}: {esc(words['frontier'])} with a caveat: {esc(why)}</li>"
              for c, why in d.caveats.items()]
    items += [f"<li class='pairs'><small>{esc(x)}</small></li>" for x in [d.pairs_text()] if x]
    items += [f"<li class='state-dominated'><b>{esc(words['dominated'])}</b>: {esc(ruled_out_text(r))}</li>"
              for r in d.ruled_out]
    items += [f"<li class='state-tradeoff'><b>{esc(words['trade-off'])}</b>: {esc(text)}</li>"
              for _, text in d.tradeoffs]
    items += [_undecided_item(u) for u in d.undecided]
    items += [f"<li class='state-excluded'><b>{esc(words['excluded'])}</b>: {esc(c)} ({esc(why)})</li>"
              for c, why in d.excluded.items()]
    return (f"<article class='decision-context' data-context='{d.context}'><h3>Context {d.context} tokens"
            f"</h3><ul class='decision'>{''.join(items)}</ul></article>")


def _candidates(rb: Runbook) -> str:
    return ("<section id='candidates'><h2>Candidates</h2>"
            + table(CANDIDATE_HEADER, candidate_rows(rb), "What each candidate is, as benchd ran it", "candidates")
            + "</section>")


def _pareto(rb: Runbook, candidates: list[str], charts: list[Doc]) -> str:
    axes = records.axes_present(rb)
    if not axes:
        return "<section id='pareto'><h2>Pareto view</h2><p>No context has a successful probe: nothing to compare.</p></section>"
    x_axis = "mem_peak_bytes" if "mem_peak_bytes" in axes else axes[-1]
    y_axis = "gen_tps" if "gen_tps" in axes else axes[0]
    opts = "".join(f"<option value='{esc(a)}'>{esc(axis_label(a))}</option>" for a in axes)
    controls = (f"<div class='controls'><label>x axis <select id='x-axis'>{opts}</select></label> "
                f"<label>y axis <select id='y-axis'>{opts}</select></label></div>")
    parts = []
    for ctx in rb.pareto:
        points = records.pareto_points(rb, ctx)
        charts.append({"id": f"chart-pareto-{ctx.context}", "kind": "pareto", "spec": pagecharts.pareto_spec(
            [p.chart_record() for p in points], ctx.context, axes, candidates, x_axis, y_axis)})
        parts.append(_pareto_context(ctx, points, axes))
    return ("<section id='pareto'><h2>Pareto view</h2><p>Per context, one point per candidate. A candidate is "
            "dominated when another is at least as good on every axis both have and better on one; the frontier is "
            "what is left. benchd does not choose among the frontier: the tradeoff is yours. Marker shape and colour "
            f"name the candidate (the same on every chart); {esc(pagecharts.state_legend())}. Hover a point for its cell's median, CI, probes and each figure's source.</p>"
            f"{controls}{''.join(parts)}</section>")


def _pareto_context(ctx: ContextPareto, points: list[records.ParetoPoint], axes: list[str]) -> str:
    context, cid = ctx.context, f"chart-pareto-{ctx.context}"
    rows = [[p.candidate, STATE_WORDS[p.status], p.relation, *(Raw(f"<span title='{esc(p.tips.get(a))}'>"
                                                      f"{esc(fmt_value(a, p.values.get(a)))}</span>")
                                                  for a in axes)] for p in points]
    rows += [[c, STATE_WORDS["excluded"], why, *["-"] * len(axes)] for c, why in ctx.excluded.items()]
    skipped = "".join(f"<li>{esc(' vs '.join(sp.pair))}: not compared on {esc(', '.join(sp.axes))} "
                      "(null for one of them)</li>" for sp in ctx.skipped_pairs)
    return (
        f"<article class='context' data-context='{context}'><h3>Context {context} tokens</h3>"
        f"<figure>{chart_div(cid, f'Pareto scatter at context {context}; the table below has the same figures')}"
        f"<figcaption class='undrawn' id='{cid}-undrawn'></figcaption></figure>"
        + table(["candidate", "state", "Pareto", *(axis_label(a) for a in axes)], rows,
                f"Context {context}: cell medians (hover a value for its CI, probes and source)", "pareto")
        + (f"<ul class='skipped'>{skipped}</ul>" if skipped else "") + "</article>")


def _probes(rb: Runbook, candidates: list[str], charts: list[Doc]) -> str:
    series = records.probe_series(rb)
    if not series:
        return "<section id='probes'><h2>Probe series</h2><p>No probe rows.</p></section>"
    charts.append({"id": "chart-probes", "kind": "probes",
                   "spec": pagecharts.probes_spec([p.chart_record() for p in series], candidates)})
    rows = [[p.candidate, p.context, p.probe, p.mark, fmt_value("gen_tps", p.gen_tps), p.note, p.source, p.verdict]
            for p in series]
    return ("<section id='probes'><h2>Probe series per cell</h2><p>Each probe's generation tok/s in the order it "
            "ran; the dashed line is the cell median. Failed probes (crosses) and null values (squares) sit at the "
            "bottom of their panel with the reason in their tooltip and in the table.</p>"
            f"{chart_div('chart-probes', 'Small multiples of the probe series; the table below lists every probe')}"
            "<details><summary>Every probe as a table</summary>"
            + table(["candidate", "context", "probe", "kind", "gen tok/s", "note", "source", "cell"], rows) +
            "</details></section>")


def _sustained(rb: Runbook, candidates: list[str], charts: list[Doc]) -> str:
    windows, runs = records.sustained_windows(rb), records.sustained_runs(rb)
    if not runs:
        return "<section id='sustained'><h2>Sustained generation</h2><p>Not run in this sweep (sustained.tokens = 0).</p></section>"
    if windows:
        charts.append({"id": "chart-sustained", "kind": "sustained", "spec": pagecharts.sustained_spec(windows, candidates)})
    rows = [[r.candidate, r.status, r.gen_tokens, fmt_value("sustain_ratio", r.sustain_ratio),
             ", ".join(fmt_value("gen_tps", w) for w in r.window_tps) or "null", r.why, r.window_source]
            for r in runs]
    return ("<section id='sustained'><h2>Sustained generation</h2>"
            + (chart_div("chart-sustained", "Sustained windows per candidate; the table below has the values") if windows else "")
            + table(["candidate", "status", "tokens", "sustain ratio", "window tok/s", "error / nulls", "source"], rows)
            + "</section>")


def _agentic(rb: Runbook, candidates: list[str], charts: list[Doc]) -> str:
    turns, rates = records.session_turns(rb), records.level_rates(rb)
    if not turns and not rates:
        return ("<section id='agentic'><h2>Sessions and parallel requests</h2><p>Not measured in this sweep "
                "(session.turns = 0, concurrency = [1]).</p></section>")
    out = "<section id='agentic'><h2>Sessions and parallel requests</h2>"
    if turns:
        charts.append({"id": "chart-sessions", "kind": "sessions", "spec": pagecharts.sessions_spec(turns, candidates)})
        out += (chart_div("chart-sessions", "TTFT per session turn per candidate; the table below has the values")
                + table(["candidate", "context", "turn", "TTFT", "cached", "prompt", "reusable prefix", "cache miss"],
                        [[t["candidate"], t["context"], t["turn"], fmt_value("ttft_ms", t["ttft_ms"]), t["cached_tokens"],
                          t["prompt_tokens"], t["reusable"], t["miss"]] for t in turns]))
    if rates:
        charts.append({"id": "chart-levels", "kind": "levels", "spec": pagecharts.levels_spec(rates, candidates)})
        out += (chart_div("chart-levels", "Aggregate and per-request gen tok/s per level; the table below has the values")
                + table(["candidate", "context", "level", "measure", "gen tok/s"],
                        [[r["candidate"], r["context"], r["level"], r["measure"], fmt_value("gen_tps", r["tps"])]
                         for r in rates]))
    return out + "</section>"


def _ready(rb: Runbook) -> str:
    rows = records.ready_rows(rb)
    if not rows:
        return "<section id='ready'><h2>Time to ready</h2><p>No server start recorded its time to ready.</p></section>"

    def fig(f: records.ReadyFigure) -> str:
        return f"null: {f.why}" if f.median is None else fmt_median(f.median, f.low, f.high, f.n)

    top = table(["candidate", "warm (s)", "cold (s)", "cold / warm", "load (s)"],
                [[r.candidate, fig(r.warm), fig(r.cold),
                  f"{r.cold_over_warm:.2f}" if r.cold_over_warm is not None else "null",
                  f"{r.load_s:.2f}" if r.load_s is not None else f"null: {r.load_why}"] for r in rows])
    starts = table(["candidate", "time", "purpose", "ready_s", "load_s", "cache", "resident before", "how known"],
                   [[r.candidate, r.time, r.purpose, r.ready_s, r.load_s, r.cache, r.resident_before,
                     "; ".join(f"{k}: {v}" for k, v in {**r.sources, **r.null_reasons}.items())] for r in rb.ready])
    return ("<section id='ready'><h2>Time to ready</h2><p>Spawn to health answering, over the starts with the model "
            "files ≥ 99 % in (warm) or ≤ 1 % in (cold) the page cache, read with mincore just before the spawn.</p>"
            f"{top}<details><summary>Every server start</summary>{starts}</details></section>")


def _kld_row(r: KldResult) -> list[object]:
    from benchd.results.kldview import plus_minus as pm

    return [r.context, r.candidate, r.status, pm(r.kld_mean, r.kld_mean_se), fmt_value("kld", r.kld_median),
            fmt_value("kld", r.kld_p99), pm(r.top1_agree, r.top1_agree_se, 100), pm(r.ppl_ratio, r.ppl_ratio_se),
            r.tokens_scored, r.seconds, fmt_value("mem_peak_bytes", r.mem_peak_bytes),
            "; ".join([*(x for x in (r.reason, r.comparability) if x), *r.notes,
                       *(f"{k}: {v}" for k, v in r.null_reasons.items())])]


def _kld_points(rb: Runbook) -> list[Doc]:
    return [{"candidate": r.candidate, "context": r.context, "kld": r.kld_mean, "mem_mib": r.mem_peak_bytes / (1 << 20)}
            for r in rb.kld if r.status == "ok" and r.kld_mean is not None and r.mem_peak_bytes]


def _kld(rb: Runbook, candidates: list[str], charts: list[Doc]) -> str:
    if rb.sweep.kld.reference is None:
        return ""
    head = "<section id='kld'><h2>KL divergence</h2>"
    c = rb.kld_corpus
    corpus = (f"<p>Against <b>{esc(rb.sweep.kld.reference)}</b> on {esc(c.path)} ({esc(c.source)}; sha256 "
              f"<code>{esc(c.sha256)}</code>, {c.tokens if c.tokens is not None else 'null'} tokens). Mean ± standard "
              "error over the scored tokens; lower is less quality lost (docs/kld.md).</p>") if c else ""
    if not rb.kld:
        return head + corpus + "<p>No result: the step did not run.</p></section>"
    pts = _kld_points(rb)
    if pts:
        charts.append({"id": "chart-kld", "kind": "kld", "spec": pagecharts.kld_spec(pts, candidates)})
    rows = [_kld_row(r) for r in rb.kld]
    return (head + corpus + (chart_div("chart-kld", "KL divergence by peak memory per context; the table below has "
                                       "the values") if pts else "")
            + table(["context", "candidate", "status", "mean KLD", "median", "p99", "top-1 %", "PPL ratio", "tokens",
                     "seconds", "peak memory", "reasons and notes"], rows) + "</section>")


def _eval_row(e: EvalSummary) -> list[object]:
    return [e.candidate, e.tier, e.passed, e.total, f"{e.completed} ({e.errors})" if e.completed is not None else "-",
            fmt_value("eval_pass_rate", e.pass_rate), fmt_range("eval_pass_rate", e.ci_low, e.ci_high),
            fmt_counts(e.failures), e.parser or "-",
            f"{e.latency_s_median:.3g}" if e.latency_s_median is not None else "-", e.partial_reason or "no",
            e.unsandboxed]


def _task_row(e: EvalResult) -> list[object]:
    return [e.candidate, e.tier, e.category or "-", e.task, "yes" if e.passed else "no", e.failure or "-",
            e.parameter or "-", e.detail or ""]


def _evals(rb: Runbook) -> str:
    if not rb.eval_summary:
        return "<section id='evals'><h2>Evals</h2><p>No eval ran (eval_tier = none, or no candidate answered).</p></section>"

    top = table(["candidate", "tier / suite", "passed", "total", "completed (server errors)", "pass rate (of completed)",
                 "95 % CI", "failure classes", "tool parser", "median s / task", "partial", "not sandboxed"],
                [_eval_row(e) for e in rb.eval_summary])
    sources = "".join(f"<li>{esc(s.suite)}: {esc(s.package)} {esc(s.version)} (sha256 {esc(s.sha256[:16])}…), "
                      f"license {esc(s.license)}; {len(s.task_ids)} tasks</li>" for s in rb.eval_sources)
    tasks = table(["candidate", "suite", "category", "task", "passed", "failure", "parameter", "detail"],
                  [_task_row(e) for e in rb.evals])
    return (f"<section id='evals'><h2>Evals</h2>{top}" + (f"<ul>{sources}</ul>" if sources else "")
            + f"<details><summary>Every task</summary>{tasks}</details></section>")


def _locks(rb: Runbook) -> str:
    items = []
    for i, c in enumerate(records.lock_commands(rb)):
        note = f"<br><small>{esc(c.note)}</small>" if c.note else ""
        items.append(f"<li class='lock'><code id='lock-{i}'>{esc(c.command)}</code> <button type='button' "
                     f"class='copy' data-target='lock-{i}' aria-label='copy the lock command of {esc(c.candidate)}'>"
                     f"copy</button>{note}</li>")
    return ("<section id='lock'><h2>Lock a candidate</h2><p>benchd never picks one. When you have chosen, run the "
            "command of your choice (with your reason in --note): it writes a reviewable locked.toml with the "
            f"evidence. Candidates in alphabetical order.</p><ul class='locks'>{''.join(items)}</ul></section>")


def _race(rb: Runbook) -> str:
    if not rb.race and not rb.sweep.racing_on():
        return ""
    from benchd.results.race import HEADER, race_rows, race_text

    rows = table(HEADER, [list(r) for r in race_rows(rb)], cls="race") if rb.race else ""
    return f"<section id='race'><h2>Race</h2><p>{esc(race_text(rb))}</p>{rows}</section>"


def render_page(rb: Runbook, runtime: Runtime) -> bytes:
    """The runbook page (pure: the same runbook and runtime give the same bytes)."""
    candidates = [c.id for c in rb.sweep.candidates]
    charts: list[Doc] = []
    nav = "".join(f"<a href='#{a}'>{t}</a>" for a, t in (("priority", "Priority"), ("decision", "Decision"), ("candidates", "Candidates"),
                  ("summary", "Summary"), ("pareto", "Pareto"),
                  ("probes", "Probes"), ("sustained", "Sustained"), ("agentic", "Sessions"), ("ready", "Ready"),
                  ("evals", "Evals"), ("lock", "Lock"))
                  + ((("kld", "KLD"),) if rb.sweep.kld.reference else ()))
    body = (f"<header><h1>benchd runbook <span class='rid'>{esc(rb.id)}</span></h1>"
            f"<p class='outcome {esc(rb.outcome)}'>sweep <b>{esc(rb.sweep.name)}</b>: {esc(rb.outcome)}</p>"
            f"<nav>{nav}</nav></header><main>"
            + _priorities(rb) + _decision(rb) + _candidates(rb) + _summary(rb) + _race(rb) + _pareto(rb, candidates, charts) + _probes(rb, candidates, charts)
            + _sustained(rb, candidates, charts) + _agentic(rb, candidates, charts) + _ready(rb) + _kld(rb, candidates, charts) + _evals(rb)
            + _locks(rb) + "</main>")
    labels = {a: axis_label(a) for a in records.axes_present(rb)}
    return page(f"benchd runbook {rb.id}", body, charts, {"labels": labels}, runtime)


def write_page(rb: Runbook, out_dir: Path, cache_dir: Path | None = None) -> Path:
    """`<out_dir>/<id>.html`, written atomically."""
    return _write(out_dir / f"{rb.id}.html", render_page(rb, vega_runtime(cache_dir)))


def _write(path: Path, data: bytes) -> Path:
    atomic_write(path, data)
    return path


def render_compare_page(cmp: Comparison, runtime: Runtime) -> bytes:
    """`benchctl compare A B --html`: warnings first, then ratio B/A per cell and metric, chart and table."""
    records_ = [{"cell": f"{cell.candidate} @ {cell.context}", "metric": m.metric, "ratio": m.ratio_b_over_a,
                 "verdict": m.verdict, "text": m.text, "median_a": fmt_value(m.metric, m.median_a),
                 "median_b": fmt_value(m.metric, m.median_b)}
                for cell in cmp.cells for m in cell.metrics if m.ratio_b_over_a is not None]
    charts = [{"id": "chart-compare", "kind": "compare", "spec": pagecharts.compare_spec(records_)}] if records_ else []
    warnings = "".join(f"<li>{esc(w)}</li>" for w in cmp.warnings) or "<li>none: the two runbooks are like for like</li>"
    only = (f"<p>Only in A: {esc(', '.join(cmp.only_in_a) or '-')}; only in B: "
            f"{esc(', '.join(cmp.only_in_b) or '-')}</p>")
    body = (f"<header><h1>benchd comparison</h1><p>A = <span class='rid'>{esc(cmp.a)}</span>, "
            f"B = <span class='rid'>{esc(cmp.b)}</span></p></header><main><section id='summary'><h2>Summary</h2>"
            f"<p>Test: {esc(cmp.test)}; α = {esc(cmp.alpha)} per metric, {esc(margin_words(cmp.margin_pct, cmp.margins))}.</p>"
            f"<h3>What differs between the two runs</h3><ul>{warnings}</ul>{only}</section>"
            "<section id='cells'><h2>B / A per cell</h2>"
            + (chart_div("chart-compare", "Ratio B over A per cell and metric; the table below has the figures")
               if records_ else "<p>No cell has a ratio (no common cell measured on both sides).</p>")
            + table(COMPARE_HEADER, compare_rows(cmp))
            + "</section></main>")
    return page(f"benchd comparison {cmp.a} vs {cmp.b}", body, charts, {"labels": {}}, runtime)


def write_compare_page(cmp: Comparison, out_dir: Path, cache_dir: Path | None = None) -> Path:
    """`<out_dir>/compare-<A>-vs-<B>.html`, written atomically."""
    return _write(out_dir / f"compare-{cmp.a}-vs-{cmp.b}.html", render_compare_page(cmp, vega_runtime(cache_dir)))
