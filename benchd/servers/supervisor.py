"""Server lifecycle: spawn in its own process group, wait for readiness, watch for crashes, tear down.
Reasons and facts: docs/runtimes.md#server-lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from benchd.config import HOST, LOG_CAP_BYTES, Config
from benchd.errors import BenchdError
from benchd.lifeline import die_with_daemon
from benchd.schemas import Candidate
from benchd.sensors import pagecache
from benchd.sensors.suspend.sensor import StopWatch
from benchd.servers.affinity import spawning_on
from benchd.servers.procgroup import (
    exit_status,
    free_port,
    group_members,
    killpg,
    listening_addresses,
    listens_on,
    non_loopback,
    port_is_free,
    wait_gone,
)
from benchd.servers.records import SERVER_TOKEN_ENV, reap_orphans, write_pending, write_record
from benchd.servers.runtimes import get_adapter
from benchd.servers.server import NO_PID, ExitInfo, Server, ServerStartError
from benchd.stats.notation import plural

log = logging.getLogger("benchd.servers.supervisor")

#: How often the watcher checks the log size; rotating at half the cap keeps a file under it (docs/runtimes.md).
_ROTATE_CHECK_S = 0.2
_ROTATE_AT = 0.5
#: How much of a start's log is read for its load facts (the layer split is logged while loading).
LOAD_LOG_BYTES = 1 << 20


def _page_cache_before(candidate: Candidate, cold: bool) -> tuple[str | None, str, float | None]:
    """(cache state, how known, resident fraction) of the model files just before a spawn (dropped first when `cold`)."""
    spec = candidate.spec
    files = pagecache.files_of([candidate.model, *([spec.draft_model] if spec and spec.draft_model else [])])
    why = pagecache.drop(files) if cold else None
    res = pagecache.resident(files)
    state = pagecache.cache_state(res)
    if state is None:
        return None, f"{res.source}: {res.reason}", None
    how = f"{res.source}: {res.resident_pages} of {res.pages} pages of {plural(res.files, 'file')} resident before the spawn"
    if cold:
        how = f"{'pages not dropped: ' + why if why else 'posix_fadvise(POSIX_FADV_DONTNEED)'}; {how}"
    return state, how, res.fraction


#: How long a start waits, after health answered, for a model-loaded line logged after ready (llama-server).
LATE_LINE_S = 2.0
#: The pause between health checks as a share of the time since spawn (5 % < the ready axis's ±10 % margin).
READY_RESOLUTION = 0.05


def health_gap(since_spawn_s: float, ceiling_s: float) -> float:
    return min(ceiling_s, max(0.005, since_spawn_s * READY_RESOLUTION))


class _LoadMarker:
    """When the adapter's model-loaded line first shows in this start's log (polled with the health
    checks, so within one poll interval of when it was written)."""

    def __init__(self, marker: str | None, path: Path, offset: int, started: float) -> None:
        self.marker, self.path, self.offset, self.started = marker, path, offset, started

    def look(self, server: Server) -> bool:
        """Record `load_s` when the line is in the log now; True when it is known (or never will be)."""
        if self.marker is None or server.load_s is not None:
            return True
        if self.marker in _read_from(self.path, self.offset, LOAD_LOG_BYTES):
            server.load_s = time.monotonic() - self.started
            server.load_note = f"log: first seen {self.marker!r} (polled every health check)"
            return True
        return False

    async def settle(self, server: Server, ready_s: float, poll_s: float) -> None:
        """After health answered with no line seen: a line within `LATE_LINE_S` came after ready, so `load_s`
        is the ready time (the same one-poll resolution)."""
        if server.load_s is not None or self.marker is None:
            return
        deadline = time.monotonic() + LATE_LINE_S
        while not await asyncio.to_thread(self.look, server):
            if time.monotonic() >= deadline:
                server.load_note = f"the log has no {self.marker!r} line within {LATE_LINE_S:g} s of health answering"
                return
            await asyncio.sleep(min(poll_s, 0.05))
        server.load_s = ready_s
        server.load_note = (f"log: {self.marker!r} first seen after health answered (the server flags itself ready, "
                            "then logs the line): load_s is the time to the ready answer")


def _read_from(path: Path, offset: int, max_bytes: int) -> str:
    """The log from `offset` (this start's header), at most `max_bytes`; "" when rotated away."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return ""


def _check_loopback_only(server: Server) -> None:
    """Raises a `not_loopback` start error unless every TCP socket the ready server (and its children)
    listens on is loopback (a runtime may open a listener of its own)."""
    wide = non_loopback(listening_addresses(server.pid))
    if wide:
        raise server.start_error(
            f"{server.runtime} (pid {server.pid}) listens on {', '.join(wide)}, not on loopback only: benchd's "
            "servers bind 127.0.0.1 only, so it was stopped", "not_loopback")


class Supervisor:
    """Owns every server process benchd starts. One per daemon (or per test)."""

    def __init__(self, config: Config, *, grace_s: float = 10.0, poll_interval_s: float = 0.1) -> None:
        self.config = config
        self.grace_s = grace_s
        self.poll_interval_s = poll_interval_s
        self.servers: dict[int, Server] = {}
        self._pending: set[str] = set()

    # ------------------------------------------------------------------------------------ start

    async def start(
        self,
        job: str,
        candidate: Candidate,
        ctx_size: int | None,
        *,
        port: int | None = None,
        startup_timeout_s: float | None = None,
        cpus: Sequence[int] | None = None,
        cold: bool = False,
    ) -> Server:
        """Spawn the candidate's server and return it once ready; raises `ServerStartError` otherwise. `port`:
        as given, else a free one (retried once); `cpus`: the cores it may run on; `cold`: drop the model
        files' pages from the page cache first (`Server.cache` records how much was resident)."""
        timeout = startup_timeout_s if startup_timeout_s is not None else candidate.startup_timeout_s
        if candidate.external:
            return await self._attach(job, candidate)
        try:
            return await self._start_once(job, candidate, ctx_size, port or free_port(), timeout, cpus, cold)
        except ServerStartError as exc:
            if exc.reason != "port_taken" or port is not None:
                raise
        return await self._start_once(job, candidate, ctx_size, free_port(), timeout, cpus, cold)

    async def _start_once(
        self, job: str, candidate: Candidate, ctx_size: int | None, port: int, timeout_s: float,
        cpus: Sequence[int] | None = None, cold: bool = False,
    ) -> Server:
        adapter = get_adapter(candidate.runtime)
        log_path = self.config.server_log_path(job, candidate.id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            command, how = await asyncio.to_thread(adapter.launcher.command, candidate, self.config.cache_dir)
        except BenchdError as exc:
            raise ServerStartError(str(exc), reason="spawn_failed", log_path=log_path) from exc
        argv = adapter.launcher.argv(candidate, command=command, port=port, ctx_size=ctx_size)
        server_env = adapter.launcher.server_env(candidate, self.config)
        env = server_env.env
        token = secrets.token_hex(8)
        env[SERVER_TOKEN_ENV] = token
        pending = write_pending(self.config.servers_dir, token, argv, job, candidate.id)
        self._pending.add(token)  # this daemon's own spawn: `reap_orphans` leaves it alone
        cache, cache_note, resident = await asyncio.to_thread(_page_cache_before, candidate, cold)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            header = f"\n=== benchd {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {shlex.join(argv)}\n"
            os.write(fd, header.encode())
            log_start = os.lseek(fd, 0, os.SEEK_END)  # where this start's own log begins (load log)
            started = time.monotonic()  # time to ready counts from the spawn
            with spawning_on(cpus):  # the child inherits the spawning thread's mask
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=fd,
                    stderr=asyncio.subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=die_with_daemon(),  # Linux: PR_SET_PDEATHSIG (benchd.lifeline)
                )
        except OSError as exc:
            self._drop_pending(pending, token)
            raise ServerStartError(
                f"cannot start {candidate.runtime} for {candidate.id!r}: {argv[0]}: {exc.strerror or exc}",
                reason="spawn_failed",
                log_path=log_path,
            ) from exc
        finally:
            os.close(fd)
        try:
            create_time = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            create_time = 0.0
        server = Server(
            job=job,
            candidate=candidate,
            runtime=candidate.runtime,
            argv=argv,
            command=command,
            binary=shlex.join(command),
            binary_source=how,
            port=port,
            base_url=f"http://{HOST}:{port}",
            pid=proc.pid,
            pgid=proc.pid,  # start_new_session: the child leads its own group
            create_time=create_time,
            ctx_size=ctx_size,
            log_path=log_path,
            record_path=self.config.servers_dir / f"{proc.pid}.json",
            started_at=time.time(),
            version_source=adapter.version_source,
            env_passed=server_env.recorded(),
            env_removed=server_env.removed,
            cache=cache,
            cache_note=cache_note,
            cold_requested=cold,
            resident_before=resident,
            _proc=proc,
        )
        server.fit, server.fit_note = adapter.launcher.fit_state(candidate)
        write_record(self.config.servers_dir, server)
        self._drop_pending(pending, token)
        self.servers[server.pid] = server
        server._watcher = asyncio.create_task(self._watch(server), name=f"watch-{candidate.id}-{proc.pid}")
        try:
            await self._wait_ready(server, timeout_s, started, log_start)
        except BaseException:
            await self.stop(server, grace_s=min(self.grace_s, 5.0))
            raise
        server.version = await adapter.launcher.version(server.base_url, command)
        load_log = await asyncio.to_thread(_read_from, log_path, log_start, LOAD_LOG_BYTES)
        server.layer_split, server.split_note = await asyncio.to_thread(adapter.launcher.layer_split, candidate, command, load_log)
        return server

    async def _attach(self, job: str, candidate: Candidate) -> Server:
        """A handle on a server benchd does not start: detected at its URL (`runtimes.openai.detect`), its
        `pid` checked to listen on the URL's port, watched for its process ending when a pid is known."""
        from benchd.servers.runtimes.openai import base_url, detect

        assert candidate.url is not None
        url = base_url(candidate.url)
        port = urlsplit(url).port or 80
        log_path = self.config.server_log_path(job, candidate.id)
        try:
            found = await detect(candidate)
        except Exception as exc:  # nothing answers (or not like an OpenAI server): the cells fail with why
            raise ServerStartError(f"the external server at {url} does not answer: {type(exc).__name__}: {exc}",
                                   reason="unreachable", log_path=log_path) from exc
        pid = candidate.pid or NO_PID
        create_time = 0.0
        if candidate.pid is not None:
            if not await asyncio.to_thread(listens_on, candidate.pid, port):
                raise ServerStartError(f"pid {candidate.pid} does not listen on port {port} of {url}: it is not "
                                       "the server (or it ended)", reason="not_the_server", log_path=log_path)
            with contextlib.suppress(psutil.Error):
                create_time = psutil.Process(candidate.pid).create_time()
        server = Server(
            job=job, candidate=candidate, runtime=candidate.runtime, argv=[], command=[],
            binary=f"{found.kind} at {url}", binary_source="external: benchd does not start it", port=port,
            base_url=url, pid=pid, pgid=0, create_time=create_time, ctx_size=found.slot_ctx, log_path=log_path,
            record_path=self.config.servers_dir / f"external-{candidate.id}.json", started_at=time.time(),
            version=found.version, version_source=found.sources.get("version", found.null_reasons.get("version", "")),
            load_note="an external server: benchd does not start it", external=found,
            cache_note="an external server: benchd does not start it, so it has no page-cache state before a start",
        )
        if candidate.pid is not None:
            server._watcher = asyncio.create_task(self._watch_pid(server), name=f"watch-{candidate.id}-{pid}")
        return server

    async def _watch_pid(self, server: Server) -> None:
        """An external server's process, polled: its end is a crash (benchd never stops it)."""
        try:
            proc = psutil.Process(server.pid)
            while True:
                if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                    break
                await asyncio.sleep(_ROTATE_CHECK_S)
        except psutil.Error:
            pass
        if server.exit is None:
            server.exit = ExitInfo(status="gone", returncode=-1, log_tail="", expected=False)
        server._exited.set()

    async def _detach(self, server: Server) -> ExitInfo | None:
        """Let go of an external server: nothing is signalled (benchd did not start it)."""
        server._stopping = True
        if server._watcher is not None and not server._watcher.done():
            server._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server._watcher
        if server.exit is None:
            server.exit = ExitInfo(status="detached", returncode=0, log_tail="", expected=True)
        server._exited.set()
        return server.exit

    async def _wait_ready(self, server: Server, timeout_s: float, started: float, log_start: int) -> None:
        adapter = get_adapter(server.runtime)
        deadline = time.monotonic() + timeout_s
        exited = asyncio.create_task(server._exited.wait())
        last = "no answer yet"
        marker = _LoadMarker(adapter.load_marker, server.log_path, log_start, started)
        server.load_note = adapter.load_marker_reason if adapter.load_marker is None else ""
        checked = started  # when the check before this one began: readiness came after it
        watch = StopWatch(server.pid)  # a stall or a stop inside the time to ready
        watch.start()
        try:
            while True:
                marker.look(server)
                asked = time.monotonic()
                poll = asyncio.create_task(adapter.launcher.check_ready(server.base_url))
                remaining = deadline - time.monotonic()
                done, _ = await asyncio.wait(
                    {poll, exited}, timeout=max(remaining, 0.0), return_when=asyncio.FIRST_COMPLETED
                )
                if exited in done:
                    poll.cancel()
                    raise self._exited_error(server)
                if poll in done:
                    answer = poll.result()
                    last = answer.detail
                    if answer.ready:
                        server.ready_s = time.monotonic() - started
                        server.ready_note = (f"benchd: spawn -> health answered (monotonic clock), to within "
                                             f"{(time.monotonic() - checked) * 1000:.0f} ms (the check before it)")
                        server.ready_stopped_s = await watch.stop()
                        server.ready_stalled_s = None if watch.error else round(watch.stalled_s, 3)
                        if listens_on(server.pid, server.port):
                            _check_loopback_only(server)
                            await marker.settle(server, server.ready_s, self.poll_interval_s)
                            return
                        raise server.start_error(
                            f"port {server.port} was taken by another process: something else answers "
                            f"health there while {server.runtime} (pid {server.pid}) is not listening",
                            "port_taken")
                else:
                    poll.cancel()
                checked = asked
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise server.start_error(
                        f"{server.runtime} for {server.candidate.id!r} not ready within {timeout_s:g} s "
                        f"(last health answer: {last})",
                        "timeout")
                gap = health_gap(time.monotonic() - started, self.poll_interval_s)
                done, _ = await asyncio.wait({exited}, timeout=min(gap, remaining))
                if exited in done:
                    raise self._exited_error(server)
        finally:
            exited.cancel()
            await watch.stop()

    def _exited_error(self, server: Server) -> ServerStartError:
        info = server.exit
        status = info.status if info else "unknown"
        tail = server.log_tail()
        lowered = tail.lower()
        taken = "address already in use" in lowered or "couldn't bind" in lowered or "errno 98" in lowered
        if taken and not port_is_free(server.port):
            return ServerStartError(
                f"{server.runtime} for {server.candidate.id!r} could not bind port {server.port}: "
                f"the port was taken by another process ({status})",
                reason="port_taken",
                exit_status=status,
                log_tail=tail,
                log_path=server.log_path,
            )
        last_line = next((ln for ln in reversed(tail.strip().splitlines()) if ln.strip()), "")
        return ServerStartError(
            f"{server.runtime} for {server.candidate.id!r} exited before ready ({status}): {last_line[:300]}",
            reason="exited",
            exit_status=status,
            log_tail=tail,
            log_path=server.log_path,
        )

    # ------------------------------------------------------------------------------------ watch

    async def _watch(self, server: Server) -> None:
        """Wait for the process to end; meanwhile keep its log under the cap."""
        proc = server._proc
        assert proc is not None
        waiter = asyncio.create_task(proc.wait())
        try:
            while True:
                done, _ = await asyncio.wait({waiter}, timeout=_ROTATE_CHECK_S)
                if done:
                    break
                try:
                    await self._rotate_if_needed(server.log_path)
                except OSError:  # never the end of the watch: crash detection outlives any log trouble
                    log.exception("rotating %s failed", server.log_path)
        finally:
            if not waiter.done():
                waiter.cancel()
        rc = waiter.result()
        server.exit = ExitInfo(
            status=exit_status(rc), returncode=rc, log_tail=server.log_tail(), expected=server._stopping
        )
        server._exited.set()

    @staticmethod
    async def _rotate_if_needed(path: Path, cap: int = LOG_CAP_BYTES) -> bool:
        try:
            if os.stat(path).st_size <= cap * _ROTATE_AT:
                return False
        except OSError:
            return False
        rotated = path.with_name(path.name + ".1")

        def copy_truncate() -> None:
            try:
                shutil.copyfile(path, rotated)
            except OSError:  # a full disk: drop the partial copy, keep the cap (the older half is lost)
                with contextlib.suppress(OSError):
                    rotated.unlink()
                os.truncate(path, 0)
                raise
            os.truncate(path, 0)

        await asyncio.to_thread(copy_truncate)  # an 8 MB copy must not stall the loop
        return True

    # ------------------------------------------------------------------------------------- stop

    async def stop(self, server: Server, *, grace_s: float | None = None) -> ExitInfo | None:
        """SIGTERM the group, SIGKILL after the grace period, and wait until no member is left (members by
        process group and start time: a reused pid is never touched)."""
        if server.external is not None:
            return await self._detach(server)
        grace = self.grace_s if grace_s is None else grace_s
        server._stopping = True
        if server.exit is None:
            killpg(server.pgid, signal.SIGTERM)
            again = get_adapter(server.runtime).term_again_s
            if again is not None and await server.wait_exit(min(again, grace)) is None:
                killpg(server.pgid, signal.SIGTERM)
            if await server.wait_exit(grace) is None:
                killpg(server.pgid, signal.SIGKILL)
                await server.wait_exit(5.0)
        survivors = await wait_gone(group_members(server.pgid, server.create_time), 0.5)
        if survivors:  # grandchildren that outlived the leader (or ignored TERM)
            for p in survivors:
                with contextlib.suppress(psutil.Error):
                    p.kill()
            await wait_gone(survivors, 5.0)
        if server._watcher is not None:
            await asyncio.wait({server._watcher}, timeout=1.0)
        server.record_path.unlink(missing_ok=True)
        self.servers.pop(server.pid, None)
        return server.exit

    async def stop_all(self) -> None:
        """Tear down every server this supervisor owns (daemon shutdown); keeps going on errors."""
        for server in list(self.servers.values()):
            with contextlib.suppress(Exception):
                await self.stop(server)

    # ---------------------------------------------------------------------------------- orphans

    def _drop_pending(self, path: Path, token: str) -> None:
        path.unlink(missing_ok=True)
        self._pending.discard(token)

    async def reap_orphans(self) -> list[dict[str, Any]]:
        """`records.reap_orphans`, leaving alone the servers this supervisor runs or is spawning."""
        return await reap_orphans(
            self.config.servers_dir, own_pids=self.servers, own_tokens=self._pending, grace_s=self.grace_s
        )
