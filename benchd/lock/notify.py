"""Desktop notifications for a recheck that found a regression (or could not run): the message, and
the notifier that posts it. Which command: docs/locking.md#the-lock-file-the-timer-and-the-notifier.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys

from benchd.lifeline import die_with_daemon
from benchd.lock.lockfile import LockFile
from benchd.lock.recheck import summary
from benchd.schemas import RecheckEntry

log = logging.getLogger("benchd.lock.notify")

NOTIFY_TIMEOUT_S = 10.0


def message(lf: LockFile, entry: RecheckEntry) -> tuple[str, str]:
    """(title, message): the candidate, the old and new versions, the cause and the verdict's summary."""
    old = lf.locked.binary_version or "?"
    new = entry.fingerprint.version if entry.fingerprint and entry.fingerprint.version else "?"
    title = (f"benchd: {entry.candidate} got slower" if entry.regressed
             else f"benchd: recheck of {entry.candidate} {entry.outcome}")
    versions = f"{old} -> {new}" if old != new else f"version {new}"
    return title, f"{versions}; {'; '.join(entry.cause)}. {summary(entry)}"


def notify_argv(title: str, message: str, command: list[str]) -> tuple[list[str] | None, str]:
    """(argv, how) of the notifier to run, or (None, why there is none)."""
    if command:
        return [*command, title, message], "notify_command"
    if sys.platform == "darwin":
        # AppleScript string literals take JSON's escapes for quotes and backslashes.
        script = f"display notification {json.dumps(message)} with title {json.dumps(title)}"
        return ["osascript", "-e", script], "osascript"
    found = shutil.which("notify-send")
    if found:
        return [found, "--app-name=benchd", title, message], "notify-send"
    return None, "no desktop notifier on this system (no notify_command, not macOS, no notify-send)"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=NOTIFY_TIMEOUT_S, check=False,
                          stdin=subprocess.DEVNULL, preexec_fn=die_with_daemon())


async def notify(title: str, message: str, command: list[str]) -> str:
    """Post the notification; returns what happened, one line (never raises)."""
    argv, how = notify_argv(title, message, command)
    log.warning("%s: %s", title, message)
    if argv is None:
        return f"none: {how}; see the daemon log and `benchctl status`"
    try:
        done = await asyncio.to_thread(_run, argv)
    except (OSError, subprocess.SubprocessError) as exc:
        log.error("notifier %s failed: %s", argv[0], exc)
        return f"{how}: failed ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        log.error("notifier %s exited %s: %s", argv[0], done.returncode, detail[0])
        return f"{how}: exit {done.returncode} {detail[0]}".rstrip()
    return f"{how}: posted"
