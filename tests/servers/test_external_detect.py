"""Detection of external servers (`runtime = "openai"`), and the sweep check's refusals.

Ollama and LM Studio cannot be installed here, so `_double` is a small aiohttp server on 127.0.0.1 that
answers ONLY their detection endpoints (the shapes from their API docs: Ollama's `/api/version`,
`/api/show`, `/api/tags`; LM Studio's `/api/v0/models`) plus `/v1/models`; it serves no completions.
The real servers' detection (llama-server, MLX) is in test_external_detect_real.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp import web
from testlib import loopback_app

from benchd.engine.sweepcheck import external_problems
from benchd.schemas import Candidate
from benchd.servers.runtimes.openai import detect


def cand(**kw: Any) -> Candidate:
    return msgspec.convert({"id": "ext", "runtime": "openai", "request_model": "m", **kw}, Candidate)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _double(routes: dict[tuple[str, str], Any]) -> AsyncIterator[str]:
    app = web.Application()
    for (method, path), doc in routes.items():
        async def handler(request: web.Request, doc: Any = doc) -> web.Response:
            return web.json_response(doc)
        app.router.add_route(method, path, handler)
    async with loopback_app(app) as url:
        yield url


@pytest.fixture
async def ollama() -> AsyncIterator[str]:
    async for url in _double({("GET", "/api/version"): {"version": "0.12.3"},
                              ("POST", "/api/show"): {"parameters": "num_ctx 8192\nstop \"<|im_end|>\""},
                              ("GET", "/api/tags"): {"models": [{"name": "m"}]},
                              ("GET", "/v1/models"): {"object": "list", "data": [{"id": "m"}]}}):
        yield url


@pytest.fixture
async def lmstudio() -> AsyncIterator[str]:
    async for url in _double({("GET", "/api/v0/models"): {"object": "list", "data": [
                                  {"id": "other", "max_context_length": 4096},
                                  {"id": "m", "max_context_length": 32768, "loaded_context_length": 4096}]},
                              ("GET", "/v1/models"): {"object": "list", "data": [{"id": "m"}]}}):
        yield url


@pytest.fixture
async def unknown() -> AsyncIterator[str]:
    async for url in _double({("GET", "/v1/models"): {"object": "list", "data": [{"id": "m"}]}}):
        yield url


async def test_ollama(ollama: str) -> None:
    found = await detect(cand(url=ollama))
    assert found.kind == "ollama" and found.version == "ollama 0.12.3" and found.slot_ctx == 8192
    assert found.sources["slot_ctx"].startswith("POST /api/show") and found.model_ids == ["m"]
    assert "pid" in found.null_reasons


async def test_lm_studio(lmstudio: str) -> None:
    found = await detect(cand(url=lmstudio + "/v1/"))
    assert found.kind == "lm-studio" and found.slot_ctx == 4096 and found.version is None
    assert "loaded_context_length" in found.sources["slot_ctx"] and found.null_reasons["version"]


async def test_unknown_openai_compatible(unknown: str) -> None:
    found = await detect(cand(url=unknown))
    assert found.kind == "OpenAI-compatible, unknown" and found.model_ids == ["m"]
    assert found.slot_ctx is None and found.null_reasons["slot_ctx"]


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"url": "http://10.0.0.5:8080"}, "url", "not a loopback address"),
    ({"url": "https://127.0.0.1:8080"}, "url", "must be http://"),
    ({"url": "http://example.com"}, "url", "not a loopback address"),
    ({"url": "http://127.0.0.1:8080", "args": ["-t", "2"]}, "args", "does not apply"),
    ({"url": "http://127.0.0.1:8080", "model": "/m.gguf"}, "model", "does not apply"),
    ({}, "url", "needs `url`"),
])
def test_static_refusals(fields: dict[str, Any], field: str, words: str) -> None:
    problems = external_problems(cand(**fields))
    assert any(p.field and p.field.endswith("." + field) and words in p.message for p in problems), problems


def test_loopback_forms_pass() -> None:
    for url in ("http://127.0.0.1:8080", "http://127.3.4.5", "http://[::1]:8080/v1", "http://localhost:11434"):
        assert external_problems(cand(url=url)) == [], url


def test_owned_candidates_keep_their_rules() -> None:
    owned = msgspec.convert({"id": "o", "runtime": "llama-server", "url": "http://127.0.0.1:1"}, Candidate)
    fields = {p.field for p in external_problems(owned)}
    assert fields == {"$.candidates[o].url", "$.candidates[o].model"}


async def test_api_key_is_sent_and_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A double that answers `/v1/models` only with the right bearer key (as a keyed server would)."""
    monkeypatch.setenv("BENCHD_TEST_KEY", "sekrit-123")
    seen: list[str] = []

    async def models(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer sekrit-123":
            return web.json_response({"error": "unauthorized"}, status=401)
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    from benchd.servers.runtimes import get_adapter

    async with loopback_app(app) as url:
        c = cand(url=url, api_key_env="BENCHD_TEST_KEY")
        found = await detect(c)
        # while the server it was cleared for listens (the key goes to no other listener: test_hostile_external)
        assert get_adapter("openai").requests.request_headers(c)["Authorization"] == "Bearer sekrit-123"
    assert found.kind == "OpenAI-compatible, unknown" and seen and set(seen) == {"Bearer sekrit-123"}
    assert b"sekrit" not in msgspec.json.encode(found) + msgspec.json.encode(c)
    assert "Authorization" not in get_adapter("llama-server").requests.request_headers(c)
