"""The eval tier run through a candidate's server: ask each task, grade the answer off the event loop.

Split from the scheduler because asking is I/O and grading may run code in a sandboxed subprocess
(`evals.grade`, which blocks): neither belongs in the probe loop. A task whose request fails is a
failed result naming why, never a silent gap.
"""

from __future__ import annotations

import asyncio

import msgspec

from benchd.engine import evals
from benchd.schemas import Candidate, EvalResult, Sampling
from benchd.servers.runtimes.base import RuntimeAdapter, http_post_json


def answer_text(raw: bytes) -> str | None:
    """`choices[0].message.content` of an OpenAI chat completion, or None."""
    try:
        doc = msgspec.json.decode(raw)
        return str(doc["choices"][0]["message"]["content"])
    except (msgspec.DecodeError, KeyError, IndexError, TypeError):
        return None


async def run_task(
    job: str, adapter: RuntimeAdapter, base_url: str, cand: Candidate, task: evals.EvalTask,
    sampling: Sampling, timeout_s: float,
) -> EvalResult:
    body = adapter.answer_body(model=adapter.request_model(cand), prompt=task.prompt,
                               max_tokens=task.max_tokens, sampling=sampling)
    try:
        status, raw = await http_post_json(base_url, adapter.request_path(), body, timeout_s=timeout_s)
        answer = answer_text(raw) if status == 200 else None
        detail = None if status == 200 else f"HTTP {status}"
    except Exception as exc:  # recorded in the eval result, not swallowed
        answer, detail = None, f"request failed: {type(exc).__name__}: {exc}"
    if answer is None:
        return EvalResult(job=job, candidate=cand.id, tier=task.tier, task=task.id, passed=False,
                          detail=detail or "no answer text", sandboxed=None)
    return evals.to_result(job, cand.id, task, await asyncio.to_thread(evals.grade, task, answer))
