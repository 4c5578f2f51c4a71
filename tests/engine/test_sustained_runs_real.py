"""`[sustained] runs` against a real tiny llama-server: the runs are rows of their own, back to back on the
candidate's last server start, each with its windows and ratio, and the runbook lists every run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results import runbook
from benchd.schemas import Candidate, Cooldown, Sustained, Sweep
from benchd.store import Store, utcnow


def test_three_sustained_runs_are_three_rows_on_the_last_start(tmp_path: Path, tiny_models: Any,
                                                               llama_server_bin: Path) -> None:
    cand = Candidate(id="t", runtime="llama-server", model=str(tiny_models.target), binary=str(llama_server_bin),
                     args=["-t", "1"])
    sweep = Sweep(name="runs", contexts=[128], gen_tokens=8, probes=1, warmup=0, eval_tier="none",
                  sustained=Sustained(tokens=32, window=8, runs=3), candidates=[cand],
                  cooldown=Cooldown(policy="fixed", seconds=0.0, max_seconds=0.0))
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep, job_id="runs-0001")
    store.transition(job.id, "job_started", {}, state="running", started_at=utcnow())
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
    assert outcome.state == "succeeded", outcome
    rows = [r for r in store.results.rows(job.id) if r.kind == "sustained"]
    assert [r.probe for r in rows] == [0, 1, 2] and all(r.status == "ok" for r in rows), [r.error for r in rows]
    assert len({r.start for r in rows}) == 1 and rows[0].start is not None  # one server start serves them all
    for r in rows:  # windows, or why there are none: on a busy machine a tiny model's tokens come in one read
        if r.window_tps:
            assert r.sustain_ratio is not None or "a ratio needs at least 2" in r.sources["sustain_ratio"]
        else:
            assert "windows unmeasurable" in r.sources["window_tps"], r.sources
            assert r.sustain_ratio is None and r.sources["sustain_ratio"].startswith("null: "), r.sources
    prog = store.get_job(job.id).progress
    assert prog is not None and prog.done == prog.total == 1 + 3
    rb = runbook.build_runbook(config, store, job.id)
    assert [s.candidate for s in rb.sustained] == ["t"] * 3
    with pytest.raises(StopIteration):  # nothing says the runs are missing
        next(d for d in rb.deferred.automatic if d.axis == "sustained")
