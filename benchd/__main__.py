"""`benchd`: click flags → Config → run_daemon() on uvloop. The only place in benchd that exits.

Exit codes: 0 clean shutdown, 2 bad configuration, 3 another benchd holds the state dir, 4 the state
database is corrupt, 130 a second SIGINT, 1 anything else (logged with its traceback); under `--launchd`
2, 3 and 4 become 0 after logging (why: docs/service.md). Logs: stderr and `<state>/logs/benchd.log` (rotated).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sqlite3
import sys

import click

from benchd.config import Config

EXIT_BAD_CONFIG = 2
EXIT_ALREADY_RUNNING = 3
EXIT_CORRUPT_STORE = 4
LOG_BYTES = 5 * 1024 * 1024
LEVELS = ("debug", "info", "warning", "error")


def setup_logging(config: Config) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    root.setLevel(config.log_level.upper())
    for h in list(root.handlers):
        root.removeHandler(h)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(fmt)
    root.addHandler(stderr)
    try:
        config.logs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fileh = logging.handlers.RotatingFileHandler(config.daemon_log_path, maxBytes=LOG_BYTES, backupCount=2)
        fileh.setFormatter(fmt)
        root.addHandler(fileh)
        os.chmod(config.daemon_log_path, 0o600)
    except OSError as exc:
        root.warning("cannot write %s (%s): logging to stderr only", config.daemon_log_path, exc)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="State dir (default: $BENCHD_STATE_DIR or the platform's).")
@click.option("--socket", "socket_path", type=click.Path(dir_okay=False, path_type=str), default=None,
              help="Unix socket (default: <state>/benchd.sock or $BENCHD_SOCKET).")
@click.option("--log-level", type=click.Choice(LEVELS, case_sensitive=False), default="info", show_default=True)
@click.option("--launchd", "under_launchd", is_flag=True,
              help="Started by launchd: exits 2, 3 and 4 (retrying cannot fix them) log why and exit 0 instead.")
@click.version_option(package_name="benchd")
def cli(state_dir: str | None, socket_path: str | None, log_level: str, under_launchd: bool) -> None:
    """benchd: the benchmark daemon. Runs in the foreground; launchd/systemd supervise it."""
    import uvloop

    from benchd.daemon.instance import AlreadyRunning, check_socket_path, ensure_private_dir
    from benchd.daemon.lifecycle import run_daemon
    from benchd.errors import BenchdError
    from benchd.store import CorruptStore

    config = Config.resolve(state_dir=state_dir, socket=socket_path, log_level=log_level.lower())
    try:
        check_socket_path(config.socket)
        fixed = ensure_private_dir(config.state_dir)  # before the log file goes in it
    except BenchdError as exc:
        click.echo(f"benchd: {exc}", err=True)
        _refuse(EXIT_BAD_CONFIG, under_launchd)
    setup_logging(config)
    log = logging.getLogger("benchd")
    for what in fixed:
        log.warning("fixed loose permissions: %s", what)
    try:
        code = uvloop.run(run_daemon(config))
    except AlreadyRunning as exc:
        log.error("%s; refusing to start", exc)
        _refuse(EXIT_ALREADY_RUNNING, under_launchd)
    except CorruptStore as exc:
        log.error("%s", exc.message)
        _refuse(EXIT_CORRUPT_STORE, under_launchd)
    except BenchdError as exc:
        log.error("bad configuration: %s", exc)
        _refuse(EXIT_BAD_CONFIG, under_launchd)
    except (OSError, sqlite3.Error) as exc:  # e.g. the state dir's disk is full: one clear line, no traceback
        log.error("cannot start on %s: %s: %s (%s free there); the supervisor's restart retries", config.state_dir,
                  type(exc).__name__, exc, _free(config.state_dir))
        sys.exit(1)
    except KeyboardInterrupt:
        code = 130
    logging.shutdown()
    if code == 130:
        os._exit(code)  # forced: do not wait for worker threads
    sys.exit(code)


def _refuse(code: int, under_launchd: bool) -> None:
    """Exit with a refusal code; under launchd exit 0 instead (the reason is already logged)."""
    if under_launchd:
        what = {EXIT_BAD_CONFIG: "bad configuration", EXIT_CORRUPT_STORE: "the state database is corrupt"}.get(
            code, "another benchd owns the state dir")
        msg = (f"benchd: exiting 0 instead of {code} ({what}) because launchd would restart it every 30 s "
               "for ever; fix the cause, then `benchctl service install`")
        if logging.getLogger().handlers:
            logging.getLogger("benchd").error(msg)
        else:
            click.echo(msg, err=True)
        logging.shutdown()
        sys.exit(0)
    sys.exit(code)


def _free(path: object) -> str:
    import shutil

    from benchd.stats.notation import fmt_bytes

    try:
        return fmt_bytes(shutil.disk_usage(str(path)).free, 1)
    except OSError:
        return "unknown space"


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
