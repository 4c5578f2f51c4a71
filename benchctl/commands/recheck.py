"""`benchctl recheck [--now]`: re-measure the locked candidate; and the recheck lines `status` prints.

The daemon queues rechecks by itself when the lock's runtime or model changed (at start and every
`recheck_hours`); this queues one by hand. Without `--now` the `[recheck]` settings' conditions apply
(`when`, next `at`); with it, the job runs as soon as the queue is free.
"""

from __future__ import annotations

import click

from benchctl import exitcodes
from benchctl.commands.common import _call, _client, _fail, _print_json, decoded, json_option, socket_option
from benchd.schemas import RecheckEntry, RecheckStatus


def recheck_lines(st: RecheckStatus | None) -> list[str]:
    """What `status` says about rechecks (None: a daemon older than rechecks): a pending one (and why it
    waits), the last verdict, bad settings."""
    if st is None:
        return []
    lines = []
    if st.settings_error:
        lines.append(f"recheck   settings: {st.settings_error}")
    if st.lock_error:
        lines.append(f"recheck   lock unreadable: {st.lock_error}")
    pending, job = st.pending, st.pending_job
    if pending:
        why = "" if job is None else job.waiting_reason or (f"not before {job.not_before}" if job.not_before else "")
        lines.append(f"recheck   PENDING job {pending.job} ({job.state if job else '?'}"
                     + (f": {why}" if why else "") + f") because {'; '.join(pending.cause or ['-'])}")
    if st.last:
        lines.append(f"recheck   last {st.last.at[:19]} job {st.last.job}: {verdict_line(st.last)}")
    return lines


def verdict_line(entry: RecheckEntry) -> str:
    """The daemon's `lock.recheck.summary`, from the answer (`status` stays free of the results stage)."""
    if entry.outcome != "succeeded" or entry.error:
        return entry.outcome + (f": {entry.error}" if entry.error else "")
    regressions = "; ".join(entry.regressions)
    if entry.regressed and entry.confirming:
        return f"suspected regression, being confirmed by recheck job {entry.confirming}: {regressions}"
    if entry.regressed:
        first = f" (confirmed by a second run; first: job {entry.confirms})" if entry.confirms else ""
        return f"REGRESSED{first}: {regressions}"
    return "no regression" + (f" (job {entry.confirms}'s regression did not repeat)" if entry.confirms else "")


@click.command()
@click.option("--now", is_flag=True, help="Run as soon as the queue is free (ignore the [recheck] when/at settings).")
@socket_option
@json_option
def recheck(now: bool, socket_path: str | None, as_json: bool) -> None:
    """Queue a recheck of the locked candidate: the same cells re-measured and compared with the evidence.

    \b
    Examples:
      benchctl recheck          # with the [recheck] conditions (default: idle + AC power, next 03:00)
      benchctl recheck --now
    """
    answer = _call(lambda: _client(socket_path).recheck(now))
    if as_json:
        _print_json(answer)
        return
    st = decoded(RecheckStatus, answer)
    pending, job = st.pending, st.pending_job
    if pending is None:
        raise _fail("error: benchd queued a recheck but its answer names no pending job", exitcodes.FAILED)
    click.echo(pending.job)
    extra = []
    if job and job.not_before:
        extra.append(f"not before {job.not_before}")
    if job and job.when:
        extra.append(f"when {', '.join(job.when)}")
    click.echo(f"recheck of {pending.candidate} queued ({'; '.join(extra) or 'now'}); "
               f"cause: {'; '.join(pending.cause)}", err=True)
