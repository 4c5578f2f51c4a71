"""The scripted thinking model on the REAL servers: what a thinking model's stream looks like per runtime.

Pins what issue 13's measurements rely on: llama-server puts the reasoning in `delta.reasoning_content`,
mlx_lm.server in `delta.reasoning`, mlx_vlm.server in both (thinking off by default there); the think
tags produce no chunk but count in `completion_tokens`; thinking off removes the reasoning phase; EOS
stops the model after its answer unless suppressed; draft acceptance falls as the changed share grows.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from contract_http import Stream, post_json, stream_chat


def _chat(max_tokens: int = 100, **extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": f"[{uuid.uuid4().hex}] Why is the sky blue? Think first."}],
        "max_tokens": max_tokens, "temperature": 0, "seed": 0,
        "stream_options": {"include_usage": True}, **extra,
    }


def _deltas(s: Stream, key: str) -> list[str]:
    return [d[key] for e in s.content_chunks if (d := e["choices"][0].get("delta") or {}).get(key)]


def _finish(s: Stream) -> str | None:
    return s.content_chunks[-1]["choices"][0]["finish_reason"]


@pytest.fixture(scope="module")
def llama_scripted(start_llama_server: Any, scripted_models: Any) -> Iterator[str]:
    with start_llama_server(scripted_models.target, ["-t", "1"]) as url:
        yield url


@pytest.fixture(scope="module")
def mlx_lm_scripted(start_mlx_server: Any, scripted_models: Any) -> Iterator[str]:
    with start_mlx_server("mlx_lm.server", scripted_models.mlx_dir) as url:
        yield url


@pytest.fixture(scope="module")
def mlx_vlm_scripted(start_mlx_server: Any, scripted_models: Any) -> Iterator[str]:
    with start_mlx_server("mlx_vlm.server", scripted_models.mlx_dir) as url:
        yield url


# ------------------------------------------------------------------------------------- llama-server


def test_llama_completion_follows_the_script_and_stops(llama_scripted: str, scripted_models: Any) -> None:
    """Any text whose last token is unscripted (here a newline) leads into the script; EOS ends it."""
    body = {"prompt": "Some arbitrary prompt text.\n", "n_predict": 100, "temperature": 0,
            "return_tokens": True, "cache_prompt": False}
    status, r = post_json(llama_scripted + "/completion", body)
    assert status == 200
    assert r["tokens"] == scripted_models.script.chain()
    assert r["stop_type"] == "eos" and r["timings"]["predicted_n"] == scripted_models.generated_tokens()
    assert r["content"] == f"<think>{scripted_models.reasoning_text}</think>{scripted_models.answer_text}"


def test_llama_ignore_eos_repeats_the_answer(llama_scripted: str, scripted_models: Any) -> None:
    s = scripted_models.script
    body = {"prompt": "x\n", "n_predict": 60, "temperature": 0, "return_tokens": True, "cache_prompt": False,
            "ignore_eos": True}
    _, r = post_json(llama_scripted + "/completion", body)
    expected = s.chain()[:-1] + list(s.answer_ids) * 10
    assert r["tokens"] == expected[:60] and r["timings"]["predicted_n"] == 60
    chat = stream_chat(llama_scripted, _chat(64, ignore_eos=True))
    assert "".join(_deltas(chat, "reasoning_content")) == scripted_models.reasoning_text
    assert chat.text.startswith(scripted_models.answer_text * 3)
    assert chat.usage_chunk["usage"]["completion_tokens"] == 64 and _finish(chat) == "length"


def test_llama_prompt_tail_tokens(llama_scripted: str, scripted_models: Any) -> None:
    """llama.cpp's SPM tokenizer: thinking on ends the prompt in `\\n` (-> <think>), off in `\\n\\n`."""
    msgs = {"messages": [{"role": "user", "content": "hello"}]}
    tails = []
    for kwargs in ({}, {"chat_template_kwargs": {"enable_thinking": False}}):
        _, rendered = post_json(llama_scripted + "/apply-template", {**msgs, **kwargs})
        _, tok = post_json(llama_scripted + "/tokenize", {"content": rendered["prompt"], "parse_special": True})
        tails.append(tok["tokens"][-1])
    assert tails[0] not in scripted_models.script.chain()
    assert tails[1] == scripted_models.script.paragraph_id


def test_llama_streams_reasoning_content(llama_scripted: str, scripted_models: Any) -> None:
    s = stream_chat(llama_scripted, _chat())
    reasoning = _deltas(s, "reasoning_content")
    assert len(reasoning) == scripted_models.reasoning_tokens  # one chunk per token; the tags carry none
    assert "".join(reasoning) == scripted_models.reasoning_text
    assert s.text == scripted_models.answer_text and "<think>" not in s.text
    assert s.usage_chunk["usage"]["completion_tokens"] == scripted_models.generated_tokens()
    assert _finish(s) == "stop"


def test_llama_thinking_off_skips_the_reasoning(llama_scripted: str, scripted_models: Any) -> None:
    s = stream_chat(llama_scripted, _chat(chat_template_kwargs={"enable_thinking": False}))
    assert _deltas(s, "reasoning_content") == []
    assert s.text == scripted_models.answer_text
    assert s.usage_chunk["usage"]["completion_tokens"] == scripted_models.generated_tokens(thinking=False)


def _acceptance(start_llama_server: Any, target: Any, draft: Any) -> tuple[int, int]:
    """(accepted, drafted) over one chat answer (stops at EOS) and one 128-token run past EOS."""
    args = ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", "3", "-t", "1"]
    with start_llama_server(target, args) as url:
        _, chat = post_json(url + "/v1/chat/completions", {**_chat(), "stream": False})
        _, raw = post_json(url + "/completion", {"prompt": "x\n", "n_predict": 128, "temperature": 0,
                                                 "ignore_eos": True, "cache_prompt": False})
    assert raw["timings"]["predicted_n"] == 128
    return (chat["timings"]["draft_n_accepted"] + raw["timings"]["draft_n_accepted"],
            chat["timings"]["draft_n"] + raw["timings"]["draft_n"])


def test_llama_draft_acceptance_falls_with_the_changed_share(start_llama_server: Any, scripted_models: Any) -> None:
    rates = {}
    for share, draft in sorted(scripted_models.drafts.items()):
        accepted, drafted = _acceptance(start_llama_server, scripted_models.target, draft)
        assert drafted > 0
        rates[share] = accepted / drafted
    shares = sorted(rates)
    assert rates[0.0] >= 0.9 and rates[1.0] == 0.0, rates
    assert all(rates[a] > rates[b] for a, b in itertools.pairwise(shares)), rates


# ------------------------------------------------------------------------------------------- MLX


def test_mlx_lm_streams_reasoning(mlx_lm_scripted: str, scripted_models: Any) -> None:
    s = stream_chat(mlx_lm_scripted, _chat())
    reasoning = _deltas(s, "reasoning")
    assert len(reasoning) == scripted_models.reasoning_tokens and _deltas(s, "reasoning_content") == []
    assert "".join(reasoning) == scripted_models.reasoning_text
    assert s.text == scripted_models.answer_text
    assert s.usage_chunk["usage"]["completion_tokens"] == scripted_models.generated_tokens()
    assert _finish(s) == "stop"


def test_mlx_lm_thinking_off_and_eos_suppressed(mlx_lm_scripted: str, scripted_models: Any) -> None:
    off = stream_chat(mlx_lm_scripted, _chat(chat_template_kwargs={"enable_thinking": False}))
    assert _deltas(off, "reasoning") == []
    assert off.text.strip() == scripted_models.answer_text.strip()  # the first piece's space is trimmed
    assert off.usage_chunk["usage"]["completion_tokens"] == scripted_models.generated_tokens(thinking=False)
    bias = {str(i): -1000 for i in scripted_models.eos_ids}
    long = stream_chat(mlx_lm_scripted, _chat(60, logit_bias=bias))
    assert long.usage_chunk["usage"]["completion_tokens"] == 60 and _finish(long) == "length"
    assert long.text.startswith(scripted_models.answer_text * 2)


def test_mlx_vlm_thinking_is_off_by_default_and_on_on_request(mlx_vlm_scripted: str, scripted_models: Any) -> None:
    model = str(scripted_models.mlx_dir)
    default = stream_chat(mlx_vlm_scripted, _chat(model=model))
    assert _deltas(default, "reasoning") == [] and default.text.strip() == scripted_models.answer_text.strip()
    assert default.usage_chunk["usage"]["completion_tokens"] == scripted_models.generated_tokens(thinking=False)
    on = stream_chat(mlx_vlm_scripted, _chat(model=model, enable_thinking=True))
    for key in ("reasoning", "reasoning_content"):
        assert "".join(_deltas(on, key)) == scripted_models.reasoning_text, key
    assert on.text == scripted_models.answer_text
    assert on.usage_chunk["usage"]["completion_tokens"] == scripted_models.generated_tokens()
    assert _finish(on) == "stop"
    bias = {str(i): -1000 for i in scripted_models.eos_ids}
    long = stream_chat(mlx_vlm_scripted, _chat(48, model=model, logit_bias=bias))
    assert long.usage_chunk["usage"]["completion_tokens"] == 48 and _finish(long) == "length"
