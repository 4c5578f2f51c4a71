"""The handle of one running server (`Server`), how it ended (`ExitInfo`), and why it never got ready."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from benchd.schemas import Candidate, ExternalServer
from benchd.servers.procgroup import LOG_TAIL_BYTES, read_log_tail

StartFailure = Literal["spawn_failed", "exited", "timeout", "port_taken", "unreachable", "not_the_server",
                       "not_loopback"]


@dataclass(frozen=True)
class ExitInfo:
    """How a server process ended: `status` is "exit N" or "signal N"; `expected` if we stopped it."""

    status: str
    returncode: int
    log_tail: str
    expected: bool


class ServerStartError(Exception):
    """The server never got ready: why (`reason`), its exit status if it exited, and its log tail."""

    def __init__(
        self,
        message: str,
        *,
        reason: StartFailure,
        exit_status: str | None = None,
        log_tail: str = "",
        log_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.exit_status = exit_status
        self.log_tail = log_tail
        self.log_path = log_path


#: The pid of an external server whose candidate gives none: above every PID_MAX_LIMIT, so never found.
NO_PID = 2**31 - 1


@dataclass(eq=False)
class Server:
    """A running (or ended) server that `Supervisor.start` made ready."""

    job: str
    candidate: Candidate
    runtime: str
    argv: list[str]
    command: list[str]
    binary: str
    binary_source: str
    port: int
    base_url: str
    pid: int
    pgid: int
    create_time: float
    ctx_size: int | None
    log_path: Path
    record_path: Path
    started_at: float
    #: Time to ready: spawn -> health answers; spawn -> the adapter's model-loaded log line (`load_s`,
    #: None with `load_note` saying why); the model files' page-cache state just before the spawn.
    ready_s: float = 0.0
    ready_note: str = ""
    ready_stalled_s: float | None = None
    ready_stopped_s: float | None = None
    load_s: float | None = None
    load_note: str = ""
    #: "cold", "warm" or "partial" (`pagecache.cache_state`: by the resident share); None: unknown (`cache_note`).
    cache: str | None = None
    cache_note: str = ""
    cold_requested: bool = False
    resident_before: float | None = None
    version: str | None = None
    version_source: str = ""
    #: Environment passed on top of the scrubbed inheritance (secret-looking values redacted), and the
    #: inherited runtime knobs removed (`runtimes.environment`).
    env_passed: dict[str, str] = field(default_factory=dict)
    env_removed: list[str] = field(default_factory=list)
    #: `--fit` as started and its source; the layer split the server reported, or why none (`split_note`).
    fit: str | None = None
    fit_note: str = ""
    layer_split: str | None = None
    split_note: str = ""
    exit: ExitInfo | None = None
    #: The candidate's server start number in its job (1 = its first), set by the engine's pool: rows
    #: carry it, so the comparison can count the starts its rounds rest on.
    start_no: int | None = None
    #: A server benchd does not start (`runtime = "openai"`): what was detected at its URL. `stop()` only
    #: lets go of it; `pid` is its `pid` (or NO_PID: memory then unsampled), `argv` and `command` are empty.
    external: ExternalServer | None = None
    _proc: asyncio.subprocess.Process | None = field(default=None, repr=False)
    _exited: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _watcher: asyncio.Task[None] | None = field(default=None, repr=False)
    _stopping: bool = field(default=False, repr=False)

    @property
    def running(self) -> bool:
        return self.exit is None

    @property
    def crashed(self) -> ExitInfo | None:
        """Exit info when the server ended without `stop()` asking it to; else None."""
        return self.exit if self.exit is not None and not self.exit.expected else None

    async def wait_exit(self, timeout_s: float | None = None) -> ExitInfo | None:
        """Wait until the process ends (None on timeout)."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._exited.wait()
        except TimeoutError:
            return None
        return self.exit

    def start_error(self, message: str, reason: StartFailure) -> ServerStartError:
        """This server's failure to get ready, with its log tail and log path."""
        return ServerStartError(message, reason=reason, log_tail=self.log_tail(), log_path=self.log_path)

    def log_tail(self, max_bytes: int = LOG_TAIL_BYTES) -> str:
        return read_log_tail(self.log_path, max_bytes)
