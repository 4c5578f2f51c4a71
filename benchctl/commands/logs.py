"""`benchctl logs [JOB] [--server CANDIDATE]`: read the daemon's log or a server's log.

The daemon says where its state dir is (`GET /v1/health`), so this reads the files of the benchd that
is actually running, not of whatever state dir this shell would default to. With no daemon answering it
reads the files of its own state dir (--state-dir, $BENCHD_STATE_DIR, the default) and says so on
stderr (offline); exit 3 only when that state dir does not exist. Logs are size-capped and rotated once or twice
(`.log.1`, `.log.2`): `--lines` reaches back into the rotated files when the current one is short.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import NoReturn

import click

from benchctl import exitcodes
from benchctl.commands.common import _fail as fail
from benchctl.commands.common import decoded, socket_option
from benchd.schemas import Health

JOB_RE = re.compile(r"^[a-z0-9-]{8,32}$")
CANDIDATE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
HEALTH_TIMEOUT_S = 3.0
FOLLOW_POLL_S = 0.5


def _fail(code: int, message: str) -> NoReturn:
    raise fail(f"error: {message}", code)


def tail_lines(path: Path, n: int) -> list[str]:
    """The last `n` lines of `path`, continuing into `path.1`, `path.2` (older) when it is short."""
    out: list[str] = []
    for candidate in (path, path.with_name(path.name + ".1"), path.with_name(path.name + ".2")):
        if len(out) >= n or not candidate.exists():
            break
        out = _last_lines(candidate, n - len(out)) + out
    return out


def _last_lines(path: Path, n: int) -> list[str]:
    """Read backwards in blocks: a capped log is megabytes, the tail is a few hundred bytes."""
    if n <= 0:
        return []
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= n:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.decode(errors="replace").splitlines()
    return lines[-n:]


def _follow(path: Path) -> None:
    """Print what is appended to `path` until Ctrl-C; reopen after rotation or truncation."""
    fh = path.open("rb")
    fh.seek(0, os.SEEK_END)
    ino = os.fstat(fh.fileno()).st_ino
    try:
        while True:
            chunk = fh.read()
            if chunk:
                click.echo(chunk.decode(errors="replace"), nl=False)
                continue
            time.sleep(FOLLOW_POLL_S)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if st.st_ino != ino or st.st_size < fh.tell():  # rotated or truncated: start the new file
                fh.close()
                fh = path.open("rb")
                ino = os.fstat(fh.fileno()).st_ino
    except KeyboardInterrupt:
        pass
    finally:
        fh.close()


def _state_dir(socket_path: str | None) -> tuple[Path, str | None]:
    """(the state dir, the running job): the daemon's when one answers, else this command's state dir
    (--state-dir / $BENCHD_STATE_DIR / the default) read offline, said so on stderr; exit 3 when that
    state dir does not exist either."""
    from benchctl.client import ApiError, Client, Unreachable
    from benchctl.commands.common import config

    cfg = config(socket_path)
    try:
        health = Client(cfg.socket, timeout=HEALTH_TIMEOUT_S).health()
    except Unreachable as exc:
        if not cfg.state_dir.is_dir():
            _fail(exitcodes.UNREACHABLE, f"{exc}; and there is no state dir at {cfg.state_dir} to read offline "
                  "(--state-dir names another)")
        from benchctl.commands.offline import offline_line, running_job

        click.echo(offline_line(cfg, f"the log files under {cfg.logs_dir}"), err=True)
        return cfg.state_dir, running_job(cfg)
    except ApiError as exc:
        _fail(exitcodes.FAILED, f"benchd answered /v1/health with an error: {exc}")
    got = decoded(Health, health)
    return Path(got.state_dir), got.running_job


def _pick_logs(state: Path, job: str | None, server: str | None, running: str | None) -> list[Path]:
    logs = state / "logs"
    if job is None and server is None:
        return [logs / "benchd.log"]
    if job is None:
        if running is None:
            _fail(exitcodes.BAD_INPUT, "--server needs a JOB when no job is running: benchctl logs JOB --server CANDIDATE")
        job = running
    if not JOB_RE.fullmatch(job):
        _fail(exitcodes.BAD_INPUT, f"{job!r} is not a job id ([a-z0-9-], 8 to 32 characters)")
    job_dir = logs / job
    if server is not None:
        if not CANDIDATE_RE.fullmatch(server) or ".." in server:
            _fail(exitcodes.BAD_INPUT, f"{server!r} is not a candidate id")
        path = job_dir / f"{server}.log"
        if not path.exists():
            have = sorted(p.stem for p in job_dir.glob("*.log")) if job_dir.is_dir() else []
            hint = f"; this job has logs for: {', '.join(have)}" if have else ""
            _fail(exitcodes.BAD_INPUT, f"no log for candidate {server!r} of job {job} ({path}){hint}")
        return [path]
    found = sorted(job_dir.glob("*.log")) if job_dir.is_dir() else []
    if not found:
        _fail(exitcodes.BAD_INPUT, f"no server logs for job {job} under {job_dir} (unknown job, or no server started yet)")
    return found


@click.command("logs")
@click.argument("job", required=False)
@click.option("--server", "server", metavar="CANDIDATE", help="A candidate's server log (of JOB, else of the running job).")
@click.option("-n", "--lines", type=click.IntRange(min=0), default=50, show_default=True, help="How many lines to show.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing what is appended (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="Print {path, lines} objects as JSON (not with --follow).")
@socket_option
def logs(job: str | None, server: str | None, lines: int, follow: bool, as_json: bool, socket_path: str | None) -> None:
    """Read the daemon's log, or the log of a server a job started.

    Without JOB: the daemon's own log. With JOB: every server log of that job (or one, with --server).
    A running benchd says where its state dir is; with none running, the files of --state-dir (else
    $BENCHD_STATE_DIR, the default) are read offline, said so on stderr.

    \b
    Examples:
      benchctl logs                          # the daemon's log
      benchctl logs -f                       # ... and keep following it
      benchctl logs 20261130-ab12cd34        # every server log of a job
      benchctl logs 20261130-ab12cd34 --server llama-q4 -n 200
      benchctl logs --server llama-q4 -f     # a server of the running job
    """
    if as_json and follow:
        _fail(exitcodes.BAD_INPUT, "--json and --follow do not go together")
    state, running = _state_dir(socket_path)
    paths = _pick_logs(state, job, server, running)
    if follow and len(paths) > 1:
        _fail(exitcodes.BAD_INPUT, "--follow reads one log: add --server CANDIDATE")
    if paths == [state / "logs" / "benchd.log"] and not paths[0].exists():
        _fail(exitcodes.FAILED, f"no daemon log at {paths[0]} yet (benchd also logs to stderr: under a service, "
              "see `journalctl --user -u benchd` or <state>/logs/launchd.stderr.log)")
    if as_json:
        import json

        click.echo(json.dumps([{"path": str(p), "lines": tail_lines(p, lines)} for p in paths], indent=2))
        return
    for path in paths:
        if len(paths) > 1:
            click.echo(click.style(f"==> {path} <==", bold=True))
        for line in tail_lines(path, lines):
            click.echo(line)
    if follow:
        _follow(paths[0])
