"""Parser blame and thinking budgets on the public suites: leaked markup named by format, streamed calls
merged by id, one request shape for every category, and a reply cut while reasoning asked again, then
graded `reasoning_truncated`.

The server in the budget tests is a test double (an aiohttp app on 127.0.0.1): it answers all-reasoning at
a small budget and a call at a larger one, on demand; the scripted thinking model's own retry runs
against real llama-server in test_eval_thinking.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from testlib import loopback_app

from benchd.engine import evalrun, suiterun, suites
from benchd.schemas import Candidate, Sweep
from benchd.servers.runtimes import get_adapter


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.fixture(scope="module")
def tools(eval_suites: Path) -> suites.SuiteData:
    return suites.load("tools", eval_suites)


def _task(tools: suites.SuiteData, task_id: str) -> suites.Task:
    return next(t for t in tools.tasks if t.id == task_id)


LEAKS = {
    "hermes/qwen <tool_call>": '<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10}}',
    "deepseek": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>calculate_triangle_area',
    "llama-3 <|python_tag|>": '<|python_tag|>calculate_triangle_area.call(base=10, height=5)',
    "gpt-oss harmony": '<|channel|>commentary to=functions.calculate_triangle_area <|constrain|>json<|message|>{}',
    "gemma tool_code": '```tool_code\ncalculate_triangle_area(base=10, height=5)\n```',
    "<function=": '<function=calculate_triangle_area>{"base": 10}</function>',
    "mistral [TOOL_CALLS]": '[TOOL_CALLS][{"name": "calculate_triangle_area", "arguments": {}}]',
    "bare JSON": '{"name": "calculate_triangle_area", "parameters": {"base": 10, "height": 5}}',
}


@pytest.mark.parametrize("fmt", sorted(LEAKS))
def test_leaked_markup_names_its_format(tools: suites.SuiteData, fmt: str) -> None:
    t = _task(tools, "simple_python_0")
    v = suiterun.classify(t, suiterun.parse_stream(_sse(_delta({"content": LEAKS[fmt]}), _delta({}, "stop"))), None)
    assert v.failure == "leaked_markup" and v.detail.startswith(fmt + " tool-call markup"), v


def test_prose_is_not_markup(tools: suites.SuiteData) -> None:
    t = _task(tools, "simple_python_0")
    for text in ("The area is 25.", 'Use {"base": 10} next time.', "Call the function to get the area."):
        v = suiterun.classify(t, suiterun.parse_stream(_sse(_delta({"content": text}), _delta({}, "stop"))), None)
        assert v.failure == "no_call", (text, v)


def test_parallel_calls_sharing_index_0_are_merged_by_id(tools: suites.SuiteData) -> None:
    """Ollama-style: every call streamed whole with index 0 and its own id."""
    t = _task(tools, "parallel_0")
    calls = [{"index": 0, "id": f"call_{i}", "type": "function",
              "function": {"name": "spotify_play", "arguments": json.dumps(args)}}
             for i, args in enumerate(({"artist": "Maroon 5", "duration": 15},
                                       {"artist": "Taylor Swift", "duration": 20}))]
    reply = suiterun.parse_stream(_sse(*[_delta({"tool_calls": [c]}) for c in calls], _delta({}, "tool_calls")))
    assert len(reply.calls) == 2
    assert suiterun.classify(t, reply, None).passed


def test_id_then_index_only_deltas_stay_one_call(tools: suites.SuiteData) -> None:
    """OpenAI-style: the id on the first delta only, the arguments' pieces by index."""
    args = json.dumps({"base": 10, "height": 5})
    deltas = [_delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "calculate_triangle_area",
                                                                         "arguments": ""}}]})]
    deltas += [_delta({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 4]}}]})
               for i in range(0, len(args), 4)]
    reply = suiterun.parse_stream(_sse(*deltas, _delta({}, "tool_calls")))
    assert reply.calls == [{"name": "calculate_triangle_area", "arguments": args}]
    assert suiterun.classify(_task(tools, "simple_python_0"), reply, None).passed


def test_one_request_shape_for_every_category(tools: suites.SuiteData) -> None:
    adapter = get_adapter("llama-server")
    cand = Candidate(id="c", runtime="llama-server", model="/m.gguf")
    sweep = Sweep(name="s", contexts=[256], gen_tokens=8, candidates=[cand], evals=["tools"])
    shapes = set()
    for cat in suites.BFCL_CATEGORIES:
        task = next(t for t in tools.tasks if t.category == cat)
        body = suiterun.tool_body(adapter, cand, task, sweep, "off", stream=True)
        shapes.add(tuple(sorted((k, json.dumps(v)) for k, v in body.items() if k not in ("messages", "tools"))))
    assert len(shapes) == 1
    assert dict(next(iter(shapes)))["parallel_tool_calls"] == "true"


@pytest.fixture
async def thinker() -> AsyncIterator[dict[str, Any]]:
    """All reasoning up to a budget of 512 tokens (finish_reason length), a valid call beyond it; a code
    request gets the same reasoning cut, then a fenced answer."""
    state: dict[str, Any] = {"budgets": []}

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        state["budgets"].append(body["max_tokens"])
        small = body["max_tokens"] <= state.get("cut_at", 768)
        if "tools" in body:
            if small:
                raw = _sse(_delta({"reasoning_content": "Let me think " * 50}), _delta({}, "length"))
            else:
                fn = body["tools"][0]["function"]["name"]
                raw = _sse(_delta({"tool_calls": [{"index": 0, "id": "x", "function": {
                    "name": fn, "arguments": json.dumps({"base": 10, "height": 5})}}]}), _delta({}, "tool_calls"))
            return web.Response(body=raw, content_type="text/event-stream")
        message: dict[str, Any] = {"role": "assistant", "content": None if small else state["code"],
                                   "reasoning_content": "Let me think " * 50}
        return web.json_response({"choices": [{"finish_reason": "length" if small else "stop", "message": message}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": body["max_tokens"]}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with loopback_app(app) as url:
        state["url"] = url
        yield state


def _sweep(**kw: Any) -> Sweep:
    cand = Candidate(id="c", runtime="llama-server", model="/m.gguf")
    return Sweep(name="s", contexts=[256], gen_tokens=8, candidates=[cand], evals=["tools", "code"], **kw)


async def test_tools_cut_while_reasoning_are_asked_again(thinker: dict[str, Any], tools: suites.SuiteData) -> None:
    sweep = _sweep(eval_reasoning_budget=1024)
    adapter, task = get_adapter("llama-server"), _task(tools, "simple_python_0")
    got = await suiterun.run_tool_task("j", adapter, thinker["url"], sweep.candidates[0], task, sweep, 30)
    assert got.passed and got.max_tokens == suiterun.TOOL_MAX_TOKENS + 1024, got
    assert thinker["budgets"] == [suiterun.TOOL_MAX_TOKENS, suiterun.TOOL_MAX_TOKENS + 1024]
    assert "cut off while reasoning" in (got.detail or "")


async def test_tools_still_cut_are_reasoning_truncated(thinker: dict[str, Any], tools: suites.SuiteData) -> None:
    thinker["cut_at"] = 10_000
    sweep = _sweep(eval_reasoning_budget=1024)
    got = await suiterun.run_tool_task("j", get_adapter("llama-server"), thinker["url"], sweep.candidates[0],
                                       _task(tools, "simple_python_0"), sweep, 30)
    assert not got.passed and got.failure == "reasoning_truncated"
    none = await suiterun.run_tool_task("j", get_adapter("llama-server"), thinker["url"], sweep.candidates[0],
                                        _task(tools, "simple_python_0"), _sweep(eval_reasoning_budget=0), 30)
    assert none.failure == "reasoning_truncated" and none.max_tokens == suiterun.TOOL_MAX_TOKENS


async def test_code_cut_while_reasoning_is_retried_then_truncated(thinker: dict[str, Any], eval_suites: Path) -> None:
    data = suites.load("code", eval_suites)
    task = data.tasks[0]
    thinker["code"] = "```python\n" + task.data["prompt"] + task.data["canonical_solution"] + "```"
    adapter, sweep = get_adapter("llama-server"), _sweep(eval_reasoning_budget=256)
    got = await suiterun.run_code_task("j", adapter, thinker["url"], sweep.candidates[0], task, sweep, 60)
    assert got.passed and got.max_tokens == 768 + 256, got.detail
    assert got.grade_s is not None and got.grade_s > 0 and "sandbox" in got.sources["grade_s"]
    assert got.task_s == got.latency_s + got.grade_s  # type: ignore[operator]
    thinker["cut_at"] = 10_000
    cut = await suiterun.run_code_task("j", adapter, thinker["url"], sweep.candidates[0], task, sweep, 60)
    assert cut.failure == "reasoning_truncated" and not cut.passed and cut.sandboxed is None
    assert cut.grade_s is None and "grade_s" not in cut.sources and cut.task_s == cut.latency_s  # no code ran


def test_an_answer_cut_after_the_reasoning_is_not_truncated_reasoning() -> None:
    raw = json.dumps({"choices": [{"finish_reason": "length", "message": {
        "content": "def f():\n    return 1", "reasoning_content": "thought"}}]}).encode()
    assert not evalrun.parse_answer(raw).cut_while_reasoning
