"""`benchctl service install|uninstall|status`: benchd as a per-user service (LaunchAgent / systemd user unit)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from benchctl import exitcodes
from benchctl.commands.common import _fail as fail
from benchctl.commands.common import state_dir_option

if TYPE_CHECKING:
    from benchd.service.manager import ServicePlan

STATE_DIR_HELP = "State dir the service's benchd uses (default: $BENCHD_STATE_DIR, else the platform default)."


def _plan(state_dir: str | None) -> ServicePlan:
    from benchd.config import Config
    from benchd.service import manager as service

    state = Config.resolve(state_dir=state_dir).state_dir
    try:
        return service.plan(Path(state))
    except service.ServiceError as exc:
        _fail(str(exc))


def _fail(message: str) -> NoReturn:
    raise fail(f"error: {message}", exitcodes.FAILED)


def _apply(action: Callable[[ServicePlan], list[str]], plan: ServicePlan) -> None:
    """Run an install/uninstall step and print what it did; a service error exits 1 with its reason."""
    from benchd.service import manager as svc

    try:
        done = action(plan)
    except svc.ServiceError as exc:
        _fail(str(exc))
    for line in done:
        click.echo(line)


def _print_logs(logs: list[str]) -> None:
    click.echo("logs:")
    for line in logs:
        click.echo(f"  {line}")


@click.group("service")
def service() -> None:
    """Install, remove or inspect benchd as a user service that starts at login.

    macOS: a LaunchAgent in ~/Library/LaunchAgents/dev.benchd.plist (user session: Metal needs it;
    ProcessType Interactive so launchd does not throttle the benchmarks). Linux: a systemd user unit
    in ~/.config/systemd/user/benchd.service. Both restart benchd after a crash, not in a tight loop.

    \b
    Examples:
      benchctl service install --dry-run     # print the file it would write
      benchctl service install
      benchctl service status
      benchctl service uninstall
    """


@service.command("install")
@state_dir_option(help=STATE_DIR_HELP)
@click.option("--dry-run", is_flag=True, help="Print the rendered unit file and where it would go; change nothing.")
def install(state_dir: str | None, dry_run: bool) -> None:
    """Write the service file for this install and start it.

    \b
    Examples:
      benchctl service install --dry-run
      benchctl service install --state-dir ~/benchd-state
    """
    from benchd.service import manager as svc

    plan = _plan(state_dir)
    if dry_run:
        click.echo(f"# would write {plan.path} ({plan.manager})", err=True)
        click.echo(plan.text, nl=False)
        return
    _apply(svc.install, plan)
    click.echo(click.style(f"benchd is installed as a {plan.manager} user service", fg="green"))
    click.echo(f"state dir: {plan.state_dir}")
    _print_logs(plan.logs)


@service.command("uninstall")
@state_dir_option(help=STATE_DIR_HELP)
def uninstall(state_dir: str | None) -> None:
    """Stop benchd's service and remove its file (the state dir is kept).

    \b
    Example:
      benchctl service uninstall
    """
    from benchd.service import manager as svc

    plan = _plan(state_dir)
    _apply(svc.uninstall, plan)


@service.command("status")
@state_dir_option(help=STATE_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(state_dir: str | None, as_json: bool) -> None:
    """Show whether the service is installed, current, running, and where its logs go.

    \b
    Examples:
      benchctl service status
      benchctl service status --json
    """
    from dataclasses import asdict

    from benchd.service import manager as svc

    plan = _plan(state_dir)
    st = svc.status(plan)
    if as_json:
        import json

        click.echo(json.dumps(asdict(st), indent=2))
        return
    if not st.installed:
        click.echo(f"not installed ({st.path}); install it with: benchctl service install")
    else:
        note = "" if st.current else click.style(" (differs from this install: run `benchctl service install` again)", fg="yellow")
        click.echo(f"installed: {st.path}{note}")
    color = "green" if st.state.startswith(("active", "running")) else "yellow"
    click.echo(f"{st.manager}: " + click.style(st.state, fg=color))
    if st.pid:
        click.echo(f"pid: {st.pid}")
    if st.last_exit not in (None, "", "0"):
        click.echo(f"last exit: {st.last_exit}")
    _print_logs(st.logs)
