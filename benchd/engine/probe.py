"""The streaming client: one request, timestamps of every content chunk on arrival, the raw final chunk.
Errors are values; only cancellation propagates (docs/measuring.md#the-probe-client)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import aiohttp
import msgspec

from benchd.probe_result import ProbeResult
from benchd.servers.runtimes.http import loopback_connector, read_capped

if TYPE_CHECKING:
    from benchd.schemas import Candidate
    from benchd.servers.runtimes.base import ChatSettings, RuntimeAdapter


_decoder = msgspec.json.Decoder()
_CONTENT_KEY = b'"content"'
#: The longest SSE line a stream may send (one event's JSON; the largest, the final chunk, is a few KB).
MAX_LINE_BYTES = 4 << 20
#: Reasoning delta keys: llama.cpp `reasoning_content`, mlx_lm `reasoning`, mlx_vlm both.
_REASONING_KEYS = (b'"reasoning_content"', b'"reasoning"')
_SKIP = frozenset(b" :\t")
_QUOTE = 0x22
_BRACE = 0x7B


def _value_starts(payload: bytes, key: bytes) -> list[int]:
    """The byte that starts each value of `"key"` in a JSON text (after optional spaces and the colon)."""
    out = []
    n = len(payload)
    i = payload.find(key)
    while i != -1:
        j = i + len(key)
        while j < n and payload[j] in _SKIP:
            j += 1
        if j < n:
            out.append(j)
        i = payload.find(key, j)
    return out


def _has_text(payload: bytes, key: bytes) -> bool:
    """True when `"key"` has a non-empty string value somewhere in the chunk (a byte scan)."""
    n = len(payload)
    return any(j + 1 < n and payload[j] == _QUOTE and payload[j + 1] != _QUOTE for j in _value_starts(payload, key))


def has_answer(payload: bytes) -> bool:
    """True when a chunk has a non-empty string `"content"` (a byte scan; not `"reasoning_content"`)."""
    return _has_text(payload, _CONTENT_KEY)


def has_reasoning(payload: bytes) -> bool:
    """True when a chunk carries a non-empty reasoning delta (`reasoning_content` or `reasoning`)."""
    return any(_has_text(payload, key) for key in _REASONING_KEYS)


def _worth_decoding(payload: bytes) -> bool:
    """A content chunk is decoded only if it also carries a usage object or a finish reason."""
    for key, starts in ((b'"usage"', (_BRACE,)), (b'"finish_reason"', (_QUOTE,))):
        if any(payload[j] in starts for j in _value_starts(payload, key)):
            return True
    return False


class _Stream:
    """Per-request parsing state (kept out of `run` so the hot loop stays readable)."""

    def __init__(self, result: ProbeResult, marks: Callable[[str], None] | None = None,
                 collect_text: bool = False) -> None:
        self.r = result
        self.buf = b""
        self.marks = marks
        self.collect_text = collect_text

    def feed(self, data: bytes, now: float) -> str | None:
        """Consume bytes; returns an error message if the stream is garbage or carries an error."""
        self.buf += data
        if b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE_BYTES:
                return f"a stream line is over {MAX_LINE_BYTES} bytes without a newline (not an SSE stream)"
            return None
        *lines, self.buf = self.buf.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line or line.startswith(b":"):
                continue  # event separator, or an SSE comment (keepalive)
            if not line.startswith(b"data:"):
                if line.startswith((b"event:", b"id:", b"retry:")):
                    continue
                return f"not an SSE line: {line[:200]!r}"
            payload = line[5:].lstrip()
            if payload == b"[DONE]":
                self.r.done = True
                continue
            err = self._event(payload, now)
            if err:
                return err
        return None

    def _collect(self, doc: dict[str, object]) -> None:
        """Append a chunk's delta text (mlx_vlm sends the reasoning under both keys: taken once)."""
        for choice in doc.get("choices") or ():  # type: ignore[attr-defined]
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.r.answer_text.append(delta["content"])
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str):
                self.r.reasoning_text.append(thought)

    def _event(self, payload: bytes, now: float) -> str | None:
        answer = has_answer(payload)
        reasoning = has_reasoning(payload)
        content = answer or reasoning
        if content:
            self._content(answer, reasoning, now)
            if not self.collect_text and not _worth_decoding(payload):
                return None  # the hot path: nothing else to learn from this chunk
        try:
            doc = _decoder.decode(payload)
        except msgspec.DecodeError:
            return f"malformed JSON chunk: {payload[:200]!r}"
        if not isinstance(doc, dict):
            return f"unexpected chunk: {payload[:200]!r}"
        if self.collect_text and content:
            self._collect(doc)
        if doc.get("error"):
            return f"server error in stream: {str(doc['error'])[:500]}"
        self._finish(doc)
        return None

    def _content(self, answer: bool, reasoning: bool, now: float) -> None:
        """Count and time a chunk carrying answer or reasoning text."""
        r = self.r
        if r.first_content is None:
            r.first_content = now
            r.first_is_reasoning = reasoning and not answer
            if self.marks is not None:
                self.marks("first")
        if answer:
            r.answer_chunks += 1
            if r.first_answer is None:
                r.first_answer = now
        r.reasoning_chunks += reasoning
        r.last_content = now
        r.content_chunks += 1
        r.chunk_times.append(now)

    def _finish(self, doc: dict[str, object]) -> None:
        """Take a decoded chunk's finish reason, and keep it as `final` if it is the usage chunk."""
        r = self.r
        for choice in doc.get("choices") or ():  # type: ignore[attr-defined]
            if isinstance(choice, dict) and choice.get("finish_reason"):
                r.finish_reason = str(choice["finish_reason"])
        usage = isinstance(doc.get("usage"), dict)
        if usage or isinstance(doc.get("timings"), dict):
            # Every mlx_vlm chunk has partial timings; the one with usage is the final answer.
            if r.final is None or usage or not isinstance(r.final.get("usage"), dict):
                r.final = doc


async def run(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_s: float,
    marks: Callable[[str], None] | None = None,
    collect_text: bool = False,
) -> ProbeResult:
    """POST one streamed request and read it to the end; `collect_text` keeps the answer and reasoning text."""
    if marks is not None:
        marks("start")
    started = time.perf_counter()
    result = ProbeResult(status="failed", error=None, http_status=None, started=started, ended=started)
    stream = _Stream(result, marks, collect_text)
    connector = loopback_connector()
    try:
        async with (
            asyncio.timeout(timeout_s),
            aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session,
            session.post(url, data=body, headers=dict(headers), allow_redirects=False) as resp,
        ):
            await _read(resp, stream, marks)
    except TimeoutError:
        result.ended = time.perf_counter()
        result.status = "timeout"
        result.error = f"probe timed out after {timeout_s:g} s ({result.content_chunks} content chunks received)"
        return result
    except (aiohttp.ClientError, OSError) as exc:
        result.ended = time.perf_counter()
        what = "stream closed early" if result.http_status == 200 else "request failed"
        result.error = f"{what}: {type(exc).__name__}: {exc}"
        return result
    return _outcome(result)


async def _read(resp: aiohttp.ClientResponse, stream: _Stream, marks: Callable[[str], None] | None) -> None:
    """Read the response into `stream`'s result; its `error` says why when the read stopped early."""
    result = stream.r
    result.http_status = resp.status
    if resp.status != 200:
        text = (await resp.content.read(2000)).decode("utf-8", "replace")
        result.error = f"HTTP {resp.status}: {text.strip()}"
        result.ended = time.perf_counter()
        return
    async for data in resp.content.iter_any():
        err = stream.feed(data, time.perf_counter())
        if err:
            result.error = err
            result.ended = time.perf_counter()
            return
    result.ended = time.perf_counter()
    if marks is not None:
        marks("end")
    if stream.buf.strip():
        result.error = stream.feed(b"\n", result.ended)


def _outcome(result: ProbeResult) -> ProbeResult:
    """A fully read stream's status: ok only with [DONE] and a usage/timings chunk."""
    if result.error is not None:
        return result
    if not result.done:
        result.error = f"stream closed early: no [DONE] after {result.content_chunks} content chunks"
    elif result.final is None:
        result.error = "stream ended without a usage/timings chunk (include_usage ignored?)"
    else:
        result.status = "ok"
    return result


async def run_chat(
    adapter: RuntimeAdapter,
    base_url: str,
    candidate: Candidate,
    *,
    prompt: str,
    settings: ChatSettings,
    timeout_s: float,
    marks: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Build the adapter's streamed chat request from `settings` and run it."""
    body = adapter.requests.probe_body(candidate, prompt=prompt, settings=settings)
    return await run(
        base_url + adapter.requests.request_path(),
        adapter.requests.encode_body(body),
        adapter.requests.request_headers(candidate),
        timeout_s=timeout_s,
        marks=marks,
    )


def parse_prometheus(text: str) -> dict[str, float]:
    """`name{labels} value` lines to {name{labels}: value}; comments and garbage lines are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.rpartition(" ")
        if not name:
            continue
        try:
            out[name.strip()] = float(rest)
        except ValueError:
            continue
    return out


async def read_metrics(base_url: str, *, timeout_s: float = 5.0) -> dict[str, float] | None:
    """The server's Prometheus counters, or None when it has no `/metrics`."""
    try:
        async with (
            aiohttp.ClientSession(
                connector=loopback_connector(),
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as session,
            session.get(base_url + "/metrics", allow_redirects=False) as resp,
        ):
            if resp.status != 200:
                return None
            return parse_prometheus((await read_capped(resp)).decode("utf-8", "replace"))
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None
