"""What the daemon's recheck timer asks of the lock, without the timer or the queue: `inspect` (what
changed since the baseline), `StateFile` (`<state>/recheck.json`), `after_verdict`, `status`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import msgspec

from benchd.atomic import atomic_write
from benchd.config import Config
from benchd.errors import BenchdError
from benchd.lock.lockfile import LockFile, locked_candidate, read_lock
from benchd.lock.recheck import baseline, last_recheck
from benchd.schemas import (
    Fingerprint,
    Job,
    PendingRecheck,
    RecheckEntry,
    RecheckSettings,
    RecheckState,
    RecheckStatus,
)
from benchd.servers.fingerprint import changes, take_fingerprint

log = logging.getLogger("benchd.lock.watch")

STATE_FILE = "recheck.json"
_enc = msgspec.json.Encoder()


class StateFile:
    """`<state>/recheck.json`, read once and rewritten atomically after every change."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / STATE_FILE
        self.state = self._load()

    def _load(self) -> RecheckState:
        try:
            return msgspec.json.decode(self.path.read_bytes(), type=RecheckState)
        except FileNotFoundError:
            return RecheckState()
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("%s unreadable (%s): starting with no pending recheck", self.path, exc)
            return RecheckState()

    def save(self) -> None:
        atomic_write(self.path, msgspec.json.format(_enc.encode(self.state)))


def read_lock_or_error(path: Path) -> tuple[LockFile | None, str | None]:
    """(lock, None), or (None, why the lock file is unreadable); no file: (None, None)."""
    if not path.exists():
        return None, None
    try:
        return read_lock(path), None
    except BenchdError as exc:
        return None, exc.message


def inspect(config: Config) -> tuple[LockFile | None, Fingerprint | None, list[str], str | None]:
    """(lock, current fingerprint, what changed since the baseline, lock error); no lock: Nones, []."""
    lf, error = read_lock_or_error(config.locked_path)
    if lf is None:
        return None, None, [], error
    current = take_fingerprint(locked_candidate(lf.locked), config, "read by the recheck detector")
    return lf, current, changes(baseline(lf), current), None


def after_verdict(entry: RecheckEntry, settings: RecheckSettings, confirms: str | None
                  ) -> Literal["confirm", "notify"] | None:
    """A regression is confirmed once (unless `confirm = false`); then it, or a failure, is notified."""
    if entry.regressed and settings.confirm and confirms is None:
        return "confirm"
    if entry.regressed or entry.outcome == "failed":
        return "notify"
    return None


def status(config: Config, settings: RecheckSettings, settings_error: str | None, state: RecheckState,
           pending: PendingRecheck | None, pending_job: Job | None, next_check_at: str | None
           ) -> tuple[RecheckStatus, str | None]:
    """The `GET /v1/recheck` record, and the lock error it reports (None when the lock reads)."""
    lf, lock_error = read_lock_or_error(config.locked_path)
    last = last_recheck(lf) if lf else None
    return RecheckStatus(settings=settings, settings_error=settings_error, lock_path=str(config.locked_path),
                         lock_candidate=lf.locked.candidate if lf else None, lock_error=lock_error,
                         pending=pending, pending_job=pending_job, last=last, last_check_at=state.last_check_at,
                         last_check=state.last_check, next_check_at=next_check_at), lock_error
