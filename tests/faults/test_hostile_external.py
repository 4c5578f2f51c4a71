"""External servers and secrets (issue 36): benchd follows no redirect, refuses credentials in a URL,
caps what it reads (a body, a stream line), sends the API key only to a listener it checked (the
candidate's `pid`, or a process of benchd's own user), and no server it starts inherits a secret.

The servers here are aiohttp apps on 127.0.0.1 in this test process (a double for an external server
that misbehaves on purpose, which no real server does on demand); the key test against another user's
listener starts a small Python HTTP server as `nobody` (root only)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web
from testlib import loopback_app

from benchd.engine import probe
from benchd.engine.sweepcheck import external_problems
from benchd.errors import BenchdError
from benchd.schemas import Candidate
from benchd.servers.runtimes import environment
from benchd.servers.runtimes.http import MAX_BODY_BYTES, ResponseTooLarge, http_get
from benchd.servers.runtimes.openai import api_key_headers, detect, key_recipient

KEY_ENV = "BENCHD_HOSTILE_TEST_KEY"


def ext(url: str, **kw: Any) -> Candidate:
    return msgspec.convert({"id": "ext", "runtime": "openai", "url": url, "request_model": "m", **kw}, Candidate)


def _models_app(seen: list[dict[str, str]]) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    async def other(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({}, status=404)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_route("*", "/{tail:.*}", other)
    return app


def test_credentials_query_and_fragment_in_a_url_are_refused() -> None:
    (err,) = external_problems(ext("http://admin:hunter2@127.0.0.1:8080"))
    assert (err.code, err.field) == ("credentials_in_url", "$.candidates[ext].url")
    assert "hunter2" not in err.message and "api_key_env" in err.message
    for url in ("http://127.0.0.1:8080/?key=abc", "http://127.0.0.1:8080/#x"):
        assert [e.code for e in external_problems(ext(url))] == ["bad_url"], url


async def test_no_redirect_is_followed() -> None:
    """The server answers every GET with a 302 to another loopback server: that one is never asked."""
    hits: list[dict[str, str]] = []
    async with loopback_app(_models_app(hits)) as target:
        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPFound(target + request.path)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", redirect)
        async with loopback_app(app) as url:
            status, _ = await http_get(url, "/health")
            assert status == 302
            with pytest.raises(Exception):  # noqa: B017  (nothing OpenAI-like answers: every GET is a 302)
                await detect(ext(url))
    assert hits == [], "a redirect was followed"


async def test_bodies_and_stream_lines_are_capped() -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        chunk = b"x" * (1 << 20)
        try:
            for _ in range(MAX_BODY_BYTES // len(chunk) + 8):  # no newline, ever
                await resp.write(chunk)
        except (ConnectionResetError, RuntimeError):
            pass  # the client hung up at its cap: what is tested
        return resp

    app = web.Application()
    app.router.add_get("/big", huge)
    app.router.add_post("/v1/chat/completions", huge)
    async with loopback_app(app) as url:
        with pytest.raises(ResponseTooLarge):
            await http_get(url, "/big", timeout_s=120)
        result = await probe.run(url + "/v1/chat/completions", b"{}", {}, timeout_s=120)
    assert result.status == "failed" and "without a newline" in (result.error or ""), result.error


async def test_the_key_goes_to_a_listener_of_benchds_own_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process listens (same user): the key is sent; given a `pid` that does not listen, it is not."""
    monkeypatch.setenv(KEY_ENV, "k-123")
    seen: list[dict[str, str]] = []
    async with loopback_app(_models_app(seen)) as url:
        found = await detect(ext(url, api_key_env=KEY_ENV))
        assert found.kind and any(h.get("Authorization") == "Bearer k-123" for h in seen)
        assert api_key_headers(ext(url, api_key_env=KEY_ENV)) == {"Authorization": "Bearer k-123"}
        seen.clear()
        sleeper = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
        try:
            pid, why = await asyncio.to_thread(key_recipient, ext(url, api_key_env=KEY_ENV, pid=sleeper.pid))
            assert pid is None and "does not listen" in why
            with pytest.raises(BenchdError) as info:
                await detect(ext(url, api_key_env=KEY_ENV, pid=sleeper.pid))
        finally:
            sleeper.kill()
            await sleeper.wait()
    assert info.value.code == "api_key_withheld" and "k-123" not in info.value.message
    assert seen == [], "a request was made although the key was withheld"


#: An interpreter another user may run (the venv's lives under root's home).
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
                    reason="needs root (and /usr/bin/python3) to start a listener of another user")
async def test_the_key_is_withheld_from_another_users_listener(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "k-456")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ("import http.server, sys\n"
              "class H(http.server.BaseHTTPRequestHandler):\n"
              "    def do_GET(self):\n"
              "        print(self.headers.get('Authorization'), flush=True)\n"
              "        self.send_response(200); self.send_header('Content-Type', 'application/json'); self.end_headers()\n"
              "        self.wfile.write(b'{\"data\": [{\"id\": \"m\"}]}')\n"
              "    def log_message(self, *args):\n"
              "        pass\n"
              "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    proc = await asyncio.create_subprocess_exec(SYSTEM_PYTHON, "-c", server, str(port), user="nobody", cwd="/",
                                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        with pytest.raises(BenchdError) as info:
            await detect(ext(url, api_key_env=KEY_ENV))
        assert info.value.code == "api_key_withheld" and "another user" in info.value.message
        with pytest.raises(BenchdError):
            api_key_headers(ext(url, api_key_env=KEY_ENV))
        # given its pid, the candidate names the server: the key is sent
        await detect(ext(url, api_key_env=KEY_ENV, pid=proc.pid))
    finally:
        proc.kill()
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    sent = out.decode().split()  # the Authorization header of each request, in order: None until the pid was named
    assert sent and sent[0] == "Bearer", sent  # the withheld detection made no request at all
    assert set(sent) <= {"Bearer", "k-456"}, sent


def test_no_server_inherits_a_secret() -> None:
    inherited = {"PATH": "/usr/bin", "HF_TOKEN": "hf_x", "MY_API_KEY": "k", "DB_PASSWORD": "p",
                 "TOKENIZERS_PARALLELISM": "false", "LLAMA_ARG_HOST": "0.0.0.0"}
    env = environment.build(("LLAMA_",), {}, {"CAND_SECRET": "given"}, inherited)
    assert env.env == {"PATH": "/usr/bin", "TOKENIZERS_PARALLELISM": "false", "CAND_SECRET": "given"}
    assert env.removed == ["DB_PASSWORD", "HF_TOKEN", "LLAMA_ARG_HOST", "MY_API_KEY"]
    assert env.recorded() == {"CAND_SECRET": "<redacted>"}
