"""The runbook of a real sweep: a tiny llama-server swept through the engine, then its runbook is
schema-valid, carries real provenance (the GGUF's sha256, the server's build) and defers every null metric."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from benchd.results import runbook
from benchd.results.text import fmt_value
from tests.results.test_runbook import METRIC_FIELDS


@pytest.mark.slow
def test_runbook_of_a_real_sweep(tmp_path: Path, tiny_models, llama_server_bin) -> None:
    """A real (tiny) llama-server sweep through the engine, then the runbook: schema-valid, real
    provenance (sha256 of the GGUF, the server's build string), every null metric deferred."""
    from benchd.config import Config
    from benchd.engine.scheduler import run_job
    from benchd.schemas import Candidate, Cooldown, Sustained, Sweep
    from benchd.store import Store, utcnow

    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    sweep = Sweep(name="real-tiny", contexts=[128], gen_tokens=8, probes=2, warmup=0, eval_tier="none",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0.0, max_seconds=0.0),
                  candidates=[Candidate(id="tiny", runtime="llama-server", model=str(tiny_models.target),
                                        binary=str(llama_server_bin), args=["-t", "1"])])
    job, _ = store.create_job(sweep, job_id="realsweep-0001")
    store.transition(job.id, "job_started", {}, state="running", started_at=utcnow())
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
    store.transition(job.id, "job_finished", {}, state=outcome.state, finished_at=utcnow())
    rid = runbook.write_runbook(config, store, job.id)
    doc = json.loads((config.runbooks_dir / f"{rid}.json").read_text())
    jsonschema.validate(doc, runbook.runbook_schema())
    rb = runbook.load_runbook(rid, config)
    assert rb.outcome == "succeeded", rb.job.error
    ok = [r for r in rb.rows if r.status == "ok"]
    assert len(ok) == 2
    cand = rb.provenance.candidates[0]
    assert cand.model.sha256 == hashlib.sha256(Path(tiny_models.target).read_bytes()).hexdigest()
    assert cand.server_version and cand.binary == str(llama_server_bin)
    assert len(rb.cooldowns) == 2
    axes = {a.strip() for d in rb.deferred.automatic for a in d.axis.split(",")}
    nulls = {m for r in ok for m in METRIC_FIELDS if getattr(r, m) is None and m not in ("sustain_ratio", "window_tps")}
    assert not nulls - axes
    cell = rb.cells[0]
    assert cell.gen_tps.median is not None
    md = (config.runbooks_dir / f"{rid}.md").read_text()
    assert fmt_value("gen_tps", cell.gen_tps.median) in md
    store.close()
