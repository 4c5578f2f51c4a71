"""The streaming client against a real llama-server (tiny model): a normal probe (counts, timestamps,
cache_n == 0), the /metrics cross-check, a hung (SIGSTOPped) server hitting the probe's timeout, cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import psutil
import pytest

from benchd.config import Config
from benchd.engine import probe
from benchd.probe_result import counter_diff
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.supervisor import Server, Supervisor
from tests.testlib import until

PROMPT = "def add(a, b):\n    return a + b\n" * 30


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
        assert "socket read" in n.null_reasons["gen_tps_client"], n.null_reasons
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


def _connections_to(server: Server) -> int:
    """This process's open TCP connections to the server (a stopped server's kernel still accepts them)."""
    port = int(server.base_url.rsplit(":", 1)[1])
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


async def test_probe_cancellation_propagates(llama_server) -> None:
    """Cancelled while its request is on the wire to a stopped server, the probe re-raises the cancel."""
    _, server = llama_server
    os.kill(server.pid, signal.SIGSTOP)
    before = _connections_to(server)
    try:
        task = asyncio.create_task(probe.run_chat(get_adapter("llama-server"), server.base_url, server.candidate,
                                                  prompt=PROMPT, settings=ChatSettings(8), timeout_s=60))
        await until(lambda: _connections_to(server) > before, "the request's connection open")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        os.kill(server.pid, signal.SIGCONT)
