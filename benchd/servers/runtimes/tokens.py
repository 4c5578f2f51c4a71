"""What a stream's chunks say about its tokens: those inside the client's window, and the thinking figures.
Reasons and facts: docs/runtimes.md#stream-token-accounting."""

from __future__ import annotations

from typing import TypedDict

from benchd.probe_result import ProbeResult
from benchd.stats.notation import plural


class ClientMetrics(TypedDict, total=False):
    """The figures `thinking_fields` / `client_timing` give `Normalized`, named like its fields."""

    ttfat_ms: float | None
    reasoning_tokens: int | None
    thinking: str | None
    ttft_ms: float | None
    e2e_ms: float
    gen_tps_client: float | None


class ClientFigures(ClientMetrics, total=False):
    """`ClientMetrics` with their `sources` and `null_reasons` (popped and merged by the caller)."""

    sources: dict[str, str]
    null_reasons: dict[str, str]


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def window_tokens(result: ProbeResult, completion_tokens: int | None) -> tuple[int | None, list[str]]:
    """(tokens inside the stream window, counting the first chunk's; what was left outside and why). Tokens
    without a chunk are attributed to the closing think tag, the stop token, then the opening think tag,
    as far as the count allows (docs/runtimes.md#stream-token-accounting)."""
    if completion_tokens is None:
        return None, []
    spare = completion_tokens - result.content_chunks
    if spare <= 0:
        return completion_tokens, []
    if result.reasoning_chunks and result.answer_chunks:
        spare -= 1  # the closing think tag: between reasoning and answer, inside the window
    outside: list[str] = []
    if spare >= 1 and result.finish_reason == "stop":
        outside.append("the final stop token")
        spare -= 1
    if spare >= 1 and result.first_is_reasoning:
        outside.append("the opening think tag")
    return completion_tokens - len(outside), outside


def thinking_fields(result: ProbeResult) -> ClientFigures:
    """ttfat_ms, reasoning_tokens and thinking (observed), with sources and null reasons."""
    out: ClientFigures = {"sources": {}, "null_reasons": {}}
    out["ttfat_ms"] = ttfat = result.ttfat_ms
    if ttfat is not None:
        out["sources"]["ttfat_ms"] = "client:first-answer-chunk"
    elif result.reasoning_chunks:
        out["null_reasons"]["ttfat_ms"] = (
            f"no answer token arrived: all {result.content_chunks} token chunks were reasoning")
    else:
        out["null_reasons"]["ttfat_ms"] = "no answer token arrived"
    details = (result.usage or {}).get("completion_tokens_details")
    reported = _int(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    if reported is not None:
        out["reasoning_tokens"] = reported
        out["sources"]["reasoning_tokens"] = "server:usage completion_tokens_details.reasoning_tokens"
    elif result.content_chunks:
        out["reasoning_tokens"] = result.reasoning_chunks
        out["sources"]["reasoning_tokens"] = "client:reasoning-chunks (one token per chunk)"
    else:
        out["reasoning_tokens"] = None
        out["null_reasons"]["reasoning_tokens"] = "no token chunk arrived"
    if result.content_chunks:
        out["thinking"] = "on" if result.reasoning_chunks else "off"
        out["sources"]["thinking"] = (
            f"client:reasoning-deltas ({result.reasoning_chunks} of {result.content_chunks} token chunks)")
    else:
        out["thinking"] = None
        out["null_reasons"]["thinking"] = "no token chunk arrived"
    return out


def client_timing(result: ProbeResult, completion_tokens: int | None) -> ClientFigures:
    """ttft (the first token of any kind), e2e, the client stream-window rate over the tokens inside it
    (`window_tokens`) and the thinking figures, with sources/reasons (shared by all runtimes)."""
    out = thinking_fields(result)
    out["ttft_ms"] = ttft = result.ttft_ms
    if ttft is not None:
        out["sources"]["ttft_ms"] = "client:first-token-chunk (reasoning or answer)"
    else:
        out["null_reasons"]["ttft_ms"] = "no token chunk arrived"
    out["e2e_ms"] = result.e2e_ms
    out["sources"]["e2e_ms"] = "client:request-to-stream-end"
    inside, outside = window_tokens(result, completion_tokens)
    tps, arrivals = result.gen_tps_client(inside), result.arrivals
    if tps is not None and arrivals < 2:
        tps = None  # every token arrived in one read: there is no window to time
    out["gen_tps_client"] = tps
    if tps is not None:
        source = "client:stream-window"
        if outside:
            source += f" ({inside} of {completion_tokens} tokens inside; outside: {', '.join(outside)})"
        if arrivals < result.content_chunks / 2:  # bunched reads: say so, never hide it
            source += f" (bunched: {arrivals} reads for {result.content_chunks} chunks)"
        out["sources"]["gen_tps_client"] = source
    elif result.content_chunks >= 2 and arrivals < 3:
        out["null_reasons"]["gen_tps_client"] = (
            f"stream window unmeasurable: all tokens arrived in {plural(arrivals, 'socket read')} "
            "(client starved or server faster than the client's reads)"
        )
    else:
        out["null_reasons"]["gen_tps_client"] = "stream window too short (fewer than 2 token chunks or tokens)"
    return out
