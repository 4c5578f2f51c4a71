"""macOS-only: the LaunchAgent's launchctl commands and load sequence (docs/service.md#launchctl)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]

#: The plist's ExitTimeOut: launchd SIGKILLs benchd this long after SIGTERM (benchd needs <= 10 s).
EXIT_TIMEOUT_S = 30
#: Extra wait for launchd to reap the job after ExitTimeOut.
GONE_MARGIN_S = 5.0
#: launchctl's exit status (and message prefix) when bootstrap races a job still being removed.
BOOTSTRAP_EIO = 5
BOOTSTRAP_RETRIES = 8
BOOTSTRAP_RETRY_S = 1.0
POLL_S = 0.25


class LaunchctlError(Exception):
    """A launchctl step failed in a way retrying does not fix; the message names the command."""


def domain(uid: int | None = None) -> str:
    return f"gui/{os.getuid() if uid is None else uid}"


def target(label: str, uid: int | None = None) -> str:
    return f"{domain(uid)}/{label}"


def agent_path(label: str, home: Path | None = None) -> Path:
    return (home or Path.home()) / "Library" / "LaunchAgents" / f"{label}.plist"


def bootstrap_command(plist: Path, uid: int | None = None) -> list[str]:
    return ["launchctl", "bootstrap", domain(uid), str(plist)]


def enable_command(label: str, uid: int | None = None) -> list[str]:
    return ["launchctl", "enable", target(label, uid)]


def kickstart_command(label: str, uid: int | None = None) -> list[str]:
    """Restart the loaded job in place (`-k` kills the running instance first)."""
    return ["launchctl", "kickstart", "-k", target(label, uid)]


def bootout_command(label: str, uid: int | None = None) -> list[str]:
    return ["launchctl", "bootout", target(label, uid)]


def print_command(label: str, uid: int | None = None) -> list[str]:
    return ["launchctl", "print", target(label, uid)]


def _why(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr or done.stdout or "").strip().splitlines()
    return text[-1] if text else f"exit status {done.returncode}"


def _is_eio(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode == BOOTSTRAP_EIO or f"{BOOTSTRAP_EIO}: Input/output error" in (done.stderr or "")


def wait_gone(label: str, run: Runner, *, uid: int | None = None, limit_s: float = EXIT_TIMEOUT_S + GONE_MARGIN_S,
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
    """Poll `launchctl print` until the job is gone; False if it is still there after `limit_s`."""
    deadline = clock() + limit_s
    while run(print_command(label, uid)).returncode == 0:
        if clock() >= deadline:
            return False
        sleep(POLL_S)
    return True


def load_agent(label: str, plist: Path, *, changed: bool, run: Runner, uid: int | None = None,
               sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Load (or reload) the agent; returns what was done, one line each. Raises LaunchctlError."""
    done: list[str] = []
    loaded = run(print_command(label, uid)).returncode == 0
    if loaded and not changed:
        result = run(kickstart_command(label, uid))
        if result.returncode != 0:
            raise LaunchctlError(f"`{' '.join(kickstart_command(label, uid))}` failed: {_why(result)}")
        return [f"ran: {' '.join(kickstart_command(label, uid))} (plist unchanged: restarted in place)"]
    if loaded:
        run(bootout_command(label, uid))  # "not loaded" meanwhile is fine: waiting below settles it
        done.append(f"ran: {' '.join(bootout_command(label, uid))}")
        if not wait_gone(label, run, uid=uid, sleep=sleep, clock=clock):
            raise LaunchctlError(
                f"{target(label, uid)} was still loaded {EXIT_TIMEOUT_S + GONE_MARGIN_S:.0f} s after bootout "
                f"(ExitTimeOut {EXIT_TIMEOUT_S} s): check `launchctl print {target(label, uid)}` and retry"
            )
        done.append(f"waited until {target(label, uid)} was gone")
    result = run(enable_command(label, uid))
    if result.returncode != 0:
        raise LaunchctlError(f"`{' '.join(enable_command(label, uid))}` failed: {_why(result)}")
    done.append(f"ran: {' '.join(enable_command(label, uid))}")
    return [*done, _bootstrap(bootstrap_command(plist, uid), run, sleep)]


def _bootstrap(cmd: list[str], run: Runner, sleep: Callable[[float], None]) -> str:
    """Runs `cmd`, retried while launchd answers EIO (still removing the old job); what was done."""
    for attempt in range(1, BOOTSTRAP_RETRIES + 1):
        result = run(cmd)
        if result.returncode == 0:
            return f"ran: {' '.join(cmd)}" + (f" (attempt {attempt}: launchd was still removing the old job)"
                                               if attempt > 1 else "")
        if not _is_eio(result) or attempt == BOOTSTRAP_RETRIES:
            break
        sleep(BOOTSTRAP_RETRY_S)
    raise LaunchctlError(f"`{' '.join(cmd)}` failed: {_why(result)}")


_TOP_KEY = re.compile(r"^\t([a-z][a-z ()]*[a-z)]) = (.*)$")  # "jetsam memory limit (active) = ..." too


def parse_print(text: str) -> dict[str, str]:
    """The service's own top-level `key = value` lines of `launchctl print` (one tab deep; nested blocks
    skipped): `state`, `pid`, `last exit code`, `path`, `runs`..."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        match = _TOP_KEY.match(line)
        if match and not match.group(2).endswith("{"):
            out.setdefault(match.group(1), match.group(2).strip())
    return out
