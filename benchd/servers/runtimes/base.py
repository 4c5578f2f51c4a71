"""What every runtime adapter provides (its facts and eight stateless parts), and the pieces they share:
the streamed chat request body, the reserved-args check, `Normalized`. See docs/architecture.md
("A new runtime adapter")."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypedDict, cast

import msgspec

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate, Row, Sampling, Sweep, Vision
from benchd.schemas.json import JSONObject, JSONValue
from benchd.servers.runtimes import environment, flags, tokens
from benchd.servers.runtimes.environment import ServerEnv
from benchd.servers.runtimes.http import Readiness, http_get, http_post_json, json_health
from benchd.servers.runtimes.tokens import ClientMetrics
from benchd.servers.runtimes.vision import VisionFacts

__all__ = [
    "CTX_MARGIN_TOKENS",
    "Checks",
    "Images",
    "Launcher",
    "Normalized",
    "Parallel",
    "ParallelStart",
    "Part",
    "Reader",
    "Readiness",
    "RenderItem",
    "Requests",
    "RuntimeAdapter",
    "ServerEnv",
    "SessionStart",
    "Sessions",
    "Tools",
    "http_get",
    "http_post_json",
    "json_health",
]

#: A conversation to render with the chat template, and a text (the answer) appended after the rendering.
RenderItem = tuple[list[dict[str, str]], str]


@dataclass(frozen=True)
class SessionStart:
    """How a runtime serves session turns with its prompt cache on: the `candidate` to start, `own_start`
    (the cold probes' server cannot serve them), `notes` (recorded in `sources["prompt_cache"]`)."""

    candidate: Candidate
    own_start: bool
    notes: str


@dataclass(frozen=True)
class ParallelStart:
    """The server start of one concurrency level N: the candidate with its slot flags, the context size,
    what was set (`notes`), and `serial`: why it serves N one at a time (None: it batches)."""

    candidate: Candidate
    ctx_size: int | None
    notes: str
    serial: str | None = None

@dataclass(frozen=True)
class PrefixCacheRule:
    """What a runtime's prompt cache can hand the next session turn. `block_tokens`: the prefix is reused in
    whole blocks of this many tokens; `keeps_generated`: False when only the prompt's K/V stays cached;
    `source`: where that was read."""

    block_tokens: int = 1
    keeps_generated: bool = True
    source: str = ""


class DraftMetrics(TypedDict, total=False):
    """The draft figures `Reader.draft_fields` gives `Normalized`, named like its fields."""

    draft_n: int
    draft_accepted: int
    draft_acceptance: float


class DraftFigures(DraftMetrics, total=False):
    """`DraftMetrics` with their `sources` and `null_reasons` (popped and merged by the caller)."""

    sources: dict[str, str]
    null_reasons: dict[str, str]


@dataclass(frozen=True)
class ChatSettings:
    """What a probe's request asks for beside its prompt; `of(sweep)` is the sweep's, for every probe kind."""

    max_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    thinking: str = "default"
    run_to_length: bool = True

    @classmethod
    def of(cls, sweep: Sweep, max_tokens: int | None = None, *, to_length: bool = False) -> ChatSettings:
        """The sweep's settings (`max_tokens` default `gen_tokens`); `to_length` overrides its EOS rule."""
        return cls(max_tokens=sweep.gen_tokens if max_tokens is None else max_tokens, sampling=sweep.sampling,
                   thinking=sweep.thinking, run_to_length=to_length or sweep.ignore_eos)


#: Margin on `context + gen_tokens` when an adapter sizes the context: template tokens, the prompt builder's 1 %.
CTX_MARGIN_TOKENS = 64


@dataclass(frozen=True)
class Normalized:
    """One probe's metrics in runtime-independent form, named like `schemas.Row`'s fields: every non-null
    metric has its source in `sources`, every expected null a reason in `null_reasons`."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    gen_tokens: int | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    gen_tps_client: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    ttfat_ms: float | None = None
    reasoning_tokens: int | None = None
    thinking: str | None = None
    draft_n: int | None = None
    draft_accepted: int | None = None
    draft_acceptance: float | None = None
    server_peak_memory_bytes: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    null_reasons: dict[str, str] = field(default_factory=dict)

    def row_fields(self) -> dict[str, object]:
        """The fields `schemas.Row` knows, ready for `Row(**fields, job=..., ...)`."""
        known = set(Row.__struct_fields__)
        return {k: v for k, v in dataclasses.asdict(self).items() if k in known}


def json_number(value: object) -> float | None:
    """`value` as a float when it is a JSON number (not a bool), else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


class Part:
    """One stateless side of a runtime's adapter; the runtime's facts and other parts via `self.runtime`."""

    def __init__(self, runtime: RuntimeAdapter) -> None:
        self.runtime = runtime


class Checks(Part):
    """What a candidate may ask of this runtime (reserved flags, refused values, spec kinds, tune matrix)."""

    def pinned_build(self, candidate: Candidate) -> bool:
        """Whether the candidate runs the build `flag_values` describes (not a `binary` of its own)."""
        return candidate.binary is None

    def value_problem(self, candidate: Candidate, flag: str, value: str | int | bool) -> str | None:
        """Why the pinned build refuses `flag value` (a matrix value), or None."""
        rt = self.runtime
        return flags.value_problem(rt.flag_values, flag, value) if self.pinned_build(candidate) else None

    def tune_matrix(self, model: str, binary: str | None, cores: int
                    ) -> tuple[dict[str, Sequence[str | bool]], list[str]]:
        """(the `benchctl tune` matrix for this model and machine, why each key); none by default."""
        return {}, [f"{self.runtime.name}: no flags to tune known to benchd"]

    def combination_problems(self, candidate: Candidate) -> list[BenchdError]:
        """Flags the pinned build refuses together (each alone is fine); none by default."""
        return []

    def reserved_flag(self, arg: str) -> str | None:
        """The reserved flag `arg` spells (`--flag`, `--flag=value`, and with `abbreviates` any prefix of
        `--flag` and a bare `--`, after which benchd's own flags would be positionals), or None."""
        rt = self.runtime
        key = arg.split("=", 1)[0]
        if key in rt.reserved_args:
            return key
        if rt.abbreviates and key.startswith("--"):
            if key == "--":
                return "--"
            return next((f for f in rt.reserved_args if f.startswith("--") and f.startswith(key)), None)
        return None

    def validate(self, candidate: Candidate) -> list[BenchdError]:
        """Everything wrong with a candidate for this runtime, each naming the field (empty: fine)."""
        rt = self.runtime
        errors: list[BenchdError] = []
        if self.pinned_build(candidate):
            errors += flags.args_problems(rt.flag_values, candidate)
        errors += self.combination_problems(candidate)
        for i, arg in enumerate(candidate.args):
            flag = self.reserved_flag(arg)
            if flag == "--":
                errors.append(BenchdError(
                    "reserved_arg", f"candidate {candidate.id!r}: {rt.name} argument '--' would turn benchd's "
                    "own flags (which follow the candidate's args) into positional arguments",
                    f"$.candidates[{candidate.id}].args[{i}]"))
            elif flag is not None:
                spelt = arg.split("=", 1)[0]
                how = "" if spelt == flag else f" ({spelt!r} is how {rt.name}'s parser abbreviates {flag!r})"
                errors.append(
                    BenchdError(
                        "reserved_arg",
                        f"candidate {candidate.id!r}: {rt.name} argument {flag!r} is set by benchd{how}; "
                        f"{rt.reserved_args[flag]}",
                        f"$.candidates[{candidate.id}].args[{i}]",
                    )
                )
        spec = candidate.spec
        if spec is not None:
            if spec.kind not in rt.spec_kinds:
                supported = ", ".join(rt.spec_kinds) or "none"
                errors.append(
                    BenchdError(
                        "unsupported_spec",
                        f"candidate {candidate.id!r}: {rt.name} does not support spec kind "
                        f"{spec.kind!r}; supported: {supported}",
                        f"$.candidates[{candidate.id}].spec.kind",
                    )
                )
            elif spec.draft_model is None and spec.kind not in rt.spec_kinds_without_draft:
                errors.append(
                    BenchdError(
                        "missing_draft_model",
                        f"candidate {candidate.id!r}: spec kind {spec.kind!r} needs `spec.draft_model`",
                        f"$.candidates[{candidate.id}].spec.draft_model",
                    )
                )
        if candidate.mmproj is not None and not rt.takes_mmproj:
            errors.append(BenchdError(
                "unsupported_mmproj", f"candidate {candidate.id!r}: `mmproj` is a llama-server projector; "
                f"{rt.name} reads its vision model from the model dir", f"$.candidates[{candidate.id}].mmproj"))
        if candidate.vision:
            facts = rt.images.vision_facts(candidate)
            if not facts.ok:
                errors.append(BenchdError(
                    "no_vision_model", f"candidate {candidate.id!r} says vision = true but has no vision model: "
                    f"{facts.reason}", f"$.candidates[{candidate.id}].vision"))
        return errors


class Launcher(Part):
    """Starting the server and describing it; a subclass provides `command`, `argv`, `check_ready`, `version`."""

    def command(self, candidate: Candidate, cache_dir: Path) -> tuple[list[str], str]:
        """(the command prefix, how found: candidate|env|path|cache). May run a subprocess: off the loop."""
        raise NotImplementedError

    def argv(self, candidate: Candidate, *, command: list[str], port: int, ctx_size: int | None) -> list[str]:
        """The whole command line of a start: `command`, the candidate's args, then benchd's own flags."""
        raise NotImplementedError

    def restarts_per_context(self, candidate: Candidate) -> bool:
        """Whether the server must restart for every context of the grid (its context size changes)."""
        return False

    def server_ctx_size(self, candidate: Candidate, context: int, gen_tokens: int) -> int | None:
        """The context size to start the server with for this cell; None = the server sizes itself."""
        return None

    def env(self, candidate: Candidate, config: Config) -> dict[str, str]:
        """The child's whole environment (see `server_env`)."""
        return self.server_env(candidate, config).env

    def server_env(self, candidate: Candidate, config: Config) -> ServerEnv:
        """Ours minus `env_scrub`, plus `env_ours`, plus the candidate's `env` (wins), with its record."""
        return environment.build(self.runtime.env_scrub, self.env_ours(config), candidate.env, os.environ)

    def env_ours(self, config: Config) -> dict[str, str]:
        """Variables benchd sets for this runtime (recorded beside the candidate's)."""
        return {}

    def fit_state(self, candidate: Candidate) -> tuple[str | None, str]:
        """(`--fit` as the server runs it, its source) or (None, why there is none)."""
        return None, f"{self.runtime.name} has no --fit (it does not move layers between devices)"

    def layer_split(self, candidate: Candidate, command: list[str], load_log: str) -> tuple[str | None, str]:
        """(the split the server reported, its source) or (None, why not). May run a subprocess."""
        return None, f"{self.runtime.name} has no layer split: MLX runs the whole model on its default device"

    def memory_note(self, candidate: Candidate) -> str | None:
        """How the runtime maps the model, printed beside memory figures (RSS depends on it)."""
        return None

    def server_threads(self, candidate: Candidate) -> tuple[int | None, str]:
        """(compute threads the server will use, how known), or (None, why not); `pin_client` uses it."""
        return None, f"{self.runtime.name} sets no thread count benchd can read"

    async def check_ready(self, base_url: str) -> Readiness:
        """Whether the server at `base_url` answers requests yet (`health_path` for the servers benchd starts)."""
        raise NotImplementedError

    async def version(self, base_url: str, command: list[str]) -> str | None:
        """The running server's version as recorded in every row (`version_source` says where from)."""
        raise NotImplementedError

    def installed_version(self, command: list[str]) -> str | None:
        """What `version()` reports, read offline (None: cannot tell). May run a subprocess."""
        return None

    def installed_packages(self, command: list[str]) -> dict[str, str]:
        """Package versions the server's speed depends on (MLX venvs); empty for a single binary."""
        return {}


class Requests(Part):
    """What benchd sends: path, headers, bodies, the `model` value, and token counts."""

    def request_path(self) -> str:
        """The streamed chat endpoint's path."""
        return "/v1/chat/completions"

    def request_headers(self, candidate: Candidate | None = None) -> dict[str, str]:
        """The headers of a streamed request to the candidate's server (with `auth_headers`)."""
        auth = self.auth_headers(candidate) if candidate is not None else {}
        return {"Content-Type": "application/json", "Accept": "text/event-stream", **auth}

    def auth_headers(self, candidate: Candidate) -> dict[str, str]:
        """Headers that authorize a request (an external server's API key); none for a server benchd starts."""
        return {}

    def request_body(
        self,
        *,
        model: str,
        prompt: str,
        max_tokens: int,
        sampling: Sampling,
        thinking: str = "default",
    ) -> dict[str, object]:
        """A streamed chat completion with usage, greedy/seeded as the sweep says; `thinking` "on"/"off"
        sends `enable_thinking` where this runtime reads it, "default" sends nothing."""
        body: dict[str, object] = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "seed": sampling.seed,
        }
        if thinking != "default":
            if self.runtime.thinking_top_level:
                body["enable_thinking"] = thinking == "on"
            else:
                body["chat_template_kwargs"] = {"enable_thinking": thinking == "on"}
        body.update(self.runtime_fields())
        return body

    def runtime_fields(self) -> JSONObject:
        """Fields every chat request to this runtime carries (llama-server: `cache_prompt`)."""
        return {}

    def probe_body(self, candidate: Candidate, *, prompt: str, settings: ChatSettings) -> dict[str, object]:
        """The streamed body of every probe kind: `request_body` with the candidate's `model` value, plus
        `length_fields` (`settings.run_to_length`)."""
        body = self.request_body(model=self.request_model(candidate), prompt=prompt, max_tokens=settings.max_tokens,
                                 sampling=settings.sampling, thinking=settings.thinking)
        body.update(self.length_fields(candidate, settings.run_to_length))
        return body

    def answer_body(
        self, *, model: str, prompt: str, max_tokens: int, sampling: Sampling, thinking: str = "default"
    ) -> dict[str, object]:
        """A non-streamed chat completion for an eval task: the model may stop on its own."""
        body = self.request_body(model=model, prompt=prompt, max_tokens=max_tokens, sampling=sampling,
                                 thinking=thinking)
        body["stream"] = False
        body.pop("stream_options", None)
        return body

    def length_fields(self, candidate: Candidate, run_to_length: bool) -> JSONObject:
        """Request fields that make a probe generate exactly `max_tokens` (or, False, let it stop)."""
        return {}

    def request_model(self, candidate: Candidate) -> str:
        """The `model` value requests carry: the candidate's `request_model`, else the model path."""
        return candidate.request_model or candidate.model

    def encode_body(self, body: Mapping[str, object]) -> bytes:
        """The request body's JSON bytes."""
        return msgspec.json.encode(body)

    async def count_tokens(self, base_url: str, text: str) -> int | None:
        """Exact prompt tokens via the server's tokenizer, or None (calibrate from usage instead)."""
        return None

    async def count_request_tokens(self, base_url: str, body: Mapping[str, object]) -> int | None:
        """A chat request's prompt tokens (images included) without running it, or None where the
        server has no such count (then the image tokens come from the two probes' usage)."""
        return None

    def local_token_counter(self, candidate: Candidate) -> Callable[[str], Awaitable[int]] | None:
        """A `count_tokens(text)` that needs no server (e.g. the model dir's tokenizer), or None."""
        return None

    async def rendered_tokens(self, base_url: str, candidate: Candidate, command: list[str],
                              items: list[RenderItem], thinking: str) -> list[list[int]]:
        """The token ids of each item as the server would see it: the conversation rendered by the
        model's chat template with the generation prompt (`thinking` as requests send it), plus the
        appended text. Raises `RuntimeError` naming why when this runtime cannot tell."""
        raise RuntimeError(f"{self.runtime.name} cannot render and tokenize a conversation")


class Reader(Part):
    """What the server answered, as `Normalized` (a subclass provides `normalize`), and why a probe ended short."""

    def normalize(self, result: ProbeResult, *, spec_configured: bool) -> Normalized:
        """One probe's metrics from its final chunk and the client's stream window."""
        raise NotImplementedError

    def short_reason(self, candidate: Candidate, *, asked: int, got: int, finish_reason: str | None,
                     run_to_length: bool) -> str:
        """Why a probe generated `got` < `asked` tokens, for its row."""
        why = "the sweep lets the model stop (ignore_eos = false)" if not run_to_length else self.eos_gap(candidate)
        return f"generated {got} of {asked} tokens (finish_reason {finish_reason or 'none'}): {why}"

    def eos_gap(self, candidate: Candidate) -> str:
        """Why EOS could end a probe although benchd asked to run to length."""
        return f"{self.runtime.name} ended the stream before max_tokens"

    def acceptance_check(self, before: Mapping[str, float], after: Mapping[str, float] | None) -> dict[str, str]:
        """A cross-check of draft acceptance from server counters diffed over a probe (source -> text);
        empty for runtimes without such counters (`reads_counters` False)."""
        return {}

    def normalize_timings(self, result: ProbeResult, *, spec_configured: bool) -> Normalized:
        """The llama.cpp-style final chunk (`usage` + `timings`) that llama-server and mlx_vlm.server
        both send: rates from `server:timings`, the client window recorded beside them."""
        name = self.runtime.name
        timings: Mapping[str, object] = result.timings or {}
        prompt_tokens, completion_tokens, cached = self.usage_tokens(result)
        sources: dict[str, str] = {}
        reasons: dict[str, str] = {}
        if prompt_tokens is not None:
            sources["prompt_tokens"] = "server:usage"
        else:
            reasons["prompt_tokens"] = "no usage in the final chunk"
        cache_n = _int(timings.get("cache_n"))
        if cache_n is not None:
            cached, sources["cached_tokens"] = cache_n, "server:timings cache_n"
        elif cached is not None:
            sources["cached_tokens"] = "server:usage prompt_tokens_details"
        else:
            reasons["cached_tokens"] = "no cache_n in timings"
        gen_tokens = completion_tokens if completion_tokens is not None else _int(timings.get("predicted_n"))
        if gen_tokens is not None:
            sources["gen_tokens"] = "server:usage" if completion_tokens is not None else "server:timings"
        else:
            reasons["gen_tokens"] = "no usage or timings in the final chunk"
        rates: dict[str, float | None] = {}
        for key, raw in (("prompt_tps", "prompt_per_second"), ("gen_tps", "predicted_per_second")):
            value = json_number(timings.get(raw))
            rates[key] = value if value else None
            if value:
                sources[key] = "server:timings"
            else:
                reasons[key] = f"{name} sent no (or zero) timings.{raw}"
        client = self.client_timing(result, gen_tokens)
        draft = self.draft_fields(timings, spec_configured=spec_configured, runtime=name, source="server:timings")
        for part in (client, draft):
            sources.update(part.pop("sources"))
            reasons.update(part.pop("null_reasons"))
        return Normalized(prompt_tokens=prompt_tokens, cached_tokens=cached, gen_tokens=gen_tokens,
                          prompt_tps=rates["prompt_tps"], gen_tps=rates["gen_tps"], sources=sources,
                          null_reasons=reasons, **cast(ClientMetrics, client), **cast(DraftMetrics, draft))

    def normalize_usage(self, result: ProbeResult, *, spec_configured: bool, no_timings: str,
                        no_prompt_rate: str, no_cache_details: str, no_draft_counts: str) -> Normalized:
        """The generic OpenAI stream (no `timings`): tokens from `usage`, the generation rate from the
        client's stream window, no prompt rate; each `no_*` text is the reason its figure is null."""
        prompt_tokens, completion_tokens, cached = self.usage_tokens(result)
        sources: dict[str, str] = {}
        reasons: dict[str, str] = {"prompt_tps": no_prompt_rate}
        if prompt_tokens is not None:
            sources["prompt_tokens"] = "server:usage"
        else:
            reasons["prompt_tokens"] = "no usage in the final chunk"
        gen_tokens = completion_tokens
        if gen_tokens is not None:
            sources["gen_tokens"] = "server:usage"
        else:
            gen_tokens = result.content_chunks
            sources["gen_tokens"] = "client:content-chunks"
        if cached is not None:
            sources["cached_tokens"] = "server:usage prompt_tokens_details"
        else:
            reasons["cached_tokens"] = no_cache_details
        client = self.client_timing(result, gen_tokens)
        sources.update(client.pop("sources"))
        reasons.update(client.pop("null_reasons"))
        gen_tps = client["gen_tps_client"]
        if gen_tps is not None:
            sources["gen_tps"] = sources["gen_tps_client"]
        else:
            reasons["gen_tps"] = f"{no_timings}, and {reasons['gen_tps_client']}"
        for key in ("draft_n", "draft_accepted", "draft_acceptance"):
            reasons[key] = no_draft_counts if spec_configured else "no spec configured"
        return Normalized(prompt_tokens=prompt_tokens, cached_tokens=cached, gen_tokens=gen_tokens, gen_tps=gen_tps,
                          sources=sources, null_reasons=reasons, **cast(ClientMetrics, client))

    #: Window accounting and thinking figures live in `tokens` (shared by every adapter's normalize).
    client_timing = staticmethod(tokens.client_timing)

    @staticmethod
    def draft_fields(
        timings: Mapping[str, object] | None, *, spec_configured: bool, runtime: str, source: str
    ) -> DraftFigures:
        """draft_n / accepted / acceptance from llama.cpp-style timings, only when a spec is configured."""
        out: DraftFigures = {"sources": {}, "null_reasons": {}}
        if not spec_configured:
            for key in ("draft_n", "draft_accepted", "draft_acceptance"):
                out["null_reasons"][key] = "no spec configured"
            return out
        n = _int((timings or {}).get("draft_n"))
        acc = _int((timings or {}).get("draft_n_accepted"))
        if n is None or acc is None:
            for key in ("draft_n", "draft_accepted", "draft_acceptance"):
                out["null_reasons"][key] = f"{runtime} reported no draft counts for this request"
            return out
        out["draft_n"] = n
        out["draft_accepted"] = acc
        out["sources"]["draft_n"] = source
        out["sources"]["draft_accepted"] = source
        if n > 0:
            out["draft_acceptance"] = acc / n
            out["sources"]["draft_acceptance"] = f"{source} draft_n_accepted/draft_n"
        else:
            out["null_reasons"]["draft_acceptance"] = "draft_n is 0 (nothing was drafted)"
        return out

    @staticmethod
    def usage_tokens(result: ProbeResult) -> tuple[int | None, int | None, int | None]:
        """(prompt_tokens, completion_tokens, cached_tokens) from the final chunk's OpenAI `usage`."""
        usage = result.usage or {}
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
        return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), cached


class Sessions(Part):
    """Session turns with the prompt cache on; a runtime that runs sessions provides `session_start`."""

    def session_start(self, candidate: Candidate) -> SessionStart:
        """The server start that serves session turns with the prompt cache on (see `SessionStart`)."""
        raise NotImplementedError

    def session_fields(self) -> JSONObject:
        """Request fields a session turn sends on top of `request_body` (llama-server: `cache_prompt`)."""
        return {}

    def prefix_cache_rule(self, candidate: Candidate) -> PrefixCacheRule:
        """How the session start's cache reuses a prefix; by default any length, generated tokens included."""
        return PrefixCacheRule()


class Parallel(Part):
    """Simultaneous requests; a runtime that runs concurrency levels provides `parallel_start`."""

    def parallel_start(self, candidate: Candidate, level: int, ctx_size: int | None) -> ParallelStart:
        """The start serving `level` simultaneous requests; `ctx_size` is one request's (the cold cell's)."""
        raise NotImplementedError

    #: The flags of the candidate's args that cap its simultaneous requests.
    slots_flags: ClassVar[tuple[str, ...]] = ()

    def parallel_slots(self, candidate: Candidate) -> tuple[int | None, str]:
        """(the most simultaneous requests the candidate's own args allow, the flag), or (None, "") when
        its args set no limit (benchd then sets one per level)."""
        given = flags.flag_values(candidate.args, self.slots_flags)
        if not given or not given[-1][1].isdigit():
            return None, ""
        flag, value = given[-1]
        return int(value), f"{flag} {value} (candidate args)"

    def validate_levels(self, candidate: Candidate, levels: list[int]) -> list[BenchdError]:
        """A concurrency level above the simultaneous requests the candidate's own args allow is refused."""
        slots, flag = self.parallel_slots(candidate)
        return [BenchdError("concurrency_above_slots",
                            f"candidate {candidate.id!r}: concurrency level {n} is above the {slots} simultaneous "
                            f"requests {self.runtime.name} serves with {flag}; remove the flag (benchd sets it per "
                            "level) or the level", "$.concurrency")
                for n in levels if slots is not None and n > slots]

    def parallel_body(self, body: dict[str, object]) -> str | None:
        """Adjust a parallel request's body in place so the runtime can batch it; what changed, or None."""
        return None

    async def slot_facts(self, base_url: str) -> dict[str, str]:
        """What the running server says about its slots (llama-server `/props`), source -> fact."""
        return {}


class Images(Part):
    """Image probes: the vision model's facts, resolutions checked against them, the image message."""

    def vision_facts(self, candidate: Candidate) -> VisionFacts:
        """Whether the candidate has a vision model, and the largest image side it takes."""
        return VisionFacts(False, f"{self.runtime.name} takes no images")

    def validate_vision(self, candidate: Candidate, vision: Vision) -> list[BenchdError]:
        """The sweep's image resolutions against the candidate's model (each side within its maximum)."""
        if not candidate.vision:
            return []
        facts = self.vision_facts(candidate)
        if not facts.ok:
            return []  # `validate` names the missing model
        return [
            BenchdError("image_too_large", f"vision.resolutions[{i}] {w}x{h} is larger than candidate "
                        f"{candidate.id!r} takes: at most {facts.max_side} px a side ({facts.max_source})",
                        f"$.vision.resolutions[{i}]")
            for i, (w, h) in enumerate(vision.resolutions) if max(w, h) > facts.max_side
        ]

    def image_messages(self, prompt: str, data_urls: list[str]) -> list[JSONObject]:
        """One user message: the images as OpenAI `image_url` parts, then the prompt text (both servers
        take this form; the images first, so the text that follows stays unique to the probe)."""
        parts: list[JSONValue] = [{"type": "image_url", "image_url": {"url": u}} for u in data_urls]
        parts.append({"type": "text", "text": prompt})
        return [{"role": "user", "content": parts}]


class Tools(Part):
    """Tool calls: which parser the server ran for them."""

    async def tool_parser(self, base_url: str, candidate: Candidate, command: list[str]) -> str | None:
        """The tool-call parser the server ran for the last tool request, or None when it cannot say."""
        return None


class RuntimeAdapter:
    """One runtime: its facts (the class attributes below) and its parts, built once per adapter; each
    runtime module names the parts it subclasses in `*_part`."""

    #: The runtime's name as in `schemas.Runtime`.
    name: ClassVar[str] = ""
    #: Spec kinds this runtime supports (checked against the pinned build's `--help`).
    spec_kinds: ClassVar[tuple[str, ...]] = ()
    #: Spec kinds that need no `draft_model`.
    spec_kinds_without_draft: ClassVar[tuple[str, ...]] = ()
    #: Candidate args the adapter owns: flag -> what to use instead.
    reserved_args: ClassVar[Mapping[str, str]] = {}
    #: Where `version()` gets its answer.
    version_source: ClassVar[str] = ""
    #: The readiness endpoint.
    health_path: ClassVar[str] = "/health"
    #: The line the server logs once its model is loaded (None: `load_marker_reason` says why no load time).
    load_marker: ClassVar[str | None] = None
    load_marker_reason: ClassVar[str] = "this runtime logs no model-loaded line: ready_s includes the load"
    #: Seconds after SIGTERM to send it again (a server whose first signal waits for open streams); None: never.
    term_again_s: ClassVar[float | None] = None
    #: Whether the server exposes Prometheus counters that cross-check draft acceptance (`/metrics`).
    reads_counters: ClassVar[bool] = False
    #: Inherited variables removed before a start (a trailing `_` = prefix; `environment` says why).
    env_scrub: ClassVar[tuple[str, ...]] = ()
    #: `enable_thinking` as a top-level field (mlx_vlm.server) rather than in `chat_template_kwargs`.
    thinking_top_level: ClassVar[bool] = False
    #: Flags whose values the pinned build restricts (every spelling), checked in `validate` and in a matrix.
    flag_values: ClassVar[Mapping[str, flags.FlagValues]] = {}
    #: Whether the parser takes a unique prefix of a long option (argparse): reserved flags refused by prefix too.
    abbreviates: ClassVar[bool] = False
    #: Whether the candidate's `mmproj` (a projector file) means anything to this runtime.
    takes_mmproj: ClassVar[bool] = False
    #: Where `count_request_tokens` counts (empty: this runtime cannot count a request without running it).
    request_count_source: ClassVar[str] = ""

    #: The part classes this runtime uses (a runtime module names its subclasses here).
    checks_part: ClassVar[type[Checks]] = Checks
    launcher_part: ClassVar[type[Launcher]] = Launcher
    requests_part: ClassVar[type[Requests]] = Requests
    reader_part: ClassVar[type[Reader]] = Reader
    sessions_part: ClassVar[type[Sessions]] = Sessions
    parallel_part: ClassVar[type[Parallel]] = Parallel
    images_part: ClassVar[type[Images]] = Images
    tools_part: ClassVar[type[Tools]] = Tools

    def __init__(self) -> None:
        self.checks = self.checks_part(self)
        self.launcher = self.launcher_part(self)
        self.requests = self.requests_part(self)
        self.reader = self.reader_part(self)
        self.sessions = self.sessions_part(self)
        self.parallel = self.parallel_part(self)
        self.images = self.images_part(self)
        self.tools = self.tools_part(self)
