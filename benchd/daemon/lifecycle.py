"""Wiring: state dir → instance lock → store → queue → API on the Unix socket; and the ordered shutdown.
Reasons and facts: docs/architecture.md#startup-and-shutdown-order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from types import TracebackType

from aiohttp import web

from benchd.config import Config
from benchd.daemon.api import Ctx, make_app
from benchd.daemon.gate import PeerGate
from benchd.daemon.hub import EventHub
from benchd.daemon.instance import (
    InstanceGuard,
    bind_socket,
    check_socket_path,
    ensure_private_dir,
    unlink_socket,
)
from benchd.daemon.queue import JobQueue, RunJob
from benchd.daemon.recheck import Rechecker, routes
from benchd.store import Store

log = logging.getLogger("benchd")

SHUTDOWN_BUDGET_S = 10.0
#: How long aiohttp waits for in-flight requests after the follow streams were told to end.
HTTP_SHUTDOWN_S = 1.5
#: How long the running job gets to abort its probe and tear down its servers.
JOB_STOP_S = 6.0
#: How long shutdown waits for a runbook being written in a worker thread before it leaves the store open.
RUNBOOK_WAIT_S = 5.0

EXIT_OK = 0
EXIT_FORCED = 130
EXIT_SLOW_SHUTDOWN = 1


async def _reap_orphans(config: Config) -> None:
    """Kill servers a dead daemon left running (the supervisor's records in `<state>/servers/`)."""
    from benchd.servers.supervisor import Supervisor

    try:
        entries = await Supervisor(config).reap_orphans()
    except Exception:
        log.exception("orphan cleanup failed")
        return
    for entry in entries:
        if entry.get("action") == "killed":
            log.warning("killed server pid %s left by a previous daemon (job %s, candidate %s)",
                        entry.get("pid"), entry.get("job"), entry.get("candidate"))


class Daemon:
    """The running daemon; `async with Daemon(config) as d:` in tests, `run_daemon` in production."""

    def __init__(self, config: Config, run_job: RunJob | None = None) -> None:
        self.config = config
        self._run_job = run_job
        self.guard = InstanceGuard(config)
        self.store: Store | None = None
        self.hub: EventHub | None = None
        self.queue: JobQueue | None = None
        self.rechecker: Rechecker | None = None
        self.runner: web.AppRunner | None = None
        self.server: asyncio.AbstractServer | None = None
        self._bound = False
        self._closed = False

    async def start(self) -> None:
        """Raises BenchdError (bad config, exit 2) or AlreadyRunning (exit 3); cleans up what it took."""
        try:
            await self._start()
        except BaseException:
            await self.shutdown()
            raise

    async def _start(self) -> None:
        cfg = self.config
        check_socket_path(cfg.socket)
        for fixed in ensure_private_dir(cfg.state_dir) + ensure_private_dir(cfg.logs_dir):
            log.warning("fixed loose permissions: %s", fixed)
        self.guard.acquire()
        await _reap_orphans(cfg)
        self.store = Store(cfg.db_path)
        os.chmod(cfg.db_path, 0o600)
        self.hub = EventHub()
        self.hub.bind(asyncio.get_running_loop())
        self.queue = JobQueue(self.store, cfg, self.hub, run_job=self._run_job)
        self.queue.recover()
        self.rechecker = Rechecker(cfg, self.store, self.queue)
        app = make_app(Ctx(cfg, self.store, self.queue, self.hub))
        app.router.add_routes(routes(self.rechecker))
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=HTTP_SHUTDOWN_S, access_log=None)
        await self.runner.setup()
        sock = bind_socket(cfg.socket)
        self._bound = True
        make_inner = self.runner.server
        assert make_inner is not None
        uid = os.getuid()
        live: set[PeerGate] = set()  # the connections served now (capped, see gate.MAX_CONNECTIONS)
        self.server = await asyncio.get_running_loop().create_server(lambda: PeerGate(make_inner, uid, live),
                                                                     sock=sock)
        self.queue.start()
        await self.rechecker.start()
        log.info("benchd %s listening on %s (state %s, pid %s)", _version(), cfg.socket, cfg.state_dir, os.getpid())

    async def shutdown(self) -> None:
        """The ordered teardown; every step runs even if an earlier one failed."""
        if self._closed:
            return
        self._closed = True
        t0 = time.monotonic()
        if self.server is not None:
            with _step("stop accepting"):
                self.server.close()
        if self.hub is not None:
            self.hub.close()
        if self.runner is not None:
            with _step("close API connections"):
                await asyncio.wait_for(self.runner.cleanup(), HTTP_SHUTDOWN_S + 1.0)
        if self.rechecker is not None:
            with _step("stop the recheck timer"):
                await self.rechecker.stop()
        if self.queue is not None:
            with _step("stop the running job"):
                await self.queue.stop(wait_s=JOB_STOP_S)
        if self.store is not None:
            with _step("close the store"):
                await self._close_store(self.store)
        if self._bound:
            with _step("unlink the socket"):
                unlink_socket(self.config.socket)
        with _step("release the instance lock"):
            self.guard.release()
        log.info("benchd stopped in %.2f s", time.monotonic() - t0)

    async def _close_store(self, store: Store) -> None:
        if self.queue is None:
            store.close()
        elif not await asyncio.to_thread(self.queue.ends.close_store, RUNBOOK_WAIT_S):
            log.warning("a runbook is still being written after %.0f s: the store is left open", RUNBOOK_WAIT_S)

    async def __aenter__(self) -> Daemon:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()


@contextlib.contextmanager
def _step(what: str):  # type: ignore[no-untyped-def]
    try:
        yield
    except Exception:
        log.exception("shutdown step failed: %s", what)


def _version() -> str:
    import benchd

    return benchd.__version__


async def run_daemon(config: Config) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status (0 after a clean shutdown within 10 s).

    Raises BenchdError (bad config) and AlreadyRunning from startup; `__main__` maps them to exits."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    force = asyncio.Event()

    def handle_term() -> None:
        log.info("SIGTERM: shutting down")
        stop.set()

    def handle_int() -> None:
        if stop.is_set():
            log.warning("second SIGINT: forcing the exit")
            force.set()
        else:
            log.info("SIGINT: shutting down (again to force)")
            stop.set()

    loop.add_signal_handler(signal.SIGTERM, handle_term)
    loop.add_signal_handler(signal.SIGINT, handle_int)
    daemon = Daemon(config)
    try:
        await daemon.start()
        await stop.wait()
        shutdown = asyncio.create_task(daemon.shutdown())
        forced = asyncio.create_task(force.wait())
        done, _ = await asyncio.wait({shutdown, forced}, timeout=SHUTDOWN_BUDGET_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        if shutdown in done:
            return EXIT_OK
        if forced in done:
            return EXIT_FORCED
        log.error("shutdown took longer than %.0f s", SHUTDOWN_BUDGET_S)
        return EXIT_SLOW_SHUTDOWN
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGINT)
