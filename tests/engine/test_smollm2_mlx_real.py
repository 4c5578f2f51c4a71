"""The real model's MLX copy through the engine: one cold probe and a 2-turn session on mlx_lm.server at
the smallest context (SmolLM2-135M float32 runs at a few tokens/s on a 2-core x86 CPU: RESULTS.md §3c).

What it checks that the tiny models cannot: the real ChatML session grows turn by turn and the second turn
reuses the first's prompt cache on the server (its cached tokens cover the first turn's prompt).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.schemas import Candidate, Cooldown, Session, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]


def test_an_mlx_session_on_the_real_model_reuses_its_cache(real_model: Any, cache_dir: Path, tmp_path: Path) -> None:
    cand = Candidate(id="smollm2-mlx", runtime="mlx_lm.server", model=str(real_model.mlx_dir))
    sweep = Sweep(name="smollm2-mlx", contexts=[64], gen_tokens=4, probes=1, warmup=0, eval_tier="none",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  session=Session(turns=2, append_tokens=16, gen_tokens=4), candidates=[cand],
                  probe_timeout_s=600)  # a hang guard: at load 12 mlx read ~1.4 prompt tok/s (RESULTS.md §3b)
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    created, _ = store.create_job(sweep)
    outcome = asyncio.run(run_job(created.id, sweep, store, config, lambda e: None))
    assert outcome.state == "succeeded", outcome
    rows = store.results.rows(created.id)
    store.close()
    cold = [r for r in rows if r.kind == "probe"]
    assert [r.status for r in cold] == ["ok"] and cold[0].cached_tokens == 0, cold  # cold probes: no prompt cache
    turns = sorted((r for r in rows if r.kind == "session"), key=lambda r: r.probe)
    assert [r.status for r in turns] == ["ok", "ok"], [(r.status, r.error) for r in turns]
    assert "--prompt-cache-size" in turns[0].sources["prompt_cache"]
    first, second = turns
    assert first.cached_tokens is not None and first.cached_tokens < 32, first.cached_tokens  # its own server start
    # turn 2 = turn 1's prompt + its answer + the appended tool result: the cache covers turn 1's prompt
    assert second.prompt_tokens and first.prompt_tokens and second.prompt_tokens > first.prompt_tokens
    assert second.cached_tokens is not None and second.cached_tokens >= first.prompt_tokens - 8, second.sources
    assert second.cache_miss is False, second.sources.get("cache_miss")
