"""Thinking models on the REAL servers (issue 13): the scripted thinking model (`<think>`, K reasoning
tokens, `</think>`, an answer, EOS) probed through benchd's own path — `Supervisor.start` (argv,
scrubbed environment), `probe.run_chat` (the request body) and the adapter's `reader.normalize` (the row's
figures) — on llama-server, mlx_lm.server and mlx_vlm.server.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine import probe
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings, Normalized
from benchd.servers.server import Server
from benchd.servers.supervisor import Supervisor

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")
PROMPT = "Why is the sky blue? Think it through first. " * 4


def candidate(runtime: str, models: Any, **kw: Any) -> Candidate:
    model = models.target if runtime == "llama-server" else models.mlx_dir
    args = ["-t", "1"] if runtime == "llama-server" else []
    return Candidate(id=f"t-{runtime.split('.')[0].replace('_', '-')}", runtime=runtime, model=str(model),
                     args=kw.pop("args", args), **kw)


@contextlib.asynccontextmanager
async def started(cand: Candidate, state: Path, cache_dir: Path) -> AsyncIterator[Server]:
    sup = Supervisor(Config.resolve(state_dir=state, cache_dir=cache_dir), grace_s=1.5)
    server = await sup.start("thinking", cand, get_adapter(cand.runtime).launcher.server_ctx_size(cand, 512, 256))
    try:
        yield server
    finally:
        await sup.stop_all()


async def probes(server: Server, cand: Candidate, n: int, max_tokens: int, thinking: str,
                 run_to_length: bool = True) -> list[tuple[ProbeResult, Normalized]]:
    adapter = get_adapter(cand.runtime)
    out = []
    for _ in range(n):
        r = await probe.run_chat(adapter, server.base_url, cand, prompt=f"[{uuid.uuid4().hex}] {PROMPT}",
                                 settings=ChatSettings(max_tokens, thinking=thinking, run_to_length=run_to_length),
                                 timeout_s=120)
        assert r.ok, r.error
        out.append((r, adapter.reader.normalize(r, spec_configured=cand.spec is not None)))
    return out


@pytest.fixture(scope="module")
def thinking_runs(scripted_models: Any, make_scripted_models: Any, cache_dir: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Per runtime: 5 probes of 256 tokens with thinking on (the default on llama-server and mlx_lm,
    asked for on mlx_vlm), 1 with thinking off, 1 with EOS left alone; and the server handle.
    llama-server runs the medium scripted model (same script, a few hundred tok/s): the small one
    streams thousands of tok/s, and a loaded client then reads a whole probe in one or two reads,
    which leaves no window to time."""
    medium = make_scripted_models(size="medium")
    assert medium.reasoning_tokens == scripted_models.reasoning_tokens

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for runtime in RUNTIMES:
            cand = candidate(runtime, medium if runtime == "llama-server" else scripted_models)
            on = "on" if runtime == "mlx_vlm.server" else "default"
            async with started(cand, tmp_path_factory.mktemp("state"), cache_dir) as server:
                out[runtime] = {
                    "server": server,
                    "on": await probes(server, cand, 5, 256, thinking=on),
                    "off": await probes(server, cand, 1, 64, thinking="off"),
                    "eos": await probes(server, cand, 1, 64, thinking=on, run_to_length=False),
                }
        return out

    yield asyncio.run(run())


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_reasoning_is_measured(thinking_runs: dict[str, Any], scripted_models: Any, runtime: str) -> None:
    """TTFT is the first reasoning token, every generated token but the two tags has a chunk inside the
    window, reasoning_tokens == K, and the answer comes K + 1 tokens later."""
    k = scripted_models.reasoning_tokens
    for r, n in thinking_runs[runtime]["on"]:
        assert n.gen_tokens == 256 and r.finish_reason == "length"  # EOS suppressed: the full work
        assert r.first_is_reasoning and r.reasoning_chunks == k
        assert r.content_chunks == 256 - 2  # the two tags carry no chunk; everything else is in the window
        assert n.reasoning_tokens == k and n.sources["reasoning_tokens"].startswith("client:reasoning-chunks")
        assert n.thinking == "on"
        assert n.ttft_ms is not None and n.ttfat_ms is not None and n.ttft_ms <= n.ttfat_ms  # same read when bunched
        assert r.first_content == r.chunk_times[0] and r.first_answer == r.chunk_times[k]
        if n.gen_tps_client is None:  # a starved client read the stream at once: benchd names the reads
            assert "socket read" in n.null_reasons["gen_tps_client"], n.null_reasons
        else:
            assert "outside: the opening think tag" in n.sources["gen_tps_client"]


def test_llama_ttft_follows_the_servers_prompt_timing(thinking_runs: dict[str, Any]) -> None:
    """The first token chunk (reasoning) arrives right after the server's prompt processing: TTFT minus
    the server's `prompt_ms` is two decode steps (`<think>`, the first reasoning token) plus HTTP, a
    small share of the K + 2 steps to the first answer token (a ratio: absolute times vary with load).
    A run whose first reasoning and first answer tokens came in one socket read (a starved client) cannot
    tell them apart and is left out; benchd's TTFT is then the read's time for both."""
    gaps, answer_gaps = [], []
    for r, n in thinking_runs["llama-server"]["on"]:
        prompt_ms = (r.timings or {})["prompt_ms"]
        assert n.ttft_ms is not None and n.ttfat_ms is not None and n.ttft_ms - prompt_ms >= 0
        if r.first_content == r.first_answer:
            assert n.ttft_ms == n.ttfat_ms
            continue
        gaps.append(n.ttft_ms - prompt_ms)
        answer_gaps.append(n.ttfat_ms - prompt_ms)
    assert not gaps or statistics.median(gaps) < 0.5 * statistics.median(answer_gaps), (gaps, answer_gaps)


@pytest.mark.parametrize("runtime", ["llama-server", "mlx_vlm.server"])
def test_client_window_agrees_with_the_servers_rate(thinking_runs: dict[str, Any], runtime: str) -> None:
    """Where the client read the stream as it came (its window not flagged bunched, nor null with its
    reads named), the client's window rate is the server's within 2 %."""
    runs = [n for _, n in thinking_runs[runtime]["on"]]
    ratios = [n.gen_tps_client / n.gen_tps for n in runs
              if n.gen_tps_client is not None and "(bunched" not in n.sources["gen_tps_client"]]
    for n in runs:
        if n.gen_tps_client is None:
            assert "socket read" in n.null_reasons["gen_tps_client"], n.null_reasons
    assert not ratios or statistics.median(ratios) == pytest.approx(1.0, abs=0.02), ratios


def test_mlx_lm_rate_is_tokens_inside_the_window(thinking_runs: dict[str, Any]) -> None:
    """mlx_lm reports no timing: gen_tps is (N - 1) over the first-to-last chunk window, N counting the
    tokens inside it (256 minus the opening tag before the first chunk)."""
    for r, n in thinking_runs["mlx_lm.server"]["on"]:
        if n.gen_tps is None:  # a starved client read the stream at once: benchd names the reads
            assert "socket read" in n.null_reasons["gen_tps"], n.null_reasons
            continue
        assert n.sources["gen_tps"].startswith("client:stream-window (255 of 256 tokens inside")
        if r.arrivals == r.content_chunks:  # unbunched: the plain window applies exactly
            assert n.gen_tps == pytest.approx((255 - 1) / (r.chunk_times[-1] - r.chunk_times[0]), rel=1e-9)
        assert n.gen_tps == n.gen_tps_client


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_thinking_off_removes_the_reasoning(thinking_runs: dict[str, Any], scripted_models: Any, runtime: str) -> None:
    for r, n in thinking_runs[runtime]["off"]:
        assert r.reasoning_chunks == 0 and n.reasoning_tokens == 0 and n.thinking == "off"
        assert n.ttft_ms == n.ttfat_ms and n.gen_tokens == 64


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_eos_left_alone_ends_short(thinking_runs: dict[str, Any], scripted_models: Any, runtime: str) -> None:
    """Without suppression the model stops after its answer: 35 tokens of 64, the stop token outside the
    window (it has no chunk: llama-server and mlx_lm count it in completion_tokens); a starved client that
    read the short stream at once has no window, and the null reason names its socket reads."""
    for r, n in thinking_runs[runtime]["eos"]:
        assert r.finish_reason == "stop" and n.gen_tokens == scripted_models.generated_tokens() < 64
        if n.gen_tps_client is None:
            assert "stream window unmeasurable: all tokens arrived in" in n.null_reasons["gen_tps_client"], n.null_reasons
        else:
            assert "the final stop token" in n.sources["gen_tps_client"]


def test_llama_fit_off_and_cpu_split(thinking_runs: dict[str, Any]) -> None:
    server = thinking_runs["llama-server"]["server"]
    i = server.argv.index("--fit")
    assert server.argv[i + 1] == "off" and server.fit == "off" and "benchd default" in server.fit_note
    assert server.layer_split is None and server.split_note.startswith("CPU-only build")


def test_mlx_logit_bias_names_the_model_dirs_eos_ids(scripted_models: Any) -> None:
    for runtime in ("mlx_lm.server", "mlx_vlm.server"):
        fields = get_adapter(runtime).requests.length_fields(candidate(runtime, scripted_models), True)
        assert {int(k) for k in fields["logit_bias"]} == set(scripted_models.eos_ids)
        assert get_adapter(runtime).requests.length_fields(candidate(runtime, scripted_models), False) == {}
