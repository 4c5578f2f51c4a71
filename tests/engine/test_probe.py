"""The streaming client on the stream shapes a real server will not produce, and on a refused connection;
the probes of a real llama-server are in test_probe_real.py.

A small asyncio HTTP double only for what no real server does on demand: garbage lines, a stream cut before
`[DONE]`, an HTTP error, and the SSE comments + spaced JSON of mlx_lm in one controlled stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from benchd.engine import probe
from benchd.probe_result import counter_diff
from benchd.servers.procgroup import free_port
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.llama_server import (
    METRIC_DRAFT_ACCEPTED,
    METRIC_DRAFT_TOKENS,
    acceptance_from_metrics,
)

HEADERS = {"Content-Type": "application/json"}


def test_content_chunks_decoded_only_when_they_carry_more() -> None:
    vlm = b'{"choices":[{"finish_reason":null,"delta":{"content":"x"}}],"usage":null,"timings":{"predicted_per_second":9.5}}'
    assert not probe._worth_decoding(vlm)
    assert not probe._worth_decoding(b'{"choices": [{"finish_reason": null, "delta": {"content": "x"}}]}')
    assert probe._worth_decoding(b'{"choices": [{"finish_reason": "length", "delta": {"content": "x"}}]}')
    assert probe._worth_decoding(b'{"choices":[],"usage":{"prompt_tokens":1}}')


def test_parse_prometheus_and_diff() -> None:
    text = (
        "# HELP llamacpp:prompt_tokens_total x\n# TYPE llamacpp:prompt_tokens_total counter\n"
        "llamacpp:prompt_tokens_total 10\nllamacpp:tokens_predicted_total 64\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5\ngarbage line\n'
    )
    m = probe.parse_prometheus(text)
    assert m["llamacpp:prompt_tokens_total"] == 10.0
    assert m['llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == 5.0
    assert counter_diff(m, {**m, "llamacpp:prompt_tokens_total": 25.0})["llamacpp:prompt_tokens_total"] == 15.0
    assert acceptance_from_metrics({METRIC_DRAFT_TOKENS: 10.0, METRIC_DRAFT_ACCEPTED: 4.0}) == 0.4
    assert acceptance_from_metrics({METRIC_DRAFT_TOKENS: 0.0, METRIC_DRAFT_ACCEPTED: 0.0}) is None


async def test_probe_connection_refused() -> None:
    r = await probe.run(f"http://127.0.0.1:{free_port()}/v1/chat/completions", b"{}", HEADERS, timeout_s=5)
    assert r.status == "failed" and r.error is not None and r.error.startswith("request failed")


# ------------------------------------------------------------------------------ stream double

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def serve_once(handler: Handler) -> tuple[asyncio.Server, str]:
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            await handler(writer)
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/chat/completions"


def sse_head() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


async def run_double(handler: Handler, timeout_s: float = 5) -> probe.ProbeResult:
    server, url = await serve_once(handler)
    try:
        return await probe.run(url, b"{}", HEADERS, timeout_s=timeout_s)
    finally:
        server.close()


USAGE = b'data: {"object": "chat.completion", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}\n\n'


async def test_double_mlx_like_stream_with_comments() -> None:
    async def handler(w: asyncio.StreamWriter) -> None:
        w.write(sse_head() + b": keepalive 1/5\n\n: keepalive 5/5\n\n")
        for tok in (b"a", b"b", b"c"):
            w.write(b'data: {"choices": [{"delta": {"content": "' + tok + b'"}}]}\n\n')
            await w.drain()
            await asyncio.sleep(0.01)
        w.write(USAGE + b"data: [DONE]\n\n")

    r = await run_double(handler)
    assert r.status == "ok" and r.content_chunks == 3
    assert r.usage == {"prompt_tokens": 5, "completion_tokens": 3}
    n = get_adapter("mlx_lm.server").reader.normalize(r, spec_configured=False)
    assert n.gen_tokens == 3 and n.gen_tps is not None and n.gen_tps == pytest.approx(2 / (r.last_content - r.first_content))  # type: ignore[operator]


async def test_double_garbage_line() -> None:
    async def handler(w: asyncio.StreamWriter) -> None:
        w.write(sse_head() + b'data: {"choices": [{"delta": {"content": "a"}}]}\n\nHELLO GARBAGE\n\n')

    r = await run_double(handler)
    assert r.status == "failed" and "not an SSE line" in (r.error or "")


async def test_double_malformed_json() -> None:
    async def handler(w: asyncio.StreamWriter) -> None:
        w.write(sse_head() + b"data: {not json\n\n")

    r = await run_double(handler)
    assert r.status == "failed" and "malformed JSON chunk" in (r.error or "")


async def test_double_closed_before_done() -> None:
    async def handler(w: asyncio.StreamWriter) -> None:
        w.write(sse_head() + b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n')

    r = await run_double(handler)
    assert r.status == "failed" and r.error is not None and r.error.startswith("stream closed early")
    assert r.content_chunks == 1


async def test_double_http_error_and_stream_error() -> None:
    async def http_500(w: asyncio.StreamWriter) -> None:
        body = b'{"error": "boom"}'
        w.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    r = await run_double(http_500)
    assert r.status == "failed" and r.http_status == 500 and "HTTP 500" in (r.error or "") and "boom" in (r.error or "")

    async def in_stream(w: asyncio.StreamWriter) -> None:
        w.write(sse_head() + b'data: {"error": {"code": 500, "message": "context full"}}\n\n')

    r = await run_double(in_stream)
    assert r.status == "failed" and "context full" in (r.error or "")


async def test_double_no_usage_chunk() -> None:
    async def handler(w: asyncio.StreamWriter) -> None:
        w.write(sse_head() + b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: [DONE]\n\n')

    r = await run_double(handler)
    assert r.status == "failed" and "without a usage" in (r.error or "")


def _result_with_reads(reads: list[tuple[float, int]]) -> probe.ProbeResult:
    """A ProbeResult whose content chunks arrived in the given (read time, chunks) socket reads."""
    times = [t for t, k in reads for _ in range(k)]
    return probe.ProbeResult(status="ok", error=None, http_status=200, started=0.0, ended=times[-1],
                             first_content=times[0], last_content=times[-1], content_chunks=len(times),
                             chunk_times=times)


def test_gen_tps_client_bunched_first_read_uses_read_ends() -> None:
    """Pure arithmetic, no server: a real server cannot be made to coalesce chunks on demand.

    A server producing 1 token / 10 ms; the starved client got tokens 1-5 in one read at t=0.04 (when
    token 5 was produced), then one per read up to token 10 at t=0.09, then the final read. The plain
    first-to-last window (0.04..0.09, 9 intervals) would say 180 tok/s; the read-end window says 100."""
    reads = [(0.04, 5)] + [(0.01 * i, 1) for i in range(5, 10)]
    r = _result_with_reads(reads)
    assert r.gen_tps_client() == pytest.approx(100.0)
    # Unbunched: the plain (n - 1) / (last - first) window, unchanged.
    r = _result_with_reads([(0.01 * i, 1) for i in range(10)])
    assert r.gen_tps_client() == pytest.approx(9 / 0.09)
    # A bunched final read (the server finished before the client woke) is not used as an end point.
    r = _result_with_reads([(0.01 * i, 1) for i in range(8)] + [(0.5, 2)])
    assert r.gen_tps_client() == pytest.approx(100.0)


def test_gen_tps_client_two_bunched_reads_is_none() -> None:
    """Two reads, one of them bunched: no fresh end point exists, so no rate (not a 50x outlier)."""
    assert _result_with_reads([(0.0, 1), (0.001, 63)]).gen_tps_client() is None
    assert _result_with_reads([(0.0, 1), (0.01, 1)]).gen_tps_client() == pytest.approx(100.0)
