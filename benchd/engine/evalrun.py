"""The eval tier run through a candidate's server: ask each task, grade the answer off the event loop.
Reasons: docs/evals.md#asking-and-grading.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import msgspec

from benchd.engine import evals
from benchd.schemas import Candidate, EvalResult, Sweep
from benchd.servers.runtimes.base import RuntimeAdapter, http_post_json

_THINK_BLOCK = re.compile(r"^\s*<think>.*?(</think>|$)", re.DOTALL)


@dataclass(frozen=True)
class Answer:
    """The graded text, whether the reply was cut off while still reasoning, and the server's usage."""

    text: str | None
    cut_while_reasoning: bool = False
    usage: dict[str, object] | None = None


@dataclass(frozen=True)
class Asked:
    """An answer after the reasoning-budget retry: the budget of the answer kept and what happened."""

    answer: Answer
    failure: str | None
    max_tokens: int
    note: str


def answer_text(raw: bytes) -> str | None:
    """The reply's answer, a leading think block removed; None when it is not a chat completion."""
    return parse_answer(raw).text


def parse_answer(raw: bytes) -> Answer:
    try:
        doc = msgspec.json.decode(raw)
        choice = doc["choices"][0]
        message = choice["message"]
    except (msgspec.DecodeError, KeyError, IndexError, TypeError):
        return Answer(None)
    if not isinstance(message, dict):
        return Answer(None)
    content = message.get("content")
    at_length = isinstance(choice, dict) and choice.get("finish_reason") == "length"
    text, cut = _past_thinking(content if isinstance(content, str) else "", message, at_length)
    usage = doc.get("usage") if isinstance(doc, dict) and isinstance(doc.get("usage"), dict) else None
    return Answer(text.strip(), cut, usage)


def _past_thinking(text: str, message: dict[str, object], at_length: bool) -> tuple[str, bool]:
    """(the text after an unparsed leading think block, whether the reply was cut off while reasoning)."""
    unparsed = _THINK_BLOCK.match(text)
    reasoning = any(isinstance(message.get(k), str) and message[k] for k in ("reasoning_content", "reasoning"))
    if unparsed is None:
        return text, at_length and reasoning and not text.strip()
    return text[unparsed.end():], at_length and (not unparsed.group(1) or reasoning)


async def ask(adapter: RuntimeAdapter, base_url: str, cand: Candidate, prompt: str, max_tokens: int,
              sweep: Sweep, thinking: str, timeout_s: float) -> tuple[Answer, str | None]:
    """One non-streamed answer; (answer, None) or (empty answer, why it failed)."""
    body = adapter.requests.answer_body(model=adapter.requests.request_model(cand), prompt=prompt, max_tokens=max_tokens,
                               sampling=sweep.sampling, thinking=thinking)
    try:
        status, raw = await http_post_json(base_url, adapter.requests.request_path(), body, timeout_s=timeout_s,
                                           headers=adapter.requests.auth_headers(cand))
    except Exception as exc:  # recorded in the eval result, not swallowed
        return Answer(None), f"request failed: {type(exc).__name__}: {exc}"
    if status != 200:
        return Answer(None), f"HTTP {status}"
    return parse_answer(raw), None


async def ask_with_budget(adapter: RuntimeAdapter, base_url: str, cand: Candidate, prompt: str, max_tokens: int,
                          sweep: Sweep, thinking: str, timeout_s: float) -> Asked:
    """One answer; one cut off while reasoning is asked again with `eval_reasoning_budget` more."""
    answer, failure = await ask(adapter, base_url, cand, prompt, max_tokens, sweep, thinking, timeout_s)
    if failure is None and answer.cut_while_reasoning and sweep.eval_reasoning_budget > 0:
        budget = max_tokens + sweep.eval_reasoning_budget
        again, failure = await ask(adapter, base_url, cand, prompt, budget, sweep, thinking, timeout_s)
        return Asked(again, failure, budget, f"cut off while reasoning at {max_tokens} tokens; asked again "
                     f"with {budget}. ")
    return Asked(answer, failure, max_tokens, "")


TRUNCATED = "the answer was cut off while the model was still reasoning"
GRADE_SOURCE = "benchd: wall clock around the sandbox run of the answer's code"


async def graded_off_loop(grade: Callable[[], evals.GradeResult]) -> tuple[evals.GradeResult, float | None]:
    """`grade()` in a thread, and its seconds when it ran code (None when it ran none)."""
    t0 = time.monotonic()
    graded = await asyncio.to_thread(grade)
    return graded, None if graded.sandboxed is None else time.monotonic() - t0


class AskedFields(TypedDict):
    """The EvalResult fields known once the task was asked (graded or not)."""

    job: str
    candidate: str
    tier: str
    task: str
    thinking: str
    max_tokens: int
    latency_s: float
    sources: dict[str, str]


async def run_task(
    job: str, adapter: RuntimeAdapter, base_url: str, cand: Candidate, task: evals.EvalTask,
    sweep: Sweep, timeout_s: float,
) -> EvalResult:
    thinking = "off" if sweep.eval_thinking == "off" else sweep.thinking
    t0 = time.monotonic()
    asked = await ask_with_budget(adapter, base_url, cand, task.prompt, task.max_tokens, sweep, thinking, timeout_s)
    answer, failure, budget, note = asked.answer, asked.failure, asked.max_tokens, asked.note
    latency = time.monotonic() - t0
    timed = {"latency_s": "benchd: wall clock around the task's requests"}
    common = AskedFields(job=job, candidate=cand.id, tier=task.tier, task=task.id, thinking=thinking,
                         max_tokens=budget, latency_s=latency, sources=timed)
    if answer.text is None:
        return EvalResult(passed=False, detail=note + (failure or "no answer text"), sandboxed=None,
                          failure="server_error", **common)
    if answer.cut_while_reasoning:
        return EvalResult(passed=False, detail=note + TRUNCATED + " (not graded)", sandboxed=None,
                          failure="reasoning_truncated", **common)
    text = answer.text
    graded, grade_s = await graded_off_loop(lambda: evals.grade(task, text, unsandboxed=sweep.eval_sandbox == "none"))
    result = evals.to_result(job, cand.id, task, graded._replace(detail=note + graded.detail))
    if grade_s is not None:
        timed["grade_s"] = GRADE_SOURCE
    return msgspec.structs.replace(result, thinking=thinking, max_tokens=budget, latency_s=latency,
                                   grade_s=grade_s, sources={**result.sources, **timed})
