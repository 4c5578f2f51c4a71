"""Tool-call replies assembled and classified, and a suite that goes on through server errors.

The server here is a test double (an aiohttp app on 127.0.0.1): no real runtime can be made to answer a
500 or a malformed tool-call chunk on demand mid-suite. Everything else about tool calls runs against
the real servers in test_suites_real.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from testlib import loopback_app

from benchd.config import Config
from benchd.engine import suiterun, suites
from benchd.engine.scheduler import Engine
from benchd.schemas import Candidate, EvalLimit, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.supervisor import Server
from benchd.store import Store


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _call_deltas(name: str, args: str, index: int = 0) -> list[dict[str, Any]]:
    half = len(args) // 2
    return [_delta({"tool_calls": [{"index": index, "id": f"c{index}", "type": "function",
                                    "function": {"name": name, "arguments": args[:half]}}]}),
            _delta({"tool_calls": [{"index": index, "function": {"arguments": args[half:]}}]})]


@pytest.fixture(scope="module")
def tools(eval_suites: Path) -> suites.SuiteData:
    return suites.load("tools", eval_suites)


def _task(tools: suites.SuiteData, task_id: str) -> suites.Task:
    return next(t for t in tools.tasks if t.id == task_id)


def test_streamed_deltas_assemble_and_grade(tools: suites.SuiteData) -> None:
    t = _task(tools, "parallel_0")
    raw = _sse(_delta({"role": "assistant", "content": ""}),
               *_call_deltas("spotify_play", json.dumps({"artist": "Maroon 5", "duration": 15}), 0),
               *_call_deltas("spotify_play", json.dumps({"artist": "Taylor Swift", "duration": 20}), 1),
               _delta({}, "tool_calls"), {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})
    reply = suiterun.parse_stream(raw)
    assert [c["name"] for c in reply.calls] == ["spotify_play", "spotify_play"] and reply.usage
    assert suiterun.classify(t, reply, None).passed


def test_each_failure_class(tools: suites.SuiteData) -> None:
    t = _task(tools, "simple_python_0")
    good = json.dumps({"base": 10, "height": 5})
    cases = {
        "bad_arguments_json": _sse(*_call_deltas("calculate_triangle_area", '{"base": 10, "height": '),
                                   _delta({}, "tool_calls")),
        "dropped_call": _sse(_delta({"content": ""}), _delta({}, "tool_calls")),
        "leaked_markup": _sse(_delta({"content": '<tool_call>{"name": "calculate_triangle_area"'}), _delta({}, "stop")),
        "no_call": _sse(_delta({"content": "The area is 25."}), _delta({}, "stop")),
        "wrong_function": _sse(*_call_deltas("area_of_circle", good), _delta({}, "tool_calls")),
        "extra_call": _sse(*_call_deltas("calculate_triangle_area", good, 0),
                           *_call_deltas("calculate_triangle_area", good, 1), _delta({}, "tool_calls")),
        "server_error": b'data: {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "x", \n\n',
    }
    for cls, raw in cases.items():
        v = suiterun.classify(t, suiterun.parse_stream(raw), "a log line")
        assert not v.passed and v.failure == cls, (cls, v)
    mismatch = _sse(*_call_deltas("calculate_triangle_area", json.dumps({"base": 10, "height": 6})),
                    _delta({}, "tool_calls"))
    v = suiterun.classify(t, suiterun.parse_stream(mismatch), None)
    assert v.failure == "argument_mismatch" and v.parameter == "height"
    dropped = suiterun.classify(t, suiterun.parse_stream(cases["dropped_call"]), "WARNING: could not parse tool call")
    assert "could not parse tool call" in dropped.detail


def test_non_streamed_message_is_graded_the_same(tools: suites.SuiteData) -> None:
    t = _task(tools, "simple_python_0")
    raw = json.dumps({"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
                      "tool_calls": [{"id": "a", "type": "function", "function": {
                          "name": "calculate_triangle_area", "arguments": json.dumps({"base": 10, "height": 5})}}]}}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 3}}).encode()
    assert suiterun.classify(t, suiterun.parse_message(raw), None).passed
    cut = suiterun.classify(t, suiterun.parse_message(raw.replace(b'"tool_calls", "message"', b'"length", "message"')), None)
    assert cut.passed and "finish_reason length" in cut.detail  # graded as parsed, the cut said


@pytest.fixture
async def double() -> AsyncIterator[dict[str, Any]]:
    """Answers the n-th request: a malformed tool-call chunk, then HTTP 500, then a valid call."""
    state: dict[str, Any] = {"n": 0}

    async def chat(request: web.Request) -> web.StreamResponse:
        state["n"] += 1
        n = state["n"]
        if n == 1:
            return web.Response(body=b'data: {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": \n\n',
                                content_type="text/event-stream")
        if n == 2:
            return web.Response(status=500, text="internal error")
        body = await request.json()
        fn = body["tools"][0]["function"]["name"]
        return web.Response(body=_sse(*_call_deltas(fn, "{}"), _delta({}, "tool_calls")), content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with loopback_app(app) as url:
        state["url"] = url
        yield state


async def test_server_errors_mid_suite_are_rows_and_the_suite_goes_on(double: dict[str, Any], eval_suites: Path,
                                                                       tmp_path: Path) -> None:
    cand = Candidate(id="double", runtime="llama-server", model=str(tmp_path / "m.gguf"))
    sweep = Sweep(name="double", contexts=[256], gen_tokens=8, candidates=[cand], evals=["tools"],
                  eval_limit=EvalLimit(tools=4))
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=eval_suites)
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    engine = Engine(job.id, sweep, store, config, lambda e: None)
    log = tmp_path / "server.log"
    log.write_text("")
    server = Server(job=job.id, candidate=cand, runtime="llama-server", argv=[], command=["/bin/false"], binary="",
                    binary_source="test", port=0, base_url=double["url"], pid=0, pgid=0, create_time=0.0, ctx_size=None,
                    log_path=log, record_path=tmp_path / "rec", started_at=0.0)
    await engine.evals.run_suite(get_adapter("llama-server"), server, cand, "tools")
    order = [t.id for t in engine.evals.suite_tasks("tools")]
    by_id = {r.task: r for r in store.results.evals(job.id)}
    assert sorted(by_id) == sorted(order)
    results = [by_id[i] for i in order]  # in the order asked
    assert [r.failure for r in results[:2]] == ["server_error", "server_error"]
    assert "malformed" in (results[0].detail or "") or "not an SSE" in (results[0].detail or "")
    assert "HTTP 500" in (results[1].detail or "")
    assert all(r.failure != "server_error" for r in results[2:])
    assert any(e.type == "eval_suite" for e in store.events.page(job.id))
