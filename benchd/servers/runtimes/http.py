"""HTTP helpers the adapters share: a fresh connection per request, to loopback only (`loopback_connector`),
no redirect followed, at most `MAX_BODY_BYTES` of a body read, and the shared `/health` shape."""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec
from aiohttp.abc import AbstractResolver, ResolveResult

from benchd.config import is_loopback_host

if TYPE_CHECKING:
    from aiohappyeyeballs import AddrInfoType  # aiohttp's own dependency; a type only


class _LoopbackResolver(AbstractResolver):
    """Resolves `localhost` to 127.0.0.1 and ::1 and refuses every other name, with no DNS lookup."""

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        if host.lower() != "localhost":
            raise OSError(errno.EACCES, f"{host} is not loopback: benchd sends requests to loopback addresses only")
        return [ResolveResult(hostname=host, host=ip, port=port, family=fam, proto=0, flags=socket.AI_NUMERICHOST)
                for ip, fam in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6))
                if family in (socket.AF_UNSPEC, fam)]

    async def close(self) -> None:
        return None


def _loopback_socket(addr_info: AddrInfoType) -> socket.socket:
    """A socket for `addr_info`, refused (before it connects) when its address is not loopback."""
    family, kind, proto, _, sockaddr = addr_info
    if not is_loopback_host(ip := str(sockaddr[0])):
        raise OSError(errno.EACCES, f"{ip} is not loopback: benchd sends requests to loopback addresses only")
    return socket.socket(family, kind, proto)


def loopback_connector() -> aiohttp.TCPConnector:
    """Every request's connector: a fresh connection, refused before any lookup or socket unless loopback."""
    return aiohttp.TCPConnector(force_close=True, resolver=_LoopbackResolver(), socket_factory=_loopback_socket)


@dataclass(frozen=True)
class Readiness:
    """One health poll: ready or not, with the server's own words for the log/error message."""

    ready: bool
    detail: str


#: The most a non-streamed answer (health, /props, /slots, /v1/models, token counts) may hold.
MAX_BODY_BYTES = 16 << 20


class ResponseTooLarge(aiohttp.ClientPayloadError):
    """A body over its cap (an aiohttp.ClientError, so every caller's handling of a failed request holds)."""


async def read_capped(resp: aiohttp.ClientResponse, limit: int = MAX_BODY_BYTES) -> bytes:
    """The response body, refused with `ResponseTooLarge` once it passes `limit` bytes."""
    if resp.content_length is not None and resp.content_length > limit:
        raise ResponseTooLarge(f"the answer declares {resp.content_length} bytes, over the {limit}-byte cap")
    buf = bytearray()
    async for chunk in resp.content.iter_any():
        buf += chunk
        if len(buf) > limit:
            raise ResponseTooLarge(f"the answer is over the {limit}-byte cap")
    return bytes(buf)


def _session(timeout_s: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=loopback_connector(),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    )


async def http_get(base_url: str, path: str, *, timeout_s: float = 2.0) -> tuple[int, bytes]:
    """GET on a fresh connection; returns (status, body). Connection errors raise aiohttp errors."""
    async with _session(timeout_s) as session, session.get(base_url + path, allow_redirects=False) as resp:
        return resp.status, await read_capped(resp)


async def http_post_json(
    base_url: str, path: str, body: Mapping[str, Any] | bytes, *, timeout_s: float = 30.0,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """POST a JSON body on a fresh connection (`headers` on top of the JSON content type); (status, body).
    `body` as bytes is sent as it is (JSON the caller encoded, e.g. off the event loop)."""
    async with (
        _session(timeout_s) as session,
        session.post(
            base_url + path, data=body if isinstance(body, bytes) else msgspec.json.encode(body),
            headers={**(headers or {}), "Content-Type": "application/json"}, allow_redirects=False,
        ) as resp,
    ):
        return resp.status, await read_capped(resp)


async def json_health(base_url: str, path: str, ok_values: tuple[str, ...]) -> Readiness:
    """A `/health` that answers 200 `{"status": <one of ok_values>}` when ready (shared shape)."""
    try:
        status, raw = await http_get(base_url, path, timeout_s=2.0)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Readiness(False, f"not answering: {type(exc).__name__}")
    text = raw[:300].decode("utf-8", "replace")
    if status != 200:
        return Readiness(False, f"HTTP {status}: {text}")
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return Readiness(False, f"HTTP 200 but not JSON: {text}")
    ok = isinstance(doc, dict) and doc.get("status") in ok_values
    return Readiness(ok, text)
