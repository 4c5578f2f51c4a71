"""`runtime = "openai"`: a server benchd does not start, reached at the candidate's `url`; what answers is
detected per URL (`detect`, `_DETECTED`) and kind-dependent requests go through that runtime's adapter.

Reasons and facts: docs/runtimes.md#external-servers."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, TypedDict, Unpack
from urllib.parse import urlsplit

import aiohttp
import msgspec
import psutil

from benchd.errors import BenchdError
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate, ExternalServer
from benchd.schemas.json import JSONObject
from benchd.servers.procgroup import listens_on, port_listeners
from benchd.servers.runtimes import base
from benchd.servers.runtimes.http import loopback_connector, read_capped
from benchd.servers.runtimes.llama_server import LlamaServerAdapter
from benchd.servers.runtimes.mlx_lm import MlxLmAdapter
from benchd.servers.runtimes.mlx_vlm import MlxVlmAdapter
from benchd.stats.notation import plural

UNKNOWN_KIND = "OpenAI-compatible, unknown"
NOT_STARTED = "an external server: benchd does not start it"
#: Kinds that are one of the runtimes benchd runs itself: their kind-specific requests go through it.
_INNER: dict[str, base.RuntimeAdapter] = {
    "llama-server": LlamaServerAdapter(),
    "mlx_lm.server": MlxLmAdapter(),
    "mlx_vlm.server": MlxVlmAdapter(),
}
_DETECTED: dict[str, ExternalServer] = {}


def base_url(url: str) -> str:
    """The URL requests are built on: no trailing slash, no `/v1` (benchd adds the paths it asks)."""
    u = url.rstrip("/")
    return u[:-3] if u.endswith("/v1") else u


def key_recipient(candidate: Candidate) -> tuple[int | None, str]:
    """(the pid the API key may be sent to, "") or (None, why not): the process of benchd's user listening
    on the URL's port. Blocking (psutil)."""
    assert candidate.url is not None
    port = urlsplit(base_url(candidate.url)).port or 80
    if candidate.pid is not None:
        if listens_on(candidate.pid, port):
            return candidate.pid, ""
        return None, f"pid {candidate.pid} does not listen on port {port}"
    pids, unseen = port_listeners(port)
    me = os.getuid()
    owners: dict[int, int | None] = {}
    for pid in pids:
        try:
            owners[pid] = psutil.Process(pid).uids().real
        except psutil.Error:
            owners[pid] = None
    if unseen or any(uid != me for uid in owners.values()):
        return None, (f"port {port} is held by a process of another user (or one benchd may not inspect); "
                      "the key goes only to a server of benchd's own user, or to the candidate's `pid`")
    if not owners:
        return None, f"nothing listens on port {port}"
    return min(owners), ""


#: The process each external URL's API key was cleared for (`key_recipient`, checked when detected).
_KEY_RECIPIENT: dict[str, int] = {}


def api_key_headers(candidate: Candidate) -> dict[str, str]:
    """`Authorization: Bearer <key>` from `api_key_env`'s variable, read per request; empty without one.
    Raises BenchdError `api_key_withheld` unless the process it was cleared for still listens there."""
    if not (candidate.api_key_env and os.environ.get(candidate.api_key_env)):
        return {}
    assert candidate.url is not None
    url = base_url(candidate.url)
    port = urlsplit(url).port or 80
    pid = _KEY_RECIPIENT.get(url)
    if pid is None or not listens_on(pid, port):
        pid, why = key_recipient(candidate)
        if pid is None:
            _KEY_RECIPIENT.pop(url, None)
            raise BenchdError("api_key_withheld", f"candidate {candidate.id!r}: the API key from ${candidate.api_key_env} "
                              f"is not sent to {url}: {why}", f"$.candidates[{candidate.id}].api_key_env")
        _KEY_RECIPIENT[url] = pid
    return {"Authorization": f"Bearer {os.environ[candidate.api_key_env]}"}


async def _get(url: str, path: str, headers: Mapping[str, str]) -> tuple[int, object, str]:
    """(status, decoded JSON or None, the Server header) of one GET on a fresh connection."""
    async with (
        aiohttp.ClientSession(connector=loopback_connector(),
                              timeout=aiohttp.ClientTimeout(total=10.0)) as session,
        session.get(url + path, headers=dict(headers), allow_redirects=False) as resp,
    ):
        raw = await read_capped(resp)
        try:
            doc = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            doc = None
        return resp.status, doc, resp.headers.get("Server", "")


async def _post(url: str, path: str, body: Mapping[str, object], headers: Mapping[str, str]) -> tuple[int, object]:
    async with (
        aiohttp.ClientSession(connector=loopback_connector(),
                              timeout=aiohttp.ClientTimeout(total=10.0)) as session,
        session.post(url + path, json=dict(body), headers=dict(headers), allow_redirects=False) as resp,
    ):
        raw = await read_capped(resp)
        try:
            return resp.status, msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return resp.status, None


def _model_ids(doc: object) -> list[str]:
    data = doc.get("data") if isinstance(doc, dict) else None
    return [str(m["id"]) for m in data or [] if isinstance(m, dict) and m.get("id") is not None]


async def detect(candidate: Candidate) -> ExternalServer:
    """What answers at the candidate's `url`. Raises `aiohttp.ClientError` / `TimeoutError` when nothing
    does, `RuntimeError` when it is not OpenAI-compatible."""
    assert candidate.url is not None
    url = base_url(candidate.url)
    await _check_key_recipient(candidate, url)
    d = _Detection(candidate, url, api_key_headers(candidate))
    for step in (_as_llama_server, _as_ollama, _as_lm_studio, _as_other):
        found = await step(d)
        if found is not None:
            return found
    raise RuntimeError(f"{url} answers but not like an OpenAI-compatible server ({'; '.join(d.asked)})")


async def _check_key_recipient(candidate: Candidate, url: str) -> None:
    """An API key goes only to a process that listens on the url (recorded); else `api_key_withheld`."""
    if candidate.api_key_env and os.environ.get(candidate.api_key_env):
        pid, why = await asyncio.to_thread(key_recipient, candidate)  # a psutil scan: off the loop
        if pid is None:
            raise BenchdError("api_key_withheld", f"candidate {candidate.id!r}: the API key from "
                              f"${candidate.api_key_env} is not sent to {url}: {why}",
                              f"$.candidates[{candidate.id}].api_key_env")
        _KEY_RECIPIENT[url] = pid


class _Facts(TypedDict, total=False):
    """What a detection found, as `ExternalServer` fields (each one left out is null)."""

    version: str | None
    slot_ctx: int | None
    total_slots: int | None
    chat_format: str | None
    model_ids: list[str]


class _Detection:
    """One detection's state: what was asked, each fact's source or null reason."""

    def __init__(self, candidate: Candidate, url: str, headers: dict[str, str]) -> None:
        self.candidate = candidate
        self.url = url
        self.headers = headers
        self.asked: list[str] = []
        self.sources: dict[str, str] = {}
        self.nulls: dict[str, str] = {}

    async def get(self, path: str) -> tuple[int, object, str]:
        return await _get(self.url, path, self.headers)

    def done(self, kind: str, **facts: Unpack[_Facts]) -> ExternalServer:
        for name in ("version", "slot_ctx", "total_slots", "chat_format"):
            if facts.get(name) is None:
                self.nulls.setdefault(name, f"{kind} does not report it" if kind != UNKNOWN_KIND
                                      else "the server's kind is unknown")
        if self.candidate.pid is None:
            self.nulls["pid"] = "the candidate gives no `pid` or `process`: its memory is not sampled"
        found = ExternalServer(url=self.url, kind=kind, pid=self.candidate.pid, process=self.candidate.process,
                               detected_by=self.asked, sources=self.sources, null_reasons=self.nulls, **facts)
        _DETECTED[self.url] = found
        return found


async def _as_llama_server(d: _Detection) -> ExternalServer | None:
    status, props, _ = await d.get("/props")
    d.asked.append(f"GET /props: HTTP {status}")
    if not (status == 200 and isinstance(props, dict) and "total_slots" in props):
        return None
    gen = props.get("default_generation_settings")
    n_ctx = gen.get("n_ctx") if isinstance(gen, dict) else None
    build = props.get("build_info")
    slots_status, slots, _ = await d.get("/slots")
    d.asked.append(f"GET /slots: HTTP {slots_status}")
    fmts = sorted({s["params"]["chat_format"] for s in slots if isinstance(s, dict)
                   and isinstance(s.get("params"), dict) and isinstance(s["params"].get("chat_format"), str)}
                  ) if isinstance(slots, list) else []
    if fmts:
        d.sources["chat_format"] = "GET /slots params.chat_format"
    else:
        d.nulls["chat_format"] = f"GET /slots answered HTTP {slots_status} without params.chat_format (--no-slots?)"
    d.sources.update({"kind": "GET /props has total_slots", "version": "GET /props build_info",
                      "slot_ctx": "GET /props default_generation_settings.n_ctx",
                      "total_slots": "GET /props total_slots"})
    path = props.get("model_path")
    return d.done("llama-server", version=f"llama.cpp {build}" if isinstance(build, str) and build else None,
                  slot_ctx=n_ctx if isinstance(n_ctx, int) else None,
                  total_slots=props["total_slots"] if isinstance(props["total_slots"], int) else None,
                  chat_format=", ".join(fmts) or None, model_ids=[str(path)] if path else [])


async def _as_ollama(d: _Detection) -> ExternalServer | None:
    status, ver, _ = await d.get("/api/version")
    d.asked.append(f"GET /api/version: HTTP {status}")
    if not (status == 200 and isinstance(ver, dict) and isinstance(ver.get("version"), str)):
        return None
    d.sources.update({"kind": "GET /api/version answers {version} (Ollama)", "version": "GET /api/version"})
    num_ctx = None
    if d.candidate.request_model:
        show_status, show = await _post(d.url, "/api/show", {"model": d.candidate.request_model}, d.headers)
        d.asked.append(f"POST /api/show: HTTP {show_status}")
        params = show.get("parameters") if isinstance(show, dict) else None
        m = re.search(r"^num_ctx\s+(\d+)", params, re.M) if isinstance(params, str) else None
        if m:
            num_ctx = int(m.group(1))
            d.sources["slot_ctx"] = "POST /api/show parameters num_ctx"
        else:
            d.nulls["slot_ctx"] = "Ollama's /api/show lists no num_ctx for the model (its default applies)"
    _, tags, _ = await d.get("/api/tags")
    ids = [str(m.get("name")) for m in (tags or {}).get("models", []) if isinstance(m, dict)] \
        if isinstance(tags, dict) else []
    return d.done("ollama", version=f"ollama {ver['version']}", slot_ctx=num_ctx, model_ids=ids)


async def _as_lm_studio(d: _Detection) -> ExternalServer | None:
    status, lms, _ = await d.get("/api/v0/models")
    d.asked.append(f"GET /api/v0/models: HTTP {status}")
    if not (status == 200 and isinstance(lms, dict) and isinstance(lms.get("data"), list)):
        return None
    mine = next((m for m in lms["data"] if isinstance(m, dict) and m.get("id") == d.candidate.request_model), None)
    ctx = None
    if mine is not None:
        ctx = mine.get("loaded_context_length") or mine.get("max_context_length")
        d.sources["slot_ctx"] = ("GET /api/v0/models loaded_context_length" if mine.get("loaded_context_length")
                                 else "GET /api/v0/models max_context_length")
    d.sources["kind"] = "GET /api/v0/models answers a model list (LM Studio)"
    d.nulls["version"] = "LM Studio's REST API reports no version"
    return d.done("lm-studio", slot_ctx=ctx if isinstance(ctx, int) else None, model_ids=_model_ids(lms))


async def _as_other(d: _Detection) -> ExternalServer | None:
    """mlx_vlm.server, mlx_lm.server (by their /health), else any server whose /v1/models answers."""
    status, health, server_header = await d.get("/health")
    d.asked.append(f"GET /health: HTTP {status} (Server: {server_header or 'none'})")
    models_status, models, _ = await d.get("/v1/models")
    d.asked.append(f"GET /v1/models: HTTP {models_status}")
    ids = _model_ids(models)
    if isinstance(health, dict) and health.get("status") == "healthy" and "loaded_model" in health:
        ctx = health.get("loaded_context_size") or health.get("effective_context_limit")
        d.sources["kind"] = "GET /health has loaded_model (mlx_vlm.server)"
        if isinstance(ctx, int):
            d.sources["slot_ctx"] = "GET /health loaded_context_size"
        d.nulls["version"] = "mlx_vlm.server exposes no version endpoint"
        loaded = health.get("loaded_model")
        return d.done("mlx_vlm.server", slot_ctx=ctx if isinstance(ctx, int) else None,
                      model_ids=[str(loaded)] if loaded else ids)
    if isinstance(health, dict) and health.get("status") == "ok" and server_header.startswith("BaseHTTP"):
        d.sources["kind"] = "GET /health {status: ok} from Python's BaseHTTP server (mlx_lm.server)"
        d.nulls["version"] = "mlx_lm.server exposes no version endpoint"
        d.nulls["slot_ctx"] = "mlx_lm.server sizes its cache as it goes; it reports no context limit"
        return d.done("mlx_lm.server", model_ids=ids)
    if models_status == 200 and isinstance(models, dict):
        d.sources["kind"] = "GET /v1/models answers; no known server's own endpoint did"
        return d.done(UNKNOWN_KIND, model_ids=ids)
    return None


def detected(url: str | None) -> ExternalServer | None:
    """The last detection of the server at `url` in this process (None before its first attach)."""
    return _DETECTED.get(base_url(url)) if url else None


def _inner(url: str | None) -> base.RuntimeAdapter | None:
    """The adapter of the runtime detected at `url`, where benchd runs that kind itself."""
    found = detected(url)
    return _INNER.get(found.kind) if found is not None else None


class ExternalChecks(base.Checks):
    """An external server's candidate checks: none here (`sweepcheck.external_problems` has them)."""

    def validate(self, candidate: Candidate) -> list[BenchdError]:
        """The static checks live in the one sweep check (`benchd.engine.sweepcheck.external_problems`)."""
        return []


class ExternalLauncher(base.Launcher):
    """An external server is not started: readiness from `/v1/models`, the version from the detection."""

    def command(self, candidate: Candidate, cache_dir: Path) -> tuple[list[str], str]:
        return [], NOT_STARTED

    def argv(self, candidate: Candidate, *, command: list[str], port: int, ctx_size: int | None) -> list[str]:
        return []

    async def check_ready(self, base_url_: str) -> base.Readiness:
        try:
            status, _, _ = await _get(base_url_, "/v1/models", {})
        except (aiohttp.ClientError, TimeoutError) as exc:
            return base.Readiness(False, f"not answering: {type(exc).__name__}")
        return base.Readiness(status < 500, f"GET /v1/models: HTTP {status}")

    async def version(self, base_url_: str, command: list[str]) -> str | None:
        found = _DETECTED.get(base_url(base_url_))
        return found.version if found else None


class ExternalRequests(base.Requests):
    """Requests to an external server: its API key, and the detected kind's fields, counts and rendering."""

    def auth_headers(self, candidate: Candidate) -> dict[str, str]:
        return api_key_headers(candidate)

    def request_model(self, candidate: Candidate) -> str:
        return candidate.request_model or ""

    def length_fields(self, candidate: Candidate, run_to_length: bool) -> JSONObject:
        inner = _inner(candidate.url)
        return inner.requests.length_fields(candidate, run_to_length) if inner is not None else {}

    def probe_body(self, candidate: Candidate, *, prompt: str, settings: base.ChatSettings) -> dict[str, object]:
        """The generic body plus the detected kind's own probe fields (llama-server: `cache_prompt` false)."""
        body = super().probe_body(candidate, prompt=prompt, settings=settings)
        inner = _inner(candidate.url)
        body.update(inner.requests.runtime_fields() if inner is not None else {})
        return body

    async def count_tokens(self, base_url_: str, text: str) -> int | None:
        inner = _inner(base_url_)
        return await inner.requests.count_tokens(base_url_, text) if inner is not None else None

    async def rendered_tokens(self, base_url_: str, candidate: Candidate, command: list[str],
                              items: list[base.RenderItem], thinking: str) -> list[list[int]]:
        inner = _inner(base_url_)
        if inner is None or inner.name != "llama-server":
            kind = (detected(base_url_) or ExternalServer(url="", kind=UNKNOWN_KIND)).kind
            raise RuntimeError(f"an external {kind} has no endpoint that renders and tokenizes a conversation")
        return await inner.requests.rendered_tokens(base_url_, candidate, command, items, thinking)


class ExternalReader(base.Reader):
    """An external server's answers: its own `timings` where it sends them (llama-server, mlx_vlm.server), else
    `usage` and the client's stream window (the generic OpenAI stream)."""

    def normalize(self, result: ProbeResult, *, spec_configured: bool) -> base.Normalized:
        if result.timings:
            return self.normalize_timings(result, spec_configured=spec_configured)
        return self.normalize_usage(result, spec_configured=spec_configured, no_timings="the server sent no timings",
                                    no_prompt_rate="the server's stream has no timings: the prompt rate is not measurable",
                                    no_cache_details="the server sent no prompt_tokens_details",
                                    no_draft_counts="the server reports no draft counts")

    def eos_gap(self, candidate: Candidate) -> str:
        inner = _inner(candidate.url)
        kind = (detected(candidate.url) or ExternalServer(url="", kind=UNKNOWN_KIND)).kind
        return inner.reader.eos_gap(candidate) if inner is not None else f"{kind} offers no way to suppress EOS"


class ExternalSessions(base.Sessions):
    """Sessions on an external server: its prompt cache as it was started."""

    def session_start(self, candidate: Candidate) -> base.SessionStart:
        inner = _inner(candidate.url)
        how = ("its prompt cache is as it was started (llama-server: on by default; the turns send cache_prompt)"
               if inner is not None and inner.name == "llama-server" else "its prompt cache is as it was started")
        return base.SessionStart(candidate, False, f"{NOT_STARTED}: {how}")

    def session_fields(self) -> JSONObject:
        return {"cache_prompt": True} if any(f.kind == "llama-server" for f in _DETECTED.values()) else {}


class ExternalParallel(base.Parallel):
    """Parallel requests to an external server: its slots as it was started."""

    def parallel_start(self, candidate: Candidate, level: int, ctx_size: int | None) -> base.ParallelStart:
        found = detected(candidate.url)
        slots = found.total_slots if found else None
        serial = (f"the server has {plural(slots, 'slot')}, fewer than {level} requests" if slots is not None and slots < level
                  else None)
        return base.ParallelStart(candidate, None, f"{NOT_STARTED}: its slots / batching as it was started", serial)

    def parallel_body(self, body: dict[str, object]) -> str | None:
        return None

    async def slot_facts(self, base_url_: str) -> dict[str, str]:
        inner = _inner(base_url_)
        return await inner.parallel.slot_facts(base_url_) if inner is not None else {}


class ExternalTools(base.Tools):
    """An external server's tool calls: the detected kind's parser where it can be asked remotely."""

    async def tool_parser(self, base_url_: str, candidate: Candidate, command: list[str]) -> str | None:
        inner = _inner(base_url_)
        if inner is None or inner.name == "mlx_lm.server":  # mlx_lm's answer needs its interpreter and model dir
            return None
        return await inner.tools.tool_parser(base_url_, candidate, command)


class OpenAIAdapter(base.RuntimeAdapter):
    """A server benchd does not start (docs/runtimes.md#external-servers)."""

    name: ClassVar[str] = "openai"
    version_source: ClassVar[str] = "detected at attach (GET /props build_info, GET /api/version)"
    load_marker_reason: ClassVar[str] = NOT_STARTED

    checks_part = ExternalChecks
    launcher_part = ExternalLauncher
    requests_part = ExternalRequests
    reader_part = ExternalReader
    sessions_part = ExternalSessions
    parallel_part = ExternalParallel
    tools_part = ExternalTools
