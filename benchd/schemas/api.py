"""API bodies and the job event stream (`/v1`): submit, job, progress, health, errors, events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from benchd.schemas.recheck import PendingRecheck, RecheckEntry, RecheckSettings
from benchd.schemas.sweep import Sweep, WhenCondition

# ---------------------------------------------------------------------------------------- API bodies


class SubmitJob(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """`POST /v1/jobs` body. `not_before` is an RFC 3339 time with an offset."""

    sweep: Sweep
    not_before: str | None = None
    when: Annotated[list[WhenCondition], Meta(max_length=2)] = []


JobState = Literal["queued", "waiting", "running", "succeeded", "failed", "cancelled", "interrupted"]
JOB_STATES: tuple[str, ...] = ("queued", "waiting", "running", "succeeded", "failed", "cancelled", "interrupted")
TERMINAL_JOB_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class Progress(Struct, kw_only=True):
    """Rows stored vs planned. With `probes = "auto"` the plan is a range: `total` is its low end
    (every cell stops at `min`) and `total_max` its high end (every cell runs to `max`); `eta_s` /
    `eta_max_s` are the matching estimates, the eval tasks left included (benchd.daemon.eta)."""

    done: int
    total: int
    eta_s: float | None = None
    total_max: int | None = None
    eta_max_s: float | None = None


class Job(Struct, kw_only=True):
    """A queued or finished sweep, as the API shows it."""

    id: str
    name: str
    state: JobState
    created_at: str
    not_before: str | None = None
    when: list[str] = []
    waiting_reason: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None
    progress: Progress | None = None
    runbook_id: str | None = None
    #: Why the job's runbook could not be written (it is not written again); `error` says it too.
    runbook_error: str | None = None
    sweep: Sweep | None = None
    #: The stored sweep's text when it no longer decodes (the job then fails with the reason in `error`).
    sweep_raw: str | None = None


class JobList(Struct, kw_only=True):
    jobs: list[Job]
    next_cursor: str | None = None


class ErrorBody(Struct, kw_only=True):
    code: str
    message: str
    field: str | None = None


class ErrorAnswer(Struct, kw_only=True):
    error: ErrorBody


class Health(Struct, kw_only=True):
    version: str
    pid: int
    uptime_s: float
    state_dir: str
    queue_depth: int
    running_job: str | None = None
    store_error: str | None = None


class RecheckRequest(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """`POST /v1/recheck` body: queue a recheck of the lock by hand. `now` = no time or conditions;
    otherwise the `[recheck]` settings' `when` and `at` apply."""

    now: bool = False


class RecheckStatus(Struct, kw_only=True):
    """`GET /v1/recheck` (and `POST`'s answer): settings in force, the lock, pending and last recheck."""

    settings: RecheckSettings
    settings_error: str | None = None
    lock_path: str
    lock_candidate: str | None = None
    lock_error: str | None = None
    pending: PendingRecheck | None = None
    pending_job: Job | None = None
    last: RecheckEntry | None = None
    last_check_at: str | None = None
    last_check: list[str] = []
    next_check_at: str | None = None


# ------------------------------------------------------------------------------------------ events

EventType = Literal[
    "job_queued",
    "job_started",
    "job_resumed",
    "server_starting",
    "server_ready",
    "server_stopped",
    "server_crashed",
    "cooldown_started",
    "cooldown_finished",
    "probe_started",
    "probe_finished",
    "cell_finished",
    "session_turn",
    "session_finished",
    "level_finished",
    "eval_suite",
    "eval_budget_reached",
    "design_chosen",
    "design_changed",
    "round_started",
    "context_finished",
    "candidate_dropped",
    "candidate_settled",
    "kld_started",
    "kld_finished",
    "job_interrupted",
    "job_finished",
    "job_failed",
    "job_cancelled",
]
TERMINAL_EVENTS: frozenset[str] = frozenset({"job_finished", "job_failed", "job_cancelled"})


class Event(Struct, kw_only=True, frozen=True):
    """One line of `GET /v1/jobs/{id}/events` (seq per job, gap-free, from 1); read, `type` may be a newer daemon's."""

    seq: int
    time: str
    type: str
    job: str
    payload: dict[str, Any] = {}
