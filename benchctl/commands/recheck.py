"""`benchctl recheck [--now]`: re-measure the locked candidate; and the recheck lines `status` prints.

The daemon queues rechecks by itself when the lock's runtime or model changed (at start and every
`recheck_hours`); this queues one by hand. Without `--now` the `[recheck]` settings' conditions apply
(`when`, next `at`); with it, the job runs as soon as the queue is free.
"""

from __future__ import annotations

from typing import Any

import click

from benchctl.commands.common import _call, _client, _print_json, json_option, socket_option


def recheck_lines(st: dict[str, Any]) -> list[str]:
    """What `status` says about rechecks: a pending one (and why it waits), the last verdict, bad settings."""
    lines = []
    if st.get("settings_error"):
        lines.append(f"recheck   settings: {st['settings_error']}")
    if st.get("lock_error"):
        lines.append(f"recheck   lock unreadable: {st['lock_error']}")
    pending, job = st.get("pending"), st.get("pending_job") or {}
    if pending:
        why = job.get("waiting_reason") or (f"not before {job['not_before']}" if job.get("not_before") else "")
        lines.append(f"recheck   PENDING job {pending['job']} ({job.get('state', '?')}"
                     + (f": {why}" if why else "") + f") because {'; '.join(pending.get('cause') or ['-'])}")
    last = st.get("last")
    if last:
        lines.append(f"recheck   last {last['at'][:19]} job {last['job']}: {verdict_line(last)}")
    return lines


def verdict_line(entry: dict[str, Any]) -> str:
    """The daemon's `lock.recheck.summary`, from the JSON (`status` stays free of the results stage)."""
    if entry.get("outcome") != "succeeded" or entry.get("error"):
        return f"{entry.get('outcome')}" + (f": {entry['error']}" if entry.get("error") else "")
    regressions = "; ".join(entry.get("regressions") or [])
    if entry.get("regressed") and entry.get("confirming"):
        return f"suspected regression, being confirmed by recheck job {entry['confirming']}: {regressions}"
    if entry.get("regressed"):
        first = f" (confirmed by a second run; first: job {entry['confirms']})" if entry.get("confirms") else ""
        return f"REGRESSED{first}: {regressions}"
    return "no regression" + (f" (job {entry['confirms']}'s regression did not repeat)" if entry.get("confirms") else "")


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
    st = _call(lambda: _client(socket_path).recheck(now))
    if as_json:
        _print_json(st)
        return
    pending, job = st["pending"], st.get("pending_job") or {}
    click.echo(pending["job"])
    extra = []
    if job.get("not_before"):
        extra.append(f"not before {job['not_before']}")
    if job.get("when"):
        extra.append(f"when {', '.join(job['when'])}")
    click.echo(f"recheck of {pending['candidate']} queued ({'; '.join(extra) or 'now'}); "
               f"cause: {'; '.join(pending['cause'])}", err=True)
