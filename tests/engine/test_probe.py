"""The streaming client against real servers, plus the stream shapes a real server will not produce.

Real llama-server for: a normal probe (counts, timestamps, cache_n == 0), the /metrics cross-check, a
hung (SIGSTOPped) server hitting the probe's timeout, cancellation, and a refused connection. A small
asyncio HTTP double only for what no real server does on demand: garbage lines, a stream cut before
`[DONE]`, an HTTP error, and the SSE comments + spaced JSON of mlx_lm in one controlled stream.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import msgspec
import pytest

from benchd.config import Config
from benchd.engine import probe
from benchd.probe_result import counter_diff
from benchd.schemas import Candidate
from benchd.servers.procgroup import free_port
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.runtimes.llama_server import (
    METRIC_DRAFT_ACCEPTED,
    METRIC_DRAFT_TOKENS,
    acceptance_from_metrics,
)
from benchd.servers.supervisor import Server, Supervisor

PROMPT = "def add(a, b):\n    return a + b\n" * 30
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


# ----------------------------------------------------------------------------- real llama-server


@pytest.fixture
async def llama_server(
    tmp_path: Path, cache_dir: Path, tiny_models, llama_server_bin: Path
) -> AsyncIterator[tuple[Supervisor, Server]]:
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    sup = Supervisor(config, grace_s=3.0)
    c = msgspec.convert({"id": "tiny", "runtime": "llama-server", "model": str(tiny_models.target),
                         "binary": str(llama_server_bin)}, Candidate)
    server = await sup.start("job-probe", c, 2048)
    yield sup, server
    await sup.stop_all()


@pytest.mark.real
async def test_probe_llama_server(llama_server) -> None:
    _, server = llama_server
    adapter = get_adapter("llama-server")
    before = await probe.read_metrics(server.base_url)
    r = await probe.run_chat(adapter, server.base_url, server.candidate, prompt=PROMPT, settings=ChatSettings(48),
                             timeout_s=60)
    after = await probe.read_metrics(server.base_url)
    assert r.status == "ok" and r.error is None and r.http_status == 200 and r.done
    assert r.content_chunks == 48 == len(r.chunk_times)
    assert r.chunk_times == sorted(r.chunk_times)
    assert r.started < r.first_content <= r.last_content <= r.ended  # type: ignore[operator]
    assert r.finish_reason == "length"
    n = adapter.reader.normalize(r, spec_configured=False)
    assert n.cached_tokens == 0  # cache_prompt: false
    assert n.gen_tokens == 48 and n.prompt_tokens is not None and n.prompt_tokens > 300
    assert n.prompt_tps and n.gen_tps and n.sources["gen_tps"] == "server:timings"
    if n.gen_tps_client is None:  # a starved client read all 48 tokens at once: benchd names the reads
        assert "socket read(s)" in n.null_reasons["gen_tps_client"], n.null_reasons
    else:  # may be flagged "(bunched: …)" under load
        assert n.sources["gen_tps_client"].startswith("client:stream-window")
    assert 0 < n.ttft_ms < n.e2e_ms  # type: ignore[operator]
    assert before is not None and after is not None
    diff = counter_diff(before, after)
    assert diff["llamacpp:tokens_predicted_total"] == 48
    # a second probe on the same server works (fresh connection; llama-server closed the last one)
    again = await probe.run_chat(adapter, server.base_url, server.candidate, prompt="x" + PROMPT,
                                 settings=ChatSettings(8), timeout_s=60)
    assert again.status == "ok" and again.content_chunks == 8


@pytest.mark.real
async def test_probe_timeout_on_hung_server(llama_server) -> None:
    _, server = llama_server
    os.kill(server.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = await probe.run_chat(get_adapter("llama-server"), server.base_url, server.candidate, prompt=PROMPT,
                                 settings=ChatSettings(8), timeout_s=1.0)
        assert 0.9 < time.monotonic() - t0 < 30  # the 1 s timeout held, not a hang
        assert r.status == "timeout" and "timed out after 1 s" in (r.error or "")
    finally:
        os.kill(server.pid, signal.SIGCONT)


@pytest.mark.real
async def test_probe_cancellation_propagates(llama_server) -> None:
    _, server = llama_server
    os.kill(server.pid, signal.SIGSTOP)
    try:
        task = asyncio.create_task(probe.run_chat(get_adapter("llama-server"), server.base_url, server.candidate,
                                                  prompt=PROMPT, settings=ChatSettings(8), timeout_s=60))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        os.kill(server.pid, signal.SIGCONT)


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
