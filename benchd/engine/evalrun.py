"""The eval tier run through a candidate's server: ask each task, grade the answer off the event loop.

Reasons and facts: docs/evals.md#asking-and-grading.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

import msgspec

from benchd.engine import evals
from benchd.schemas import Candidate, EvalResult, Sweep
from benchd.servers.runtimes.base import RuntimeAdapter, http_post_json

_THINK_BLOCK = re.compile(r"^\s*<think>.*?(</think>|$)", re.DOTALL)


@dataclass(frozen=True)
class Answer:
    """The graded text, and whether the reply was cut off while still reasoning."""

    text: str | None
    cut_while_reasoning: bool = False


def answer_text(raw: bytes) -> str | None:
    """The answer of an OpenAI chat completion: `choices[0].message.content` without a leading think
    block (a template the runtime's reasoning parser did not recognise leaves it there); None when the
    reply is not a chat completion. A null content (all reasoning) is the empty answer, never "None"."""
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
    text = content if isinstance(content, str) else ""
    unparsed = _THINK_BLOCK.match(text)
    reasoning = any(isinstance(message.get(k), str) and message[k] for k in ("reasoning_content", "reasoning"))
    still_thinking = (unparsed is not None and not unparsed.group(1)) or (reasoning and not text.strip())
    if unparsed is not None:
        text = text[unparsed.end():]
    cut = isinstance(choice, dict) and choice.get("finish_reason") == "length" and (still_thinking or reasoning)
    return Answer(text.strip(), bool(cut))


async def ask(adapter: RuntimeAdapter, base_url: str, cand: Candidate, prompt: str, max_tokens: int,
              sweep: Sweep, thinking: str, timeout_s: float) -> tuple[Answer, str | None]:
    """One non-streamed answer; (answer, None) or (empty answer, why it failed)."""
    body = adapter.answer_body(model=adapter.request_model(cand), prompt=prompt, max_tokens=max_tokens,
                               sampling=sweep.sampling, thinking=thinking)
    try:
        status, raw = await http_post_json(base_url, adapter.request_path(), body, timeout_s=timeout_s,
                                           headers=adapter.auth_headers(cand))
    except Exception as exc:  # recorded in the eval result, not swallowed
        return Answer(None), f"request failed: {type(exc).__name__}: {exc}"
    if status != 200:
        return Answer(None), f"HTTP {status}"
    return parse_answer(raw), None


async def run_task(
    job: str, adapter: RuntimeAdapter, base_url: str, cand: Candidate, task: evals.EvalTask,
    sweep: Sweep, timeout_s: float,
) -> EvalResult:
    thinking = "off" if sweep.eval_thinking == "off" else sweep.thinking
    budget = task.max_tokens
    t0 = time.monotonic()
    answer, failure = await ask(adapter, base_url, cand, task.prompt, budget, sweep, thinking, timeout_s)
    note = ""
    if failure is None and answer.cut_while_reasoning and sweep.eval_reasoning_budget > 0:
        budget += sweep.eval_reasoning_budget
        note = f"cut off while reasoning at {task.max_tokens} tokens; asked again with {budget}. "
        answer, failure = await ask(adapter, base_url, cand, task.prompt, budget, sweep, thinking, timeout_s)
    latency = time.monotonic() - t0
    timed = {"latency_s": "benchd: wall clock around the task's requests"}
    if answer.text is None:
        return EvalResult(job=job, candidate=cand.id, tier=task.tier, task=task.id, passed=False,
                          detail=note + (failure or "no answer text"), sandboxed=None, thinking=thinking,
                          max_tokens=budget, latency_s=latency, sources=timed)
    graded = await asyncio.to_thread(evals.grade, task, answer.text, unsandboxed=sweep.eval_sandbox == "none")
    if answer.cut_while_reasoning:
        note += "the answer was cut off while the model was still reasoning. "
    result = evals.to_result(job, cand.id, task, graded._replace(detail=note + graded.detail))
    return msgspec.structs.replace(result, thinking=thinking, max_tokens=budget, latency_s=latency,
                                   sources={**result.sources, **timed})
