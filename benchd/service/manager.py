"""The benchd user service: render, load, unload and inspect the LaunchAgent / systemd user unit (macOS
commands in `launchd.py`). Raises `ServiceError` saying what to do. Reasons: docs/service.md#the-service-manager."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Literal
from xml.sax.saxutils import escape as xml_escape

from benchd.atomic import atomic_write
from benchd.service import launchd as service_darwin

Manager = Literal["launchd", "systemd"]
Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHD_TEMPLATE = REPO_ROOT / "launchd" / "dev.benchd.plist.in"
SYSTEMD_TEMPLATE = REPO_ROOT / "systemd" / "benchd.service.in"
THROTTLE_S = 30
UNIT_MODE = 0o644  # the unit file: its owner writes it, the service manager reads it (whatever the umask)
#: Environment passed into the service (besides every BENCHD_* except the state dir, given as a flag).
PASSED_ENV = ("PATH", "HF_HUB_OFFLINE", "HF_HUB_CACHE")


class ServiceError(Exception):
    """Installing, removing or inspecting the service failed; the message says what to do."""


@dataclass(frozen=True)
class ServicePlan:
    """Everything about the service for this install: where its file goes and what it says."""

    manager: Manager
    name: str  # systemd unit stem / the last part of the launchd label
    label: str  # launchd label (dev.<name>) or systemd unit file name (<name>.service)
    path: Path  # where the unit file is installed
    text: str  # the rendered unit file
    benchd: Path
    state_dir: Path
    logs: list[str] = field(default_factory=list)  # where the logs go, one human line each


def benchd_executable() -> Path:
    """The `benchd` script of the running interpreter's environment (the venv's)."""
    return Path(sys.executable).parent / "benchd"


def service_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    out = {k: env[k] for k in PASSED_ENV if env.get(k)}
    for key in sorted(env):
        if key.startswith("BENCHD_") and key != "BENCHD_STATE_DIR" and env[key]:
            out[key] = env[key]
    return out


def _template(path: Path) -> Template:
    try:
        return Template(path.read_text())
    except OSError as exc:
        raise ServiceError(
            f"the service template {path} is missing ({exc.strerror}); benchctl service needs a checkout "
            "of benchd (the templates live at its root)"
        ) from exc


def render_launchd(benchd: Path, state_dir: Path, env: dict[str, str], label: str = "dev.benchd") -> str:
    """The LaunchAgent plist. Every value is XML-escaped (state dirs may contain spaces or '&')."""
    logs = state_dir / "logs"
    env_lines = "\n".join(
        f"    <key>{xml_escape(k)}</key>\n    <string>{xml_escape(v)}</string>" for k, v in sorted(env.items())
    )
    return _template(LAUNCHD_TEMPLATE).substitute(
        label=xml_escape(label),
        benchd=xml_escape(str(benchd)),
        state_dir=xml_escape(str(state_dir)),
        environment=env_lines,
        throttle_s=THROTTLE_S,
        exit_timeout_s=service_darwin.EXIT_TIMEOUT_S,
        stdout_log=xml_escape(str(logs / "launchd.stdout.log")),
        stderr_log=xml_escape(str(logs / "launchd.stderr.log")),
    )


def _systemd_quote(value: str, *, dollars: bool = True) -> str:
    """A double-quoted systemd word: `%` specifiers (and, for ExecStart, `$` expansion) neutralised."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if dollars:
        escaped = escaped.replace("$", "$$")
    return f'"{escaped}"'


def render_systemd(benchd: Path, state_dir: Path, env: dict[str, str]) -> str:
    """The systemd user unit, with paths quoted so spaces and specials survive."""
    env_lines = "\n".join(
        "Environment=" + _systemd_quote(f"{k}={v}", dollars=False) for k, v in sorted(env.items())
    )
    return _template(SYSTEMD_TEMPLATE).substitute(
        exec_start=f"{_systemd_quote(str(benchd))} --state-dir {_systemd_quote(str(state_dir))}",
        working_directory=str(state_dir).replace("%", "%%"),
        environment=env_lines,
    )


def systemd_user_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "systemd" / "user"


def plan(
    state_dir: Path,
    *,
    manager: Manager | None = None,
    benchd: Path | None = None,
    environ: dict[str, str] | None = None,
    name: str = "benchd",
) -> ServicePlan:
    """Render the service for this install (nothing is written). `name` lets tests use a unique unit."""
    mgr: Manager = manager or ("launchd" if sys.platform == "darwin" else "systemd")
    exe = benchd or benchd_executable()
    state = state_dir.expanduser().absolute()
    env = service_environment(environ)
    daemon_log = state / "logs" / "benchd.log"
    if mgr == "launchd":
        label = f"dev.{name}"
        logs = [
            f"daemon log: {daemon_log}",
            f"launchd stdout/stderr: {state / 'logs' / 'launchd.stdout.log'}, {state / 'logs' / 'launchd.stderr.log'}",
        ]
        return ServicePlan(
            manager=mgr, name=name, label=label, path=service_darwin.agent_path(label), text=render_launchd(exe, state, env, label),
            benchd=exe, state_dir=state, logs=logs,
        )
    label = f"{name}.service"
    logs = [f"daemon log: {daemon_log}", f"journal: journalctl --user -u {name}"]
    return ServicePlan(
        manager=mgr, name=name, label=label, path=systemd_user_dir(environ) / label, text=render_systemd(exe, state, env),
        benchd=exe, state_dir=state, logs=logs,
    )


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(cmd, 127, "", f"{cmd[0]}: command not found ({exc.strerror})")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"{' '.join(cmd)} timed out after 60 s")


def _why(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr or done.stdout or "").strip().splitlines()
    return text[-1] if text else f"exit status {done.returncode}"


def user_systemd_error(run: Runner = _run) -> str | None:
    """None when `systemctl --user` can talk to a user manager; else its error, verbatim."""
    done = run(["systemctl", "--user", "show-environment"])
    return None if done.returncode == 0 else _why(done)


def _no_user_systemd(why: str) -> ServiceError:
    return ServiceError(
        f"systemctl --user is not available here: {why}. A user systemd needs a login session "
        "(for a headless box: `loginctl enable-linger $USER`, then log in again). Nothing was changed. "
        "`benchctl service install --dry-run` prints the unit; without a service, run `benchd` in the foreground."
    )


def _write(plan_: ServicePlan) -> bool:
    """Write the unit file (and the state/logs dirs launchd needs); True when its content changed."""
    plan_.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (plan_.state_dir / "logs").mkdir(mode=0o700, exist_ok=True)
    old = plan_.path.read_text() if plan_.path.exists() else None
    atomic_write(plan_.path, plan_.text, mode=UNIT_MODE)  # launchd refuses a group/world-writable plist
    return old != plan_.text


def _wrote(plan_: ServicePlan, changed: bool) -> str:
    return f"wrote {plan_.path}" if changed else f"{plan_.path} is up to date"


def install(plan_: ServicePlan, *, run: Runner = _run, sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Write and load the service; returns what was done, one line each. Raises ServiceError."""
    if not os.access(plan_.benchd, os.X_OK):
        raise ServiceError(f"{plan_.benchd} is not an executable benchd; install benchd into this venv first (make setup)")
    if plan_.manager != "systemd":
        changed = _write(plan_)
        done = [_wrote(plan_, changed)]
        try:
            return done + service_darwin.load_agent(plan_.label, plan_.path, changed=changed, run=run, sleep=sleep)
        except service_darwin.LaunchctlError as exc:
            raise ServiceError(str(exc)) from exc
    why = user_systemd_error(run)
    if why is not None:
        raise _no_user_systemd(why)
    changed = _write(plan_)
    done = [_wrote(plan_, changed)]
    active = run(["systemctl", "--user", "is-active", plan_.label]).stdout.strip() == "active"
    steps = [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", plan_.label]]
    if changed and active:
        steps.append(["systemctl", "--user", "restart", plan_.label])  # pick up the new unit
    for cmd in steps:
        result = run(cmd)
        if result.returncode != 0:
            raise ServiceError(f"`{' '.join(cmd)}` failed: {_why(result)}")
        done.append(f"ran: {' '.join(cmd)}")
    return done


def uninstall(plan_: ServicePlan, *, run: Runner = _run) -> list[str]:
    """Stop and unload the service, then remove its file. Missing pieces are not errors."""
    done: list[str] = []
    if plan_.manager == "systemd":
        why = user_systemd_error(run)
        if why is None:
            result = run(["systemctl", "--user", "disable", "--now", plan_.label])
            done.append(f"ran: systemctl --user disable --now {plan_.label}" + ("" if result.returncode == 0 else f" ({_why(result)})"))
        elif plan_.path.exists():
            raise _no_user_systemd(why)
    else:
        result = run(service_darwin.bootout_command(plan_.label))
        done.append(f"ran: launchctl bootout ({'unloaded' if result.returncode == 0 else _why(result)})")
    if plan_.path.exists():
        plan_.path.unlink()
        done.append(f"removed {plan_.path}")
        if plan_.manager == "systemd":
            run(["systemctl", "--user", "daemon-reload"])
    else:
        done.append(f"{plan_.path} was not installed")
    done.append(f"the state dir {plan_.state_dir} (jobs, runbooks, logs) is kept")
    return done


@dataclass
class ServiceStatus:
    manager: Manager
    path: str
    installed: bool
    current: bool | None  # installed file == this install's rendering (None when not installed)
    state: str  # e.g. "active (running)", "running", "not loaded", "unavailable: ..."
    pid: int | None
    last_exit: str | None
    logs: list[str]


def status(plan_: ServicePlan, *, run: Runner = _run) -> ServiceStatus:
    installed = plan_.path.exists()
    current = (plan_.path.read_text() == plan_.text) if installed else None
    pid: int | None = None
    last_exit: str | None = None
    if plan_.manager == "systemd":
        why = user_systemd_error(run)
        if why is not None:
            state = f"unavailable: systemctl --user: {why}"
        else:
            shown = run(["systemctl", "--user", "show", plan_.label, "-p", "ActiveState,SubState,MainPID,ExecMainStatus,NRestarts"])
            props = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
            state = f"{props.get('ActiveState', '?')} ({props.get('SubState', '?')})"
            pid = int(props["MainPID"]) if props.get("MainPID", "0") not in ("", "0") else None
            last_exit = props.get("ExecMainStatus")
    else:
        shown = run(service_darwin.print_command(plan_.label))
        if shown.returncode != 0:
            state = "not loaded"
        else:
            props = service_darwin.parse_print(shown.stdout)
            state = props.get("state", "?")
            pid = int(props["pid"]) if props.get("pid", "").isdigit() else None
            last_exit = props.get("last exit code")
    return ServiceStatus(
        manager=plan_.manager, path=str(plan_.path), installed=installed, current=current, state=state,
        pid=pid, last_exit=last_exit, logs=plan_.logs,
    )
