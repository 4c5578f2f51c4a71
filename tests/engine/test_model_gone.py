"""A model file deleted after submit (issue 18): the cell fails naming the file before any server starts,
instead of "server never became ready … exiting due to model loading error" with the path in a log tail."""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.schemas import Candidate, Cooldown, Spec, Sustained, Sweep
from benchd.store import Store


def test_model_deleted_after_submit_is_named(tmp_path: Path) -> None:
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    config.state_dir.mkdir(parents=True)
    model, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    model.write_bytes(b"GGUF")
    sweep = Sweep(name="gone", contexts=[64], gen_tokens=4, probes=2, warmup=0, sustained=Sustained(tokens=0),
                  cooldown=Cooldown(seconds=0, max_seconds=0), candidates=[
                      Candidate(id="c", runtime="llama-server", model=str(model),
                                spec=Spec(draft_model=str(draft)))])
    store = Store(config.db_path)
    job, queued = store.create_job(sweep)  # the draft never existed; the target exists now
    assert queued.payload["missing_paths"] == [str(draft)]
    model.unlink()
    asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
    rows = store.results.rows(job.id)
    assert len(rows) == 2 and all(r.status == "failed" for r in rows)
    assert rows[0].error == (f"model file {model} no longer exists (it existed at submit); "
                             f"draft model file {draft} does not exist (nor did it at submit)")
    assert not any(e.type == "server_starting" for e in store.events.page(job.id))
    store.close()
