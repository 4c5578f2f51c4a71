"""The dated runbook: everything a job measured and everything needed to trust it, written when the
job ends as `<state>/runbooks/<id>.json` and `.md` (and its views). Facts: docs/architecture.md#runbook-files."""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct

from benchd.atomic import atomic_write
from benchd.config import Config
from benchd.errors import BenchdError, NotFound
from benchd.results import provenance
from benchd.results.flags import runbook_flags
from benchd.schemas import (
    JOB_ID_PATTERN,
    RUNBOOK_ID_PATTERN,
    RUNBOOK_SCHEMA_VERSION,
    SUPPORTED_VERSIONS,
    CooldownHappened,
    DeferredAxes,
    EvalCategory,
    EvalResult,
    EvalSuiteSource,
    EvalSummary,
    Event,
    JobInfo,
    Provenance,
    Row,
    Runbook,
    SustainedResult,
)
from benchd.schemas.json import JSONObject
from benchd.sensors import facts
from benchd.servers.runtimes.environment import redact_sweep
from benchd.stats.ranktests import clopper_pearson
from benchd.store import Store, utcnow


class RunbookHead(Struct, kw_only=True):
    """The cheap part of a runbook, for listing (unknown fields are ignored on purpose)."""

    schema_version: int
    id: str = ""
    generated_at: str = ""
    outcome: str = ""
    job: JobInfo | None = None


_encoder = msgspec.json.Encoder(order="deterministic")
_v1_decoder = msgspec.json.Decoder(Runbook)
_head_decoder = msgspec.json.Decoder(RunbookHead)


def runbook_schema() -> JSONObject:
    """JSON schema of the current runbook version (committed as schemas/runbook.schema.json)."""
    return msgspec.json.schema(Runbook)


#: Events the runbook does not read: a probe's row is in the rows table (its `probe_finished` event
#: repeats it), and the starts and cell verdicts are recomputed from the rows.
_EVENTS_NOT_READ = ("probe_started", "probe_finished", "cooldown_started", "cell_finished")


class _Shared:
    """One object per equal value the rows and events repeat, so a long sweep's runbook holds each
    distinct value once; what is built from the shared rows equals what the full rows give."""

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self._seen.setdefault(v, v)
        if isinstance(v, dict):
            d = {self.value(k): self.value(x) for k, x in v.items()}
            try:
                return self._seen.setdefault(("dict", tuple(d.items())), d)
            except TypeError:  # an unhashable value (a list): shared inside, not as a whole
                return d
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, Struct):
            return self._seen.setdefault((type(v), _encoder.encode(v)), v)
        return v

    def row(self, r: Row) -> Row:
        return Row(**{f: self.value(getattr(r, f)) for f in r.__struct_fields__})

    def event(self, e: Event) -> Event:
        return msgspec.structs.replace(e, payload=self.value(e.payload))


def runbook_id(job_id: str, started_at: str | None, created_at: str) -> str:
    """`<YYYY-MM-DD>-<job>`: the UTC date of the job's start (its creation if it never started)."""
    stamp = (started_at or created_at).replace("Z", "+00:00")
    day = datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%d")
    return f"{day}-{job_id}"


def _sustained(rows: list[Row]) -> list[SustainedResult]:
    return [
        SustainedResult(candidate=r.candidate, status=r.status, gen_tokens=r.gen_tokens,
                        sustain_ratio=r.sustain_ratio, window_tps=r.window_tps, thermal_before=r.thermal_before,
                        thermal_after=r.thermal_after, error=r.error, null_reasons=r.null_reasons)
        for r in rows if r.kind == "sustained"
    ]


def _eval_summary(evals: list[EvalResult], sources: list[EvalSuiteSource] | None = None) -> list[EvalSummary]:
    """Per candidate and tier/suite: passes, the Clopper–Pearson 95 % interval, failure classes, and for
    the public suites the planned count, medians per task and the parser."""
    planned = {s.suite: len(s.task_ids) for s in sources or []}
    groups: dict[tuple[str, str], list[EvalResult]] = {}
    for e in evals:
        groups.setdefault((e.candidate, e.tier), []).append(e)
    out = []
    for (c, t), g in sorted(groups.items()):
        passed = sum(e.passed for e in g)
        errors = sum(e.failure == "server_error" for e in g)
        completed = len(g) - errors
        low, high = clopper_pearson(passed, completed, 0.95) if completed else (None, None)
        failures: dict[str, int] = {}
        for e in g:
            if e.failure:
                failures[e.failure] = failures.get(e.failure, 0) + 1
        lat = [e.latency_s for e in g if e.latency_s is not None]
        task_s = [s for s in (e.task_s for e in g) if s is not None]
        toks = [float(e.completion_tokens) for e in g if e.completion_tokens is not None]
        reasoning = [e.reasoning_tokens for e in g if e.reasoning_tokens is not None]
        plan = planned.get(t)
        partial = plan is not None and len(g) < plan
        out.append(EvalSummary(
            candidate=c, tier=t, passed=passed, total=len(g), pass_rate=passed / completed if completed else None,
            completed=completed, failed=completed - passed, errors=errors, completion_rate=completed / len(g),
            **(_bfcl_view(g) if t == "tools" else {}),
            unsandboxed=sum(e.sandboxed is False for e in g), ci_low=low, ci_high=high, failures=failures,
            planned=plan, partial=partial,
            partial_reason=(f"{len(g)} of {plan} tasks ran (eval_budget_s reached, or the server stopped)"
                            if partial else None),
            latency_s_median=statistics.median(lat) if lat else None,
            task_s_median=statistics.median(task_s) if task_s else None,
            completion_tokens_median=statistics.median(toks) if toks else None,
            reasoning_tokens_total=sum(reasoning) if reasoning else None,
            parser=next((e.parser for e in g if e.parser), None)))
    return out


def _bfcl_view(g: list[EvalResult]) -> dict[str, Any]:
    """Per BFCL category counts and BFCL's unweighted aggregate over the categories but irrelevance."""
    cats: dict[str, EvalCategory] = {}
    for cat in sorted({e.category or "?" for e in g}):
        mine = [e for e in g if (e.category or "?") == cat]
        err = sum(e.failure == "server_error" for e in mine)
        ok = sum(e.passed for e in mine)
        done = len(mine) - err
        cats[cat] = EvalCategory(passed=ok, completed=done, errors=err, total=len(mine),
                                 pass_rate=ok / done if done else None)
    scored = {k: v for k, v in cats.items() if k != "irrelevance" and v.pass_rate is not None}
    n = sum(v.completed for v in scored.values())
    irr = cats.get("irrelevance")
    return {"categories": cats,
            "aggregate": sum(v.pass_rate or 0.0 for v in scored.values()) / len(scored) if scored else None,
            "aggregate_label": (f"BFCL v4 subset, function-calling mode, {n} tasks (unweighted mean of "
                                f"{len(scored)} categories, irrelevance apart)") if scored else None,
            "irrelevance_rate": irr.pass_rate if irr is not None else None}


def _eval_sources(events: list[Event]) -> list[EvalSuiteSource]:
    """The public suites' provenance, from the job's `eval_suite` events (the last per suite)."""
    found: dict[str, EvalSuiteSource] = {}
    for ev in events:
        if getattr(ev, "type", None) == "eval_suite":
            try:
                found[ev.payload["suite"]] = msgspec.convert(ev.payload, EvalSuiteSource)
            except (msgspec.ValidationError, KeyError, TypeError):
                continue
    return [found[s] for s in sorted(found)]


def build_runbook(config: Config, store: Store, job_id: str, outcome: str | None = None) -> Runbook:
    from benchd.engine.kld import corpus_from_events as kld_corpus
    from benchd.engine.kld import pareto_samples as kld_samples
    from benchd.engine.kld import results_from_events as kld_results
    from benchd.engine.metrics import cell_stats
    from benchd.engine.verdict import with_verdicts
    from benchd.results.deferred import automatic_deferred
    from benchd.results.design import sweep_design
    from benchd.results.drift import sweep_drift
    from benchd.results.pareto import pareto_from_rows, view_alpha
    from benchd.results.race import race_drops, race_settled
    from benchd.results.ready import ready_starts, ready_summary
    from benchd.stats.stop import planned_axes

    job = store.get_job(job_id)
    sweep = job.sweep or store.get_sweep(job_id)
    shared = _Shared()
    rows = [shared.row(r) for r in store.results.iter_rows(job_id)]
    evals = store.results.evals(job_id)
    events = [shared.event(e) for e in store.events.iterate(job_id, exclude_types=_EVENTS_NOT_READ)]
    drift, no_drift = sweep_drift(sweep, rows)
    design = sweep_design(sweep, events)  # the order that ran: what the comparisons pair by
    starts = ready_starts(events)
    eval_sources = _eval_sources(events)
    warm_ready: dict[str, list[float]] = {}
    for s in starts:
        if s.cache == "warm" and s.ready_s:
            warm_ready.setdefault(s.candidate, []).append(s.ready_s)
    prov = Provenance(
        collected_at=utcnow(), machine=facts.collect_machine(), benchd=facts.collect_benchd(),
        candidates=provenance.collect_candidates(config, sweep, rows, events),
        prompts=provenance.collect_prompts(events), sleep=provenance.collect_sleep(events),
        energy=provenance.collect_energy(events),
    )
    return Runbook(
        schema_version=RUNBOOK_SCHEMA_VERSION,
        id=runbook_id(job.id, job.started_at, job.created_at),
        generated_at=utcnow(),
        outcome=outcome or job.state,
        job=JobInfo(id=job.id, name=job.name, state=job.state, created_at=job.created_at,
                    started_at=job.started_at, finished_at=job.finished_at, error=job.error),
        sweep=redact_sweep(sweep),  # secret-looking env values never reach a runbook (nor pages, exports, locks)
        provenance=prov,
        cooldowns=[CooldownHappened(seq=e.seq, time=e.time, payload=e.payload)
                   for e in events if e.type == "cooldown_finished"],
        deferred=DeferredAxes(declared=list(sweep.deferred), automatic=list(automatic_deferred(sweep, rows, evals, left={
            d.candidate: d.left() for d in race_drops(events)}))),
        rows=rows,
        cells=with_verdicts(cell_stats([r for r in rows if r.kind == "probe"]), rows, sweep.probe_plan()),
        sustained=_sustained(rows),
        evals=evals,
        eval_summary=_eval_summary(evals, eval_sources),
        pareto=pareto_from_rows(rows, evals, sweep.probe_plan(), order=design.order,
                                extra={"ready_s": warm_ready, "kld": kld_samples(kld_results(events))},
                                margins=sweep.margins, k=len(planned_axes(sweep)),
                                alpha=view_alpha(sweep, design.order)[0], alpha_source=view_alpha(sweep, design.order)[1],
                                left=race_drops(events)),
        flags=runbook_flags(rows),
        drift=drift,
        drift_null_reason=no_drift,
        ready=starts,
        ready_summary=ready_summary(starts, [c.id for c in sweep.candidates]),
        eval_sources=eval_sources,
        design=design,
        kld=kld_results(events),
        kld_corpus=kld_corpus(events),
        race=race_drops(events),
        race_settled=race_settled(events),
    )


def encode_runbook(rb: Runbook) -> bytes:
    return msgspec.json.format(_encoder.encode(rb), indent=2) + b"\n"


#: The runbook's lists that grow with the sweep: encoded item by item (`iter_runbook_json`).
_LONG_LISTS = ("rows", "cooldowns")


def iter_runbook_json(rb: Runbook) -> Iterator[bytes]:
    """`encode_runbook(rb)` in pieces (the long lists item by item), never holding the whole text: the
    bytes are the same."""
    head = msgspec.json.format(_encoder.encode(msgspec.structs.replace(rb, rows=[], cooldowns=[])), indent=2)
    pos = 0
    for at, name in sorted((head.index(f'\n  "{name}": ['.encode()) + len(name) + 8, name) for name in _LONG_LISTS):
        yield head[pos:at]
        items: list[Struct] = getattr(rb, name)
        for i, item in enumerate(items):
            text = msgspec.json.format(_encoder.encode(item), indent=2)
            yield (b",\n" if i else b"\n") + b"\n".join(b"    " + line for line in text.split(b"\n"))
        if items:
            yield b"\n  "
        pos = at
    yield head[pos:] + b"\n"


def save_runbook(config: Config, rb: Runbook, charts: bool = True) -> Path:
    """Write `<id>.json` and `<id>.md` atomically, and with `charts` the runbook's views in this process
    (the daemon renders them in a worker, `render.render_off_loop`)."""
    from benchd.results.report import render_markdown

    out = config.runbooks_dir
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{rb.id}.json"
    atomic_write(path, iter_runbook_json(rb))
    atomic_write(out / f"{rb.id}.md", render_markdown(rb).encode())
    if charts:
        from benchd.results.views import render_views

        render_views(rb, out, cache_dir=config.cache_dir)
    return path


def write_runbook(config: Config, store: Store, job_id: str, outcome: str | None = None, *, charts: bool = True) -> str:
    """Build and write the runbook of a job; returns its id."""
    rb = build_runbook(config, store, job_id, outcome)
    save_runbook(config, rb, charts=charts)
    return rb.id


def check_runbook_head(data: bytes, source: str = "runbook") -> RunbookHead:
    """The runbook's head (id, version, job) after checking the text is JSON of a version this benchd reads."""
    try:
        head = _head_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BenchdError("invalid_runbook", f"{source}: not a benchd runbook ({exc})") from exc
    if head.schema_version not in SUPPORTED_VERSIONS:
        raise BenchdError(
            "unsupported_runbook_version",
            f"{source}: runbook schema_version {head.schema_version} is not supported by benchd "
            f"{facts.collect_benchd().version} (it reads {', '.join(map(str, SUPPORTED_VERSIONS))})",
            "schema_version",
        )
    return head


def decode_runbook(data: bytes, source: str = "runbook") -> Runbook:
    """Dispatch on `schema_version`; an unknown version is a clear error, never a half-read."""
    check_runbook_head(data, source)
    try:
        return _v1_decoder.decode(data)
    except msgspec.ValidationError as exc:
        from benchd.errors import from_validation

        raise from_validation(exc, source) from exc


def resolve_runbook_path(ref: str | Path | None, config: Config) -> Path:
    """A path, a runbook id, a job id, a unique prefix of one, or None (the newest) → the runbook's JSON path."""
    rdir = config.runbooks_dir
    if ref is None:
        found = runbook_files(rdir)
        if not found:
            raise BenchdError("no_runbooks", f"no runbooks in {rdir} (a runbook is written when a job ends)")
        return found[0]
    text = str(ref)
    p = Path(text).expanduser()
    if p.suffix == ".json" or os.sep in text:
        if p.is_file():
            return p
        raise BenchdError("not_found", f"no runbook file at {p}")
    return _by_id(text, rdir) or (p if p.is_file() else _by_prefix(text, rdir))


def _by_id(text: str, rdir: Path) -> Path | None:
    """The runbook of exactly this runbook id, or the newest of exactly this job id."""
    if re.fullmatch(RUNBOOK_ID_PATTERN, text) and (rdir / f"{text}.json").is_file():
        return rdir / f"{text}.json"
    if re.fullmatch(JOB_ID_PATTERN, text):
        hits = sorted(rdir.glob(f"????-??-??-{text}.json")) if rdir.is_dir() else []
        return hits[-1] if hits else None
    return None


def _by_prefix(text: str, rdir: Path) -> Path:
    """The one runbook whose id, or whose job id, starts with `text`; several is an error naming them."""
    hits = [f for f in runbook_files(rdir) if f.stem.startswith(text) or f.stem[11:].startswith(text)] if text else []
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        names = ", ".join(f.stem for f in hits[:5]) + (f" and {len(hits) - 5} more" if len(hits) > 5 else "")
        raise BenchdError("ambiguous", f"{text!r} is the start of {len(hits)} runbook ids: {names}; give more of it", "id")
    raise NotFound("runbook (id, job id or path)", text)


def load_runbook(ref: str | Path | None, config: Config) -> Runbook:
    path = resolve_runbook_path(ref, config)
    return decode_runbook(path.read_bytes(), str(path))


def runbook_files(rdir: Path) -> list[Path]:
    """Newest first: by date in the name, then job id."""
    if not rdir.is_dir():
        return []
    return sorted((p for p in rdir.glob("*.json") if re.fullmatch(RUNBOOK_ID_PATTERN, p.stem)),
                  key=lambda p: p.stem, reverse=True)


def list_runbooks(config: Config) -> list[JSONObject]:
    """For `GET /v1/runbooks`: one entry per runbook, newest first (cheap: only the head is decoded)."""
    return [_list_entry(path) for path in runbook_files(config.runbooks_dir)]


def _list_entry(path: Path) -> JSONObject:
    entry: JSONObject = {"id": path.stem, "path": str(path)}
    try:
        head = _head_decoder.decode(path.read_bytes())
    except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        entry["error"] = f"unreadable: {exc}"
        return entry
    job = head.job
    entry.update(
        schema_version=head.schema_version, generated_at=head.generated_at, outcome=head.outcome,
        job=job.id if job else None, name=job.name if job else None,
        started_at=job.started_at if job else None, finished_at=job.finished_at if job else None,
        markdown=str(path.with_suffix(".md")) if path.with_suffix(".md").is_file() else None,
        html=str(path.with_suffix(".html")) if path.with_suffix(".html").is_file() else None,
        charts=[str(c) for c in (path.with_name(f"{path.stem}.pareto.png"),
                                 path.with_name(f"{path.stem}.pareto.svg")) if c.is_file()],
    )
    return entry


def runbook_json(ref: str, config: Config) -> bytes:
    """For `GET /v1/runbooks/{id}`: the file's bytes after checking its head. A runbook or job id only,
    never a path (the API must not read arbitrary files)."""
    if not (re.fullmatch(RUNBOOK_ID_PATTERN, ref) or re.fullmatch(JOB_ID_PATTERN, ref)):
        raise BenchdError("invalid", f"not a runbook id or job id: {ref!r}", "id")
    path = resolve_runbook_path(ref, config)
    data = path.read_bytes()
    check_runbook_head(data, str(path))
    return data


def schema_json() -> str:
    """The committed schemas/runbook.schema.json text (a test diffs the file against this)."""
    import json

    return json.dumps(runbook_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # `python -m benchd.results.runbook > schemas/runbook.schema.json`
    print(schema_json(), end="")
