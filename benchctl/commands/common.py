"""Options and helpers shared by the commands that talk to the daemon (jobs, tail, logs, ...).

Its own module so that `jobs` and `tail` both import it and not each other (`submit --follow` runs the
tail loop; `tail` needs the socket option and the exit-code mapping).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import click

from benchctl import exitcodes
from benchctl.jsonerror import error_json, json_requested
from benchd.stats.notation import fmt_duration

if TYPE_CHECKING:
    from benchd.schemas import Job, Progress

TERMINAL_EXIT = {"job_finished": exitcodes.OK, "job_failed": exitcodes.FAILED, "job_cancelled": exitcodes.CANCELLED}
RECONNECT_FOR_S = 60.0

# ----------------------------------------------------------------------------------------- helpers


STATE_DIR_HELP = "State dir (default: $BENCHD_STATE_DIR or the platform default)."
#: Where `--state-dir` leaves its value for the commands that do not take it as a parameter (the socket ones).
_META_KEY = "benchctl.state_dir"


def _remember_state_dir(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.meta[_META_KEY] = value
    return value


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@overload
def state_dir_option(f: Callable[..., Any], *, expose: bool = ..., help: str = ...) -> Callable[..., Any]: ...
@overload
def state_dir_option(f: None = None, *, expose: bool = ..., help: str = ...) -> Decorator: ...
def state_dir_option(f: Callable[..., Any] | None = None, *, expose: bool = True,
                     help: str = STATE_DIR_HELP) -> Callable[..., Any] | Decorator:
    """The one `--state-dir` of every command that reads or writes the state dir. `expose=False` (the
    daemon commands, through `socket_option`): the value is not a parameter of the command but is read by
    `state_dir()` / `_client()`, where it sets the default socket (<state dir>/benchd.sock)."""
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        return click.option("--state-dir", "state_dir", type=click.Path(file_okay=False), default=None,
                            help=help, callback=_remember_state_dir, expose_value=expose)(fn)

    return deco(f) if f is not None else deco


def state_dir() -> str | None:
    """The `--state-dir` given to the running command, or None (then $BENCHD_STATE_DIR or the default)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(_META_KEY) if ctx is not None else None


def config(socket_path: str | None = None, state: str | None = None) -> Any:
    """benchd's Config as this command sees it: --state-dir (else $BENCHD_STATE_DIR, the default), and the
    socket from --socket / $BENCHD_SOCKET, else <state dir>/benchd.sock. With a socket named
    `benchd.sock` and no state dir given at all, the state dir is the socket's folder (where benchd puts
    its socket), so what is read offline is that daemon's, not the platform default's."""
    import os
    from pathlib import Path

    from benchd.config import Config

    state = state if state is not None else state_dir()
    if state is None and not os.environ.get("BENCHD_STATE_DIR") and socket_path and Path(socket_path).name == "benchd.sock":
        state = str(Path(socket_path).expanduser().absolute().parent)
    return Config.resolve(state_dir=state, socket=socket_path)


def _default_socket() -> str:
    return str(config().socket)


def socket_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--socket` and `--state-dir` (its default socket), for every command that talks to the daemon."""
    return state_dir_option(click.option(
        "--socket", "socket_path", envvar="BENCHD_SOCKET", default=None, metavar="PATH",
        help="benchd's Unix socket (default: $BENCHD_SOCKET or <state dir>/benchd.sock).",
    )(f), expose=False)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


def _client(socket_path: str | None) -> Any:
    from benchctl.client import Client

    return Client(socket_path or _default_socket())


def _fail(message: str, code: int, *, slug: str | None = None, field: str | None = None) -> SystemExit:
    """SystemExit, not click's Exit: benchctl's main() runs click with standalone_mode=False, which
    turns an Exit into a return value that main() drops (the exit code would be lost). With `--json`
    the message is a JSON object on stdout (`error_json`)."""
    if json_requested():
        click.echo(error_json(message.removeprefix("error: "), code, slug, field))
    else:
        click.echo(message, err=True)
    return SystemExit(code)


def _call(fn: Callable[[], Any]) -> Any:
    """Run a client call; typed errors become the contract's exit codes."""
    from benchctl.client import ApiError, Unreachable

    try:
        return fn()
    except Unreachable as exc:
        raise _fail(str(exc), exitcodes.UNREACHABLE, slug="unreachable") from exc
    except ApiError as exc:
        code = exitcodes.BAD_INPUT if 400 <= exc.status < 500 else exitcodes.FAILED
        raise _fail(f"error: {exc}", code, slug=exc.code, field=exc.field) from exc


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


Answer = TypeVar("Answer")


def decoded(kind: type[Answer], answer: object) -> Answer:
    """An API answer (the JSON the client returns) as its `benchd.schemas` type; exit 1 when it is not one."""
    import msgspec

    try:
        return msgspec.convert(answer, kind)
    except msgspec.ValidationError as exc:
        raise _fail(f"error: benchd answered something that is not a {kind.__name__}: {exc}", exitcodes.FAILED) from exc


def progress_of(job: Job) -> Progress:
    """The job's progress; none yet is 0 of 0 rows."""
    from benchd.schemas import Progress

    return job.progress or Progress(done=0, total=0)


def planned_text(prog: Progress) -> str:
    """Rows planned: `N`, or `min-max` when the probe count is adaptive (`probes = "auto"`)."""
    lo, hi = prog.total, prog.total_max
    return f"{lo}-{hi}" if hi is not None and hi != lo else str(lo)


def eta_text(prog: Progress) -> str:
    """ETA: one figure, or `low-high` when the probe count is adaptive."""
    lo, hi = prog.eta_s or 0, prog.eta_max_s
    return f"{fmt_duration(lo)}-{fmt_duration(hi)}" if hi is not None and round(hi) != round(lo) else fmt_duration(lo)
