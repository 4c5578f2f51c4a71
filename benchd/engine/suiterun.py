"""The public suites (`code`: HumanEval, `tools`: BFCL) run through a candidate's server.
Reasons: docs/evals.md#running-the-public-suites.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

import msgspec

from benchd.engine import bfcl, evalrun, humaneval, suites
from benchd.schemas import Candidate, EvalResult, Sweep
from benchd.servers.runtimes.base import RuntimeAdapter, http_post_json

#: Tool-call markup a parser should have turned into a call, by format: left in `content` with no call,
#: it is the parser's failure (`leaked_markup`, the format named), not the model's.
MARKUP: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hermes/qwen <tool_call>", re.compile(r"</?tool_call>")),
    ("<|tool_call|>", re.compile(r"<\|tool_calls?(?:_begin)?\|>|<\|tool_call")),
    ("deepseek", re.compile(r"<｜tool▁(?:calls|call)▁begin｜>|<｜tool▁sep｜>")),
    ("llama-3 <|python_tag|>", re.compile(r"<\|python_tag\|>")),
    ("gpt-oss harmony", re.compile(r"<\|channel\|>|<\|call\|>|\bto=functions\.")),
    ("gemma tool_code", re.compile(r"```tool_code\b")),
    ("<function=", re.compile(r"<function=|<tool_calls>")),
    ("mistral [TOOL_CALLS]", re.compile(r"\[TOOL_CALLS\]")),
)
_BARE_JSON = re.compile(r'^\s*(?:```(?:json)?\s*)?[\[{]\s*\{?\s*"(?:name|function)"\s*:', re.DOTALL)
TOOL_MAX_TOKENS = 512
_LOG_HINT = re.compile(r"tool|pars|json|error|exception|traceback", re.IGNORECASE)


@dataclass
class Reply:
    """What a chat completion said, streamed or not."""

    status: int = 0
    error: str | None = None
    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    calls: list[dict[str, str]] = field(default_factory=list)  # {"name", "arguments"} as received
    usage: dict[str, object] | None = None


class _Calls:
    """Tool-call deltas assembled by call `id` (Ollama's parallel calls share index 0), else `index`."""

    def __init__(self) -> None:
        self.slots: list[dict[str, str]] = []
        self.by_id: dict[str, dict[str, str]] = {}
        self.by_index: dict[int, dict[str, str]] = {}

    def slot(self, d: Mapping[str, object], pos: int, whole: bool) -> dict[str, str]:
        raw_id = d.get("id")
        cid = raw_id if isinstance(raw_id, str) and raw_id else None
        raw_index = d.get("index")
        idx: int = raw_index if isinstance(raw_index, int) else pos
        if whole:  # a non-streamed message: each entry is one complete call
            found = None
        elif cid is not None:
            found = self.by_id.get(cid)
        else:
            found = self.by_index.get(idx)
        if found is None:
            found = {"name": "", "arguments": ""}
            self.slots.append(found)
            if cid is not None:
                self.by_id[cid] = found
        self.by_index[idx] = found
        return found

    def merge(self, deltas: object, *, whole: bool = False) -> None:
        for pos, d in enumerate(deltas if isinstance(deltas, list) else []):
            if not isinstance(d, dict):
                continue
            slot = self.slot(d, pos, whole)
            fn: dict[str, object] = d["function"] if isinstance(d.get("function"), dict) else {}
            name = fn.get("name")
            if isinstance(name, str):
                slot["name"] += name
            args = fn.get("arguments")
            if isinstance(args, str):
                slot["arguments"] += args
            elif args is not None:  # an object instead of a string: kept as JSON text to grade
                slot["arguments"] += msgspec.json.encode(args).decode()


def parse_stream(raw: bytes) -> Reply:
    """An SSE chat completion assembled."""
    r = Reply(status=200)
    calls = _Calls()
    for line in raw.split(b"\n"):
        doc, error = _sse_event(line)
        if error is not None:
            r.error = error
            break
        if doc is None:
            continue
        if isinstance(doc.get("usage"), dict):
            r.usage = doc["usage"]
        for ch in doc.get("choices") or ():
            _merge_choice(r, calls, ch)
    r.calls = calls.slots
    return r


def _sse_event(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(one SSE line's JSON object or None to skip it, the error that ends the stream)."""
    line = line.strip()
    if not line or line.startswith(b":") or line.startswith((b"event:", b"id:", b"retry:")):
        return None, None
    if not line.startswith(b"data:"):
        return None, f"not an SSE line: {line[:200]!r}"
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return None, None
    try:
        doc = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return None, f"malformed JSON chunk: {payload[:200]!r}"
    if not isinstance(doc, dict):
        return None, None
    if doc.get("error"):
        return None, f"error event: {str(doc['error'])[:300]}"
    return doc, None


def _merge_choice(r: Reply, calls: _Calls, ch: object) -> None:
    if not isinstance(ch, dict):
        return
    delta: dict[str, object] = ch["delta"] if isinstance(ch.get("delta"), dict) else {}
    content = delta.get("content")
    if isinstance(content, str):
        r.content += content
    for key in ("reasoning_content", "reasoning"):
        text = delta.get(key)
        if isinstance(text, str):
            r.reasoning += text
    calls.merge(delta.get("tool_calls"))
    if ch.get("finish_reason"):
        r.finish_reason = str(ch["finish_reason"])


def parse_message(raw: bytes) -> Reply:
    """A non-streamed chat completion."""
    r = Reply(status=200)
    try:
        doc = msgspec.json.decode(raw)
        choice = doc["choices"][0]
        msg = choice["message"]
    except (msgspec.DecodeError, KeyError, IndexError, TypeError):
        r.error = f"not a chat completion: {raw[:200]!r}"
        return r
    r.content = msg.get("content") if isinstance(msg.get("content"), str) else ""
    r.reasoning = next((msg[k] for k in ("reasoning_content", "reasoning") if isinstance(msg.get(k), str)), "")
    r.finish_reason = choice.get("finish_reason")
    acc = _Calls()
    acc.merge(msg.get("tool_calls"), whole=True)
    r.calls = acc.slots
    r.usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else None
    return r


def _log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _log_line(path: Path | None, since: int) -> str | None:
    """The last line the server logged since `since` that speaks of tools, parsing or an error."""
    if path is None:
        return None
    try:
        with path.open("rb") as fh:
            fh.seek(since)
            new = fh.read(256 * 1024).decode("utf-8", "replace")
    except OSError:
        return None
    hits = [ln.strip() for ln in new.splitlines() if ln.strip() and _LOG_HINT.search(ln)]
    return hits[-1][:500] if hits else None


def cut_while_reasoning(reply: Reply) -> bool:
    """The reply ran to max_tokens before any call or answer text (all reasoning)."""
    if reply.error is not None or reply.finish_reason != "length" or reply.calls:
        return False
    text = reply.content.strip()
    if text.lower().startswith("<think>"):
        return "</think>" not in text.lower()
    return not text and bool(reply.reasoning)


def leaked_markup(content: str) -> tuple[str, int] | None:
    """(format, offset) of the first tool-call markup in `content` (or a bare JSON call), else None."""
    found = [(m.start(), name) for name, pat in MARKUP if (m := pat.search(content)) is not None]
    if found:
        at, name = min(found)
        return name, at
    if _BARE_JSON.match(content) and re.search(r'"(?:arguments|parameters)"\s*:', content):
        return "bare JSON", len(content) - len(content.lstrip())
    return None


def classify(task: suites.Task, reply: Reply, log_line: str | None) -> bfcl.Verdict:
    """The failure class of one tool task (docs/evals.md#running-the-public-suites), else BFCL's verdict."""
    if reply.error is not None or reply.status != 200:
        why = reply.error or f"HTTP {reply.status}"
        return bfcl.Verdict(False, "server_error", why + (f"; log: {log_line}" if log_line else ""))
    calls = _decoded_calls(reply)
    if isinstance(calls, bfcl.Verdict):
        return calls
    if not calls and (unparsed := _no_call_verdict(reply, log_line)) is not None:
        return unparsed
    v = bfcl.grade(task.category, task.data["function"], task.answer, calls)
    if reply.finish_reason == "length":  # graded as parsed, but the call may not be what the model meant
        v = dataclasses.replace(v, detail=v.detail + "; the reply ran to max_tokens (finish_reason length)")
    return v


def _decoded_calls(reply: Reply) -> list[bfcl.Call] | bfcl.Verdict:
    calls: list[bfcl.Call] = []
    for c in reply.calls:
        try:
            args = msgspec.json.decode(c["arguments"] or "{}")
        except msgspec.DecodeError:
            return bfcl.Verdict(False, "bad_arguments_json", f"{c['name']}: arguments are not JSON: "
                                f"{c['arguments'][:200]!r}")
        if not isinstance(args, dict):
            return bfcl.Verdict(False, "bad_arguments_json", f"{c['name']}: arguments are not a JSON object: "
                                f"{c['arguments'][:200]!r}")
        calls.append(bfcl.Call(c["name"], args))
    return calls


def _no_call_verdict(reply: Reply, log_line: str | None) -> bfcl.Verdict | None:
    """With no call parsed: a call announced that never arrived, or call markup left in the content."""
    if reply.finish_reason == "tool_calls":
        return bfcl.Verdict(False, "dropped_call", "finish_reason tool_calls but no call arrived"
                            + (f"; log: {log_line}" if log_line else "; nothing in the server log"))
    content = reply.content
    leaked = leaked_markup(content)
    if leaked is None:
        return None
    fmt, at = leaked
    return bfcl.Verdict(False, "leaked_markup", f"{fmt} tool-call markup in content, no call parsed: "
                        f"{content[max(0, at - 20):at + 120]!r}")


def _needs_log(reply: Reply) -> bool:
    return bool(reply.error or reply.status != 200 or (not reply.calls and reply.finish_reason == "tool_calls"))


def tool_body(adapter: RuntimeAdapter, cand: Candidate, task: suites.Task, sweep: Sweep, thinking: str,
              *, stream: bool, max_tokens: int = TOOL_MAX_TOKENS) -> dict[str, Any]:
    body = adapter.requests.answer_body(model=adapter.requests.request_model(cand), prompt="", max_tokens=max_tokens,
                               sampling=sweep.sampling, thinking=thinking)
    body["messages"] = [dict(m) for m in task.data["question"][0]]
    body["tools"] = bfcl.openai_tools(task.data["function"])
    body["tool_choice"] = "auto"
    body["parallel_tool_calls"] = True  # every category alike: the request must not give the category away
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


async def ask_tools(adapter: RuntimeAdapter, base_url: str, body: dict[str, object], timeout_s: float,
                    headers: dict[str, str] | None = None) -> Reply:
    try:
        status, raw = await http_post_json(base_url, adapter.requests.request_path(), body, timeout_s=timeout_s,
                                           headers=headers)
    except Exception as exc:  # recorded as server_error, never swallowed
        return Reply(error=f"request failed: {type(exc).__name__}: {exc}")
    if status != 200:
        return Reply(status=status, error=f"HTTP {status}: {raw[:200].decode('utf-8', 'replace')}")
    return parse_stream(raw) if body.get("stream") else parse_message(raw)


class _Usage(TypedDict, total=False):
    """The server's token counts an `EvalResult` records (each left out when the reply has none)."""

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int


_USAGE_KEYS: tuple[Literal["prompt_tokens", "completion_tokens"], ...] = ("prompt_tokens", "completion_tokens")


def _usage(reply_usage: Mapping[str, object] | None) -> tuple[_Usage, dict[str, str], dict[str, str]]:
    vals: _Usage = {}
    src: dict[str, str] = {"latency_s": "benchd: wall clock around the request"}
    nulls: dict[str, str] = {}
    u = reply_usage or {}
    for key in _USAGE_KEYS:
        got = u.get(key)
        if isinstance(got, int):
            vals[key] = got
            src[key] = f"server usage.{key}"
        else:
            nulls[key] = f"the server's reply has no usage.{key}"
    details = u.get("completion_tokens_details")
    rt = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if isinstance(rt, int):
        vals["reasoning_tokens"] = rt
        src["reasoning_tokens"] = "server usage.completion_tokens_details.reasoning_tokens"
    else:
        nulls["reasoning_tokens"] = "the server's usage reports no completion_tokens_details.reasoning_tokens"
    return vals, src, nulls


async def run_tool_task(job: str, adapter: RuntimeAdapter, base_url: str, cand: Candidate, task: suites.Task,
                        sweep: Sweep, timeout_s: float, *, log_path: Path | None = None,
                        parser: str | None = None, stream: bool = True) -> EvalResult:
    thinking = "off" if sweep.eval_thinking == "off" else sweep.thinking
    body = tool_body(adapter, cand, task, sweep, thinking, stream=stream)
    since = _log_size(log_path)
    t0 = time.monotonic()
    reply = await ask_tools(adapter, base_url, body, timeout_s, adapter.requests.auth_headers(cand))
    note = ""
    if cut_while_reasoning(reply) and sweep.eval_reasoning_budget > 0:
        budget = TOOL_MAX_TOKENS + sweep.eval_reasoning_budget
        note = f"cut off while reasoning at {TOOL_MAX_TOKENS} tokens; asked again with {budget}. "
        body = tool_body(adapter, cand, task, sweep, thinking, stream=stream, max_tokens=budget)
        since = _log_size(log_path)
        reply = await ask_tools(adapter, base_url, body, timeout_s, adapter.requests.auth_headers(cand))
    latency = time.monotonic() - t0
    line = _log_line(log_path, since) if _needs_log(reply) else None
    if cut_while_reasoning(reply):
        v = bfcl.Verdict(False, "reasoning_truncated", evalrun.TRUNCATED + " (not graded)")
    else:
        v = classify(task, reply, line)
    v = dataclasses.replace(v, detail=note + v.detail)
    vals, src, nulls = _usage(reply.usage)
    src["failure"] = "benchd: BFCL AST grader on the calls the server parsed" + (" (streamed)" if stream else "")
    if parser is not None:
        src["parser"] = "adapter.tool_parser"
    else:
        nulls["parser"] = "the runtime does not say which tool parser ran"
    return EvalResult(job=job, candidate=cand.id, tier="tools", task=task.id, passed=v.passed, detail=v.detail,
                      thinking=thinking, max_tokens=body.get("max_tokens"), category=task.category,
                      failure=v.failure, parameter=v.parameter, latency_s=latency, parser=parser,
                      sources=src, null_reasons=nulls, **vals)


class _CodeAsked(evalrun.AskedFields, _Usage):
    """The EvalResult fields of a code task known once it was asked (graded or not)."""

    category: str
    null_reasons: dict[str, str]


async def run_code_task(job: str, adapter: RuntimeAdapter, base_url: str, cand: Candidate, task: suites.Task,
                        sweep: Sweep, timeout_s: float) -> EvalResult:
    thinking = "off" if sweep.eval_thinking == "off" else sweep.thinking
    prompt = humaneval.messages(task.data)[0]["content"]
    t0 = time.monotonic()
    asked = await evalrun.ask_with_budget(adapter, base_url, cand, prompt, humaneval.MAX_TOKENS, sweep, thinking,
                                          timeout_s)
    latency = time.monotonic() - t0
    vals, src, nulls = _usage(asked.answer.usage)
    src["failure"] = "benchd: HumanEval program (prompt + completion + test + check) in the eval sandbox"
    common = _CodeAsked(job=job, candidate=cand.id, tier="code", task=task.id, thinking=thinking,
                        max_tokens=asked.max_tokens, category="humaneval", latency_s=latency,
                        sources=src, null_reasons=nulls, **vals)
    text = asked.answer.text
    if text is None:
        return EvalResult(passed=False, detail=asked.note + (asked.failure or "not a chat completion"),
                          failure="server_error", sandboxed=None, **common)
    if asked.answer.cut_while_reasoning:
        return EvalResult(passed=False, detail=asked.note + evalrun.TRUNCATED + " (not graded)",
                          failure="reasoning_truncated", sandboxed=None, **common)
    graded, grade_s = await evalrun.graded_off_loop(
        lambda: humaneval.grade(task.data, text, unsandboxed=sweep.eval_sandbox == "none"))
    if grade_s is not None:
        common["sources"]["grade_s"] = evalrun.GRADE_SOURCE
    return EvalResult(passed=graded.passed, detail=asked.note + graded.detail, failure=graded.failure,
                      sandboxed=graded.sandboxed, limits=graded.limits, grade_s=grade_s, **common)
