"""The benchctl click group. Subcommands load lazily: `benchctl ping` must not import what `report` needs.

Each entry of COMMANDS maps a command name to "module:attribute" under `benchctl.commands`; the module is
imported only when that command runs (or when `--help` lists them: then only the short help is read from
the table, nothing is imported).
"""

from __future__ import annotations

import importlib
import sys

import click

from benchctl import exitcodes

# name -> (module in benchctl.commands, attribute, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "ping": ("jobs", "ping", "Check that benchd answers on its socket."),
    "validate": ("jobs", "validate", "Check a sweep file and show its planned cells."),
    "submit": ("jobs", "submit", "Queue a sweep (now, --at a time, or --when idle/ac-power)."),
    "jobs": ("jobs", "jobs", "List jobs."),
    "status": ("jobs", "status", "Show a job (default: the running or newest one)."),
    "tail": ("tail", "tail", "Follow a job's progress until it ends."),
    "cancel": ("jobs", "cancel", "Cancel a queued or running job."),
    "logs": ("logs", "logs", "Read the daemon's log or a server's log."),
    "report": ("report", "report", "Report a runbook: medians, spread, nulls with reasons, Pareto."),
    "compare": ("report", "compare", "Compare two runbooks cell by cell."),
    "runbooks": ("report", "runbooks", "List the runbooks of the state dir (offline)."),
    "export": ("export", "export", "Export a runbook: llama-bench's Markdown table, JSON lines or CSV."),
    "tune": ("tune", "tune", "Write a sweep file that races a model's server flags (never submits)."),
    "lock": ("lock", "lock", "Lock the candidate you chose (writes locked.toml)."),
    "locked": ("lock", "locked", "Show the locked candidate, or the command that starts it."),
    "recheck": ("recheck", "recheck", "Queue a recheck of the locked candidate (--now: at once)."),
    "runtimes": ("runtimes", "runtimes", "Install or list the inference runtimes (llama-server, MLX)."),
    "evals": ("evals", "evals", "Fetch or list the public eval suites (HumanEval, BFCL)."),
    "models": ("models", "models", "Generate tiny random-weight models for tests and the demo."),
    "doctor": ("doctor", "doctor", "Check this machine: runtimes, daemon, state dir, sensors."),
    "service": ("service", "service", "Install, remove or inspect the benchd user service."),
    "prune": ("prune", "prune", "Delete old jobs, runbooks, logs and caches."),
    "completion": ("completion", "completion", "Print a shell completion script."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        try:
            mod = importlib.import_module(f"benchctl.commands.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"benchctl.commands.{module}":
                return None
            raise
        cmd = getattr(mod, attr, None)
        return cmd if isinstance(cmd, click.Command) else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="BENCHCTL_DEBUG", help="Show tracebacks on errors.")
@click.version_option(package_name="benchd")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """benchctl: measure local LLM servers, compare the tradeoffs, lock your choice.

    \b
    Examples:
      benchctl runtimes install all
      benchctl submit sweep.toml --follow
      benchctl report --pareto
      benchctl lock --candidate qwen-30b-q4-gguf
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if _no_color():  # https://no-color.org: every click.echo of every command drops its styles
        ctx.color = False


def main() -> None:
    """Entry point: click handles usage errors (exit 2); anything unexpected is one line unless --debug."""
    try:
        # standalone_mode=False: click returns a command's exit code instead of exiting; pass it on.
        rc = cli.main(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        rc = exitcodes.BAD_INPUT if exc.exit_code == 2 else exc.exit_code
        if _json_requested():
            _echo_json_error(exc.format_message(), rc, "usage")
        else:
            exc.show()
        sys.exit(rc)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # the last line of defence: no traceback unless asked for
        from benchd.errors import BenchdError

        if "--debug" in sys.argv or _env_debug():
            raise
        if isinstance(exc, BenchdError):
            if _json_requested():
                _echo_json_error(exc.message, exitcodes.BAD_INPUT, exc.code, exc.field)
            else:
                click.echo(f"error: {exc}", err=True)
            sys.exit(exitcodes.BAD_INPUT)
        if _json_requested():
            _echo_json_error(f"{type(exc).__name__}: {exc}", exitcodes.FAILED, "internal")
        else:
            click.echo(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        sys.exit(exitcodes.FAILED)


def _json_requested() -> bool:
    from benchctl.jsonerror import json_requested

    return json_requested()


def _echo_json_error(message: str, rc: int, code: str | None, field: str | None = None) -> None:
    from benchctl.jsonerror import error_json

    click.echo(error_json(message, rc, code, field))


def _no_color() -> bool:
    import os

    return os.environ.get("NO_COLOR", "") != ""


def _env_debug() -> bool:
    import os

    return os.environ.get("BENCHCTL_DEBUG", "") not in ("", "0")


if __name__ == "__main__":
    main()
