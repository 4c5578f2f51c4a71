"""Session probes on the REAL servers: a conversation growing by a turn at a time on a warm prompt cache,
through benchd's own path (`Supervisor.start` with the adapter's session start, `session.run_session`,
the adapter's `reader.normalize` and `requests.rendered_tokens`) on llama-server, mlx_lm.server and mlx_vlm.server.

- the tiny random model: cached tokens grow by about one turn each time, and the warm turns' TTFT is
  below a cold probe of the same total length (a ratio of medians on one server, not a time);
- the scripted thinking model (Qwen3's template): the reusable prefix benchd computes stops where the
  template's rendering of the earlier answer departs from what the model generated (the empty think
  block with thinking off, the dropped reasoning with thinking on), and the recorded `cache_miss`
  agrees with the server's cached tokens.

mlx_vlm.server (its prefix cache, `APC_ENABLED=1`, read in its pinned `apc.py`) keeps the prompt's K/V
only, in whole 16-token blocks: its cached tokens are a multiple of the block, reach the previous prompt
(not its answer), and that is no miss; its disk tier is off for session starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine import probe, session
from benchd.engine.prompts import PromptBuilder
from benchd.schemas import Candidate, Row, Session, Sweep
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.server import Server
from benchd.servers.supervisor import Supervisor

pytestmark = [pytest.mark.slow]

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")


def candidate(runtime: str, models: Any) -> Candidate:
    model = models.target if runtime == "llama-server" else models.mlx_dir
    args = ["-t", "1"] if runtime == "llama-server" else []
    return Candidate(id=f"s-{runtime.split('.')[0].replace('_', '-')}", runtime=runtime, model=str(model), args=args)


def sweep(cand: Candidate, context: int, *, turns: int, append: int, gen: int, thinking: str = "default",
          ignore_eos: bool = True) -> tuple[Sweep, Session]:
    return (Sweep(name="session", contexts=[context], gen_tokens=gen, candidates=[cand], thinking=thinking,  # type: ignore[arg-type]
                  ignore_eos=ignore_eos), Session(turns=turns, append_tokens=append))


@contextlib.asynccontextmanager
async def session_server(cand: Candidate, state: Path, cache_dir: Path, ctx: int) -> AsyncIterator[tuple[Server, str]]:
    """The candidate's session start (cache on), as the engine starts it."""
    start = get_adapter(cand.runtime).sessions.session_start(cand)
    sup = Supervisor(Config.resolve(state_dir=state, cache_dir=cache_dir), grace_s=1.5)
    server = await sup.start("session", start.candidate, get_adapter(cand.runtime).launcher.server_ctx_size(cand, ctx, 0))
    try:
        yield server, start.notes
    finally:
        await sup.stop_all()


async def counter(cand: Candidate, server: Server) -> Any:
    adapter = get_adapter(cand.runtime)
    if await adapter.requests.count_tokens(server.base_url, "hello") is not None:
        async def count(text: str) -> int:
            n = await adapter.requests.count_tokens(server.base_url, text)
            assert n is not None
            return n
        return count
    return adapter.requests.local_token_counter(cand)


async def run(cand: Candidate, server: Server, notes: str, plan: tuple[Sweep, Session]) -> tuple[list[Row], list[session.Turn]]:
    sw, shape = plan
    context = sw.contexts[0]
    first = await PromptBuilder().build(context, f"session/{cand.id}/{context}/session1", await counter(cand, server),
                                        key=cand.id)
    spec = session.SessionRun(
        job="session", adapter=get_adapter(cand.runtime), server=server, candidate=cand, context=context, sweep=sw,
        plan=shape, timeout_s=300.0, first_prompt=first, sizing="tokenizer", cache_notes=notes)
    return await session.run_session(spec), spec.turns


async def cold_ttfts(cand: Candidate, server: Server, tokens: int, n: int) -> list[float]:
    """TTFT of `n` unique prompts of `tokens` tokens with the cache left cold (a fresh nonce first;
    llama-server: `cache_prompt: false`, mlx_lm.server: nothing of it is in its LRU but the header)."""
    builder, count = PromptBuilder(), await counter(cand, server)
    out = []
    for i in range(n):
        prompt = await builder.build(tokens, f"cold/{cand.id}/{tokens}/{i}-{uuid.uuid4().hex[:6]}", count, key=cand.id)
        r = await probe.run_chat(get_adapter(cand.runtime), server.base_url, cand, prompt=prompt.text,
                                 settings=ChatSettings(4), timeout_s=300.0)
        assert r.ok, r.error
        assert r.ttft_ms is not None
        out.append(r.ttft_ms)
    return out


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_four_turn_session_reuses_the_cache(runtime: str, tiny_models: Any, cache_dir: Path,
                                            tmp_path: Path) -> None:
    cand = candidate(runtime, tiny_models)
    sw = sweep(cand, 1024, turns=4, append=256, gen=16)

    async def go() -> tuple[list[Row], list[float]]:
        async with session_server(cand, tmp_path, cache_dir, 4096) as (server, notes):
            rows, _ = await run(cand, server, notes, sw)
            assert all(r.status == "ok" for r in rows), [r.error for r in rows]
            return rows, await cold_ttfts(cand, server, rows[-1].prompt_tokens or 0, 3)

    rows, cold = asyncio.run(go())
    assert [r.probe for r in rows] == [1, 2, 3, 4] and [r.turn for r in rows] == [1, 2, 3, 4]
    assert {r.kind for r in rows} == {"session"}
    for prev, r in itertools.pairwise(rows):
        assert r.cached_tokens is not None and r.prompt_tokens is not None and prev.prompt_tokens is not None
        # about one turn more each time: at least the previous prompt (less the template's own tokens),
        # never the whole new prompt (the tool result is new)
        assert r.cached_tokens >= prev.prompt_tokens - 16, (r.probe, r.cached_tokens, prev.prompt_tokens)
        assert r.cached_tokens < r.prompt_tokens
        assert r.new_prompt_tokens == r.prompt_tokens - r.cached_tokens
        assert r.reusable_prefix_tokens is not None and r.reusable_prefix_tokens >= prev.prompt_tokens - 16
        assert r.cache_miss is not None and "cached_tokens" in r.sources and "cache_miss" in r.sources
        assert r.new_prompt_tps is not None and "new_prompt_tps" in r.sources
        assert r.ttft_ms is not None
        # a starved client can see all 16 tokens in one or two reads: no window, said so (mlx_lm has no timings)
        assert r.gen_tps is not None or "socket read" in r.null_reasons["gen_tps"], r.null_reasons
    summary = session.session_summary(rows)
    assert summary is not None and summary.turns == 4 and summary.warm_ttft_ms is not None
    assert summary.reuse_fraction is not None and 0.5 < summary.reuse_fraction < 1
    assert summary.warm_ttft_ms / statistics.median(cold) < 1, (summary.ttft_ms, cold)
    assert rows[0].cooldown_s is None and "prompt_cache" in rows[0].sources
    if runtime == "mlx_vlm.server":
        assert "APC_ENABLED=1" in rows[0].sources["prompt_cache"]
        assert "APC_DISK_ENABLED=0" in rows[0].sources["prompt_cache"]
        block = get_adapter(runtime).sessions.prefix_cache_rule(cand).block_tokens
        for prev, r in itertools.pairwise(rows):
            assert r.cached_tokens is not None and prev.prompt_tokens is not None
            # whole blocks of the previous prompt less its last token: the answer is not cached
            assert r.cached_tokens % block == 0 and r.cached_tokens <= prev.prompt_tokens, r.sources["cache_miss"]
            assert f"reachable {prev.prompt_tokens} " in r.sources["cache_miss"]
            assert r.cache_miss is False, r.sources["cache_miss"]


def _expected_prefix(prev_prompt: list[int], think_open: int, thinking: str) -> int:
    """Where the template's rendering of the earlier turn departs from what was generated, found from
    the previous prompt's tokens alone: thinking off, the prompt ends with the empty think block the
    template appends (`<think>\\n\\n</think>\\n\\n`), which it leaves out when it renders that answer
    again; thinking on, the prompt ends at `assistant\\n` and the model's reasoning, dropped from earlier
    turns, starts there."""
    if thinking == "off":
        return max(i for i, t in enumerate(prev_prompt) if t == think_open)
    return len(prev_prompt)


@pytest.mark.parametrize("thinking", ["off", "on"])
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_scripted_template_prefix_and_cache_miss(runtime: str, thinking: str, scripted_models: Any,
                                                 cache_dir: Path, tmp_path: Path) -> None:
    cand = candidate(runtime, scripted_models)
    sw = sweep(cand, 256, turns=3, append=64, gen=64, thinking=thinking, ignore_eos=False)
    adapter = get_adapter(cand.runtime)

    async def go() -> tuple[list[Row], list[list[int]]]:
        async with session_server(cand, tmp_path, cache_dir, 2048) as (server, notes):
            rows, turns = await run(cand, server, notes, sw)
            assert all(r.status == "ok" for r in rows), [r.error for r in rows]
            # each turn's own prompt, rendered and tokenized again on its own
            prompts = await adapter.requests.rendered_tokens(server.base_url, cand, server.command,
                                                    [(t.messages, "") for t in turns], thinking)
            return rows, prompts

    rows, prompts = asyncio.run(go())
    assert all(r.thinking == thinking for r in rows), [r.thinking for r in rows]
    for r, prev_prompt in zip(rows[1:], prompts, strict=False):
        assert r.reusable_prefix_tokens == _expected_prefix(prev_prompt, scripted_models.script.think_open_id, thinking)
        assert r.cached_tokens is not None and r.cache_miss is not None
        tolerance = int(r.sources["cache_miss"].rsplit("tolerance ", 1)[1].split()[0])
        held = r.sources["cache_miss"].split("reachable ", 1)
        reachable = int(held[1].split()[0]) if len(held) == 2 else r.reusable_prefix_tokens
        assert r.cache_miss == (r.cached_tokens < reachable - tolerance), r.sources["cache_miss"]
        assert f"cached {r.cached_tokens} vs reusable {r.reusable_prefix_tokens}" in r.sources["cache_miss"]
    if runtime == "llama-server":  # its slot holds exactly prompt + generated tokens: no miss
        assert not any(r.cache_miss for r in rows[1:]), [r.sources["cache_miss"] for r in rows[1:]]


def test_a_server_killed_mid_session_fails_the_whole_session(tiny_models: Any, cache_dir: Path,
                                                             tmp_path: Path) -> None:
    """SIGKILL once turn 1 is back: every turn's row is failed naming the turn and the crash, so a re-run
    starts the session at turn 1 (never mid-way)."""
    cand = candidate("llama-server", tiny_models)
    sw, shape = sweep(cand, 256, turns=4, append=64, gen=512)

    async def go() -> list[Row]:
        async with session_server(cand, tmp_path, cache_dir, 4096) as (server, notes):
            first = await PromptBuilder().build(256, f"session/{cand.id}/256/kill", await counter(cand, server),
                                                key=cand.id)
            answered = asyncio.Event()
            spec = session.SessionRun(job="session", adapter=get_adapter(cand.runtime), server=server, candidate=cand,
                                      context=256, sweep=sw, plan=shape, timeout_s=300.0, first_prompt=first,
                                      sizing="tokenizer", cache_notes=notes, on_turn=lambda t: answered.set())
            task = asyncio.create_task(session.run_session(spec))
            await answered.wait()  # turn 1 answered: turn 2 is on its way
            os.kill(server.pid, signal.SIGKILL)
            return await task

    rows = asyncio.run(go())
    assert [r.probe for r in rows] == [1, 2, 3, 4]
    assert all(r.status == "failed" and r.kind == "session" for r in rows)
    assert all(r.error is not None and "session failed at turn 2 of 4" in r.error for r in rows), rows[0].error
