"""API v1 over the Unix socket: the app factory, the JSON error contract, the routes, the NDJSON event stream.
Reasons and facts: docs/api.md#why-the-apis-rules."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from aiohttp import web

import benchd
from benchd.config import Config
from benchd.daemon import eta
from benchd.daemon.hub import EventHub
from benchd.daemon.queue import JobQueue, parse_time
from benchd.engine import suites, sweepcheck
from benchd.errors import BenchdError, from_validation
from benchd.schemas import (
    JOB_ID_PATTERN,
    JOB_STATES,
    RUNBOOK_ID_PATTERN,
    TERMINAL_EVENTS,
    ErrorAnswer,
    ErrorBody,
    EvalResult,
    Event,
    Health,
    Job,
    Progress,
    Sweep,
    submit_decoder,
    sweep_schema,
)
from benchd.store import Store

log = logging.getLogger("benchd.daemon.api")

MAX_BODY_BYTES = 1024 * 1024
WRITE_TIMEOUT_S = 30.0
EVENT_PAGE = 500
IDLE_CHECK_S = 10.0
MAX_LIST_LIMIT = 500
_JOB_ID = re.compile(JOB_ID_PATTERN)
_RUNBOOK_ID = re.compile(RUNBOOK_ID_PATTERN)
_enc = msgspec.json.Encoder()


class Ctx:
    """What the routes need, attached to the app under one key."""

    def __init__(self, config: Config, store: Store, queue: JobQueue, hub: EventHub) -> None:
        self.config = config
        self.store = store
        self.queue = queue
        self.hub = hub
        self.started = time.monotonic()
        self.streams: set[web.StreamResponse] = set()


CTX = web.AppKey("benchd_ctx", Ctx)


# ------------------------------------------------------------------------------------------ errors


def error_response(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body = ErrorAnswer(error=ErrorBody(code=code, message=message, field=field))
    return web.Response(status=status, body=_enc.encode(body), content_type="application/json")


_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large",
               415: "unsupported_media_type"}


@web.middleware
async def error_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    try:
        resp: web.StreamResponse = await handler(request)
        return resp
    except BenchdError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.field)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 413:
            return error_response(413, "too_large", f"request body over the {MAX_BODY_BYTES}-byte limit")
        code = _HTTP_CODES.get(exc.status, "http_error")
        msg = exc.reason if exc.status != 404 else f"no route for {request.method} {request.path}"
        return error_response(exc.status, code, msg)
    except sqlite3.Error as exc:
        ctx = request.app[CTX]
        ctx.queue.store_error = f"{type(exc).__name__}: {exc}"
        log.error("store error on %s %s: %s", request.method, request.path, exc)
        return error_response(503, "store_error", f"the state store failed: {exc}")
    except (ConnectionError, asyncio.CancelledError):
        raise
    except Exception as exc:  # a bug, not bad input: log the traceback, answer without it
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal", f"internal error ({type(exc).__name__}); see the daemon log")


def _job_id(request: web.Request) -> str:
    ident = request.match_info["id"]
    if not _JOB_ID.fullmatch(ident):
        raise BenchdError("invalid_id", "job ids are 8-32 characters of [a-z0-9-]", "id")
    return ident


def _int_param(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,12}", raw):
        raise BenchdError("invalid_param", f"{name} must be an integer in [{lo}, {hi}]", name)
    value = int(raw)
    if not lo <= value <= hi:
        raise BenchdError("invalid_param", f"{name} must be an integer in [{lo}, {hi}]", name)
    return value


def _bool_param(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").lower()
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no", ""):
        return False
    raise BenchdError("invalid_param", f"{name} must be true or false", name)


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=_enc.encode(data), content_type="application/json")


# ------------------------------------------------------------------------------------------ checks


def check_submit(sweep: Sweep, cache_dir: Path | None = None) -> Sweep:
    """The sweep with its candidate matrices expanded (what the job stores), after the sweep check; its
    first problem as a 400 naming its `$.sweep...` field."""
    expanded = sweepcheck.expand(sweep)
    problems = expanded.problems or sweepcheck.submit_problems(expanded.sweep, cache_dir)
    if problems:
        first = problems[0]
        field = first.field or "$.sweep"
        if field.startswith("$.") and not field.startswith("$.sweep"):
            field = "$.sweep." + field[2:]
        raise BenchdError(first.code, first.message, field, status=400)
    return expanded.sweep


async def resolve_external(sweep: Sweep) -> Sweep:
    """External candidates checked against this machine (off the loop: HTTP and /proc), their `process`
    resolved to a pid once; the first problem as a 400 naming its field."""
    if not any(c.external for c in sweep.candidates):
        return sweep
    resolved, problems = await asyncio.to_thread(sweepcheck.resolve_external, sweep)
    if problems:
        first = problems[0]
        raise BenchdError(first.code, first.message, "$.sweep." + (first.field or "$.candidates")[2:], status=400)
    return resolved


# ------------------------------------------------------------------------------------------ routes


async def health(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    body = Health(
        version=benchd.__version__, pid=os.getpid(), uptime_s=round(time.monotonic() - ctx.started, 3),
        state_dir=str(ctx.config.state_dir), queue_depth=ctx.store.queue_depth(),
        running_job=ctx.queue.running_job, store_error=ctx.queue.store_error,
    )
    return _json(body)


async def submit_job(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    raw = await request.read()
    try:
        body = submit_decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise from_validation(exc) from exc
    not_before = None
    if body.not_before is not None:
        try:
            not_before = parse_time(body.not_before).astimezone(UTC).isoformat(timespec="seconds").replace(
                "+00:00", "Z")
        except (ValueError, OverflowError) as exc:
            raise BenchdError("invalid", f"not_before must be an RFC 3339 time with an offset: {exc}",
                              "$.not_before") from exc
    # Off the loop: the check stats and reads the candidates' files (a slow disk must not stall the API).
    sweep = await resolve_external(await asyncio.to_thread(check_submit, body.sweep, ctx.config.cache_dir))
    job = ctx.queue.submit(sweep, not_before, list(dict.fromkeys(body.when)))
    return _json(job, status=201)


def _kld_left(ctx: Ctx, job: str, sweep: Sweep) -> float:
    """The `[kld]` step's seconds left (benchd.engine.kld.seconds_left; 0 without `[kld]` or a rate)."""
    if sweep.kld.reference is None:
        return 0.0
    from benchd.engine import kld

    events = [e for e in ctx.store.events.iterate(job, exclude_types=("probe_finished", "probe_started"))
              if e.type in ("kld_started", "kld_finished")]
    rates = [r.prompt_tps for r in ctx.store.results.iter_rows(job) if r.kind == "probe" and r.status == "ok" and r.prompt_tps]
    got = kld.seconds_left(sweep, events, statistics.median(rates) if rates else None)
    return got[0] if got else 0.0


def _task_seconds(results: list[EvalResult]) -> dict[str, list[float]]:
    """Tier -> the finished tasks' seconds (requests and sandbox)."""
    seconds: dict[str, list[float]] = {}
    for r in results:
        if r.task_s is not None:
            seconds.setdefault(r.tier, []).append(r.task_s)
    return seconds


def _with_eta(ctx: Ctx, job: Job) -> Job:
    """A running job's ETA: its probe rows and eval tasks left, each at its measured time (benchd.daemon.eta)."""
    prog = job.progress
    if job.state != "running" or prog is None or not job.started_at:
        return job
    try:
        elapsed = (datetime.now(UTC) - parse_time(job.started_at)).total_seconds()
        sweep = job.sweep or ctx.store.get_sweep(job.id)
        results = ctx.store.results.evals(job.id)
    except (ValueError, BenchdError, sqlite3.Error):
        return job
    seconds = _task_seconds(results)
    rows_left_max = prog.total_max - prog.done if prog.total_max is not None else None
    got = eta.estimate(elapsed, prog.done, prog.total - prog.done, rows_left_max, seconds,
                       suites.planned_tasks(sweep, ctx.config.cache_dir), _kld_left(ctx, job.id, sweep))
    if got is None:
        return job
    eta_s, eta_max_s = got
    return msgspec.structs.replace(job, progress=Progress(
        done=prog.done, total=prog.total, eta_s=round(eta_s, 1), total_max=prog.total_max,
        eta_max_s=round(eta_max_s, 1) if eta_max_s is not None else None))


async def list_jobs(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    state = request.query.get("state")
    if state is not None and state not in JOB_STATES:
        raise BenchdError("invalid_param", f"state must be one of {', '.join(JOB_STATES)}", "state")
    limit = _int_param(request, "limit", 50, 1, MAX_LIST_LIMIT)
    cursor = request.query.get("cursor")
    if cursor is not None and not _JOB_ID.fullmatch(cursor):
        raise BenchdError("invalid_cursor", "cursor must be a job id from a previous page's next_cursor", "cursor")
    page = ctx.store.list_jobs(state=state, limit=limit, before=cursor)
    page.jobs = [_with_store_error(ctx, _with_eta(ctx, j)) for j in page.jobs]
    return _json(page)


def _with_store_error(ctx: Ctx, job: Job) -> Job:
    """While a store write failure holds a job up, the job says so (the store cannot record it)."""
    q = ctx.queue
    if q.store_error and q.store_error_job == job.id and job.state in ("running", "interrupted"):
        note = f"the state store could not be written ({q.store_error}); the job resumes when it can"
        return msgspec.structs.replace(job, error=note)
    return job


async def get_job(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return _json(_with_store_error(ctx, _with_eta(ctx, ctx.store.get_job(_job_id(request)))))


async def cancel_job(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    return _json(await ctx.queue.cancel(_job_id(request)))


async def job_events(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CTX]
    job_id = _job_id(request)
    ctx.store.get_job(job_id, with_sweep=False)  # 404 before the stream starts
    since = _int_param(request, "since", 0, 0, 10**12)
    follow = _bool_param(request, "follow")
    last = ctx.store.events.last_seq(job_id)
    if since > last:
        raise BenchdError("invalid_cursor", f"since={since} is past the job's last event ({last})", "since")
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-store"})
    await resp.prepare(request)
    ctx.streams.add(resp)
    try:
        await _stream_events(request, resp, ctx, job_id, since, follow)
    except (TimeoutError, ConnectionError) as exc:
        log.info("event stream for %s dropped: %s", job_id, type(exc).__name__)
        if request.transport is not None:
            request.transport.abort()
    finally:
        ctx.streams.discard(resp)
    return resp


async def _stream_events(
    request: web.Request, resp: web.StreamResponse, ctx: Ctx, job_id: str, since: int, follow: bool
) -> None:
    while True:
        waiter = ctx.hub.waiter(job_id)  # taken before the read: no event can slip between
        events = ctx.store.events.page(job_id, since=since, limit=EVENT_PAGE)
        since, terminal = await _write_page(resp, events, since)
        if terminal:
            await resp.write_eof()
            return
        if len(events) == EVENT_PAGE or (follow and ctx.store.events.last_seq(job_id) > since):
            continue  # more was committed while we wrote (maybe the terminal event): send it first
        if _nothing_to_wait_for(ctx, job_id, follow):
            await resp.write_eof()
            return
        if not await _client_still_there(request, waiter):
            return
        if ctx.hub.closing.is_set() and ctx.store.events.last_seq(job_id) <= since:
            await resp.write_eof()
            return


async def _write_page(resp: web.StreamResponse, events: list[Event], since: int) -> tuple[int, bool]:
    """Writes `events` up to a terminal one: (the last seq written, whether it was terminal)."""
    for ev in events:
        await asyncio.wait_for(resp.write(_enc.encode(ev) + b"\n"), WRITE_TIMEOUT_S)
        since = ev.seq
        if ev.type in TERMINAL_EVENTS:
            return since, True
    return since, False


def _nothing_to_wait_for(ctx: Ctx, job_id: str, follow: bool) -> bool:
    """Not following, the daemon closing, or the job over without a terminal event (not via the queue): do not hang."""
    if not follow or ctx.hub.closing.is_set():
        return True
    return ctx.store.job_state(job_id) in ("succeeded", "failed", "cancelled")


async def _client_still_there(request: web.Request, waiter: asyncio.Event) -> bool:
    """Waits for the job's next event; False when the client left (aiohttp does not cancel its handler)."""
    try:
        await asyncio.wait_for(waiter.wait(), IDLE_CHECK_S)
    except TimeoutError:
        return not (request.transport is None or request.transport.is_closing())
    return True


async def get_schema(request: web.Request) -> web.Response:
    return _json(sweep_schema())


async def list_runbooks(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    from benchd.results.runbook import list_runbooks as _list

    result = await asyncio.to_thread(_list, ctx.config)
    return _json({"runbooks": _plain(result)})


async def get_runbook(request: web.Request) -> web.Response:
    """A runbook by its id (or its job's id) — never by path: the API reads no arbitrary file."""
    ctx = request.app[CTX]
    ident = request.match_info["id"]
    if not (_RUNBOOK_ID.fullmatch(ident) or _JOB_ID.fullmatch(ident)):
        raise BenchdError("invalid_id", "a runbook id (YYYY-MM-DD-<job id>) or a job id", "id")
    from benchd.results.runbook import runbook_json

    data = await asyncio.to_thread(runbook_json, ident, ctx.config)
    return web.Response(body=data, content_type="application/json")


def _plain(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return msgspec.to_builtins(value, enc_hook=str)


async def _close_streams(app: web.Application) -> None:
    """on_shutdown: follow streams end now (clients reconnect with `since`), not after the timeout."""
    ctx = app[CTX]
    ctx.hub.close()


def make_app(ctx: Ctx) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=MAX_BODY_BYTES)
    app[CTX] = ctx
    app.router.add_get("/v1/health", health)
    app.router.add_post("/v1/jobs", submit_job)
    app.router.add_get("/v1/jobs", list_jobs)
    app.router.add_get("/v1/jobs/{id}", get_job)
    app.router.add_post("/v1/jobs/{id}/cancel", cancel_job)
    app.router.add_get("/v1/jobs/{id}/events", job_events)
    app.router.add_get("/v1/schema", get_schema)
    app.router.add_get("/v1/runbooks", list_runbooks)
    app.router.add_get("/v1/runbooks/{id}", get_runbook)
    app.on_shutdown.append(_close_streams)
    return app
