"""`benchctl tail`: follow a job's events to a terminal one — a rich progress view on a TTY, plain lines
otherwise, NDJSON with --json — reconnecting with `since` across daemon restarts for up to a minute.

Also used by `submit --follow`. Split from `jobs.py` to keep each module small; the socket client and
exit-code helpers live there.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import click
import msgspec

from benchctl import exitcodes
from benchctl.commands.common import (
    RECONNECT_FOR_S,
    TERMINAL_EXIT,
    _call,
    _client,
    _fail,
    decoded,
    json_option,
    progress_of,
    socket_option,
)
from benchd.results.text import fmt_or_null
from benchd.schemas import Event, Job, KldCorpus, KldResult, Row, event_decoder, events
from benchd.stats.notation import plural


def stream_events(client: Any, job_id: str, sleep: Callable[[float], None] = time.sleep,
                  reconnect_for_s: float = RECONNECT_FOR_S) -> Iterator[tuple[Event, bytes]]:
    """Every event of a job up to its terminal event, decoded and as sent, across daemon restarts.

    When the stream drops or ends without a terminal event (the daemon stopped), reconnect with `since`
    for up to `reconnect_for_s`, then raise Unreachable.
    """
    from benchctl.client import Unreachable

    since = 0
    gone_at: float | None = None
    while True:
        try:
            for line in client.events(job_id, since=since, follow=True):
                gone_at = None
                ev = event_decoder.decode(line)
                since = ev.seq
                yield ev, line
                if ev.type in TERMINAL_EXIT:
                    return
        except Unreachable:
            pass
        now = time.monotonic()
        gone_at = gone_at if gone_at is not None else now
        if now - gone_at > reconnect_for_s:
            raise Unreachable(client.socket_path, "gone for longer than the reconnect window")
        sleep(1.0)


def follow_job(client: Any, job_id: str, as_json: bool) -> int:
    """Follow to a terminal event; returns the exit code (0 succeeded, 1 failed, 4 cancelled, 3 gone)."""
    from benchctl.client import ApiError, Unreachable

    job = decoded(Job, _call(lambda: client.job(job_id)))
    renderer: _Plain | _Rich
    if as_json:
        renderer = _Plain(job, raw=True)
    elif sys.stdout.isatty():
        renderer = _Rich(job)
    else:
        renderer = _Plain(job, raw=False)
    code = exitcodes.UNREACHABLE
    try:
        with renderer:
            for ev, line in stream_events(client, job_id):
                renderer.event(line, ev)
                code = TERMINAL_EXIT.get(ev.type, code)
    except Unreachable as exc:
        raise _fail(str(exc), exitcodes.UNREACHABLE) from exc
    except ApiError as exc:
        raise _fail(f"error: {exc}", exitcodes.BAD_INPUT) from exc
    except msgspec.MsgspecError as exc:
        raise _fail(f"error: benchd sent an event line that is not an Event: {exc}", exitcodes.FAILED) from exc
    if not as_json and code != exitcodes.UNREACHABLE:
        _say_runbook(client, job_id)
    return code


def _say_runbook(client: Any, job_id: str, wait_s: float = 60.0) -> None:
    """The runbook and its charts (a worker process draws them) are written just after the terminal
    event: wait for them (returns as soon as they are there) and name the runbook."""
    from benchctl.client import ClientError

    deadline = time.monotonic() + wait_s
    job: Job | None = None
    while time.monotonic() < deadline:
        try:
            job = decoded(Job, client.job(job_id))
        except ClientError:
            return
        if job.runbook_id or job.runbook_error:
            break
        if not (job.progress and job.progress.done):
            return  # no rows: no runbook is coming
        time.sleep(0.25)
    if job and job.runbook_id:
        click.echo(f"runbook: {job.runbook_id} (benchctl report {job.runbook_id})")
        _say_pareto(client, job.runbook_id)
    elif job and job.error:
        click.echo(f"error: {job.error}")


def _say_pareto(client: Any, runbook_id: str) -> None:
    """The runbook's Pareto view in the one comparison's words (who dominates whom, what is tied or
    unresolved), when the sweep compared more than one candidate."""
    from benchctl.client import ClientError
    from benchd.errors import BenchdError
    from benchd.results.report import pareto_lines
    from benchd.results.runbook import decode_runbook

    try:
        rb = decode_runbook(json.dumps(client.request("GET", f"/v1/runbooks/{runbook_id}")).encode())
    except (ClientError, BenchdError) as exc:
        click.echo(f"pareto: not shown ({exc})")
        return
    for p in rb.pareto:
        if len(p.points) > 1:
            for line in pareto_lines(p, rb.flags):
                click.echo(f"pareto {line}" if not line.startswith(" ") else line)


def _row_text(r: Row) -> str:
    """A probe row as the daemon sent it."""
    from benchd.results.text import fmt_with_unit

    base = f"{r.candidate} ctx {r.context} {r.kind} #{r.probe}: {r.status}"
    if r.status != "ok":
        return f"{base} ({r.error or 'no reason given'})"
    flag = f"  THROTTLE-SUSPECT ({r.throttle.note})" if r.throttle is not None and r.throttle.suspect else ""
    return (f"{base}  gen {fmt_with_unit('gen_tps', r.gen_tps)}  prompt {fmt_with_unit('prompt_tps', r.prompt_tps)}  "
            f"ttft {fmt_with_unit('ttft_ms', r.ttft_ms)}  mem {fmt_with_unit('mem_peak_bytes', r.mem_peak_bytes)}{flag}")


def _verdict_text(p: events.CellFinished) -> str:
    """`cell a ctx 512: steady after 8 probes (CI ±1.2 % <= ±2 % target after 8 ok probes, no trend)`."""
    from benchd.results.text import verdict_text

    kind = "" if p.kind == "probe" else f" {p.kind}"
    return f"cell {p.candidate} ctx {p.context}{kind}: {verdict_text(p.verdict, detail=True)}"


def _design_text(p: events.DesignChosen | events.DesignChanged) -> str:
    return f"order {p.order}: {p.why}" + (f"; plan {p.plan}" if p.plan else "")


def _dropped_text(p: events.CandidateDropped) -> str:
    lo, hi = p.planned_rows, p.planned_rows_max
    plan = "" if lo is None else f" ({lo if hi in (None, lo) else f'{lo}-{hi}'} rows planned from now on)"
    return f"{p.candidate} left the race at ctx {p.context} after round {p.round}: {p.why}{plan}"


def _session_text(p: events.SessionFinished) -> str:
    return (f"session {p.candidate} ctx {p.context}: {p.status}, warm-turn TTFT "
            f"{fmt_or_null(p.warm_ttft_ms, '{:.1f} ms')}, reuse {fmt_or_null(p.reuse_fraction, '{:.0%}')}, "
            f"cache misses {p.misses}")


def _done(p: events.JobFinished | events.JobFailed | events.JobCancelled) -> str:
    return "" if p.done is msgspec.UNSET else f" after {plural(p.done, 'row')}"


def _job_started(p: events.JobStarted) -> str:
    sleep = f"; sleep not prevented: {p.sleep_reason}" if p.sleep_prevented is False else ""
    return f"{p.done} of {plural(p.total, 'row')} done{sleep}"


def _ready_text(p: events.ServerReady) -> str:
    if p.external is not msgspec.UNSET:
        return f"{p.candidate}: attached to {p.external.get('kind', 'a server')} at {p.external.get('url')} (external)"
    took = "" if p.ready_s is msgspec.UNSET else f" in {p.ready_s:.2f} s"
    cache = f", {p.cache} page cache" if isinstance(p.cache, str) else ""
    start = "" if p.start is msgspec.UNSET else f" (start {p.start}"
    return (f"{p.candidate}: {p.runtime or 'server'} ready{took}{cache}{start}, pid {p.pid}, port {p.port}"
            f"{')' if start else ''}")


def _crash_text(p: events.ServerCrashed) -> str:
    why = p.reason if isinstance(p.reason, str) else p.error if isinstance(p.error, str) else "no reason given"
    return f"{p.candidate}: server crashed during {p.phase} ({p.exit_status or 'exit status unknown'}): {why}"


def _cooled_text(p: events.CooldownFinished) -> str:
    r = p.record
    return f"{p.candidate} ctx {p.context} #{p.probe}: cooled down {r.waited_s:.1f} s ({r.policy}: {r.reason})"


def _turn_text(p: events.SessionTurn) -> str:
    return (f"session {p.candidate} ctx {p.context} turn {p.turn}: TTFT {fmt_or_null(p.ttft_ms, '{:.1f} ms')}, "
            f"cached prompt tokens {fmt_or_null(p.cached_tokens, '{:,.0f}')}")


def _suite_text(p: events.EvalSuite) -> str:
    return (f"{p.suite} suite: {p.package} {p.version}, {plural(len(p.task_ids), 'task')} asked; "
            f"license {p.license or 'not stated'}; sha256 {p.sha256[:16]}…")


def _kld_started_text(p: events.KldStarted) -> str:
    if isinstance(p.corpus, dict):
        c = msgspec.convert(p.corpus, KldCorpus)
        tokens = f"{c.tokens:,} tokens" if c.tokens is not None else f"tokens {c.tokens_source or 'not counted'}"
        return f"kld corpus: {c.source}, {c.words:,} words, {tokens}"
    who = f" {p.candidate}" if isinstance(p.candidate, str) else ""
    ctx = f" ctx {p.context}" if isinstance(p.context, int) else ""
    return f"kld{who}{ctx}: {p.purpose if isinstance(p.purpose, str) else 'scoring'}"


def _kld_text(r: KldResult) -> str:
    head = f"kld {r.candidate} ctx {r.context} against {r.reference}"
    if r.status != "ok" or r.kld_mean is None:
        return f"{head}: {r.status} ({r.reason or 'no reason given'})"
    from benchd.results.kldview import plus_minus

    over = "" if r.tokens_scored is None else f" over {r.tokens_scored:,} tokens"
    return (f"{head}: KLD {plus_minus(r.kld_mean, r.kld_mean_se)}, "
            f"top-1 {plus_minus(r.top1_agree, r.top1_agree_se, 100, ' %')}{over}")


#: The event types `tail` words itself, each read as its payload's struct; any other is shown as sent.
_TEXTS: dict[str, Callable[[Any], str]] = {
    "job_queued": lambda p: f"job_queued: {p.name}" + (f", not before {p.not_before}" if p.not_before else ""),
    "job_started": lambda p: f"job_started: {_job_started(p)}",
    "job_resumed": lambda p: f"job_resumed: {_job_started(p)}",
    "job_interrupted": lambda p: f"job_interrupted: {p.reason}",
    "job_finished": lambda p: f"job_finished{_done(p)}",
    "job_failed": lambda p: f"job_failed{_done(p)}: {p.error or 'no reason given'}",
    "job_cancelled": lambda p: f"job_cancelled{_done(p)}: {p.reason}",
    "server_starting": lambda p: f"{p.candidate}: starting {p.runtime}"
                                 + ("" if p.ctx_size is None else f" (ctx-size {p.ctx_size})"),
    "server_ready": _ready_text,
    "server_stopped": lambda p: f"{p.candidate}: server {'crashed' if p.crashed else 'stopped'} "
                                f"({p.exit_status or 'exit status unknown'})",
    "server_crashed": _crash_text,
    "cooldown_started": lambda p: f"{p.candidate} ctx {p.context} #{p.probe}: cooling down ({p.policy})",
    "cooldown_finished": _cooled_text,
    "probe_started": lambda p: f"{p.candidate} ctx {p.context} {p.kind} #{p.probe}: started",
    "probe_finished": lambda p: _row_text(p.row),
    "cell_finished": _verdict_text,
    "design_chosen": _design_text,
    "design_changed": _design_text,
    "round_started": lambda p: f"ctx {p.context} round {p.round}: {' → '.join(p.order)}",
    "context_finished": lambda p: f"ctx {p.context} stopped after {p.rounds} rounds ({p.design}): {p.why}",
    "candidate_dropped": _dropped_text,
    "candidate_settled": lambda p: (
        f"{p.candidate} ends its rounds of ctx {p.context} after round {p.round} "
        "(each pair of it resolved or not resolvable in the rounds left); it stays in the race"),
    "session_turn": _turn_text,
    "session_finished": _session_text,
    "eval_suite": _suite_text,
    "eval_budget_reached": lambda p: (
        f"{p.candidate}: {p.suite} suite stopped at its time budget ({p.budget_s:g} s); its other tasks are not asked"),
    "kld_started": _kld_started_text,
    "kld_finished": _kld_text,
    "level_finished": lambda p: (
        f"concurrency {p.concurrency} {p.candidate} ctx {p.context}: aggregate "
        f"{fmt_or_null(p.agg_gen_tps, '{:.1f} tok/s')}"),
}


def _event_text(event: Event) -> str:
    words = _TEXTS.get(event.type)
    if words is None:
        detail = " ".join(f"{k}={v}" for k, v in event.payload.items() if not isinstance(v, dict | list) and v is not None)
        return f"{event.type} {detail}".rstrip()
    try:
        return words(events.payload(event))
    except msgspec.ValidationError as exc:
        return f"{event.type}: a payload this benchctl cannot read ({exc}): {json.dumps(event.payload)}"


class _Plain:
    def __init__(self, job: Job, raw: bool) -> None:
        self.raw = raw
        prog = progress_of(job)
        if not raw and prog.total_max not in (None, prog.total):
            sys.stdout.write(f"{job.name}: {prog.total}-{prog.total_max} rows planned "
                             "(probes = auto: a context's rounds stop once every pair's verdict is resolved, a "
                             "single candidate's cell when its CI target is met)\n")

    def __enter__(self) -> _Plain:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def event(self, line: bytes, ev: Event) -> None:
        if self.raw:
            sys.stdout.buffer.write(line + b"\n")
        else:
            sys.stdout.write(f"{ev.time[11:19]} #{ev.seq} {_event_text(ev)}\n")
        sys.stdout.flush()


class _Rich:
    """A progress bar (rows done/total, ETA) with each finished row printed above it as it lands."""

    def __init__(self, job: Job) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        prog = progress_of(job)
        self.total = prog.total
        self.high = prog.total_max is not None  # the bar follows the plan's high end (adaptive probes)
        name = job.name
        if prog.total_max is not None and prog.total_max != self.total:  # adaptive probes: the plan is a range,
            name = f"{job.name} ({self.total}-{prog.total_max} rows)"
            self.total = prog.total_max  # the bar runs to its high end (the ETA is the longest)
        self.done_keys: set[tuple[Any, ...]] = set()
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("eta"), TimeRemainingColumn())
        self.task = self.progress.add_task(name, total=self.total or None)

    def __enter__(self) -> _Rich:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def event(self, line: bytes, event: Event) -> None:
        try:
            p = events.payload(event) if event.type in ("probe_finished", "candidate_dropped") else None
        except msgspec.ValidationError:
            p = None  # said as it is below
        if isinstance(p, events.ProbeFinished):
            r = p.row
            if r.status != "aborted":
                self.done_keys.add((r.candidate, r.context, r.kind, r.probe))
                self.progress.update(self.task, completed=len(self.done_keys))
            self.progress.console.print(_row_text(r), highlight=False, markup=False)
            return
        if isinstance(p, events.CandidateDropped):  # the plan loses the dropped candidate's unrun rows
            planned = p.planned_rows_max if self.high else p.planned_rows
            if planned is not None:
                self.total = planned
                self.progress.update(self.task, total=self.total or None)
        if event.type in ("job_started", "job_resumed", "job_interrupted", *TERMINAL_EXIT, "server_crashed",
                             "cell_finished", "session_finished", "level_finished", "design_chosen",
                             "design_changed", "context_finished", "candidate_dropped", "candidate_settled"):
            self.progress.console.print(_event_text(event), style="bold", highlight=False, markup=False)
        else:
            self.progress.update(self.task, description=_event_text(event)[:60])


@click.command()
@click.argument("job_id")
@socket_option
@json_option
def tail(job_id: str, socket_path: str | None, as_json: bool) -> None:
    """Follow a job until it ends (exit 0 succeeded, 1 failed, 4 cancelled, 3 daemon gone)."""
    raise SystemExit(follow_job(_client(socket_path), job_id, as_json))


__all__ = ["follow_job", "stream_events", "tail"]
