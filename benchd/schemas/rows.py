"""Facts the engine records: one row per probe or sustained run, eval results, cooldowns, thermal readings.

Rows are append-only facts: new fields get defaults, types never change (msgspec's schema evolution)."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

# --------------------------------------------------------------------------------------- facts: rows

#: "sentinel": the drift sentinel's re-run of the sweep's first cell at the end (not in the cell's stats).
#: "session": one turn of a multi-turn session on a warm prompt cache (`probe` = the turn, from 1).
#: "parallel": one request of a batch of simultaneous streams (`concurrency`, `batch` say which).
#: "vision": an image probe (`image_*` fields); its `probe` is the resolution's index in
#: `vision.resolutions` x VISION_PROBE_STRIDE + the probe number, so each resolution is a cell of its
#: own under the unchanged (job, candidate, context, kind, probe) key.
RowKind = Literal["probe", "sustained", "sentinel", "session", "parallel", "vision"]
VISION_PROBE_STRIDE = 1000
#: Why a probe's numbers were thrown away and the probe run again (a failed row, never a slow number).
Invalidated = Literal["machine-slept", "server-stopped"]
RowStatus = Literal["ok", "failed", "timeout", "aborted"]
#: The row fields the energy step fills (benchd.engine.energy), each null one with its reason.
ENERGY_FIELDS: tuple[str, ...] = (
    "energy_prompt_j", "energy_gen_j", "prompt_watts", "gen_watts", "j_per_prompt_token", "j_per_gen_token",
    "idle_watts", "prompt_watts_above_idle", "gen_watts_above_idle", "j_per_prompt_token_above_idle",
    "j_per_gen_token_above_idle",
)


class ThermalReading(Struct, kw_only=True, frozen=True):
    """One thermal fact with its source. `celsius` and `pressure` are null when the source has none."""

    source: str
    celsius: float | None = None
    pressure: str | None = None
    available: bool = True
    reason: str | None = None


class ThrottleCheck(Struct, kw_only=True, frozen=True):
    """Whether a probe ran slower than its cell so far while the thermal reading did not say why.

    `suspect` when `value` is more than `threshold_pct` below `running_median` (the median of the cell's
    earlier ok probes, at least three) and the thermal reading is nominal or unavailable (`thermal`
    says which). `note` is the decision in words, with both figures."""

    metric: str
    value: float | None
    running_median: float | None
    drop_pct: float | None
    threshold_pct: float
    thermal: str
    suspect: bool
    note: str


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
    #: llama-server's `--fit` as started ("off": benchd's default; "on": the candidate asked for it).
    fit: str | None = None
    #: The layer split the server reported ("N/M layers on GPU"), null with a reason where it reports none.
    layer_split: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    gen_tokens: int | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    gen_tps_client: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    #: Time to the first answer token (after any reasoning); null with a reason when none came.
    ttfat_ms: float | None = None
    #: Generated tokens that were reasoning (the runtime's count where it reports one, else reasoning chunks).
    reasoning_tokens: int | None = None
    #: Thinking as it happened: "on" (reasoning deltas streamed) or "off"; what was asked is in `sources`.
    thinking: str | None = None
    #: True when the probe generated fewer tokens than asked (an EOS that could not be suppressed, or the
    #: sweep let the model stop): kept out of the cell's medians, `short_reason` says by how much and why.
    short: bool = False
    short_reason: str | None = None
    draft_n: int | None = None
    draft_accepted: int | None = None
    draft_acceptance: float | None = None
    #: The memory axis: what the candidate occupies including its weights, on every OS. Linux:
    #: VmHWM (mapped and copied weights alike); macOS: footprint peak + resident mapped model files.
    mem_peak_bytes: int | None = None
    mem_source: str | None = None
    #: The runtime's own peak-memory figure where it reports one (mlx_vlm `peak_memory`), beside the OS one.
    server_peak_memory_bytes: int | None = None
    mem_rss_anon_bytes: int | None = None
    mem_rss_file_bytes: int | None = None
    swap_in_bytes: int | None = None
    swap_out_bytes: int | None = None
    #: The axis's components, each with its source: the footprint/anonymous peak (macOS phys_footprint,
    #: Linux RssAnon), the resident peak including mapped files (Linux VmHWM, macOS ri_resident_size) and
    #: the resident bytes of the mapped model files (what a GGUF's footprint leaves out on macOS).
    mem_footprint_peak_bytes: int | None = None
    mem_resident_peak_bytes: int | None = None
    mem_model_resident_bytes: int | None = None
    cooldown_s: float | None = None
    cooldown_reason: str | None = None
    thermal_before: ThermalReading | None = None
    thermal_after: ThermalReading | None = None
    window_tps: list[float] | None = None
    sustain_ratio: float | None = None
    #: Energy (benchd.engine.energy): joules and mean watts per phase (prompt = request start -> first
    #: token, gen = first token -> end of stream), J per token, the idle baseline over the cooldown and
    #: the figures above it. System energy of the whole package/SoC; `sources` names the counters.
    energy_prompt_j: float | None = None
    energy_gen_j: float | None = None
    prompt_watts: float | None = None
    gen_watts: float | None = None
    j_per_prompt_token: float | None = None
    j_per_gen_token: float | None = None
    idle_watts: float | None = None
    prompt_watts_above_idle: float | None = None
    gen_watts_above_idle: float | None = None
    j_per_prompt_token_above_idle: float | None = None
    j_per_gen_token_above_idle: float | None = None
    #: {"prompt": {channel: J}, "gen": {channel: J}, "idle_watts": {channel: W}} where the source splits.
    energy_channels: dict[str, dict[str, float]] | None = None
    #: Sustained runs: joules per window of `sustained.window` tokens (the windows of `window_tps`).
    window_j: list[float] | None = None
    exit_status: str | None = None
    log_tail: str | None = None
    sources: dict[str, str] = {}
    null_reasons: dict[str, str] = {}
    #: The cooldown's note (sensor unavailable, a throttle-check extension and its check probes).
    cooldown_note: str | None = None
    #: Throttle check of an ok probe against its cell's running median.
    throttle: ThrottleCheck | None = None
    #: Seconds the machine slept during the probe (boottime minus monotonic clock gap; `sources` names them).
    suspended_s: float | None = None
    #: Seconds the server process was seen stopped (SIGSTOP, a debugger) during the probe, polled.
    server_stopped_s: float | None = None
    #: Seconds benchd was not run during the probe (a paused VM): its 0.1 s poll's lateness beyond 0.05 s.
    stalled_s: float | None = None
    #: Set when the probe was thrown away for a sleep or a stopped server (status failed; re-run).
    invalidated: Invalidated | None = None
    #: Session turns (kind "session"): the turn (from 1), the prompt tokens the server processed anew
    #: (prompt_tokens - cached_tokens), their rate, the reusable prefix benchd computed by tokenizing the
    #: rendered prompts (common prefix with the previous prompt + answer), and whether the server's cached
    #: tokens fell short of it beyond the tolerance (`sources` carries both numbers).
    turn: int | None = None
    new_prompt_tokens: int | None = None
    new_prompt_tps: float | None = None
    reusable_prefix_tokens: int | None = None
    cache_miss: bool | None = None
    #: Parallel requests (kind "parallel"): the level (simultaneous streams), the batch the request ran
    #: in, and the batch's aggregate gen tok/s over the window where all its streams ran (same per batch).
    concurrency: int | None = None
    batch: int | None = None
    agg_gen_tps: float | None = None
    #: Image probes (kind "vision"): the resolution and number of images sent, the image tokens (the
    #: image request's prompt tokens minus the same text-only request's), the TTFT with the images, the
    #: same prompt's TTFT without them (just before) and the difference, and each image's sha256 (new
    #: every probe). prompt_tps (image tokens included), gen_tps and memory are the image request's.
    #: `image_encode_ms` stays null: neither server reports the encode apart.
    image_width: int | None = None
    image_height: int | None = None
    images: int | None = None
    image_tokens: int | None = None
    image_ttft_ms: float | None = None
    text_ttft_ms: float | None = None
    image_extra_ttft_ms: float | None = None
    image_encode_ms: float | None = None
    image_sha256: list[str] | None = None
    #: The probe's round in its context (interleaved: every candidate once per round; blocked: one server
    #: start per candidate per round) and its position in that round's visiting order (0 = first); null in
    #: the sequential order, with the reason. The comparison pairs the probes (or block medians) of a round.
    round: int | None = None
    visit: int | None = None
    #: The candidate's server start the row was measured on, numbered in the job (1 = its first start;
    #: the `start` of its `server_ready` event). Interleaved with `starts = "round"` and blocked, every
    #: round of a context has a start of its own; with `starts = "once"` the rounds share one.
    start: int | None = None


class EvalResult(Struct, kw_only=True, frozen=True):
    """One eval task's outcome for a candidate, recorded beside the speed rows."""

    job: str
    candidate: str
    tier: str
    task: str
    passed: bool
    detail: str | None = None
    sandboxed: bool | None = None
    #: Which resource limits applied to the answer's code (None: no code ran); e.g. RLIMIT_AS is not set on macOS.
    limits: str | None = None
    #: What the eval asked for: thinking ("off", "on", "default") and the token budget of the answer that
    #: was graded (the task's own, or raised by the sweep's `eval_reasoning_budget` after a cut-off).
    thinking: str | None = None
    max_tokens: int | None = None
    #: Public suites only (`tier` is then the suite, "code" or "tools"): the BFCL category ("humaneval"
    #: for code), the failure class (None when passed; `no_call`, `wrong_function`, `bad_arguments_json`,
    #: `argument_mismatch` with its `parameter`, `leaked_markup`, `dropped_call`, `extra_call`,
    #: `server_error`, `reasoning_truncated` (every tier: cut while reasoning after the retry), and for code
    #: `wrong_answer`, `timeout`, `no_code`, `sandbox_unavailable`), the server's token usage, and
    #: the tool parser the server ran. Every task: `latency_s`, the wall-clock seconds of its requests;
    #: `grade_s`, those of the sandbox running the answer's code (None: no code ran).
    category: str | None = None
    failure: str | None = None
    parameter: str | None = None
    latency_s: float | None = None
    grade_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    parser: str | None = None
    #: Where each field above came from, and why one is null.
    sources: dict[str, str] = {}
    null_reasons: dict[str, str] = {}

    @property
    def task_s(self) -> float | None:
        """The task's seconds end to end: its requests and its code's sandbox run."""
        return None if self.latency_s is None else self.latency_s + (self.grade_s or 0.0)


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
    #: Policy `thermal` after a throttle-suspect probe: seconds added past the wait, and the rates of
    #: the short check probes run until one was back within the threshold (or max_seconds ran out).
    extended_s: float | None = None
    throttle_checks: list[float] = []
