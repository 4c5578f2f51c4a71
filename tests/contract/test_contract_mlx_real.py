"""Contract tests: mlx_lm.server 0.32.2 and mlx_vlm.server 0.7.10 response shapes benchd relies on.

Real servers (CPU backend on Linux) on the tiny model's MLX directory, which BOTH servers load. If one
of these fails after an upgrade, benchd/servers/runtimes/mlx_lm.py or mlx_vlm.py needs the same change.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from contract_http import get_json, is_printable_ascii, post_json, stream_chat


def _chat(max_tokens: int, content: str = "Tell me about the weather.", **extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": f"[{uuid.uuid4().hex}] {content}"}],
        "max_tokens": max_tokens, "temperature": 0, "seed": 0,
        "stream_options": {"include_usage": True}, **extra,
    }


# --------------------------------------------------------------------------------------- mlx_lm


def test_mlx_lm_health_and_models(mlx_lm_url: str, tiny_models: Any) -> None:
    assert get_json(mlx_lm_url + "/health") == (200, {"status": "ok"})
    status, models = get_json(mlx_lm_url + "/v1/models")  # 500 if HF_HUB_CACHE does not exist
    assert status == 200 and models["object"] == "list"
    assert str(tiny_models.mlx_dir) in [m["id"] for m in models["data"]]


def test_mlx_lm_stream_usage_chunk_without_timings(mlx_lm_url: str) -> None:
    s = stream_chat(mlx_lm_url, _chat(32))
    assert s.status == 200 and s.done and not s.other
    assert all(e["object"] == "chat.completion.chunk" for e in s.content_chunks)
    final = s.usage_chunk
    assert final is s.events[-1]
    assert final["object"] == "chat.completion"  # not ".chunk": a client must not filter on it
    assert final["choices"] == []
    usage = final["usage"]
    assert usage["completion_tokens"] == 32
    assert usage["prompt_tokens"] > 10 and usage["total_tokens"] == usage["prompt_tokens"] + 32
    assert 0 <= usage["prompt_tokens_details"]["cached_tokens"] <= usage["prompt_tokens"]
    assert all("timings" not in e for e in s.events)  # no server-side timings at all
    assert s.content_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert is_printable_ascii(s.text) and s.text.strip()


def test_mlx_lm_usage_only_with_include_usage(mlx_lm_url: str) -> None:
    body = _chat(4)
    del body["stream_options"]
    s = stream_chat(mlx_lm_url, body)
    assert s.done and not [e for e in s.events if e.get("usage")]


def test_mlx_lm_sse_keepalive_comments(mlx_lm_url: str, tiny_models: Any) -> None:
    """During prompt processing the server writes `: keepalive N/M` SSE comments (here even for short
    prompts); a client must skip every line starting with ':'. A ~2k-token stdlib prompt spans several
    progress steps."""
    src = (Path(os.__file__).parent / "argparse.py").read_text()[:6000]
    s = stream_chat(mlx_lm_url, _chat(4, content=src))
    assert s.comments, "expected `: keepalive` comment lines"
    assert all(c.startswith(": keepalive ") for c in s.comments)
    progress = [tuple(map(int, c.split()[-1].split("/"))) for c in s.comments]
    total = progress[-1][1]
    assert all(t == total and 0 <= n <= t for n, t in progress), progress  # starts at 0/M
    assert progress[-1][0] == total and total >= 1000
    assert [n for n, _ in progress] == sorted(n for n, _ in progress)
    assert s.usage_chunk["usage"]["completion_tokens"] == 4


# -------------------------------------------------------------------------------------- mlx_vlm


def test_mlx_vlm_health_reports_loaded_model(mlx_vlm_url: str, tiny_models: Any) -> None:
    status, health = get_json(mlx_vlm_url + "/health")
    assert status == 200 and health["status"] == "healthy"
    assert health["loaded_model"] == str(tiny_models.mlx_vlm_dir)
    assert "effective_context_limit" in health


def test_mlx_vlm_needs_json_content_type_and_model(mlx_vlm_url: str, tiny_models: Any) -> None:
    """422 without `Content-Type: application/json`, 422 without `model`; `model` must name the loaded
    directory (another value makes the server try to load that model from the hub)."""
    model = str(tiny_models.mlx_vlm_dir)
    url = mlx_vlm_url + "/v1/chat/completions"
    status, _ = post_json(url, {**_chat(2), "model": model, "stream": False}, content_type="text/plain")
    assert status == 422
    status, body = post_json(url, {**_chat(2), "stream": False})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "model"]
    status, body = post_json(url, {**_chat(2), "model": model, "stream": False})
    assert status == 200 and body["usage"]["completion_tokens"] == 2


def test_mlx_vlm_stream_timings_and_peak_memory(mlx_vlm_url: str, tiny_models: Any) -> None:
    s = stream_chat(mlx_vlm_url, _chat(32, model=str(tiny_models.mlx_vlm_dir)))
    assert s.status == 200 and s.done and not s.other
    with_text = [e for e in s.content_chunks if e["choices"][0]["delta"].get("content")]
    assert with_text
    rates = [e["timings"]["predicted_per_second"] for e in s.content_chunks]  # key in every chunk
    assert rates[0] is None  # the first token has no rate yet: clients must accept null
    assert all(isinstance(r, float) and r > 0 for r in rates[1:])
    assert s.content_chunks[-1]["choices"][0]["finish_reason"] == "length"
    final = s.usage_chunk
    assert final is s.events[-1] and final["choices"] == []
    assert final["object"] == "chat.completion.chunk"
    usage, t = final["usage"], final["timings"]
    assert usage["completion_tokens"] == 32
    assert t["predicted_n"] == 32 and t["prompt_n"] + t["cache_n"] == usage["prompt_tokens"]
    assert t["predicted_per_second"] == rates[-1]
    for key in ("prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_ms",
                "predicted_per_token_ms", "predicted_per_second"):
        assert t[key] > 0, key
    assert 0 < t["peak_memory"] < 64  # GB (float), the MLX allocator's peak
    for key in ("draft_kind", "draft_rounds", "draft_n", "draft_n_accepted"):
        assert key in t and t[key] is None  # present, null: no drafter ran
    assert is_printable_ascii(s.text) and s.text.strip()
