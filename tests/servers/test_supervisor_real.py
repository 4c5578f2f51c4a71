"""Supervisor against real servers: start, readiness, crash, teardown of the whole group, orphans, logs.

Real llama-server / mlx servers on the tiny models wherever possible. Test doubles only where a real
server cannot be made to do the thing: a shell script that never answers health (a server stuck
loading), and a wrapper script that leaves a TERM-ignoring grandchild behind the real llama-server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import psutil
import pytest

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.servers.procgroup import exit_status, read_log_tail
from benchd.servers.runtimes import get_adapter
from benchd.servers.supervisor import ServerStartError, Supervisor

JOB = "job-supervisor"


def group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


@pytest.fixture
def config(tmp_path: Path, cache_dir: Path) -> Config:
    return Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)


@pytest.fixture
async def sup(config: Config) -> AsyncIterator[Supervisor]:
    s = Supervisor(config, grace_s=3.0)
    yield s
    await s.stop_all()


@pytest.fixture
def llama(tiny_models, llama_server_bin: Path) -> Callable[..., Candidate]:
    """A llama-server candidate on the tiny target (the session fixture's binary unless overridden)."""

    def make(**kw: object) -> Candidate:
        fields = {"id": "tiny-llama", "runtime": "llama-server", "model": str(tiny_models.target),
                  "binary": str(llama_server_bin), **kw}
        return msgspec.convert(fields, Candidate)

    return make


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("runtime", ["llama-server", "mlx_lm.server", "mlx_vlm.server"])
async def test_start_health_teardown(
    sup: Supervisor, config: Config, tiny_models, runtime: str, request: pytest.FixtureRequest
) -> None:
    model = str(tiny_models.target) if runtime == "llama-server" else str(tiny_models.mlx_dir)
    binary = (str(request.getfixturevalue("llama_server_bin")) if runtime == "llama-server"
              else request.getfixturevalue("mlx_argv")[runtime][0])
    c = msgspec.convert({"id": "tiny", "runtime": runtime, "model": model, "startup_timeout_s": 60,
                         "binary": binary}, Candidate)
    adapter = get_adapter(runtime)
    server = await sup.start(JOB, c, adapter.launcher.server_ctx_size(c, 256, 16))
    assert server.running and server.crashed is None
    assert server.base_url == f"http://127.0.0.1:{server.port}"
    assert server.pgid == os.getpgid(server.pid) == server.pid
    assert (await adapter.launcher.check_ready(server.base_url)).ready
    assert server.version and server.version_source
    if runtime == "llama-server":
        assert server.version.startswith("llama.cpp b")
    else:
        assert server.version.startswith(runtime.split(".")[0].replace("_", "-"))
    record = msgspec.json.decode((config.servers_dir / f"{server.pid}.json").read_bytes())
    assert record["pid"] == server.pid and record["pgid"] == server.pgid
    assert record["start_time"] == psutil.Process(server.pid).create_time()
    assert record["job"] == JOB and record["candidate"] == "tiny" and record["argv"] == server.argv
    assert server.log_path == config.server_log_path(JOB, "tiny") and server.log_path.stat().st_size > 0

    info = await sup.stop(server)
    assert info is not None and info.expected and server.crashed is None
    assert group_members(server.pgid) == []
    assert not (config.servers_dir / f"{server.pid}.json").exists()


async def test_sigkill_is_reported_as_crash_with_log_tail(sup: Supervisor, llama) -> None:
    server = await sup.start(JOB, llama(), 512)
    os.kill(server.pid, signal.SIGKILL)
    info = await server.wait_exit(10)
    assert info is not None and server.crashed is info
    assert info.status == "signal 9" and info.returncode == -9
    assert "llama-server" in info.log_tail or "listening" in info.log_tail
    await sup.stop(server)
    assert group_members(server.pgid) == []


async def test_bad_model_path_fails_fast_with_exit_status(sup: Supervisor, llama, tmp_path: Path) -> None:
    c = llama(model=str(tmp_path / "missing.gguf"), startup_timeout_s=30)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        await sup.start(JOB, c, 512)
    assert time.monotonic() - t0 < 10  # noticed when the process exited, not at the timeout
    e = err.value
    assert e.reason == "exited" and e.exit_status == "exit 1"
    assert "exited before ready (exit 1)" in e.message
    assert "missing.gguf" in e.log_tail
    assert sup.servers == {}


async def test_bad_binary(sup: Supervisor, llama, tmp_path: Path) -> None:
    with pytest.raises(ServerStartError) as err:
        await sup.start(JOB, llama(binary=str(tmp_path / "nope")), 512)
    assert err.value.reason == "spawn_failed" and "not an executable" in err.value.message
    garbage = tmp_path / "garbage-server"
    garbage.write_bytes(b"\x00\x01not an executable format")
    garbage.chmod(0o755)
    with pytest.raises(ServerStartError) as err:
        await sup.start(JOB, llama(binary=str(garbage)), 512)
    assert err.value.reason == "spawn_failed" and "Exec format error" in err.value.message


async def test_never_ready_times_out_and_kills_group(sup: Supervisor, llama, tmp_path: Path) -> None:
    """Double: a 'server' that starts a child and never answers health (stuck loading)."""
    # A duration unique to this test process, so no other test (or a second test run on the machine, which
    # runs this same test) can pass for our grandchild.
    nap = f"317.{os.getpid()}"
    hang = script(tmp_path, "hang-server", f"#!/bin/sh\nsleep {nap} &\necho loading forever\nwait\n")
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        await sup.start(JOB, llama(binary=hang), 512, startup_timeout_s=1.5)
    elapsed = time.monotonic() - t0
    assert 1.4 < elapsed < 30  # the 1.5 s timeout held, not a hang
    assert err.value.reason == "timeout" and "not ready within 1.5 s" in err.value.message
    assert "loading forever" in err.value.log_tail
    assert sup.servers == {}
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == ["sleep", nap]]
    assert not [p for p in leftovers if p.status() != psutil.STATUS_ZOMBIE]


async def test_port_taken_by_a_plain_socket(sup: Supervisor, llama) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ServerStartError) as err:
            await sup.start(JOB, llama(startup_timeout_s=20), 512, port=port)
    assert err.value.reason == "port_taken" and f"port {port}" in err.value.message


async def test_auto_port_taken_is_retried_once(sup: Supervisor, llama, monkeypatch) -> None:
    """The race (port free when checked, taken before the server binds) forced by handing out a held port."""
    import benchd.servers.supervisor as supervisor_mod

    real_free_port = supervisor_mod.free_port
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        ports = iter([held.getsockname()[1]])
        monkeypatch.setattr(supervisor_mod, "free_port", lambda: next(ports, None) or real_free_port())
        server = await sup.start(JOB, llama(startup_timeout_s=20), 512)
        assert server.running and server.port != held.getsockname()[1]
    assert "couldn't bind HTTP server socket" in server.log_tail()  # the first attempt, same log file


async def test_port_taken_by_another_server(sup: Supervisor, llama) -> None:
    first = await sup.start(JOB, llama(), 512)
    other = llama(id="second", startup_timeout_s=20)
    with pytest.raises(ServerStartError) as err:
        await sup.start(JOB, other, 512, port=first.port)
    assert err.value.reason == "port_taken"
    assert first.running  # the first server is untouched
    assert list(sup.servers) == [first.pid]


async def test_a_llama_server_streaming_to_an_open_connection_stops_without_the_kill(
        sup: Supervisor, llama) -> None:
    """llama-server's first SIGTERM waits for a streaming request to end (tools/server/server.cpp's
    signal_handler); a second exits at once. A stop while a client still reads a long stream (a cancel racing
    the probe's own close) ends at the second TERM, not at SIGKILL after the grace period."""
    server = await sup.start(JOB, llama(), 256)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = msgspec.json.encode({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 60000,
                                "stream": True, "ignore_eos": True})
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    assert b"data: " in await reader.readuntil(b"data: ")  # streaming; the connection stays open
    info = await sup.stop(server)
    writer.close()
    # ended by a TERM (now and then the first one is enough), never by the kill after the grace period
    assert info is not None and info.expected and info.returncode in (0, 1), info
    if info.returncode == 1:
        assert "Received second interrupt, terminating immediately" in read_log_tail(server.log_path)


async def test_teardown_kills_term_ignoring_grandchild(sup: Supervisor, llama, tmp_path: Path) -> None:
    """Double around the real server: a wrapper leaves a grandchild that ignores SIGTERM."""
    real = llama().binary
    wrapper = script(
        tmp_path, "wrapped-llama-server",
        f"#!/bin/sh\nsh -c 'trap \"\" TERM; sleep 300' &\nexec {real} \"$@\"\n",
    )
    server = await sup.start(JOB, llama(binary=wrapper), 512)
    assert len(group_members(server.pgid)) >= 2
    t0 = time.monotonic()
    await sup.stop(server, grace_s=1.0)
    assert group_members(server.pgid) == []
    assert time.monotonic() - t0 < 10


async def test_crash_leaves_grandchild_which_stop_still_kills(sup: Supervisor, llama, tmp_path: Path) -> None:
    """Double around the real server: the leader is SIGKILLed; its TERM-ignoring child is reparented
    to init but stays in the group, and `stop()` finds it by group, not by parentage."""
    wrapper = script(
        tmp_path, "wrapped-llama-server",
        f"#!/bin/sh\nsh -c 'trap \"\" TERM; sleep 300' &\nexec {llama().binary} \"$@\"\n",
    )
    server = await sup.start(JOB, llama(binary=wrapper), 512)
    os.kill(server.pid, signal.SIGKILL)
    info = await server.wait_exit(10)
    assert info is not None and server.crashed is info and info.status == "signal 9"
    assert group_members(server.pgid) != []  # the orphaned grandchild
    await sup.stop(server, grace_s=1.0)
    assert group_members(server.pgid) == []


async def test_orphans_killed_by_new_supervisor_only_if_start_time_matches(config: Config, llama) -> None:
    first = Supervisor(config, grace_s=3.0)
    server = await first.start(JOB, llama(), 512)
    # an unrelated process whose pid a stale record names, with another start time (pid reuse)
    bystander = await asyncio.create_subprocess_exec("sleep", "300", start_new_session=True)
    fake = {"pid": bystander.pid, "pgid": bystander.pid, "start_time": psutil.Process(bystander.pid).create_time() - 1000,
            "argv": ["llama-server"], "job": JOB, "candidate": "old"}
    (config.servers_dir / f"{bystander.pid}.json").write_bytes(msgspec.json.encode(fake))
    gone = {"pid": 2**22 - 7, "pgid": 2**22 - 7, "start_time": 1.0, "argv": [], "job": JOB, "candidate": "gone"}
    (config.servers_dir / "gone.json").write_bytes(msgspec.json.encode(gone))
    try:
        second = Supervisor(config, grace_s=3.0)
        report = {r["candidate"]: r["action"] for r in await second.reap_orphans()}
        assert report == {"tiny-llama": "killed", "old": "pid-reused", "gone": "gone"}
        assert bystander.returncode is None and psutil.Process(bystander.pid).is_running()
        info = await server.wait_exit(10)
        assert info is not None and info.status in ("exit 0", "signal 15")  # llama-server exits 0 on TERM
        assert server.crashed is info  # from the first supervisor's view, nobody asked it to stop
        assert group_members(server.pgid) == []
        assert list(config.servers_dir.glob("*.json")) == []
    finally:
        bystander.kill()
        await bystander.wait()
        await first.stop_all()


async def test_reap_leaves_own_servers_alone(sup: Supervisor, llama) -> None:
    server = await sup.start(JOB, llama(), 512)
    assert await sup.reap_orphans() == []
    assert server.running


async def test_log_rotation_copy_truncate(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # what the child holds
    try:
        os.write(fd, b"a" * 300)
        assert await Supervisor._rotate_if_needed(log, cap=100)
        os.write(fd, b"after-rotation\n")
    finally:
        os.close(fd)
    assert (tmp_path / "c.log.1").read_bytes() == b"a" * 300
    assert log.read_bytes() == b"after-rotation\n"  # O_APPEND: no hole at the old offset
    assert not await Supervisor._rotate_if_needed(log, cap=100)
    assert read_log_tail(log, 20).endswith("after-rotation\n")
    assert read_log_tail(log, 20).startswith("a")  # reaches into .log.1


def test_exit_status_strings() -> None:
    assert exit_status(1) == "exit 1" and exit_status(-9) == "signal 9" and exit_status(0) == "exit 0"
