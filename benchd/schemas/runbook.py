"""The runbook document: provenance facts, per-cell statistics, the Pareto view, and the runbook itself.

Persisted as JSON with `schema_version` (history beside RUNBOOK_SCHEMA_VERSION below); `results.runbook` builds,
writes and loads it."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct

from benchd.schemas.kld import KldCorpus, KldResult
from benchd.schemas.recheck import Fingerprint
from benchd.schemas.rows import EvalResult, Row, ThermalReading
from benchd.schemas.sweep import Deferred, Sweep


class MetricStats(Struct, kw_only=True, frozen=True):
    """One metric over a cell's ok probe rows. `ci95_*` is the order-statistic interval of the median
    and `ci95_coverage` its exact binomial coverage (>= 0.95)."""

    metric: str
    n: int
    n_null: int = 0
    median: float | None = None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    cv: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    ci95_coverage: float | None = None
    noisy: bool = False
    null_reasons: dict[str, str] = {}


class Trend(Struct, kw_only=True, frozen=True):
    """Monotone trend over a cell's probe series (probe order): the Mann–Kendall test and the
    Theil–Sen slope with its 95 % CI (Sen's interval from the Kendall variance)."""

    n: int
    s: int
    p_value: float
    method: str
    slope_per_probe: float
    slope_ci_low: float | None = None
    slope_ci_high: float | None = None
    #: slope × (n − 1) in % of the fitted line's first value: how far the series moved from start to end.
    drift_pct: float


#: The verdicts: a number to trust, a number too wide, a number that moved, too few probes to say.
VERDICTS: tuple[str, ...] = ("steady", "unsteady", "drifting", "too few")


class CellVerdict(Struct, kw_only=True, frozen=True):
    """The verdict on one cell's `metric`: `steady` (CI target met, no trend), `unsteady`
    (CI wider than the target: `ci_half_width_pct` says how wide), `drifting` (significant monotone
    trend larger than the target, even with the CI met), `too few` (fewer ok probes than the CI needs).
    `verdict` is null when the metric was never measured (`reason` says why)."""

    verdict: Literal["steady", "unsteady", "drifting", "too few"] | None
    metric: str
    n: int
    probes_used: int
    adaptive: bool
    target_ci_pct: float
    ci_half_width_pct: float | None = None
    trend: Trend | None = None
    throttle_suspects: int = 0
    invalidated: int = 0
    reason: str


class CellStats(Struct, kw_only=True, frozen=True):
    """Statistics per (candidate, context) over `kind == "probe"` rows; failures are counted, not hidden."""

    candidate: str
    runtime: str
    context: int
    n_ok: int
    n_failed: int
    n_aborted: int = 0
    #: Ok probes that generated fewer tokens than asked: counted here, kept out of the medians.
    n_short: int = 0
    prompt_tps: MetricStats
    gen_tps: MetricStats
    ttft_ms: MetricStats
    mem_peak_bytes: MetricStats
    #: Energy per generated token (null before energy was measured, and on machines without a counter).
    j_per_gen_token: MetricStats | None = None
    noisy: bool = False
    noisy_metrics: list[str] = []
    errors: list[str] = []
    verdict: CellVerdict | None = None
    #: Draft acceptance over the ok probes where a spec is configured (null otherwise).
    draft_acceptance: MetricStats | None = None


class Point(Struct, kw_only=True, frozen=True):
    """One candidate in one context: axis -> cell median (None = not measured), the median's 95 % CI
    per axis where the cell has enough probes, and the cell's verdict (null for per-candidate axes)."""

    candidate: str
    values: dict[str, float | None]
    ci95: dict[str, list[float]] = {}
    verdict: str | None = None


class NotCompared(Struct, kw_only=True, frozen=True):
    """An axis both sides measured that cannot reach a verdict at its size: it counts when different
    either way and blocks when its estimate favours the loser by more than its margin, else it is left
    out. `have` / `needed`: values a side (shared tasks for pass rates); `lever` what adds them."""

    reason: str
    have: int
    needed: int
    lever: str | None


class Domination(Struct, kw_only=True, frozen=True):
    """`by` dominates (docs/measuring.md#the-one-comparison): better on `better_on`, tied on `tied_on`, not
    worse one-sided on `not_worse_on` (unresolved two-sided); `verdicts` each compared axis's text at `alpha`
    split over the axes (Bonferroni), `text` the pair's one line."""

    by: str
    better_on: list[str]
    skipped_axes: list[str]
    tied_on: list[str] = []
    alpha: float | None = None
    verdicts: dict[str, str] = {}
    text: str | None = None
    #: Axes both measured that could not reach a verdict at their size (not counted against `by`).
    not_compared: dict[str, NotCompared] = {}
    not_worse_on: list[str] = []


class Tie(Struct, kw_only=True, frozen=True):
    """Two candidates neither of which dominates the other and not a trade-off: every compared axis's
    verdict, read as `pair[0]` against `pair[1]` (a `different` axis beside an unresolved one is shown,
    not hidden), and the pair's one line (`not dominated: unresolved on ...`)."""

    pair: list[str]
    axes: dict[str, str]
    text: str | None = None
    #: "unresolved" (an axis could not be called yet) or "tied"; null in runbooks written before the field.
    status: Literal["tied", "unresolved"] | None = None
    #: The compared axes that keep the pair undecided, the axes not compared that do (their estimate
    #: favours one side beyond the margin), the axes not compared at their size, and those the side with
    #: wins is shown not worse on (unresolved two-sided; `Domination.not_worse_on`).
    unresolved_on: list[str] = []
    blocked_on: list[str] = []
    not_compared: dict[str, NotCompared] = {}
    not_worse_on: list[str] = []
    #: Per unresolved axis, how many more of its lever would give an even chance of deciding it (its sentence says it).
    rounds_to_resolve: dict[str, int] = {}


class TradeOff(Struct, kw_only=True, frozen=True):
    """Two candidates each better than the other on some axis, so both may stay on the frontier: every
    compared axis's verdict, read as `pair[0]` against `pair[1]`, and the pair's one line (`A is better on
    generation, B on peak memory: a trade-off`)."""

    pair: list[str]
    axes: dict[str, str]
    text: str


class SkippedPair(Struct, kw_only=True, frozen=True):
    """Axes that could not be compared between two candidates (null, or one value, for one or both), why."""

    pair: list[str]
    axes: list[str]
    why: dict[str, str] = {}


class ContextPareto(Struct, kw_only=True, frozen=True):
    context: int
    frontier: list[str]
    dominated: dict[str, list[Domination]]
    excluded: dict[str, str]
    skipped_pairs: list[SkippedPair]
    points: list[Point]
    ties: list[Tie] = []
    #: Pairs that trade one axis for another (empty in runbooks written before the field).
    tradeoffs: list[TradeOff] = []
    #: Frontier candidates whose cell verdict is not `steady`: never silently on the frontier.
    caveats: dict[str, str] = {}
    #: The family-wise α of the pair comparisons (each pair splits it over the axes it compares).
    alpha: float | None = None
    #: Pairs judged in this context (each at `alpha`: no correction across pairs).
    pairs_compared: int | None = None
    #: Where `alpha` comes from: "the stop rule's" (a sweep that stopped at planned looks) or "fixed".
    alpha_source: str | None = None
    #: The axes α was split over at least (the sweep's planned count).
    planned_axes: int | None = None


class MachineInfo(Struct, kw_only=True):
    hardware_model: str | None = None
    chip: str | None = None
    cpu_model: str | None = None
    cores_logical: int | None = None
    cores_physical: int | None = None
    memory_bytes: int | None = None
    os: str | None = None
    os_version: str | None = None
    kernel: str | None = None
    arch: str | None = None
    power_source: str | None = None
    battery_percent: float | None = None
    sources: dict[str, str] = {}
    null_reasons: dict[str, str] = {}


class BenchdInfo(Struct, kw_only=True):
    version: str
    python: str
    executable: str


class ModelInfo(Struct, kw_only=True):
    """A model file or an MLX model directory, identified by size and content hash."""

    path: str
    kind: str  # "file" | "dir" | "missing" | "external" (`path` is then the model id requests name)
    bytes: int | None = None
    sha256: str | None = None
    sha256_method: str | None = None
    files: int | None = None
    null_reasons: dict[str, str] = {}
    #: The licence the model's own files declare (a GGUF's `general.license`, an MLX dir's README.md
    #: front matter `license:`), and where it was read; null with a reason when they declare none.
    license: str | None = None
    license_source: str | None = None


class CpuAffinity(Struct, kw_only=True, frozen=True):
    """The sweep's `pin_client`: the cores the server and benchd's probe client (the event loop) ran
    on, or why they shared every core (`reason`). `server_cpus` is read back from the server's pid."""

    requested: bool
    applied: bool
    server_threads: int | None = None
    server_cpus: list[int] = []
    client_cpus: list[int] = []
    source: str | None = None
    reason: str | None = None


class ExternalServer(Struct, kw_only=True):
    """A server benchd does not start (`runtime = "openai"`), as it was detected: what answers at `url`
    (`kind`: "llama-server", "mlx_lm.server", "mlx_vlm.server", "ollama", "lm-studio" or "OpenAI-compatible,
    unknown"), its version, the models it lists and the context it says it serves (llama-server: `n_ctx`
    per slot and `total_slots`). `detected_by` lists the requests that told; every fact names its source
    and every null its reason. benchd never starts, restarts or stops it."""

    url: str
    kind: str
    version: str | None = None
    model_ids: list[str] = []
    slot_ctx: int | None = None
    total_slots: int | None = None
    chat_format: str | None = None
    pid: int | None = None
    process: str | None = None
    detected_by: list[str] = []
    started_by_benchd: bool = False
    sources: dict[str, str] = {}
    null_reasons: dict[str, str] = {}


class CandidateProvenance(Struct, kw_only=True):
    """One candidate's model (size + sha256), draft model, and the server that ran it."""

    candidate: str
    runtime: str
    model: ModelInfo
    draft_model: ModelInfo | None = None
    binary: str | None = None
    server_version: str | None = None
    server_version_source: str | None = None
    affinity: CpuAffinity | None = None  # from the last server_ready event; null (with a reason) before it existed
    #: Environment variables benchd passed to the server on top of a scrubbed environment (its own and the
    #: candidate's `env`; secret-looking values redacted), and the inherited runtime knobs it removed.
    server_env: dict[str, str] = {}
    env_removed: list[str] = []
    null_reasons: dict[str, str] = {}
    #: What the speed depends on, read from files when the runbook was written (None before rechecks existed).
    fingerprint: Fingerprint | None = None
    #: An external candidate's server as detected at its first attach (`server_ready` event); None for
    #: the servers benchd starts.
    external: ExternalServer | None = None


class PromptsInfo(Struct, kw_only=True):
    """Hash of the prompt corpus and template: two runbooks with equal hashes used the same prompts."""

    corpus_sha256: str | None = None
    template_sha256: str | None = None
    source: str | None = None
    corpus: dict[str, Any] = {}
    null_reasons: dict[str, str] = {}


class EnergyInfo(Struct, kw_only=True):
    """Which energy counter the job read, how finely, and what it covers (from the job's server_ready events).

    `scope` says the counter is the whole package/SoC: energy figures are the system's, shared with
    everything else running, never the server's alone."""

    source: str | None = None
    available: bool = False
    reason: str | None = None
    granularity: str | None = None
    scope: str | None = None
    recorded_by: str | None = None


class SleepInfo(Struct, kw_only=True):
    """Whether the machine was kept awake while the job ran, per start/resume (from the job's events)."""

    prevented: bool | None = None
    methods: list[str] = []
    reasons: list[str] = []
    source: str | None = None


#: Version of the runbook JSON. Change history (newest last; never edit an entry):
#:   1 (2026-11-30) first version: job, sweep, provenance (machine, benchd, per-candidate model
#:     size/sha256 and server version), cooldowns as they happened, deferred axes (declared and
#:     automatic), rows, per-cell statistics, sustained results, evals, Pareto per context.
RUNBOOK_SCHEMA_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)

# ------------------------------------------------------------------------------------------ structs


class JobInfo(Struct, kw_only=True):
    id: str
    name: str
    state: str
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None


class Provenance(Struct, kw_only=True):
    collected_at: str
    machine: MachineInfo
    benchd: BenchdInfo
    candidates: list[CandidateProvenance]
    prompts: PromptsInfo
    sleep: SleepInfo = msgspec.field(default_factory=SleepInfo)
    energy: EnergyInfo = msgspec.field(default_factory=EnergyInfo)


class CooldownHappened(Struct, kw_only=True):
    """A `cooldown_finished` event as it happened (payload verbatim: policy, waited_s, reason, ...)."""

    seq: int
    time: str
    payload: dict[str, Any]


class DeferredAxes(Struct, kw_only=True):
    declared: list[Deferred]
    automatic: list[Deferred]


class SustainedResult(Struct, kw_only=True):
    candidate: str
    status: str
    gen_tokens: int | None = None
    sustain_ratio: float | None = None
    window_tps: list[float] | None = None
    thermal_before: ThermalReading | None = None
    thermal_after: ThermalReading | None = None
    error: str | None = None
    null_reasons: dict[str, str] = {}


class RunbookFlag(Struct, kw_only=True):
    """Something a reader must know before comparing a candidate's cells (a layer split that changed
    between contexts, thinking on for some candidates and off for others, probes that ended short)."""

    candidate: str | None
    flag: str
    detail: str
    context: int | None = None  # the one context it is about (thinking_mixed), else null


class EvalCategory(Struct, kw_only=True):
    """One BFCL category of a candidate's tools run: counts, and the pass rate over completed tasks."""

    passed: int
    completed: int
    errors: int
    total: int
    pass_rate: float | None = None


class EvalSummary(Struct, kw_only=True):
    candidate: str
    tier: str
    passed: int
    total: int
    #: passed / completed: tasks with no answer to grade (server errors) are out of it, counted in `errors`
    #: (None when no task completed).
    pass_rate: float | None
    #: Tasks graded (total − errors) and completed / total; `failed` = completed − passed.
    completed: int | None = None
    failed: int | None = None
    errors: int = 0
    completion_rate: float | None = None
    #: Tools suite: per BFCL category, and BFCL's aggregate as BFCL computes it (the unweighted mean of the
    #: category pass rates, irrelevance apart) with its label; `irrelevance_rate` the irrelevance category's.
    categories: dict[str, EvalCategory] = {}
    aggregate: float | None = None
    aggregate_label: str | None = None
    irrelevance_rate: float | None = None
    unsandboxed: int = 0
    #: Clopper–Pearson exact 95 % interval of the pass rate.
    ci_low: float | None = None
    ci_high: float | None = None
    #: Failure class -> count (public suites).
    failures: dict[str, int] = {}
    #: Public suites: how many tasks the suite planned, and whether fewer ran (eval_budget_s) with why.
    planned: int | None = None
    partial: bool = False
    partial_reason: str | None = None
    #: Medians per task over the suite (null when no task reported them); `task_s_median`: requests + sandbox.
    latency_s_median: float | None = None
    task_s_median: float | None = None
    completion_tokens_median: float | None = None
    reasoning_tokens_total: int | None = None
    #: The tool parser the candidate's server ran (tools suite).
    parser: str | None = None


class EvalSuiteSource(Struct, kw_only=True):
    """Where a public suite's tasks came from: the package, its version, the wheel's sha256, its license
    as the package states it, the data files read and the task ids used (in order)."""

    suite: str
    package: str
    version: str
    file: str
    sha256: str
    license: str
    data_files: list[str]
    task_ids: list[str]


class SweepDrift(Struct, kw_only=True):
    """The drift sentinel: the sweep's first cell run again at the end, its median over the first run's,
    judged by the one comparison (margin ±`target_pct`): `verdict` and its `text` at `alpha`, `p_value`
    its rank guard's p. `drifted` is true when the comparison says different, false when tied, null
    when unresolved."""

    candidate: str
    context: int
    metric: str
    n_first: int
    n_sentinel: int
    first_median: float | None = None
    sentinel_median: float | None = None
    ratio: float | None = None
    drift_pct: float | None = None
    p_value: float | None = None
    target_pct: float
    drifted: bool | None = None
    verdict: str | None = None
    text: str | None = None
    alpha: float | None = None
    summary: str
    null_reasons: dict[str, str] = {}


class ReadyStart(Struct, kw_only=True):
    """One server start's time to ready (from its `server_ready` event). `purpose`: "sweep" (a start
    the probes needed) or "ready" (a `[ready] starts` start, stopped once ready). `cache`: the model
    files' page-cache state just before the spawn (cold / warm / partial); `cold_requested`: their pages
    were asked to drop first; `ready_s` is null when the server was stopped during the start, and its
    source names a stall (`stalled_s`, `server_stopped_s`). `sources` and `null_reasons` per figure."""

    candidate: str
    time: str
    purpose: str
    ready_s: float | None = None
    load_s: float | None = None
    cache: str | None = None
    cold_requested: bool = False
    stalled_s: float | None = None
    server_stopped_s: float | None = None
    resident_before: float | None = None
    sources: dict[str, str] = {}
    null_reasons: dict[str, str] = {}


class ReadySummary(Struct, kw_only=True):
    """A candidate's time to ready: median (min, max, n) of `ready_s` over its warm and its cold starts,
    and the median `load_s`; null with the reason where no such start was made or measured."""

    candidate: str
    warm_n: int = 0
    warm_median_s: float | None = None
    warm_min_s: float | None = None
    warm_max_s: float | None = None
    cold_n: int = 0
    cold_median_s: float | None = None
    cold_min_s: float | None = None
    cold_max_s: float | None = None
    load_median_s: float | None = None
    null_reasons: dict[str, str] = {}


class ContextStop(Struct, kw_only=True):
    """Why one context's rounds ended (the engine's `context_finished`)."""

    context: int
    rounds: int
    order: str
    why: str


class SweepDesign(Struct, kw_only=True):
    """Which order ran and why (benchd.engine.plan): `order` is what the comparisons pair by;
    `asked` the sweep's field (null: the default); `changed` a fallback to blocked during the sweep
    (the warmed servers' measured footprints over the memory budget), with its reason."""

    order: str
    asked: str | None = None
    why: str
    seed: int | None = None
    plan: str
    drift_protected: bool
    budget_bytes: int | None = None
    budget_source: str | None = None
    changed: list[str] = []
    contexts: list[ContextStop] = []


class RaceDrop(Struct, kw_only=True):
    """A candidate that left the race (the job's `candidate_dropped` event): at `context` after `round`
    rounds, `by` the candidates that dominate it (`["benchd"]` when it left without one, `why` says so),
    `better_on` each dominator's axes, `texts` the dominance verdicts, `alpha` the look's α."""

    candidate: str
    context: int
    round: int
    by: list[str]
    better_on: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    alpha: float | None = None
    why: str = ""

    def left(self) -> str:
        """When it left, in the words every reader uses."""
        return f"left the race at context {self.context} after round {self.round}"


class RaceSettled(Struct, kw_only=True):
    """A candidate whose rounds of `context` ended at the look after `round` rounds while others went on
    (the job's `candidate_settled` event): each pair of it resolved or not resolvable in the rounds left,
    `pairs` the other candidate -> the look's words, `alpha` the look's α. It stayed in the race."""

    candidate: str
    context: int
    round: int
    alpha: float | None = None
    pairs: dict[str, str] = {}


class Runbook(Struct, kw_only=True):
    """The runbook JSON (schema version 1). `outcome` is the job's state when the runbook was written."""

    schema_version: int
    id: str
    generated_at: str
    outcome: str
    job: JobInfo
    sweep: Sweep
    provenance: Provenance
    cooldowns: list[CooldownHappened]
    deferred: DeferredAxes
    rows: list[Row]
    cells: list[CellStats]
    sustained: list[SustainedResult]
    evals: list[EvalResult]
    eval_summary: list[EvalSummary]
    pareto: list[ContextPareto]
    flags: list[RunbookFlag] = []
    #: The drift sentinel (null when `sentinel` is off, with the reason in `drift_null_reason`).
    drift: SweepDrift | None = None
    drift_null_reason: str | None = None
    #: Time to ready: every server start, and per candidate its warm and cold medians.
    ready: list[ReadyStart] = []
    ready_summary: list[ReadySummary] = []
    #: The public eval suites' provenance (one per suite in `sweep.evals`).
    eval_sources: list[EvalSuiteSource] = []
    #: The measuring order and why it ran (null in runbooks written before rounds existed).
    design: SweepDesign | None = None
    #: KL divergence against `sweep.kld.reference`: per candidate and `[kld]` context, and the text scored.
    kld: list[KldResult] = []
    kld_corpus: KldCorpus | None = None
    #: Racing: the candidates that left the race, when, by whom and on which axes (empty: nobody left).
    race: list[RaceDrop] = []
    #: Racing: the candidates whose rounds of a context ended early while others went on (empty: none).
    race_settled: list[RaceSettled] = []
