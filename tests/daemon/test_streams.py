"""The event stream against clumsy clients, with the daemon in-process (`Daemon` async context manager).

In-process so the test can shorten the stream's write timeout and count the daemon's own tasks; the
daemon code is the real one, on a real Unix socket. No engine is needed: the job never runs (its
`not_before` is far away), its events are appended to the store directly.
"""

from __future__ import annotations

import asyncio
import json
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from benchctl.client import AsyncClient
from benchd.config import Config
from benchd.daemon import api
from benchd.daemon.lifecycle import Daemon
from benchd.schemas import Event, Sweep
from tests.testlib import until


@pytest.fixture
async def daemon() -> AsyncIterator[Daemon]:
    base = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    cfg = Config.resolve(state_dir=base / "s", cache_dir=base / "c")

    async def never(*args: object) -> None:  # the job must not run here
        raise AssertionError("no job should run in this test")

    async with Daemon(cfg, run_job=never) as d:
        yield d


def waiting_job_with_events(d: Daemon, n: int, payload_bytes: int) -> str:
    assert d.store is not None
    sweep = msgspec.convert({"name": "s", "contexts": [64], "gen_tokens": 1,
                             "candidates": [{"id": "a", "runtime": "llama-server", "model": "/m"}]}, Sweep)
    job, _ = d.store.create_job(sweep, not_before="2099-01-01T00:00:00Z")
    for i in range(n):
        d.store.events.append(job.id, "cooldown_started", {"i": i, "pad": "x" * payload_bytes})
    return job.id


def open_follower(sock: Path, job: str, rcvbuf: int = 4096) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(str(sock))
    s.sendall(f"GET /v1/jobs/{job}/events?since=0&follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


async def follow_into(d: Daemon, job: str, got: list[Event]) -> None:
    """Follows the job's events from the start through the client, appending each to `got`, until the stream ends."""
    async with AsyncClient(d.config.socket) as c:
        async for ev in c.events(job, since=0, follow=True):
            got.append(ev)


def _ctx(d: Daemon) -> api.Ctx:
    assert d.runner is not None
    return d.runner.app[api.CTX]


async def test_a_client_that_never_reads_is_dropped_and_blocks_nothing(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five followers that never read are stuck on full sockets: health is answered while all five are
    still stuck (so the write timeout is not what let it through), then they are dropped at the timeout."""
    monkeypatch.setattr(api, "WRITE_TIMEOUT_S", 3.0)
    job = waiting_job_with_events(daemon, n=3000, payload_bytes=1000)  # ~3 MB of events
    stuck = [open_follower(daemon.config.socket, job) for _ in range(5)]
    ctx = _ctx(daemon)
    try:
        async with AsyncClient(daemon.config.socket) as c:
            await until(lambda: len(ctx.streams) == 5, "five follow streams open")
            health = await c.health()  # answered while five streams are stuck on full sockets
            assert health["pid"] > 0
            assert len(ctx.streams) == 5, "a stuck stream was dropped before health answered"
            await until(lambda: not ctx.streams, "stuck followers dropped after the write timeout")
            # a reading client still gets every event
            seqs = [ev.seq async for ev in c.events(job, since=2990)]
            assert seqs == list(range(2991, 3002))
    finally:
        for s in stuck:
            s.close()


async def test_followers_wake_on_new_events_and_end_at_terminal(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower gets the new event by being woken: its idle re-check is put out of reach."""
    monkeypatch.setattr(api, "IDLE_CHECK_S", 3600.0)
    job = waiting_job_with_events(daemon, n=0, payload_bytes=0)
    assert daemon.store is not None and daemon.queue is not None
    got: list[Event] = []
    task = asyncio.create_task(follow_into(daemon, job, got))
    await until(lambda: got, "the first event streamed")
    assert [e.type for e in got] == ["job_queued"]
    await daemon.queue.cancel(job)  # writes job_cancelled and notifies
    await asyncio.wait_for(task, 30)  # woken: a polled follower would wait for the hour-long re-check
    assert [e.type for e in got] == ["job_queued", "job_cancelled"]


async def test_shutdown_ends_follow_streams(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "IDLE_CHECK_S", 3600.0)
    job = waiting_job_with_events(daemon, n=0, payload_bytes=0)
    lines: list[bytes] = []

    def read_all() -> None:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(60)
        s.connect(str(daemon.config.socket))
        s.sendall(f"GET /v1/jobs/{job}/events?follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            lines.append(chunk)
        s.close()

    reader = asyncio.create_task(asyncio.to_thread(read_all))
    await until(lambda: b'"job_queued"' in b"".join(lines), "the first event streamed")
    await daemon.shutdown()
    await asyncio.wait_for(reader, 30)  # ended by the shutdown, not by the 3600 s idle re-check
    body = b"".join(lines)
    assert b'"job_queued"' in body
    assert not daemon.config.socket.exists()
    # events are newline-delimited JSON
    payload = body.split(b"\r\n\r\n", 1)[1]
    assert any(json.loads(x).get("type") == "job_queued" for x in payload.split(b"\n") if x.startswith(b"{"))


async def test_a_follower_woken_per_event_reads_the_job_state_not_the_whole_job(
        daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wake-up of a follow stream asks whether the job is over. It reads the state alone: the whole
    job (`Store.get_job`) counts the job's rows and scans its events, a cost per event that grew with the
    sweep and ran in the event loop the probes share (benchmarks/RESULTS.md §22 has what it cost)."""
    monkeypatch.setattr(api, "IDLE_CHECK_S", 3600.0)
    job = waiting_job_with_events(daemon, n=0, payload_bytes=0)
    store, ctx = daemon.store, _ctx(daemon)
    assert store is not None and daemon.queue is not None
    whole_reads: list[str] = []
    get_job = store.get_job
    monkeypatch.setattr(store, "get_job", lambda job_id, with_sweep=True: (whole_reads.append(job_id),
                                                                          get_job(job_id, with_sweep))[1])
    got: list[Event] = []
    task = asyncio.create_task(follow_into(daemon, job, got))
    await until(lambda: got, "the first event streamed")
    before = len(whole_reads)  # the stream's 404 check
    for i in range(20):  # one wake-up each: the follower has caught up before the next is appended
        ctx.hub.notify(store.events.append(job, "cooldown_started", {"i": i}))
        await until(lambda i=i: len(got) == i + 2, f"event {i} streamed")
    woken = len(whole_reads) - before
    await daemon.queue.cancel(job)
    await asyncio.wait_for(task, 30)
    assert len(got) == 22 and got[-1].type == "job_cancelled"
    assert woken == 0, f"the follower read the whole job {woken} times for 20 events"


def test_the_reads_a_job_view_makes_per_event_do_not_scan_the_job(tmp_path: Path) -> None:
    """`job_state` is the state `get_job` shows (NotFound for an unknown id), and the one event type a job
    view reads (`candidate_dropped`) is found through the `(job, type)` index, not by scanning every event."""
    from benchd.errors import NotFound
    from benchd.store import Store

    store = Store(tmp_path / "s.sqlite3")
    try:
        sweep = msgspec.convert({"name": "s", "contexts": [64], "gen_tokens": 1,
                                 "candidates": [{"id": "a", "runtime": "llama-server", "model": "/m"}]}, Sweep)
        job, _ = store.create_job(sweep)
        assert store.job_state(job.id) == store.get_job(job.id).state == "queued"
        with pytest.raises(NotFound):
            store.job_state("no-such-job")
        for i in range(50):
            store.events.append(job.id, "candidate_dropped" if i % 10 == 0 else "cooldown_started", {"i": i})
        assert [e.payload["i"] for e in store.events.of_type(job.id, "candidate_dropped")] == [0, 10, 20, 30, 40]
        traced: list[str] = []
        store._db.set_trace_callback(traced.append)
        store.events.of_type(job.id, "candidate_dropped")
        store._db.set_trace_callback(None)
        plan = " ".join(str(r[-1]) for r in store._db.execute(f"EXPLAIN QUERY PLAN {traced[-1]}"))
        assert "INDEX events_type (job=? AND type=?)" in plan and "TEMP B-TREE" not in plan, plan
        store._db.execute("DROP INDEX events_type")  # as a store file written before the index existed
    finally:
        store.close()
    old = Store(tmp_path / "s.sqlite3", read_only=True)  # read offline (no schema applied): same answer
    try:
        assert not old._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'events_type'").fetchall()
        assert [e.payload["i"] for e in old.events.of_type(job.id, "candidate_dropped")] == [0, 10, 20, 30, 40]
    finally:
        old.close()
