"""Tiny sync HTTP + SSE helpers for the contract tests (stdlib only, a fresh connection per request).

Why not the product's client: these tests pin what the servers send, byte-level SSE included (comment
lines, `[DONE]`), so they read the raw lines themselves.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any


def get_json(url: str, timeout: float = 30.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def post_json(url: str, body: Any, timeout: float = 120.0, content_type: str | None = "application/json") -> tuple[int, Any]:
    headers = {"Content-Type": content_type} if content_type else {}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw or b"null")
        except ValueError:
            return exc.code, raw.decode(errors="replace")


@dataclass
class Stream:
    """A parsed SSE response: JSON `data:` events, `:` comment lines, whether `[DONE]` came, other lines."""

    status: int
    content_type: str
    events: list[dict[str, Any]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def content_chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("choices")]

    @property
    def text(self) -> str:
        parts = []
        for e in self.content_chunks:
            delta = e["choices"][0].get("delta") or {}
            parts.append(delta.get("content") or "")
        return "".join(parts)

    @property
    def usage_chunk(self) -> dict[str, Any]:
        chunks = [e for e in self.events if e.get("usage")]
        assert len(chunks) == 1, f"expected exactly one chunk with usage, got {len(chunks)}"
        return chunks[0]


def stream_chat(base_url: str, body: dict[str, Any], timeout: float = 300.0) -> Stream:
    """POST a streamed /v1/chat/completions and parse every line of the SSE body."""
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        out = Stream(status=resp.status, content_type=resp.headers.get("Content-Type", ""))
        for raw in resp:
            line = raw.decode().rstrip("\r\n")
            if not line:
                continue
            if line.startswith(":"):
                out.comments.append(line)
            elif line.startswith("data:"):
                payload = line[5:].strip()
                if payload == "[DONE]":
                    out.done = True
                else:
                    out.events.append(json.loads(payload))
            else:
                out.other.append(line)
    return out


def is_printable_ascii(text: str) -> bool:
    return all(c == "\n" or 0x20 <= ord(c) < 0x7F for c in text)
