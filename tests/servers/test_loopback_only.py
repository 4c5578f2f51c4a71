"""Every request benchd sends goes to loopback (`http.loopback_connector`): a non-loopback address is refused
before a socket exists, a host name other than `localhost` before any DNS lookup, and `benchctl validate`
does not try to detect an external server whose url it refuses.

The server answering on 127.0.0.1 is a three-line aiohttp app: what is tested is the client's connector,
which no runtime can exercise (a runtime cannot make benchd send to 10.0.0.1)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from testlib import loopback_app

from benchd.config import is_loopback_host
from benchd.schemas import Candidate
from benchd.servers.runtimes import http
from benchd.servers.runtimes.openai import detect


async def _status(url: str) -> int:
    async with (aiohttp.ClientSession(connector=http.loopback_connector()) as session,
                session.get(url, allow_redirects=False) as resp):
        return resp.status


@pytest.mark.parametrize("url", ["http://192.0.2.1:9/", "http://[2001:db8::1]:9/", "http://[::ffff:192.0.2.1]:9/"])
async def test_non_loopback_addresses_are_refused_before_a_socket(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    monkeypatch.setattr(socket, "socket", lambda *a, **k: made.append(a) or pytest.fail("a socket was made"))
    with pytest.raises(aiohttp.ClientConnectorError, match="is not loopback"):
        await _status(url)
    assert made == []


async def test_host_names_other_than_localhost_get_no_dns_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: asked.append(host) or [])
    for host in ("example.com", "localhost.example.com", "127.0.0.1.nip.io"):
        with pytest.raises(aiohttp.ClientConnectorError, match="is not loopback"):
            await _status(f"http://{host}:9/")
    assert asked == []


async def test_loopback_and_localhost_are_reached() -> None:
    app = web.Application()

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.router.add_get("/health", health)
    async with loopback_app(app) as base:
        port = base.rsplit(":", 1)[1]
        assert await _status(f"{base}/health") == 200
        assert await _status(f"http://localhost:{port}/health") == 200
        assert (await http.http_get(f"http://localhost:{port}", "/health"))[0] == 200


async def test_detection_of_a_non_loopback_url_sends_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep check refuses such a url; `detect` (called by the supervisor and the fingerprint too)
    refuses it on its own."""
    monkeypatch.setattr(socket, "socket", lambda *a, **k: pytest.fail("a socket was made"))
    cand = Candidate(id="ext", runtime="openai", url="http://192.0.2.1:8080", request_model="m")
    with pytest.raises(aiohttp.ClientConnectorError, match="is not loopback"):
        await detect(cand)


def test_loopback_hosts() -> None:
    # An IPv4-mapped loopback is loopback: validate, the client's sockets and the listener check agree.
    assert all(map(is_loopback_host, ["localhost", "LOCALHOST", "127.0.0.1", "127.9.9.9", "::1", "::1%lo",
                                      "::ffff:127.0.0.1"]))
    assert not any(map(is_loopback_host, ["example.com", "10.0.0.1", "0.0.0.0", "::", "localhost.example.com",
                                          "::ffff:192.0.2.1"]))


def test_validate_does_not_ask_a_refused_url(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text('name = "x"\ncontexts = [64]\ngen_tokens = 8\n[[candidates]]\nid = "ext"\nruntime = "openai"\n'
                 'url = "http://192.0.2.1:8080"\nrequest_model = "m"\n')
    out = subprocess.run([str(Path(sys.executable).parent / "benchctl"), "validate", str(f)], capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "BENCHD_STATE_DIR": str(tmp_path / "s")}, timeout=60)
    assert out.returncode == 2
    assert "not a loopback address" in out.stderr
    assert "ext: external server at http://192.0.2.1:8080: not asked (its settings are refused" in out.stdout
    assert "not detected" not in out.stdout
