"""The payload of every event type, one struct each (the wire format: `Event.payload` is the struct's
fields as a JSON object). A field a writer sometimes leaves out is `UNSET` (absent on the wire); readers
decode with `payload(event)` and read fields, never keys.

docs/api.md#events lists them from these structs (tests/test_docs.py keeps it in step).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType

from benchd.schemas.api import Event
from benchd.schemas.kld import KldResult
from benchd.schemas.rows import CooldownRecord, Row
from benchd.schemas.runbook import CellVerdict, RaceDrop

S = TypeVar("S", bound=Struct)


class Payload(Struct, kw_only=True):
    """Unknown keys are kept out, not refused: an older daemon's store still decodes."""


# ------------------------------------------------------------------------------------------- the job


class JobQueued(Payload):
    """A job entered the queue (seq 1): its name, its `not_before`, the model paths absent at submit."""

    name: str
    not_before: str | None = None
    missing_paths: list[str] | UnsetType = UNSET


class JobStarted(Payload):
    """The queue started (or resumed) the job: rows done of the planned total, the sleep guard's state."""

    done: int = 0
    total: int = 0
    sleep_prevented: bool | UnsetType | None = UNSET
    sleep_method: str | UnsetType | None = UNSET
    sleep_reason: str | UnsetType | None = UNSET


class JobResumed(JobStarted):
    """An interrupted job running again."""


class JobInterrupted(Payload):
    reason: str


class JobFinished(Payload):
    done: int | UnsetType = UNSET


class JobFailed(Payload):
    done: int | UnsetType = UNSET
    error: str | None = None


class JobCancelled(Payload):
    reason: str
    done: int | UnsetType = UNSET


# ------------------------------------------------------------------------------------------ the design


class DesignChosen(Payload):
    """The measuring order that runs, what was asked, why, the seed of its round orders and its plan."""

    order: str
    why: str
    plan: str
    asked: str | None = None
    seed: int | None = None  # (null in stores written before these fields)
    budget_bytes: int | None = None
    budget_source: str | None = None
    drift_protected: bool | UnsetType = UNSET


class DesignChanged(Payload):
    """Interleaved fell back to blocked at `context` (the warmed servers did not fit)."""

    order: str
    why: str
    context: int | None = None
    plan: str | None = None


class RoundStarted(Payload):
    context: int
    round: int
    order: list[str]
    seed: int
    design: str


class ContextFinished(Payload):
    """A context's rounds ended: how many, under which design, and why (the stop rule's words)."""

    context: int
    rounds: int
    design: str
    why: str


class CandidateDropped(RaceDrop, kw_only=True):
    """A candidate left the race (the runbook's `RaceDrop`, docs/measuring.md#racing), and what that did to
    the plan: `unrun_rows` / `unrun_rows_max` its planned rows that will not run, `planned_rows` /
    `planned_rows_max` the job's plan from then on."""

    unrun_rows: int = 0
    unrun_rows_max: int = 0
    planned_rows: int | None = None
    planned_rows_max: int | None = None


class CandidateSettled(Payload):
    """A candidate's rounds of `context` ended at the look after `round` rounds while others went on:
    every pair of it with the candidates still racing there was resolved or could not resolve in the rounds
    left (`pairs`: the other candidate -> the look's words, at α `alpha`). It stays in the race
    (docs/measuring.md#racing)."""

    candidate: str
    context: int
    round: int
    alpha: float
    pairs: dict[str, str]


# ----------------------------------------------------------------------------------------- servers


class ServerStarting(Payload):
    candidate: str
    runtime: str
    ctx_size: int | None
    #: The prompt corpus and template hashes (the first start of a run only).
    prompts: dict[str, Any] | UnsetType = UNSET


class ServerReady(Payload):
    """A server answered health (`external`: benchd attached to a server it did not start, no time to ready)."""

    candidate: str
    purpose: str = "sweep"
    runtime: str | None = None  # (null in stores written before these fields)
    pid: int | None = None
    port: int | None = None
    ctx_size: int | None = None
    binary: str | None = None
    version: str | None = None
    version_source: str | None = None
    energy: dict[str, Any] | UnsetType = UNSET
    external: dict[str, Any] | UnsetType = UNSET
    ready_s: float | UnsetType = UNSET
    ready_note: str | UnsetType = UNSET
    #: Seconds benchd was not run / the server was seen stopped between the spawn and ready (null: unreadable).
    stalled_s: float | UnsetType | None = UNSET
    server_stopped_s: float | UnsetType | None = UNSET
    load_s: float | UnsetType | None = UNSET
    load_note: str | UnsetType = UNSET
    cache: str | UnsetType | None = UNSET
    cache_note: str | UnsetType = UNSET
    cold: bool | UnsetType = UNSET
    resident_before: float | UnsetType | None = UNSET
    argv: list[str] | UnsetType = UNSET
    affinity: dict[str, Any] | UnsetType = UNSET
    env: dict[str, str] | UnsetType = UNSET
    env_removed: list[str] | UnsetType = UNSET
    fit: str | UnsetType | None = UNSET
    layer_split: str | UnsetType | None = UNSET
    split_note: str | UnsetType = UNSET
    #: The candidate's server start number in the job (1 = its first; rows carry it as `start`).
    start: int | UnsetType = UNSET


class ServerStopped(Payload):
    candidate: str
    pid: int | None
    exit_status: str | None
    crashed: bool


class ServerCrashed(Payload):
    """A server died at startup (`reason`, `error`) or during a probe (`phase` = "probe")."""

    candidate: str
    phase: str
    exit_status: str | None
    log_tail: str
    reason: str | UnsetType = UNSET
    error: str | UnsetType = UNSET


# ------------------------------------------------------------------------------------------ probes


class CooldownStarted(Payload):
    candidate: str
    context: int
    probe: int
    policy: str
    kind: str | UnsetType = UNSET


class CooldownFinished(Payload):
    candidate: str
    context: int
    probe: int
    record: CooldownRecord
    kind: str | UnsetType = UNSET


class ProbeStarted(Payload):
    candidate: str
    context: int
    probe: int
    kind: str
    round: int | UnsetType | None = UNSET
    visit: int | UnsetType | None = UNSET


class ProbeFinished(Payload):
    """The row, stored in the same transaction."""

    row: Row


class CellFinished(Payload):
    candidate: str
    context: int
    kind: str
    verdict: CellVerdict


class SessionTurn(Payload):
    """A session's turn answered (its row is stored with the whole session's)."""

    candidate: str
    context: int
    turn: int
    ttft_ms: float | None
    cached_tokens: int | None


class SessionFinished(Payload):
    candidate: str
    context: int
    warm_ttft_ms: float | None
    reuse_fraction: float | None
    misses: int | None
    status: str
    restarted_after: str | None


class LevelFinished(Payload):
    candidate: str
    context: int
    concurrency: int
    agg_gen_tps: float | None


# ------------------------------------------------------------------------------------------- evals


class EvalSuite(Payload):
    """A public suite's provenance: package, version, wheel file and its sha256, license, the tasks asked."""

    suite: str
    package: str
    version: str
    file: str
    sha256: str
    license: str | None
    data_files: list[str]
    task_ids: list[str]


class EvalBudgetReached(Payload):
    candidate: str
    suite: str
    budget_s: float


# --------------------------------------------------------------------------------------------- KLD


class KldStarted(Payload):
    """A KLD step began: the corpus (`purpose` "corpus"), the reference's logits, or a candidate's scoring."""

    candidate: str | UnsetType = UNSET
    context: int | UnsetType = UNSET
    purpose: str | UnsetType = UNSET
    corpus: dict[str, Any] | UnsetType = UNSET



#: Every event type's payload struct (the `EventType` literal's values, in order).
PAYLOADS: dict[str, type[Struct]] = {
    "job_queued": JobQueued, "job_started": JobStarted, "job_resumed": JobResumed,
    "server_starting": ServerStarting, "server_ready": ServerReady, "server_stopped": ServerStopped,
    "server_crashed": ServerCrashed, "cooldown_started": CooldownStarted, "cooldown_finished": CooldownFinished,
    "probe_started": ProbeStarted, "probe_finished": ProbeFinished, "cell_finished": CellFinished,
    "session_turn": SessionTurn, "session_finished": SessionFinished, "level_finished": LevelFinished,
    "eval_suite": EvalSuite, "eval_budget_reached": EvalBudgetReached, "design_chosen": DesignChosen,
    "design_changed": DesignChanged, "round_started": RoundStarted, "context_finished": ContextFinished,
    "candidate_dropped": CandidateDropped, "candidate_settled": CandidateSettled,
    "kld_started": KldStarted, "kld_finished": KldResult,  # (one KldResult, docs/kld.md)
    "job_interrupted": JobInterrupted, "job_finished": JobFinished, "job_failed": JobFailed,
    "job_cancelled": JobCancelled,
}


def payload(event: Event) -> Struct:
    """The event's payload as its type's struct (msgspec.ValidationError names the bad field)."""
    return msgspec.convert(event.payload, PAYLOADS[event.type])


def decode(event: Event, kind: type[S]) -> S:
    """The event's payload as `kind` (its type's struct, known to the caller)."""
    return msgspec.convert(event.payload, kind)


def to_wire(p: Struct) -> dict[str, Any]:
    """The payload as the event stream carries it (UNSET fields absent)."""
    out: dict[str, Any] = msgspec.to_builtins(p)
    return out


def markdown() -> str:
    """The events table of docs/api.md (`python -m benchd.schemas.events`): fields marked `?` may be absent."""
    lines = ["| type | payload | |", "|---|---|---|"]
    for name, cls in PAYLOADS.items():
        fields = ", ".join(f + ("?" if isinstance(d, UnsetType) else "")
                           for f, d in zip(cls.__struct_fields__, _defaults(cls), strict=True))
        what = " ".join((cls.__dict__.get("__doc__") or "").split())
        lines.append(f"| `{name}` | {fields} | {what} |")
    return "\n".join(lines) + "\n"


def _defaults(cls: type[Struct]) -> list[object]:
    n = len(cls.__struct_fields__) - len(cls.__struct_defaults__)
    return [None] * n + list(cls.__struct_defaults__)


if __name__ == "__main__":
    print(markdown(), end="")
