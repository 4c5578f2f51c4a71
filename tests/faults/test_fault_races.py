"""Deterministic regressions for the two races the 50-client test (`test_fault_clients.py`) found.

In-process daemon (`Daemon` as an async context manager, real Unix socket, real store) so the test can
widen each race window with a delay at the exact await where it opens:

1. A follower reads the job's events, and while it awaits the socket write of the last one the job is
   cancelled. The stream then saw a terminal job state without having read the terminal event and
   ended the stream WITHOUT `job_cancelled` (clients waited for a terminal event forever).
2. The queue picked a job, then awaited the sleep guard (`_keep_awake`, which may take seconds); a
   cancel in that window wrote `job_cancelled`, and the queue then wrote `job_started` and ran the
   cancelled job anyway (events after a terminal event; a "cancelled" job that runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from benchctl.client import AsyncClient
from benchd.config import Config
from benchd.daemon import queue as queue_mod
from benchd.daemon.lifecycle import Daemon
from benchd.schemas import Sweep
from tests.testlib import until

pytestmark = [pytest.mark.slow]

SWEEP = {"name": "race", "contexts": [64], "gen_tokens": 1,
         "candidates": [{"id": "a", "runtime": "llama-server", "model": "/m"}]}


@pytest.fixture
async def daemon_and_calls() -> AsyncIterator[tuple[Daemon, list[str]]]:
    base = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    cfg = Config.resolve(state_dir=base / "s", cache_dir=base / "c")
    calls: list[str] = []

    async def engine(job_id: str, *args: Any) -> Any:
        calls.append(job_id)
        await asyncio.sleep(3600)

    async with Daemon(cfg, run_job=engine) as d:
        yield d, calls


async def test_follower_gets_the_terminal_event_committed_while_it_wrote(
        daemon_and_calls: tuple[Daemon, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    d, _ = daemon_and_calls
    assert d.store is not None and d.queue is not None
    job, _ = d.store.create_job(msgspec.convert(SWEEP, Sweep), not_before="2099-01-01T00:00:00Z")
    writing = asyncio.Event()
    real_write = web.StreamResponse.write

    async def slow_write(self: web.StreamResponse, data: bytes) -> None:
        if b'"job_queued"' in data:
            writing.set()
            await asyncio.sleep(0.5)  # the window: the job is cancelled while this write is in flight
        await real_write(self, data)

    monkeypatch.setattr(web.StreamResponse, "write", slow_write)
    got: list[str] = []

    async def follow() -> None:
        async with AsyncClient(d.config.socket) as c:
            async for ev in c.events(job.id, since=0, follow=True):
                got.append(ev.type)

    task = asyncio.create_task(follow())
    await asyncio.wait_for(writing.wait(), 5)
    await d.queue.cancel(job.id)
    await asyncio.wait_for(task, 10)
    assert got == ["job_queued", "job_cancelled"]


async def test_a_job_cancelled_while_the_queue_starts_it_never_runs(
        daemon_and_calls: tuple[Daemon, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    d, calls = daemon_and_calls
    assert d.store is not None and d.queue is not None
    entering = asyncio.Event()

    @contextlib.asynccontextmanager
    async def slow_guard() -> AsyncIterator[dict[str, Any]]:
        entering.set()
        await asyncio.sleep(0.5)  # the window: systemd-inhibit / caffeinate taking its time
        yield {"sleep_prevented": False, "sleep_reason": "test"}

    monkeypatch.setattr(queue_mod, "_keep_awake", slow_guard)
    job = d.queue.submit(msgspec.convert(SWEEP, Sweep), None, [])
    await asyncio.wait_for(entering.wait(), 5)
    cancelled = await d.queue.cancel(job.id)
    assert cancelled.state == "cancelled"
    await asyncio.sleep(1.0)  # past the guard: the queue must have noticed the cancel
    assert calls == [], "the engine ran a cancelled job"
    assert [e.type for e in d.store.events.page(job.id)] == ["job_queued", "job_cancelled"]
    assert d.store.get_job(job.id).state == "cancelled"


async def test_idle_connections_are_capped_and_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: clients that connect and never send a request (or trickle its headers) were held for
    ever, one file descriptor each (the fault suite held 300 for minutes). In-process daemon so the cap
    and the header timeout can be made small; the socket, the gate and aiohttp are the real ones."""
    import socket

    import psutil

    from benchd.daemon import gate as api

    monkeypatch.setattr(api, "MAX_CONNECTIONS", 20)
    monkeypatch.setattr(api, "HEADER_TIMEOUT_S", 5.0)
    base = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    cfg = Config.resolve(state_dir=base / "s", cache_dir=base / "c")
    async with Daemon(cfg) as d:
        me = psutil.Process()
        fds0 = me.num_fds()
        idle = []
        for i in range(20):
            s = socket.socket(socket.AF_UNIX)
            s.setblocking(False)
            s.connect(str(d.config.socket))
            if i % 2:
                s.send(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            idle.append(s)
        # both ends of the 20 connections are in this process: wait until the daemon has accepted them all
        await until(lambda: me.num_fds() >= fds0 + 2 * len(idle), "the 20 idle connections accepted")

        def one_request() -> bytes:
            with socket.socket(socket.AF_UNIX) as c:
                c.settimeout(5)
                c.connect(str(d.config.socket))
                c.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                out = b""
                while chunk := c.recv(65536):
                    out += chunk
                return out

        refused = await asyncio.to_thread(one_request)
        assert refused.startswith(b"HTTP/1.1 503") and b"too_many_connections" in refused, refused
        def dropped(s: socket.socket) -> bytes:
            """Read until the daemon drops it (in a thread: the daemon's loop is this test's)."""
            s.setblocking(True)
            s.settimeout(30)
            try:
                return s.recv(100)
            except ConnectionResetError:
                return b""
            finally:
                s.close()

        for s in idle:  # each is dropped at the header timeout: its read ends
            assert await asyncio.to_thread(dropped, s) == b""
        answer = await asyncio.to_thread(one_request)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        await until(lambda: me.num_fds() <= fds0 + 2, "the dropped connections' descriptors closed")
    from faultlib import figure

    figure("idle_connections_dropped", len(idle))
