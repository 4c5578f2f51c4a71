"""Session probes: a conversation that grows by a turn at a time on one server with its prompt cache on
(docs/measuring.md#session-probes)."""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from benchd.engine import probe
from benchd.engine.corpus import Corpus, load_corpus
from benchd.engine.prompts import Prompt
from benchd.engine.rows import Cell, ServerFacts, ServerRun, build_row, decide, failed_row, model_files
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate, CooldownRecord, Row, Session
from benchd.sensors.memory.sampler import MemoryResult, MemorySampler
from benchd.servers.runtimes.base import ChatSettings, Normalized, PrefixCacheRule, RenderItem, RuntimeAdapter
from benchd.servers.server import Server
from benchd.stats.rows import usable
from benchd.store import utcnow

#: The user's instruction after each tool result (short and fixed, so turns differ only by the tool text).
INSTRUCTION = "The tool returned the output above. Continue with the next step."
TOOL_HEADER = "Tool result ({name}):\n"
#: The fewest tokens a cached prefix may fall short of the computed one before it is a miss.
MIN_TOLERANCE_TOKENS = 2


@dataclass
class Turn:
    """One request of a session: what was sent, what came back, and the server's figures."""

    number: int
    messages: list[dict[str, str]]
    started_at: str
    result: ProbeResult
    norm: Normalized
    memory: MemoryResult | None = None

    @property
    def answer(self) -> str:
        return "".join(self.result.answer_text)

    @property
    def generated(self) -> str:
        """The generated text as the cache holds it, as far as the stream shows (reasoning, then answer)."""
        return "".join(self.result.reasoning_text) + self.answer


@dataclass
class Conversation:
    """The messages of one session; `tool_text` gives each later turn its tool result."""

    first: str
    corpus: Corpus
    chars_per_token: float
    append_tokens: int
    seed: str
    messages: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [{"role": "user", "content": self.first}]

    def tool_text(self, turn: int) -> str:
        """About `append_tokens` tokens of corpus text, a slice that differs per turn and session."""
        chars = max(1, round(self.append_tokens * self.chars_per_token))
        text = self.corpus.text
        digest = hashlib.sha256(f"{self.seed}/{turn}".encode()).digest()
        start = int.from_bytes(digest[:8], "big") % len(text)
        piece = (text[start:] + text)[:chars] if chars < len(text) else self.corpus.take(chars)[0]
        return TOOL_HEADER.format(name=f"read_file #{turn}") + piece

    def next_turn(self, answer: str, turn: int) -> None:
        self.messages.append({"role": "assistant", "content": answer})
        self.messages.append({"role": "user", "content": f"{self.tool_text(turn)}\n\n{INSTRUCTION}"})


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two sequences share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True)
class Prefixes:
    """Per turn (index 0 = turn 1): the reusable and `reachable` prefix, the tolerance; or why none."""

    reusable: list[int | None]
    tolerance: int
    reason: str | None = None
    reachable: list[int | None] = field(default_factory=list)
    rule: PrefixCacheRule = field(default_factory=PrefixCacheRule)


async def reusable_prefixes(adapter: RuntimeAdapter, server: Server, cand: Candidate, turns: Sequence[Turn],
                            thinking: str) -> Prefixes:
    """Tokenize every turn's rendered conversation, and each previous one plus its generated text."""
    rule = adapter.sessions.prefix_cache_rule(cand)
    items: list[RenderItem] = [([{"role": "user", "content": ""}], "")]  # the template's own tokens
    for i, t in enumerate(turns):
        items.append((t.messages, ""))
        if i + 1 < len(turns):
            items.append((t.messages, t.generated))
    try:
        tokens = await adapter.requests.rendered_tokens(server.base_url, cand, server.command, items, thinking)
    except Exception as exc:
        return Prefixes([None] * len(turns), MIN_TOLERANCE_TOKENS, f"{type(exc).__name__}: {exc}", rule=rule)
    tolerance = max(MIN_TOLERANCE_TOKENS, len(tokens[0])) + rule.block_tokens - 1
    prompts = tokens[1::2]
    with_answers = tokens[2::2]
    reusable: list[int | None] = [0]
    reachable: list[int | None] = [0]
    for k in range(1, len(turns)):
        reusable.append(common_prefix(prompts[k], with_answers[k - 1]))
        reachable.append(reusable[-1] if rule.keeps_generated else common_prefix(prompts[k], prompts[k - 1]))
    return Prefixes(reusable, tolerance, reachable=reachable, rule=rule)


@dataclass
class SessionRun(ServerRun):
    """A session's server, shape (`plan`), first prompt and cooldown hook."""

    plan: Session
    timeout_s: float
    first_prompt: Prompt
    sizing: str
    cache_notes: str
    cool_down: Callable[[], Awaitable[CooldownRecord]] | None = None
    memory_rate_hz: float = 10.0
    corpus: Corpus | None = None
    #: The requests as sent and answered, filled while the session runs.
    turns: list[Turn] = field(default_factory=list)
    #: Called after every answered turn (the engine emits an event; rows come at the session's end).
    on_turn: Callable[[Turn], None] | None = None


async def send_turn(run: SessionRun, messages: list[dict[str, str]], max_tokens: int) -> ProbeResult:
    """One streamed chat request carrying the whole conversation, the cache switched on."""
    adapter, cand, sweep = run.adapter, run.candidate, run.sweep
    body = adapter.requests.probe_body(cand, prompt="", settings=ChatSettings.of(sweep, max_tokens))
    body["messages"] = messages
    body.update(adapter.sessions.session_fields())
    return await probe.run(run.server.base_url + adapter.requests.request_path(), adapter.requests.encode_body(body),
                           adapter.requests.request_headers(cand), timeout_s=run.timeout_s, collect_text=True)


async def run_session(run: SessionRun) -> list[Row]:
    """Every turn of one session, as rows (kind "session", `probe` = `turn`); all failed if one failed."""
    sweep, cand, plan = run.sweep, run.candidate, run.plan
    turns_n = plan.turns
    gen = plan.gen_tokens if plan.gen_tokens is not None else sweep.gen_tokens
    conv = _conversation(run)
    cooldown = await run.cool_down() if run.cool_down is not None else None
    turns = run.turns
    turns.clear()
    for number in range(1, turns_n + 1):
        if number > 1:
            conv.next_turn(turns[-1].answer, number)
        turns.append(await _measured_turn(run, number, list(conv.messages), gen))
        if run.on_turn is not None:
            run.on_turn(turns[-1])
        why = _failure(run, turns[-1].result)
        if why is not None:
            return failed_session(run, turns, number, why, cooldown)
    prefixes = await reusable_prefixes(run.adapter, run.server, cand, turns, sweep.thinking)
    return [turn_row(run, t, prefixes, cooldown if t.number == 1 else None) for t in turns]


def _conversation(run: SessionRun) -> Conversation:
    """A session's conversation: the first prompt, then tool text at the prompt's chars per token."""
    prompt = run.first_prompt
    cpt = len(prompt.text) / max(1, prompt.counted_tokens or prompt.estimated_tokens)
    return Conversation(prompt.text, run.corpus or load_corpus(), cpt, run.plan.append_tokens,
                        f"{run.job}/{run.candidate.id}/{run.context}")


async def _measured_turn(run: SessionRun, number: int, messages: list[dict[str, str]], gen: int) -> Turn:
    """One turn sent with the memory sampler running."""
    started_at = utcnow()
    async with MemorySampler(run.server.pid, run.memory_rate_hz, model_paths=model_files(run.candidate),
                             series=False) as sampler:
        result = await send_turn(run, messages, gen)
    norm = run.adapter.reader.normalize(result, spec_configured=run.candidate.spec is not None)
    return Turn(number, messages, started_at, result, norm, sampler.result)


def _failure(run: SessionRun, result: ProbeResult) -> str | None:
    """Why the session stops after this turn (None when it goes on): the turn's `decide` verdict's error."""
    crashed = run.server.crashed
    d = decide(result_status=result.status, error=result.error or "the server ended mid-session",
               crash=crashed.status if crashed is not None else None, during="session")
    return None if d.status == "ok" else d.error


def failed_session(run: SessionRun, turns: Sequence[Turn], at: int, why: str,
                   cooldown: CooldownRecord | None) -> list[Row]:
    """Every turn of the session as a failed row naming the turn that failed and why."""
    started = [t.started_at for t in turns]
    return failed_rows(run.job, run.candidate, run.context, run.plan.turns, run.server, at, why, cooldown, started)


def failed_rows(job: str, cand: Candidate, context: int, turns: int, server: Server, at: int, why: str,
                cooldown: CooldownRecord | None = None, started: Sequence[str] = ()) -> list[Row]:
    """A failed session's rows (`at` = the turn that failed; 0 = before turn 1)."""
    facts = ServerFacts.of(server)
    where = f"at turn {at} of {turns}" if at else "before turn 1"
    error = f"session failed {where}: {why}"
    return [failed_row(Cell(job, cand, context, "session", n), error,
                       started_at=started[n - 1] if n <= len(started) else utcnow(), server=facts,
                       cooldown=cooldown if n == 1 else None,
                       log_tail=server.log_tail() if n == max(at, 1) else None, extra={"turn": n})
            for n in range(1, turns + 1)]


def turn_row(run: SessionRun, t: Turn, prefixes: Prefixes, cooldown: CooldownRecord | None) -> Row:
    """One turn's row: the probe figures plus the session fields, each with its source or null reason."""
    extra: dict[str, object] = {"turn": t.number}
    sources: dict[str, str] = {}
    reasons: dict[str, str] = {}
    norm = t.norm
    sources["turn"] = f"session of {run.plan.turns} turns, {run.plan.append_tokens} tokens appended per turn"
    sources["prompt_cache"] = run.cache_notes
    sources["prompt"] = (f"turn 1: {run.sizing}; target {run.context} tokens" if t.number == 1 else
                         "turn 1's prompt, the answers and one tool result per later turn")
    _new_prompt(t, extra, sources, reasons)
    if prefixes.reason is not None:
        reasons["reusable_prefix_tokens"] = reasons["cache_miss"] = f"not computed: {prefixes.reason}"
    elif t.number == 1:
        extra["reusable_prefix_tokens"] = 0
        sources["reusable_prefix_tokens"] = "turn 1: no previous request"
        reasons["cache_miss"] = "turn 1 has no previous request to reuse"
    else:
        _reuse(run, t, prefixes, extra, sources, reasons)
    norm = dataclasses.replace(norm, null_reasons={**norm.null_reasons, **reasons})  # build_row keeps the null ones
    d = decide(result_status=t.result.status, error=t.result.error)  # an answered turn: ok
    return build_row(Cell(run.job, run.candidate, run.context, "session", t.number), status=d.status, error=d.error,
                     started_at=t.started_at, server=ServerFacts.of(run.server), metrics=norm, memory=t.memory,
                     cooldown=cooldown, extra=extra, extra_sources=sources)


def _new_prompt(t: Turn, extra: dict[str, object], sources: dict[str, str], reasons: dict[str, str]) -> None:
    """`new_prompt_tokens` and `new_prompt_tps`: the prompt tokens the server processed anew."""
    norm = t.norm
    if norm.prompt_tokens is not None and norm.cached_tokens is not None:
        extra["new_prompt_tokens"] = norm.prompt_tokens - norm.cached_tokens
        sources["new_prompt_tokens"] = f"prompt_tokens - cached_tokens ({norm.sources.get('cached_tokens', '')})"
    else:
        reasons["new_prompt_tokens"] = "the server reported no prompt_tokens or no cached tokens"
    new = extra.get("new_prompt_tokens")
    if norm.prompt_tps is not None and norm.sources.get("prompt_tps") == "server:timings":
        extra["new_prompt_tps"] = norm.prompt_tps  # llama.cpp-style timings count the processed tokens only
        sources["new_prompt_tps"] = "server:timings prompt_per_second (over the tokens processed anew)"
    elif isinstance(new, int) and new > 0 and t.result.ttft_ms:
        extra["new_prompt_tps"] = new / (t.result.ttft_ms / 1000.0)
        sources["new_prompt_tps"] = "client: new prompt tokens / TTFT (includes the first token's decode)"
    else:
        reasons["new_prompt_tps"] = "no prompt timing and no new prompt tokens to time"


def _reuse(run: SessionRun, t: Turn, prefixes: Prefixes, extra: dict[str, object], sources: dict[str, str],
           reasons: dict[str, str]) -> None:
    """A later turn's `reusable_prefix_tokens` and `cache_miss`."""
    reusable = prefixes.reusable[t.number - 1]
    extra["reusable_prefix_tokens"] = reusable
    sources["reusable_prefix_tokens"] = (
        "benchd: common token prefix of this turn's rendered prompt with the previous prompt + its "
        f"generated text ({run.adapter.name} template and tokenizer; the answer is tokenized from its "
        "text, without the reasoning tags its parser consumed)")
    reachable = prefixes.reachable[t.number - 1]
    cached = t.norm.cached_tokens
    if cached is None or reusable is None or reachable is None:
        reasons["cache_miss"] = "the server reported no cached tokens"
        return
    extra["cache_miss"] = cached < reachable - prefixes.tolerance
    rule = prefixes.rule
    held = "" if rule.keeps_generated else f", reachable {reachable} (the previous prompt's prefix alone)"
    blocks = f" and a {rule.block_tokens}-token block less one" if rule.block_tokens > 1 else ""
    sources["cache_miss"] = (f"cached {cached} vs reusable {reusable} tokens{held}, tolerance "
                             f"{prefixes.tolerance} (the template's own tokens{blocks})"
                             + (f"; {rule.source}" if rule.source else ""))


@dataclass(frozen=True)
class SessionSummary:
    """One cell's session figures: warm-turn (>= 2) TTFT and reuse fraction, the TTFTs, the cache misses."""

    warm_ttft_ms: float | None
    reuse_fraction: float | None
    ttft_ms: list[float | None]
    misses: int
    turns: int


def session_summary(rows: Sequence[Row]) -> SessionSummary | None:
    """The summary of one cell's session rows (None when no turn is ok)."""
    ok = sorted((r for r in rows if usable(r, "session")), key=lambda r: r.probe)
    if not ok:
        return None
    warm = [r for r in ok if r.probe >= 2]
    return SessionSummary(
        warm_ttft_ms=_median_ttft(warm),
        reuse_fraction=_reuse_fraction(warm),
        ttft_ms=[r.ttft_ms for r in ok],
        misses=sum(1 for r in ok if r.cache_miss),
        turns=len(ok),
    )


def _median_ttft(warm: Sequence[Row]) -> float | None:
    ttfts = [r.ttft_ms for r in warm if r.ttft_ms is not None]
    return statistics.median(ttfts) if ttfts else None


def _reuse_fraction(warm: Sequence[Row]) -> float | None:
    """Cached over prompt tokens, over the turns that report cached tokens."""
    counted = [r for r in warm if r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens or 0 for r in counted)
    cached = sum(r.cached_tokens or 0 for r in counted)
    return cached / prompt if prompt else None


