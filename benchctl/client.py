"""The benchd API client over its Unix socket: a sync one for the CLI, an async one for tests and tools.

Answers are the JSON as sent (tests read the wire); commands decode them into `benchd.schemas` types
(`commands.common.decoded`). Errors are typed so commands map them to exit codes without parsing text:
    Unreachable → 3 (with one line on how to start the daemon; SocketPathTooLong says the path is over
    the Unix-socket limit instead, checked only once connecting failed), ApiError(status 4xx) → 2, else 1.

Reasons and facts: docs/architecture.md#the-socket-client.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    from benchd.schemas import Event


class ClientError(Exception):
    """Anything that went wrong talking to benchd."""


class Unreachable(ClientError):
    """No daemon answers on the socket (missing, refused, or it went away mid-request)."""

    def __init__(self, socket_path: Path | str, reason: str = "") -> None:
        self.socket_path = Path(socket_path)
        self.reason = reason
        super().__init__(unreachable_message(self.socket_path))


class SocketPathTooLong(Unreachable):
    """No daemon can listen on a path longer than a Unix socket address holds (pytest's tmp_path on
    macOS is one): say so, rather than let the kernel's "AF_UNIX path too long" surface as a crash."""

    def __init__(self, socket_path: Path | str) -> None:
        from benchd.config import MAX_SOCKET_PATH_BYTES

        n = len(os.fsencode(str(socket_path)))
        super().__init__(socket_path, f"the socket path is {n} bytes")
        self.args = (
            f"cannot reach benchd on {socket_path}: the socket path is {n} bytes, over the "
            f"{MAX_SOCKET_PATH_BYTES}-byte limit of Unix sockets (sun_path is 104 bytes on macOS); use a shorter "
            "--socket / $BENCHD_SOCKET or --state-dir",
        )


def unreachable(socket_path: Path | str, reason: str) -> Unreachable:
    """The error for a socket nothing answers on: SocketPathTooLong when no benchd could bind that path
    (the daemon refuses the same limit). Checked on the failure path only, so a successful `benchctl
    ping` never imports the config module."""
    from benchd.config import MAX_SOCKET_PATH_BYTES

    if len(os.fsencode(str(socket_path))) > MAX_SOCKET_PATH_BYTES:
        return SocketPathTooLong(socket_path)
    return Unreachable(socket_path, reason)


class ApiError(ClientError):
    """The daemon answered with an error body `{"error": {code, message, field}}`."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        where = f" (field {field})" if field else ""
        super().__init__(f"{message}{where}")


def unreachable_message(socket_path: Path) -> str:
    if socket_path.name == "benchd.sock":
        start = f"benchd --state-dir {socket_path.parent}"
    else:
        start = f"benchd --socket {socket_path}"
    return f"benchd is not running on {socket_path}: start it with `{start}` or `benchctl service install`"


def _error_from(status: int, body: bytes) -> ApiError:
    import msgspec

    from benchd.schemas import ErrorAnswer

    try:
        err = msgspec.json.decode(body, type=ErrorAnswer).error
        return ApiError(status, err.code, err.message, err.field)
    except msgspec.MsgspecError:
        text = body.decode(errors="replace").strip()[:300]
        return ApiError(status, "http_error", f"HTTP {status}: {text}")


def _events_query(since: int, follow: bool) -> str:
    return urlencode({"since": since, "follow": "true" if follow else "false"})


def _job_path(job_id: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Client:
    """Synchronous client; one connection per request (the CLI makes a handful)."""

    def __init__(self, socket_path: Path | str, timeout: float = 30.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout

    def _open(self, method: str, path: str, body: Any = None, timeout: float | None = -1.0
              ) -> tuple[_UnixHTTPConnection, http.client.HTTPResponse]:
        conn = _UnixHTTPConnection(str(self.socket_path), self.timeout if timeout == -1.0 else timeout)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError,
                http.client.RemoteDisconnected) as exc:
            conn.close()
            raise unreachable(self.socket_path, str(exc)) from exc
        except PermissionError as exc:
            conn.close()
            raise Unreachable(self.socket_path, f"permission denied: {exc}") from exc
        except TimeoutError as exc:
            conn.close()
            raise Unreachable(self.socket_path, "timed out") from exc
        except OSError as exc:  # "AF_UNIX path too long" carries no errno: the length is the reason
            conn.close()
            err = unreachable(self.socket_path, str(exc))
            if isinstance(err, SocketPathTooLong):
                raise err from exc
            raise
        return conn, resp

    def request(self, method: str, path: str, body: Any = None) -> Any:
        conn, resp = self._open(method, path, body)
        try:
            data = resp.read()
        except (ConnectionError, http.client.IncompleteRead) as exc:
            raise Unreachable(self.socket_path, str(exc)) from exc
        finally:
            conn.close()
        if resp.status >= 400:
            raise _error_from(resp.status, data)
        return json.loads(data) if data else None

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")  # type: ignore[no-any-return]

    def submit(self, sweep: dict[str, Any], not_before: str | None = None, when: list[str] | None = None
               ) -> dict[str, Any]:
        body = {"sweep": sweep, "not_before": not_before, "when": when or []}
        return self.request("POST", "/v1/jobs", body)  # type: ignore[no-any-return]

    def jobs(self, state: str | None = None, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        q = {k: v for k, v in (("state", state), ("limit", limit), ("cursor", cursor)) if v is not None}
        return self.request("GET", f"/v1/jobs?{urlencode(q)}")  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", _job_path(job_id))  # type: ignore[no-any-return]

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self.request("POST", _job_path(job_id) + "/cancel")  # type: ignore[no-any-return]

    def recheck_status(self) -> dict[str, Any]:
        return self.request("GET", "/v1/recheck")  # type: ignore[no-any-return]

    def recheck(self, now: bool = False) -> dict[str, Any]:
        return self.request("POST", "/v1/recheck", {"now": now})  # type: ignore[no-any-return]

    def events(self, job_id: str, since: int = 0, follow: bool = False) -> Iterator[bytes]:
        """NDJSON lines (bytes, newline stripped). Ends at the stream's end; a drop raises Unreachable."""
        conn, resp = self._open("GET", f"{_job_path(job_id)}/events?{_events_query(since, follow)}",
                                timeout=None if follow else self.timeout)
        try:
            if resp.status >= 400:
                raise _error_from(resp.status, resp.read())
            while True:
                try:
                    line = resp.readline()
                except (ConnectionError, http.client.IncompleteRead, OSError) as exc:
                    raise Unreachable(self.socket_path, f"stream dropped: {exc}") from exc
                if not line:
                    return
                line = line.strip()
                if line:
                    yield line
        finally:
            conn.close()


class AsyncClient:
    """aiohttp over `UnixConnector`; use as `async with AsyncClient(path) as c:`."""

    def __init__(self, socket_path: Path | str, timeout: float = 30.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._session: Any = None

    async def __aenter__(self) -> AsyncClient:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=str(self.socket_path)),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        import aiohttp

        kwargs: dict[str, Any] = {}
        if raw is not None:
            kwargs["data"] = raw
            kwargs["headers"] = {"Content-Type": "application/json"}
        elif body is not None:
            kwargs["json"] = body
        try:
            async with self._session.request(method, f"http://benchd{path}", **kwargs) as resp:
                data = await resp.read()
                status = resp.status
        except (aiohttp.ClientConnectionError, FileNotFoundError) as exc:
            raise unreachable(self.socket_path, str(exc)) from exc
        if status >= 400:
            raise _error_from(status, data)
        return json.loads(data) if data else None

    async def health(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/health")  # type: ignore[no-any-return]

    async def submit(self, sweep: dict[str, Any], not_before: str | None = None, when: list[str] | None = None
                     ) -> dict[str, Any]:
        return await self.request(  # type: ignore[no-any-return]
            "POST", "/v1/jobs", {"sweep": sweep, "not_before": not_before, "when": when or []})

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.request("GET", _job_path(job_id))  # type: ignore[no-any-return]

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return await self.request("POST", _job_path(job_id) + "/cancel")  # type: ignore[no-any-return]

    async def events(self, job_id: str, since: int = 0, follow: bool = False) -> AsyncIterator[Event]:
        import aiohttp

        from benchd.schemas import event_decoder

        url = f"http://benchd{_job_path(job_id)}/events?{_events_query(since, follow)}"
        try:
            async with self._session.get(url) as resp:
                if resp.status >= 400:
                    raise _error_from(resp.status, await resp.read())
                async for line in resp.content:
                    if line.strip():
                        yield event_decoder.decode(line)
        except aiohttp.ClientConnectionError as exc:
            raise Unreachable(self.socket_path, str(exc)) from exc
