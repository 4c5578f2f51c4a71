"""Exports of a runbook (`benchctl export RUNBOOK --format ...`): llama-bench's Markdown table, JSON lines
with llama-bench's field names, CSV. Reasons and facts: docs/exports.md#following-llama-bench."""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from benchd.results.text import machine_line
from benchd.schemas import CandidateProvenance, Row, Runbook
from benchd.schemas.json import JSONObject
from benchd.stats.notation import plural
from benchd.stats.rows import usable

#: How a llama.cpp build is recorded (`llama.cpp b<number>-<commit>`, the `/props` build_info format).
_BUILD = re.compile(r"\bb(\d+)-([0-9a-fA-F]+)\b")
_NOT_LLAMA = "not a llama.cpp server: llama-bench's fields describe llama.cpp builds"


def build_of(version: str | None) -> tuple[str | None, int | None]:
    """(build_commit, build_number) of a recorded llama.cpp version string, (None, None) otherwise."""
    m = _BUILD.search(version or "")
    return (m.group(2), int(m.group(1))) if m else (None, None)


def _cand_prov(rb: Runbook) -> dict[str, CandidateProvenance]:
    return {c.candidate: c for c in rb.provenance.candidates}


def _threads(cp: CandidateProvenance | None) -> tuple[int | None, str]:
    aff = cp.affinity if cp else None
    if aff is not None and aff.server_threads is not None:
        return aff.server_threads, aff.source or "affinity"
    return None, (aff.reason if aff and aff.reason else "the server's thread count was not set by the candidate")


def _llama(runtime: str, cp: CandidateProvenance | None) -> bool:
    """A llama.cpp server: one benchd started, or an external one detected as llama-server."""
    return runtime == "llama-server" or (cp is not None and cp.external is not None and cp.external.kind == "llama-server")


def _probe_rows(rb: Runbook) -> list[Row]:
    return [r for r in rb.rows if r.kind == "probe"]


def _provenance_fields(rb: Runbook, cp: CandidateProvenance | None, row: Row) -> JSONObject:
    version = row.server_version or (cp.server_version if cp else None)
    commit, number = build_of(version) if _llama(row.runtime, cp) else (None, None)
    threads, _ = _threads(cp)
    m = rb.provenance.machine
    return {
        "build_commit": commit, "build_number": number, "cpu_info": m.cpu_model or m.chip,
        "backends": None, "model_filename": cp.model.path if cp else None,
        "model_size": cp.model.bytes if cp else None, "model_n_params": None, "n_threads": threads,
        "machine": machine_line(rb.provenance.machine), "benchd_version": rb.provenance.benchd.version, "server_version": version,
        "runbook": rb.id,
    }


def _provenance_nulls(cp: CandidateProvenance | None, row: Row, fields: JSONObject) -> dict[str, str]:
    why: dict[str, str] = {}
    if fields["build_commit"] is None:
        why["build_commit"] = why["build_number"] = (_NOT_LLAMA if not _llama(row.runtime, cp)
                                                    else "no llama.cpp build recorded for this server")
    why["backends"] = "benchd does not record the ggml backends a server loaded"
    why["model_n_params"] = "benchd does not read the parameter count from the model"
    if fields["cpu_info"] is None:
        why["cpu_info"] = "the machine's CPU model was not reported"
    if fields["n_threads"] is None:
        why["n_threads"] = _threads(cp)[1]
    if cp is None:
        why["model_filename"] = why["model_size"] = "no provenance for this candidate"
    elif fields["model_size"] is None:
        why["model_size"] = cp.model.null_reasons.get("bytes", "the model's size was not read")
    return why


def jsonl_objects(rb: Runbook) -> list[JSONObject]:
    """One object per probe row: llama-bench's fields where one exists (docs/exports.md#jsonl), then every
    field of the row."""
    provs = _cand_prov(rb)
    out = []
    for row in _probe_rows(rb):
        cp = provs.get(row.candidate)
        head = _provenance_fields(rb, cp, row)
        ok = row.status == "ok"
        rate = row.gen_tps if ok else None
        nulls = _provenance_nulls(cp, row, head)
        nulls["stddev_ts"] = "one probe is one sample: see the cell's spread in the Markdown export"
        if rate is None:
            nulls["avg_ts"] = nulls["samples_ts"] = (
                row.null_reasons.get("gen_tps") or row.error or f"probe {row.status}, no decode rate")
        obj: JSONObject = {**head, "test": _test_name(row.prompt_tokens, row.gen_tokens),
               "n_prompt": row.prompt_tokens, "n_gen": row.gen_tokens, "n_depth": row.prompt_tokens,
               "test_time": row.started_at, "avg_ts": rate, "stddev_ts": None,
               "samples_ts": [rate] if rate is not None else None}
        fields = msgspec.to_builtins(row)
        obj.update({k: v for k, v in fields.items() if k not in ("null_reasons",)})
        obj["null_reasons"] = {**nulls, **row.null_reasons}
        out.append(obj)
    return out


def _test_name(n_prompt: int | None, n_gen: int | None) -> str | None:
    if not n_gen:
        return None
    return f"tg{n_gen}" + (f" @ d{n_prompt}" if n_prompt else "")


def kld_objects(rb: Runbook) -> list[JSONObject]:
    """One object per `[kld]` result, with the corpus's sha256 and tokens."""
    c = rb.kld_corpus
    corpus = {"corpus": c.path, "corpus_sha256": c.sha256, "corpus_tokens": c.tokens} if c else {}
    return [{"kind": "kld", **msgspec.to_builtins(r), **corpus} for r in rb.kld]


def render_jsonl(rb: Runbook) -> str:
    return "".join(json.dumps(o, ensure_ascii=False, sort_keys=False) + "\n"
                   for o in [*jsonl_objects(rb), *kld_objects(rb)])


def _csv_value(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, sort_keys=True)
    return str(v)


def render_csv(rb: Runbook) -> str:
    """Every row, one per line, every field a column (nested values as JSON, a null empty with its reason in
    `null_reasons`), after the provenance columns."""
    objs = jsonl_objects(rb)
    by_key = {(o["candidate"], o["context"], o["kind"], o["probe"]): o for o in objs}
    provs = _cand_prov(rb)
    lead = ["runbook", "machine", "benchd_version", "build_commit", "build_number", "model_filename", "model_size"]
    row_fields = list(Row.__struct_fields__)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*lead, *row_fields])
    for row in rb.rows:
        obj = by_key.get((row.candidate, row.context, row.kind, row.probe))
        head = obj if obj is not None else _provenance_fields(rb, provs.get(row.candidate), row)
        data = _csv_data(row, obj, lead)
        w.writerow([*(_csv_value(head[k]) for k in lead), *(_csv_value(data.get(f)) for f in row_fields)])
    return buf.getvalue()


def _csv_data(row: Row, obj: JSONObject | None, lead: list[str]) -> dict[str, object]:
    data: dict[str, object] = msgspec.to_builtins(row)
    if obj is not None and isinstance(reasons := obj["null_reasons"], dict):  # always (jsonl_objects)
        data["null_reasons"] = {k: v for k, v in reasons.items() if k in lead or k in data}
    return data


#: llama-bench's column order for a CPU build (model, size, params, backend, threads, test, t/s).
MD_COLUMNS = ["model", "size", "params", "backend", "threads", "test", "t/s"]


def _size_text(n: int | None) -> str | None:
    """llama-bench's size column: MiB below 1 GiB, else GiB, two decimals."""
    if n is None:
        return None
    return f"{n / (1 << 20):.2f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.2f} GiB"


def _ts_text(values: list[float]) -> str:
    """llama-bench's `avg ± stddev` (sample standard deviation; 0 with one sample, as llama-bench prints)."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {sd:.2f}"


def _na(na_reasons: dict[str, str], column: str, why: str) -> str:
    na_reasons.setdefault(column, why)
    return "n/a"


def _values(rows: Iterable[Row], field: str) -> list[float]:
    return [v for r in rows if (v := getattr(r, field)) is not None]


def _span(values: list[float]) -> str | None:
    """`512`, or `500-520` when the probes' counts varied; None without any."""
    if not values:
        return None
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _md_columns(cand: str, cp: CandidateProvenance | None, names: list[str], na_reasons: dict[str, str]) -> list[str]:
    model = Path(cp.model.path).name if cp else _na(na_reasons, "model", "no provenance for this candidate")
    if names.count(model) > 1:  # several candidates of one model file: say which line is whose
        model += f" [{cand}]"
    size = _size_text(cp.model.bytes if cp else None) or _na(na_reasons, "size", "the model's size was not read")
    params = _na(na_reasons, "params", "benchd does not read the parameter count from the model")
    backend = _na(na_reasons, "backend", "benchd does not record the ggml backends a server loaded")
    threads_n, threads_why = _threads(cp)
    threads = str(threads_n) if threads_n is not None else _na(na_reasons, "threads", threads_why)
    return [model, size, params, backend, threads]


def _md_lines(where: str, base: list[str], ok: list[Row], n_rows: int) -> tuple[list[list[str]], list[str]]:
    table: list[list[str]] = []
    notes: list[str] = []
    n_prompt, n_gen = sorted(set(_values(ok, "prompt_tokens"))), sorted(set(_values(ok, "gen_tokens")))
    p_label, g_label = _span(n_prompt), _span(n_gen)
    if len(n_prompt) > 1 or len(n_gen) > 1:
        notes.append(f"{where}: the test label spans the probes' token counts (prompt {n_prompt}, gen {n_gen}; "
                     "llama-bench runs one count)")
    pp, tg = _values(ok, "prompt_tps"), _values(ok, "gen_tps")
    if pp and p_label:
        table.append([*base, f"pp{p_label}", _ts_text(pp)])
    else:
        notes.append(f"{where}: no pp line: " + _reason(ok, "prompt_tps"))
    if tg and g_label:
        table.append([*base, f"tg{g_label}" + (f" @ d{p_label}" if p_label else ""), _ts_text(tg)])
    else:
        notes.append(f"{where}: no tg line: " + _reason(ok, "gen_tps"))
    if n_rows > len(ok):
        notes.append(f"{where}: {n_rows - len(ok)} of {plural(n_rows, 'probe')} not counted (failed or short)")
    return table, notes


def _left_out(where: str, rows: list[Row], ok: list[Row], cp: CandidateProvenance | None) -> str | None:
    if not _llama(rows[0].runtime, cp):
        return f"{where}: {rows[0].runtime} rows are not in the table ({_NOT_LLAMA}); see the jsonl/csv exports"
    if not ok:
        why = next((r.error for r in rows if r.error), None) or "no successful probe"
        return f"{where}: no row in the table, {plural(len(rows), 'probe')} failed: {why}"
    return None


def _probe_cells(rb: Runbook) -> dict[tuple[str, int], list[Row]]:
    groups: dict[tuple[str, int], list[Row]] = {}
    for r in _probe_rows(rb):
        groups.setdefault((r.candidate, r.context), []).append(r)
    return groups


def _md_cells(rb: Runbook) -> tuple[list[list[str]], list[str]]:
    """(table lines, what is said under the table) over the sweep's candidates × contexts."""
    provs = _cand_prov(rb)
    notes: list[str] = []
    na_reasons: dict[str, str] = {}
    table: list[list[str]] = []
    groups = _probe_cells(rb)
    names = [Path(c.model.path).name for c in provs.values() if _llama(c.runtime, c)]
    for (cand, ctx), rows in groups.items():
        cp = provs.get(cand)
        ok = [r for r in rows if usable(r, None)]
        left_out = _left_out(f"{cand} @ {ctx}", rows, ok, cp)
        if left_out is not None:
            notes.append(left_out)
            continue
        lines, said = _md_lines(f"{cand} @ {ctx}", _md_columns(cand, cp, names, na_reasons), ok, len(rows))
        table += lines
        notes += said
    notes += [f"{col}: n/a — {why}" for col, why in na_reasons.items()]
    return table, notes


def _reason(rows: Iterable[Row], metric: str) -> str:
    return next((r.null_reasons[metric] for r in rows if metric in r.null_reasons), "not measured")


def _md_grid(table: list[list[str]]) -> list[str]:
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c) for i, c in enumerate(MD_COLUMNS)]
    right = {"size", "params", "threads", "test", "t/s"}

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if MD_COLUMNS[i] in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    sep = "| " + " | ".join(("-" * (w - 1) + ":") if MD_COLUMNS[i] in right else "-" * w
                            for i, w in enumerate(widths)) + " |"
    return [line(MD_COLUMNS), sep, *(line(t) for t in table)]


def render_llama_bench_md(rb: Runbook) -> str:
    """llama-bench's Markdown table for the llama-server rows, its `build:` footer, benchd's provenance,
    and everything not in the table with its reason."""
    table, notes = _md_cells(rb)
    out = [*_md_grid(table), ""]
    builds = sorted({build_of(c.server_version) for c in rb.provenance.candidates if _llama(c.runtime, c)
                     and build_of(c.server_version)[0]}, key=str)
    out += [f"build: {commit} ({number})" for commit, number in builds] or ["build: null (no llama.cpp build recorded)"]
    out += ["", f"benchd {rb.provenance.benchd.version}, runbook {rb.id} ({rb.outcome}), machine: {machine_line(rb.provenance.machine)}"]
    out += ["model: the model file's name (llama-bench prints the model's type), [the candidate] when "
            "several share it; t/s: mean ± sample stddev "
            "over the cell's ok probes, each a fresh prompt from an empty cache"]
    if notes:
        out += ["", "Under the table (left out, abridged, n/a):", *(f"- {n}" for n in notes)]
    return "\n".join(out) + "\n"


#: `benchctl export --format` name -> writer.
FORMATS: dict[str, Callable[[Runbook], str]] = {
    "llama-bench-md": render_llama_bench_md,
    "jsonl": render_jsonl,
    "csv": render_csv,
}
