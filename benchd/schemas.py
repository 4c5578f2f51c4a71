"""Every schema benchd reads or writes: the sweep file, API bodies, rows, events, jobs.

Validation happens on decode (msgspec checks types and `Meta` constraints there, not in `__init__`), so
every inbound document goes through one of the module-level decoders below. Inbound structs forbid
unknown fields: a misspelt field must fail loudly, never be ignored.

Persisted documents (runbook JSON, lock TOML) carry their own `schema_version`; see `runbook.py` and
`lock.py` for their change histories. Rows and events are append-only facts: new fields get defaults,
types never change (msgspec's schema-evolution rules).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

# ---------------------------------------------------------------------------------------------- ids

CANDIDATE_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
JOB_ID_PATTERN = r"^[a-z0-9-]{8,32}$"
RUNBOOK_ID_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}-[a-z0-9-]{8,32}$"

CandidateId = Annotated[str, Meta(pattern=CANDIDATE_ID_PATTERN)]
JobId = Annotated[str, Meta(pattern=JOB_ID_PATTERN)]
Runtime = Literal["llama-server", "mlx_lm.server", "mlx_vlm.server"]
RUNTIMES: tuple[str, ...] = ("llama-server", "mlx_lm.server", "mlx_vlm.server")

PathStr = Annotated[str, Meta(min_length=1, max_length=4096)]
ShortStr = Annotated[str, Meta(max_length=1024)]
Seconds = Annotated[float, Meta(ge=0, le=7 * 24 * 3600)]

# ------------------------------------------------------------------------------------- sweep file


class Spec(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Speculative / MTP decoding, exactly as benchmarked (the lock preserves it verbatim)."""

    kind: Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")]
    draft_model: PathStr | None = None
    draft_max: Annotated[int, Meta(ge=1, le=1024)] | None = None


class Candidate(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One thing to measure: runtime + model + server args + optional spec."""

    id: CandidateId
    runtime: Runtime
    model: PathStr
    request_model: ShortStr | None = None
    args: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=256)] = []
    binary: PathStr | None = None
    env: Annotated[dict[Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")], ShortStr], Meta(max_length=64)] = {}
    startup_timeout_s: Annotated[float, Meta(gt=0, le=24 * 3600)] = 300.0
    ctx_size: Annotated[int, Meta(ge=16, le=16_777_216)] | None = None
    spec: Spec | None = None

    def __post_init__(self) -> None:
        if ".." in self.id:
            raise ValueError("candidate id must not contain '..'")


class Sampling(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Greedy by default; sent with every request."""

    temperature: Annotated[float, Meta(ge=0, le=10)] = 0.0
    seed: Annotated[int, Meta(ge=0, le=2**32 - 1)] = 0


class Sustained(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One long generation per candidate; tokens = 0 turns it off."""

    tokens: Annotated[int, Meta(ge=0, le=1_000_000)] = 1024
    window: Annotated[int, Meta(ge=1, le=100_000)] = 128


CooldownPolicy = Literal["fixed", "thermal", "idle"]


class Cooldown(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    policy: CooldownPolicy = "fixed"
    seconds: Seconds = 5.0
    max_seconds: Seconds = 180.0
    target_celsius: Annotated[float, Meta(ge=0, le=150)] = 65.0
    max_load: Annotated[float, Meta(ge=0, le=1024)] = 0.5

    def __post_init__(self) -> None:
        if self.max_seconds < self.seconds:
            raise ValueError("cooldown.max_seconds must be >= cooldown.seconds")


class Deferred(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """An axis the sweep did not measure, and why. Nothing unmeasured disappears without a line."""

    axis: Annotated[str, Meta(min_length=1, max_length=200)]
    reason: Annotated[str, Meta(min_length=1, max_length=2000)]


EvalTier = Literal["none", "smoke", "standard"]


class Sweep(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The sweep file (TOML on disk, JSON in `POST /v1/jobs`). These are all the fields."""

    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$")]
    contexts: Annotated[list[Annotated[int, Meta(ge=1, le=4_194_304)]], Meta(min_length=1, max_length=64)]
    gen_tokens: Annotated[int, Meta(ge=1, le=131_072)]
    candidates: Annotated[list[Candidate], Meta(min_length=1, max_length=64)]
    probes: Annotated[int, Meta(ge=1, le=1000)] = 3
    warmup: Annotated[int, Meta(ge=0, le=100)] = 1
    eval_tier: EvalTier = "none"
    probe_timeout_s: Annotated[float, Meta(gt=0, le=24 * 3600)] | None = None
    deferred: Annotated[list[Deferred], Meta(max_length=256)] = []
    sampling: Sampling = Sampling()
    sustained: Sustained = Sustained()
    cooldown: Cooldown = Cooldown()

    def __post_init__(self) -> None:
        ids = [c.id for c in self.candidates]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"candidate ids must be unique; repeated: {', '.join(dup)}")
        if len(set(self.contexts)) != len(self.contexts):
            raise ValueError("contexts must not repeat")

    def effective_probe_timeout_s(self) -> float:
        """The probe's own timeout: configured, else derived from gen_tokens with a floor.

        The derivation assumes a pessimistic 2 tok/s decode plus 10 s per 1k context tokens of
        prompt processing, never under 60 s: generous enough for a slow CPU, tight enough that a hung
        (SIGSTOPped) server is noticed within minutes, not hours.
        """
        if self.probe_timeout_s is not None:
            return self.probe_timeout_s
        return max(60.0, self.gen_tokens / 2.0 + 10.0 * max(self.contexts) / 1000.0)


# ---------------------------------------------------------------------------------------- API bodies

WhenCondition = Literal["idle", "ac-power"]


class SubmitJob(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """`POST /v1/jobs` body. `not_before` is an RFC 3339 time with an offset."""

    sweep: Sweep
    not_before: str | None = None
    when: Annotated[list[WhenCondition], Meta(max_length=2)] = []


JobState = Literal["queued", "waiting", "running", "succeeded", "failed", "cancelled", "interrupted"]
JOB_STATES: tuple[str, ...] = ("queued", "waiting", "running", "succeeded", "failed", "cancelled", "interrupted")
TERMINAL_JOB_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class Progress(Struct, kw_only=True):
    done: int
    total: int
    eta_s: float | None = None


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
    sweep: Sweep | None = None


class JobList(Struct, kw_only=True):
    jobs: list[Job]
    next_cursor: str | None = None


class ErrorBody(Struct, kw_only=True):
    code: str
    message: str
    field: str | None = None


class Health(Struct, kw_only=True):
    version: str
    pid: int
    uptime_s: float
    state_dir: str
    queue_depth: int
    running_job: str | None = None
    store_error: str | None = None


# --------------------------------------------------------------------------------------- facts: rows

RowKind = Literal["probe", "sustained"]
RowStatus = Literal["ok", "failed", "timeout", "aborted"]


class ThermalReading(Struct, kw_only=True, frozen=True):
    """One thermal fact with its source. `celsius` and `pressure` are null when the source has none."""

    source: str
    celsius: float | None = None
    pressure: str | None = None
    available: bool = True
    reason: str | None = None


class Row(Struct, kw_only=True, frozen=True, omit_defaults=False):
    """One normalized probe (or sustained generation): every parameter in the row, like llama-bench.

    Each metric names where it came from in `sources` (`server:timings`, `client:stream-window`,
    `kernel:VmHWM`, ...). A metric that could not be measured is null and `null_reasons` says why.
    (job, candidate, context, kind, probe) is unique in the store.
    """

    job: str
    candidate: str
    runtime: str
    context: int
    kind: RowKind
    probe: int
    status: RowStatus
    error: str | None = None
    started_at: str | None = None
    ctx_size: int | None = None
    binary: str | None = None
    server_version: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    gen_tokens: int | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    gen_tps_client: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    draft_n: int | None = None
    draft_accepted: int | None = None
    draft_acceptance: float | None = None
    mem_peak_bytes: int | None = None
    mem_source: str | None = None
    #: The runtime's own peak-memory figure where it reports one (mlx_vlm `peak_memory`), beside the OS one.
    server_peak_memory_bytes: int | None = None
    mem_rss_anon_bytes: int | None = None
    mem_rss_file_bytes: int | None = None
    swap_in_bytes: int | None = None
    swap_out_bytes: int | None = None
    cooldown_s: float | None = None
    cooldown_reason: str | None = None
    thermal_before: ThermalReading | None = None
    thermal_after: ThermalReading | None = None
    window_tps: list[float] | None = None
    sustain_ratio: float | None = None
    exit_status: str | None = None
    log_tail: str | None = None
    sources: dict[str, str] = {}
    null_reasons: dict[str, str] = {}


class EvalResult(Struct, kw_only=True, frozen=True):
    """One eval task's outcome for a candidate, recorded beside the speed rows."""

    job: str
    candidate: str
    tier: str
    task: str
    passed: bool
    detail: str | None = None
    sandboxed: bool | None = None


class CooldownRecord(Struct, kw_only=True, frozen=True):
    """What a cooldown wait did: policy, how long, why it stopped, readings before and after."""

    policy: str
    waited_s: float
    reason: Literal["reached", "timeout", "sensor-unavailable", "fixed"]
    before: ThermalReading | None = None
    after: ThermalReading | None = None
    load_before: float | None = None
    load_after: float | None = None
    note: str | None = None


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
    "job_interrupted",
    "job_finished",
    "job_failed",
    "job_cancelled",
]
TERMINAL_EVENTS: frozenset[str] = frozenset({"job_finished", "job_failed", "job_cancelled"})


class Event(Struct, kw_only=True, frozen=True):
    """One line of `GET /v1/jobs/{id}/events`: seq is per job, gap-free, starting at 1."""

    seq: int
    time: str
    type: EventType
    job: str
    payload: dict[str, Any] = {}


# ------------------------------------------------------------------------------------------ decoders

sweep_json_decoder = msgspec.json.Decoder(Sweep)
submit_decoder = msgspec.json.Decoder(SubmitJob)
row_decoder = msgspec.json.Decoder(Row)
event_decoder = msgspec.json.Decoder(Event)
job_decoder = msgspec.json.Decoder(Job)
json_encoder = msgspec.json.Encoder()


def sweep_schema() -> dict[str, Any]:
    """JSON schema of the sweep file, for editors and `GET /v1/schema`."""
    return msgspec.json.schema(Sweep)
