"""Evals and drafts on the scripted thinking model, REAL llama-server (issue 13), and the new sweep
fields' bad input through `benchctl validate`.

Evals grade the answer text only; a task cut off while the model still reasons is asked again with its
budget raised by `eval_reasoning_budget`, and each result records the thinking and budget it used.
Draft acceptance through benchd's rows falls as the draft's changed share grows.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine import evalrun, probe
from benchd.engine.evals import EvalTask
from benchd.schemas import Candidate, Sampling, Spec, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.supervisor import Supervisor


@pytest.fixture(scope="module")
def llama_scripted(start_llama_server: Any, scripted_models: Any) -> Iterator[str]:
    with start_llama_server(scripted_models.target, ["-t", "1"]) as url:
        yield url


def _task(max_tokens: int, expected: str) -> EvalTask:
    return EvalTask(id="scripted", tier="smoke", kind="answer", prompt=f"[{uuid.uuid4().hex}] Answer briefly.",
                    expected=expected, max_tokens=max_tokens)


def _sweep(models: Any, **kw: Any) -> Sweep:
    cand = Candidate(id="llama", runtime="llama-server", model=str(models.target))
    return Sweep(name="evals", contexts=[128], gen_tokens=16, candidates=[cand], **kw)


def _run(url: str, models: Any, task: EvalTask, **kw: Any) -> Any:
    sweep = _sweep(models, **kw)
    return asyncio.run(evalrun.run_task("j", get_adapter("llama-server"), url, sweep.candidates[0], task, sweep, 60))


def test_eval_grades_the_answer_not_the_reasoning(llama_scripted: str, scripted_models: Any) -> None:
    """Thinking as the sweep asks (on by default here): the reasoning text is never graded."""
    answer = scripted_models.answer_text.strip()
    reasoning_word = scripted_models.reasoning_text.split()[0]
    assert reasoning_word not in answer
    ok = _run(llama_scripted, scripted_models, _task(64, answer.split()[-1]), eval_thinking="sweep")
    assert ok.passed and (ok.thinking, ok.max_tokens) == ("default", 64)
    no = _run(llama_scripted, scripted_models, _task(64, reasoning_word), eval_thinking="sweep")
    assert not no.passed


def test_eval_cut_off_while_reasoning_gets_a_larger_budget(llama_scripted: str, scripted_models: Any) -> None:
    expected = scripted_models.answer_text.split()[-1]
    k = scripted_models.reasoning_tokens
    got = _run(llama_scripted, scripted_models, _task(k // 2, expected), eval_thinking="sweep",
               eval_reasoning_budget=64)
    assert got.passed and got.max_tokens == k // 2 + 64
    assert got.detail is not None and "cut off while reasoning" in got.detail
    none = _run(llama_scripted, scripted_models, _task(k // 2, expected), eval_thinking="sweep",
                eval_reasoning_budget=0)
    assert not none.passed and none.max_tokens == k // 2 and "still reasoning" in (none.detail or "")


def test_eval_thinking_off_by_default(llama_scripted: str, scripted_models: Any) -> None:
    """The default turns thinking off: the scripted model answers at once, within a small budget."""
    expected = scripted_models.answer_text.split()[-1]
    got = _run(llama_scripted, scripted_models, _task(scripted_models.generated_tokens(thinking=False), expected))
    assert got.passed and (got.thinking, got.max_tokens) == ("off", scripted_models.generated_tokens(thinking=False))


def test_answer_text_never_reads_none(llama_scripted: str, scripted_models: Any) -> None:
    """A reply cut off inside the reasoning has `content` null or empty: the answer is "", never "None"."""
    body = get_adapter("llama-server").requests.answer_body(model="m", prompt="hi", max_tokens=5, sampling=Sampling())
    import urllib.request

    req = urllib.request.Request(llama_scripted + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    raw = urllib.request.urlopen(req, timeout=60).read()
    parsed = evalrun.parse_answer(raw)
    assert parsed.text == "" and parsed.cut_while_reasoning


def test_draft_acceptance_is_monotone_in_the_changed_share(scripted_models: Any, cache_dir: Path,
                                                            tmp_path: Path) -> None:
    """Through benchd's probe path and rows: identical > 25 % > 50 % > 75 % changed > unrelated."""
    async def acceptance(draft: Path) -> float:
        cand = Candidate(id="spec", runtime="llama-server", model=str(scripted_models.target), args=["-t", "1"],
                         spec=Spec(kind="draft", draft_model=str(draft), draft_max=3))
        sup = Supervisor(Config.resolve(state_dir=tmp_path / draft.stem, cache_dir=cache_dir), grace_s=1.5)
        server = await sup.start("spec", cand, 1024)
        try:
            adapter = get_adapter("llama-server")
            r = await probe.run_chat(adapter, server.base_url, cand, prompt="Why is the sky blue?",
                                     settings=ChatSettings(128), timeout_s=120)
            n = adapter.reader.normalize(r, spec_configured=True)
            assert n.gen_tokens == 128 and n.draft_acceptance is not None, n.null_reasons
            return n.draft_acceptance
        finally:
            await sup.stop_all()

    rates = {share: asyncio.run(acceptance(path)) for share, path in sorted(scripted_models.drafts.items())}
    shares = sorted(rates)
    assert all(rates[a] > rates[b] for a, b in itertools.pairwise(shares)), rates
    assert all(rates[0.0] > rates[s] > rates[1.0] for s in shares[1:-1]), rates


BAD = """
name = "bad"
contexts = [128]
gen_tokens = 16
thinking = "{thinking}"
[[candidates]]
id = "a"
runtime = "llama-server"
model = "/nonexistent.gguf"
"""


@pytest.mark.parametrize(("field", "text"), [("thinking", BAD.format(thinking="maybe")),
                                             ("eval_thinking", BAD.format(thinking="on") + "")])
def test_bad_thinking_values_exit_2_naming_the_field(tmp_path: Path, field: str, text: str) -> None:
    if field == "eval_thinking":
        text = text.replace('thinking = "on"', 'thinking = "on"\neval_thinking = "always"')
    f = tmp_path / "bad.toml"
    f.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("BENCHD_STATE_DIR", "BENCHD_SOCKET")}
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(f)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 2
    assert f"{f}: {field}: " in out.stderr, out.stderr
