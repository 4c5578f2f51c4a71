"""Every schema benchd reads or writes: the sweep file, API bodies, rows, events, jobs.

Validation happens on decode (msgspec checks types and `Meta` constraints there, not in `__init__`), so
every inbound document goes through one of the module-level decoders below. Inbound structs forbid
unknown fields: a misspelt field must fail loudly, never be ignored.

Persisted documents (runbook JSON, lock TOML) carry their own `schema_version`; see `runbook.py` and
`lock.py` for their change histories. Rows and events are append-only facts: new fields get defaults,
types never change (msgspec's schema-evolution rules).

The package is split by stage (sweep file, rows, API, runbook, recheck); every name is re-exported here, so
`from benchd.schemas import X` is the one way the rest of benchd reaches a schema.
"""

from __future__ import annotations

import msgspec

from benchd.schemas.api import (
    JOB_STATES,
    TERMINAL_EVENTS,
    TERMINAL_JOB_STATES,
    ErrorBody,
    Event,
    EventType,
    Health,
    Job,
    JobList,
    JobState,
    Progress,
    RecheckRequest,
    RecheckStatus,
    SubmitJob,
)
from benchd.schemas.recheck import (
    CLOCK_TIME_PATTERN,
    Fingerprint,
    PendingRecheck,
    RecheckEntry,
    RecheckOutcome,
    RecheckSettings,
    RecheckState,
    SettingsFile,
)
from benchd.schemas.rows import (
    CooldownRecord,
    EvalResult,
    Row,
    RowKind,
    RowStatus,
    ThermalReading,
)
from benchd.schemas.runbook import (
    RUNBOOK_SCHEMA_VERSION,
    SUPPORTED_VERSIONS,
    BenchdInfo,
    CandidateProvenance,
    CellStats,
    ContextPareto,
    CooldownHappened,
    CpuAffinity,
    DeferredAxes,
    Domination,
    EvalSummary,
    JobInfo,
    MachineInfo,
    MetricStats,
    ModelInfo,
    Point,
    PromptsInfo,
    Provenance,
    Runbook,
    RunbookFlag,
    SkippedPair,
    SleepInfo,
    SustainedResult,
)
from benchd.schemas.sweep import (
    CANDIDATE_ID_PATTERN,
    JOB_ID_PATTERN,
    RUNBOOK_ID_PATTERN,
    RUNTIMES,
    Candidate,
    CandidateId,
    Cooldown,
    CooldownPolicy,
    Deferred,
    EvalThinking,
    EvalTier,
    JobId,
    PathStr,
    Runtime,
    Sampling,
    Seconds,
    ShortStr,
    Spec,
    Sustained,
    Sweep,
    Thinking,
    WhenCondition,
    sweep_schema,
)

# ------------------------------------------------------------------------------------------ decoders

sweep_json_decoder = msgspec.json.Decoder(Sweep)
submit_decoder = msgspec.json.Decoder(SubmitJob)
row_decoder = msgspec.json.Decoder(Row)
event_decoder = msgspec.json.Decoder(Event)
job_decoder = msgspec.json.Decoder(Job)
recheck_request_decoder = msgspec.json.Decoder(RecheckRequest)
json_encoder = msgspec.json.Encoder()

__all__ = [
    "CANDIDATE_ID_PATTERN",
    "CLOCK_TIME_PATTERN",
    "JOB_ID_PATTERN",
    "JOB_STATES",
    "RUNBOOK_ID_PATTERN",
    "RUNBOOK_SCHEMA_VERSION",
    "RUNTIMES",
    "SUPPORTED_VERSIONS",
    "TERMINAL_EVENTS",
    "TERMINAL_JOB_STATES",
    "BenchdInfo",
    "Candidate",
    "CandidateId",
    "CandidateProvenance",
    "CellStats",
    "ContextPareto",
    "Cooldown",
    "CooldownHappened",
    "CooldownPolicy",
    "CooldownRecord",
    "CpuAffinity",
    "Deferred",
    "DeferredAxes",
    "Domination",
    "ErrorBody",
    "EvalResult",
    "EvalSummary",
    "EvalThinking",
    "EvalTier",
    "Event",
    "EventType",
    "Fingerprint",
    "Health",
    "Job",
    "JobId",
    "JobInfo",
    "JobList",
    "JobState",
    "MachineInfo",
    "MetricStats",
    "ModelInfo",
    "PathStr",
    "PendingRecheck",
    "Point",
    "Progress",
    "PromptsInfo",
    "Provenance",
    "RecheckEntry",
    "RecheckOutcome",
    "RecheckRequest",
    "RecheckSettings",
    "RecheckState",
    "RecheckStatus",
    "Row",
    "RowKind",
    "RowStatus",
    "Runbook",
    "RunbookFlag",
    "Runtime",
    "Sampling",
    "Seconds",
    "SettingsFile",
    "ShortStr",
    "SkippedPair",
    "SleepInfo",
    "Spec",
    "SubmitJob",
    "Sustained",
    "SustainedResult",
    "Sweep",
    "ThermalReading",
    "Thinking",
    "WhenCondition",
    "event_decoder",
    "job_decoder",
    "json_encoder",
    "recheck_request_decoder",
    "row_decoder",
    "submit_decoder",
    "sweep_json_decoder",
    "sweep_schema",
]
