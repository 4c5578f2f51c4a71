"""A real model on the real servers: SmolLM2-135M-Instruct (its Q4_1 GGUF on llama-server, the dequantized
MLX copy on mlx_lm.server; `benchctl models real`).

What random weights cannot show: a cell's peak memory stays flat over its probes (cold starts run with
`--cache-ram 0`), the model stops by EOS and the server's count agrees with the streamed chunks, the
ChatML template renders and tokenizes alike on both runtimes, HumanEval answers pass and fail with a class,
a template without tools gets `no_call`, a session reuses the warm cache, and the two runtimes agree on the
first greedy tokens. Threads: `-t 1` (a second thread only waits on a busy 2-core machine); outputs short.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine import probe, suiterun, suites
from benchd.engine.scheduler import run_job
from benchd.schemas import Candidate, Cooldown, Row, Sampling, Session, Sustained, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.store import Store

pytestmark = [pytest.mark.slow]

CONTEXT = 256
#: One probe's KV state at CONTEXT tokens: 30 layers x (K + V) x 3 KV heads x 64 x f16, per token.
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 2
#: Greedy tokens compared across the runtimes (see test_greedy_tokens_agree_across_the_runtimes).
AGREE_N = 16
#: A step whose top-2 logprobs on llama-server are closer than this is a near-tie: there the dequantized
#: copy may take the other token (docs/testing.md#the-mlx-conversion).
NEAR_TIE_NATS = 0.5
AGREE_PROMPTS = ("Write a Python function add(a, b) that returns the sum.", "List three colors.",
                 "Explain what a hash table is in two sentences.")
STOPS_SOON = "Translate 'good morning' into Spanish."
GREEDY = Sampling()


def _post(url: str, body: dict[str, Any], timeout: float = 600.0) -> Any:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def llama(real_model: Any, start_llama_server: Any) -> Iterator[str]:
    with start_llama_server(real_model.gguf, ["-t", "1", "-np", "1", "--cache-ram", "0"], ctx=2048) as url:
        yield url


@pytest.fixture(scope="module")
def mlx(real_model: Any, start_mlx_server: Any) -> Iterator[str]:
    with start_mlx_server("mlx_lm.server", real_model.mlx_dir, ["--prompt-cache-size", "0"]) as url:
        yield url


@pytest.fixture(scope="module")
def job(real_model: Any, llama_server_bin: Path, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Row]:
    """One sweep through the engine: 4 probes + a warm-up at CONTEXT, then a 3-turn session."""
    cand = Candidate(id="smollm2", runtime="llama-server", model=str(real_model.gguf), binary=str(llama_server_bin),
                     args=["-t", "1"])
    sweep = Sweep(name="smollm2", contexts=[CONTEXT], gen_tokens=8, probes=4, warmup=1, eval_tier="none",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  session=Session(turns=3, append_tokens=48, gen_tokens=8), candidates=[cand])
    config = Config.resolve(state_dir=tmp_path_factory.mktemp("smollm2"), cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    created, _ = store.create_job(sweep)
    outcome = asyncio.run(run_job(created.id, sweep, store, config, lambda e: None))
    assert outcome.state == "succeeded", outcome
    return store.results.rows(created.id)


def test_peak_memory_does_not_grow_with_the_probe_index(job: list[Row]) -> None:
    """With the build's default `--cache-ram 8192` every finished probe's KV state stayed in the process
    (one probe's worth more per probe); cold starts run with 0, so the peaks of a cell stay within one
    probe's KV state of each other (the default would spread them over 3 of it)."""
    rows = sorted((r for r in job if r.kind == "probe" and r.status == "ok"), key=lambda r: r.probe)
    assert len(rows) == 4, [(r.probe, r.status, r.error) for r in job if r.kind == "probe"]
    peaks = [r.mem_peak_bytes for r in rows]
    assert all(isinstance(p, int) and p > 90_000_000 for p in peaks), peaks  # the weights are in it
    one_probe = KV_BYTES_PER_TOKEN * CONTEXT
    assert max(peaks) - min(peaks) < one_probe, (peaks, one_probe)  # type: ignore[type-var, operator]
    assert all("--cache-ram 0 MiB" in r.sources["mem_load_mode"] for r in rows)


def test_memory_and_prompt_speed_carry_their_sources(job: list[Row]) -> None:
    for r in (r for r in job if r.kind == "probe"):
        assert r.mem_source == "kernel:VmHWM" and r.sources["mem_resident_peak_bytes"] == "kernel:VmHWM"
        assert r.prompt_tps and r.prompt_tps > 0 and r.sources["prompt_tps"] == "server:timings"
        assert r.prompt_tokens is not None and abs(r.prompt_tokens - CONTEXT) <= 8 and r.cached_tokens == 0
        assert r.gen_tokens == 8 and r.sources["gen_tps"] == "server:timings"


def test_a_session_reuses_the_warm_cache(job: list[Row]) -> None:
    turns = sorted((r for r in job if r.kind == "session"), key=lambda r: r.probe)
    assert [r.status for r in turns] == ["ok"] * 3, [(r.status, r.error) for r in turns]
    # Turn 1 may reuse the template's default system prompt (~24 tokens) from the server's warm-up request.
    assert turns[0].cached_tokens is not None and turns[0].cached_tokens < 32, turns[0].cached_tokens
    assert "--cache-ram 8192" in turns[0].sources["prompt_cache"]
    for prev, r in itertools.pairwise(turns):
        assert r.cached_tokens is not None and r.cached_tokens >= (prev.prompt_tokens or 0) - 8, r.sources
        assert r.cache_miss is False, r.sources.get("cache_miss")


async def test_it_stops_by_eos_and_the_counts_agree(llama: str, mlx: str, real_model: Any) -> None:
    """Without ignore_eos the model ends its short answer itself: finish_reason stop, the server's
    count is every generated token, EOS included, and the client saw one chunk per token but EOS."""
    for runtime, url, model in (("llama-server", llama, real_model.gguf), ("mlx_lm.server", mlx, real_model.mlx_dir)):
        adapter = get_adapter(runtime)
        cand = Candidate(id=runtime, runtime=runtime, model=str(model))
        result = await probe.run_chat(adapter, url, cand, prompt=STOPS_SOON,
                                      settings=ChatSettings(64, GREEDY, run_to_length=False), timeout_s=600.0)
        norm = adapter.reader.normalize(result, spec_configured=False)
        assert result.ok and result.finish_reason == "stop", (runtime, result.error, result.finish_reason)
        assert norm.gen_tokens is not None and norm.gen_tokens < 64, runtime
        assert result.content_chunks == norm.gen_tokens - 1, (runtime, result.content_chunks, norm.gen_tokens)
        if runtime == "llama-server":
            assert result.final is not None and result.final["timings"]["predicted_n"] == norm.gen_tokens


async def test_the_chatml_template_renders_and_tokenizes_alike(llama: str, real_model: Any, mlx_argv: Any) -> None:
    """The same chat rendered by each runtime's own template code and tokenized by its own tokenizer: the
    ChatML text with the template's default system prompt, and the same ids on both."""
    messages = [{"role": "user", "content": "Sum 12345 and 7, then say \"done\" in émoji 😀."}]
    items: list[Any] = [(messages, ""), (messages, "12352 done<|im_end|>")]  # (chat, text after the rendering)
    ids: dict[str, list[list[int]]] = {}
    for runtime, model, command in (("llama-server", real_model.gguf, ["llama-server"]),
                                    ("mlx_lm.server", real_model.mlx_dir, mlx_argv["mlx_lm.server"])):
        cand = Candidate(id=runtime, runtime=runtime, model=str(model))
        ids[runtime] = await get_adapter(runtime).requests.rendered_tokens(llama, cand, command, items, "default")
    assert ids["llama-server"] == ids["mlx_lm.server"]
    rendered = _post(llama + "/apply-template", {"messages": messages})["prompt"]
    assert rendered == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                        f"<|im_end|>\n<|im_start|>user\n{messages[0]['content']}<|im_end|>\n<|im_start|>assistant\n")
    first = ids["llama-server"][0]
    assert first[0] == 1 and first.count(2) == 2  # <|im_start|> first, <|im_end|> after each turn
    assert ids["llama-server"][1][:len(first)] == first and ids["llama-server"][1][-1] == 2  # the special parsed
    detok = _post(llama + "/detokenize", {"tokens": first})["content"]
    assert detok == rendered


async def test_humaneval_graded_on_real_answers(llama: str, real_model: Any, eval_suites: Path) -> None:
    """Tasks it solved greedily in an earlier full run (HumanEval/23, 28, 53) and one it did not (0): at
    least one passes, and every failure carries its class and the grader's detail."""
    data = suites.load("code", eval_suites)
    by_id = {t.id: t for t in data.tasks}
    adapter = get_adapter("llama-server")
    cand = Candidate(id="smollm2", runtime="llama-server", model=str(real_model.gguf))
    sweep = Sweep(name="he", contexts=[512], gen_tokens=8, candidates=[cand])
    results = [await suiterun.run_code_task("job", adapter, llama, cand, by_id[f"HumanEval/{n}"], sweep, 600.0)
               for n in (23, 28, 53, 0)]
    assert any(r.passed for r in results), [(r.task, r.failure, r.detail[:200]) for r in results]
    for r in results:
        assert r.passed == (r.failure is None), (r.task, r.failure)
        if not r.passed:
            assert r.failure in ("wrong_answer", "no_code", "timeout") and r.detail, (r.task, r.failure, r.detail)
        assert r.completion_tokens and r.sources["completion_tokens"] == "server usage.completion_tokens"


async def test_tool_calls_are_no_call_for_a_template_without_tools(llama: str, real_model: Any,
                                                                   eval_suites: Path) -> None:
    """Its ChatML template has no tools: llama-server still takes the request, the model answers in prose,
    and the grader's class is `no_call` (not a crash, not a server error)."""
    data = suites.load("tools", eval_suites)
    task = next(t for t in data.tasks if t.category == "simple_python")
    adapter = get_adapter("llama-server")
    cand = Candidate(id="smollm2", runtime="llama-server", model=str(real_model.gguf))
    sweep = Sweep(name="tools", contexts=[512], gen_tokens=8, candidates=[cand])
    r = await suiterun.run_tool_task("job", adapter, llama, cand, task, sweep, 600.0)
    assert not r.passed and r.failure == "no_call", (r.failure, r.detail)


def _chat(url: str, prompt: str, **extra: Any) -> Any:
    return _post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                               "max_tokens": AGREE_N, "temperature": 0, **extra})


def test_greedy_tokens_agree_across_the_runtimes(llama: str, mlx: str) -> None:
    """The same prompts, greedy, AGREE_N tokens: the dequantized MLX copy says what llama-server says up to
    the first near-tie on llama-server's side (top-2 logprobs within NEAR_TIE_NATS), and all AGREE_N tokens
    on at least two of the three prompts (4-bit weights with 8-bit activations on llama.cpp against float32
    on MLX: near-ties may go the other way)."""
    full = 0
    for prompt in AGREE_PROMPTS:
        doc = _chat(llama, prompt, cache_prompt=False, logprobs=True, top_logprobs=2)
        steps = doc["choices"][0]["logprobs"]["content"]
        margins = [s["top_logprobs"][0]["logprob"] - s["top_logprobs"][1]["logprob"] for s in steps]
        clear = next((i for i, m in enumerate(margins) if m < NEAR_TIE_NATS), len(steps))
        sure = b"".join(bytes(s["bytes"]) for s in steps[:clear]).decode("utf-8", "replace")
        want = doc["choices"][0]["message"]["content"]
        got = _chat(mlx, prompt, model="default_model")["choices"][0]["message"]["content"]
        assert got.startswith(sure), (prompt, clear, margins, want, got)
        full += got == want
    assert full >= 2, full
