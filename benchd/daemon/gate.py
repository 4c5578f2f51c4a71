"""The peer gate: who may connect to the API socket, and how many at once (docs/architecture.md#the-api-gate)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

import msgspec

from benchd.peercred import PeerCredError, peer_uid
from benchd.schemas import ErrorAnswer, ErrorBody

log = logging.getLogger("benchd.daemon.api")  # the gate's lines stay under the API's logger name

REFUSE_LINGER_S = 2.0

_REFUSAL = msgspec.json.encode(ErrorAnswer(error=ErrorBody(code="forbidden", message="benchd serves only its own user")))
REFUSAL_RESPONSE = (
    b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_REFUSAL)).encode() + b"\r\n\r\n" + _REFUSAL
)


#: Connections served at once, and how long one may take to send its first headers (idle ones hold fds).
def _fd_budget() -> int:
    """A quarter of the soft fd limit (launchd's default is 256 on macOS), within [16, 256]."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 256 if soft == resource.RLIM_INFINITY else max(16, min(256, soft // 4))


MAX_CONNECTIONS = _fd_budget()
HEADER_TIMEOUT_S = 30.0
_TOO_MANY = msgspec.json.encode(ErrorAnswer(error=ErrorBody(
    code="too_many_connections", message=f"benchd serves at most {MAX_CONNECTIONS} connections at once")))
TOO_MANY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_TOO_MANY)).encode() + b"\r\n\r\n" + _TOO_MANY
)


class PeerGate(asyncio.Protocol):
    """Wraps aiohttp's per-connection protocol for peers with the daemon's uid only; with `live`, caps the
    connections and drops one without complete headers within HEADER_TIMEOUT_S."""

    def __init__(self, make_inner: Callable[[], asyncio.Protocol], allowed_uid: int,
                 live: set[PeerGate] | None = None) -> None:
        self._make_inner = make_inner
        self._allowed = allowed_uid
        self._inner: asyncio.Protocol | None = None
        self._abort: asyncio.TimerHandle | None = None
        self._live = live
        self._header_timer: asyncio.TimerHandle | None = None
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        try:
            uid: int | None = peer_uid(transport.get_extra_info("socket"))
        except PeerCredError as exc:
            log.warning("refused a connection: %s", exc)
            uid = None
        if uid != self._allowed:
            if uid is not None:
                log.warning("refused a connection from uid %s (benchd runs as uid %s)", uid, self._allowed)
            self._refuse(transport, REFUSAL_RESPONSE)
            return
        if self._live is not None:
            if len(self._live) >= MAX_CONNECTIONS:
                log.warning("refused a connection: %d connections already open", len(self._live))
                self._refuse(transport, TOO_MANY_RESPONSE)
                return
            self._live.add(self)
            closing = cast(asyncio.Transport, transport)
            self._header_timer = asyncio.get_running_loop().call_later(HEADER_TIMEOUT_S, self._no_headers, closing)
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def _refuse(self, transport: asyncio.BaseTransport, response: bytes) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio subclasses
        # Answer, half-close, and drain what the peer sends until it closes (at most REFUSE_LINGER_S):
        # closing with its request unread would reset the connection and lose the answer on the way.
        transport.write(response)
        if transport.can_write_eof():
            transport.write_eof()
        self._abort = asyncio.get_running_loop().call_later(REFUSE_LINGER_S, transport.abort)

    def _no_headers(self, transport: asyncio.Transport) -> None:
        log.info("dropped a connection that sent no complete request headers within %.0f s", HEADER_TIMEOUT_S)
        transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is not None:
            seen = self._tail + data
            if b"\r\n\r\n" in seen:
                self._header_timer.cancel()
                self._header_timer = None
                self._tail = b""
            else:
                self._tail = seen[-3:]
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else False  # refused: close now

    def connection_lost(self, exc: Exception | None) -> None:
        if self._abort is not None:
            self._abort.cancel()
        if self._header_timer is not None:
            self._header_timer.cancel()
        if self._live is not None:
            self._live.discard(self)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
