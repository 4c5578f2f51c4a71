"""Rechecks of the lock: the `Fingerprint` of what a lock depends on (read from files, no server
started), one `[[rechecks]]` entry of the lock file, the `[recheck]` settings of `<state>/config.toml`
and the daemon's own recheck bookkeeping."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from benchd.schemas.sweep import WhenCondition


class Fingerprint(Struct, kw_only=True, omit_defaults=True):
    """What the locked server's speed depends on, read without starting it: the executable that starts it
    (`binary`, the sha256 of its real file), the runtime's version read offline (`llama-server --version`
    or the MLX venv's metadata) and the venv's `packages`; one that cannot be read is absent, with the
    reason in `null_reasons`."""

    taken_at: str
    source: str
    runtime: str
    binary: str | None = None
    binary_realpath: str | None = None
    binary_bytes: int | None = None
    binary_mtime_ns: int | None = None
    binary_sha256: str | None = None
    version: str | None = None
    version_source: str | None = None
    packages: dict[str, str] = {}
    model_path: str | None = None
    model_bytes: int | None = None
    model_sha256: str | None = None
    draft_model_sha256: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    null_reasons: dict[str, str] = {}


RecheckOutcome = Literal["succeeded", "failed", "cancelled"]


class RecheckEntry(Struct, kw_only=True, omit_defaults=True):
    """One `[[rechecks]]` table: when, why, on what, and the verdict per context and metric.

    `verdicts[context][metric]` is the one comparison's verdict in words (`X % slower: different: …`,
    `same: tied within …`, `unresolved: …`, or `not measured: why`); `medians[context][metric]` the
    recheck's cell medians (later rechecks judge against their spread). `regressions` lists the metrics
    different and worse beyond the threshold; `notified` says what the notifier did. A first
    regression is held until a second recheck confirms it (`confirming`: that job; `confirms`: on the
    second one, the job it confirms or not), unless the settings say `confirm = false`.
    """

    at: str
    job: str
    outcome: RecheckOutcome
    candidate: str
    locked_at: str
    lock_runbook: str
    runbook: str | None = None
    cause: list[str] = []
    fingerprint: Fingerprint | None = None
    threshold_pct: float = 5.0
    verdicts: dict[str, dict[str, str]] = {}
    medians: dict[str, dict[str, float]] = {}
    regressed: bool = False
    regressions: list[str] = []
    notified: str | None = None
    error: str | None = None
    confirming: str | None = None
    confirms: str | None = None


#: `at` in the settings: "HH:MM" local time (24 h), or "" for "as soon as the conditions hold".
CLOCK_TIME_PATTERN = r"^(([01][0-9]|2[0-3]):[0-5][0-9])?$(?!\n)"
ClockTime = Annotated[str, Meta(pattern=CLOCK_TIME_PATTERN)]


class RecheckSettings(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The `[recheck]` table of `<state>/config.toml` (every field optional; unknown fields are errors)."""

    enabled: bool = True
    when: Annotated[list[WhenCondition], Meta(max_length=2)] = msgspec.field(
        default_factory=lambda: ["idle", "ac-power"])
    at: ClockTime = "03:00"
    recheck_hours: Annotated[float, Meta(gt=0, le=24 * 365)] = 24.0
    threshold_pct: Annotated[float, Meta(ge=0, le=1000)] = 5.0
    confirm: bool = True
    notify_command: Annotated[list[Annotated[str, Meta(min_length=1, max_length=4096)]], Meta(max_length=64)] = []


class SettingsFile(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """`<state>/config.toml`: today only `[recheck]`."""

    recheck: RecheckSettings = msgspec.field(default_factory=RecheckSettings)


class PendingRecheck(Struct, kw_only=True):
    """A recheck job the daemon queued and has not yet written into the lock's history."""

    job: str
    queued_at: str
    candidate: str
    locked_at: str
    lock_runbook: str
    cause: list[str] = []
    fingerprint: Fingerprint | None = None
    confirms: str | None = None
    now: bool = False


class RecheckState(Struct, kw_only=True):
    """`<state>/recheck.json`: the daemon's bookkeeping between restarts (the history is in the lock)."""

    schema_version: int = 1
    pending: PendingRecheck | None = None
    last_check_at: str | None = None
    last_check: list[str] = []
