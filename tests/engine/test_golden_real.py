"""The engine's behaviour kept across its split (issue 33): real tiny llama-server sweeps (interleaved with a
candidate that never starts, blocked, sequential), reduced to what the engine decides — which events, in
which order, which rows with which placement and status, and the runbook's design — and compared with the
skeleton recorded before the split (tests/data/golden/real_skeleton.json; BENCHD_GOLDEN_RECORD=1 rewrites it).

Measured figures (rates, memory, times) differ between runs of a real server and are left out; the fake
seam's golden (tests/engine/test_engine_fast.py) compares every row and event."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results import runbook
from benchd.schemas import Candidate, Cooldown, Sustained, Sweep, events
from benchd.store import Store, utcnow
from tests.testlib import assert_golden

pytestmark = [pytest.mark.slow]

GOLDEN = Path(__file__).parent.parent / "data" / "golden" / "real_skeleton.json"
#: The payload fields that name what the engine decided (not what it measured).
DECIDED = ("candidate", "context", "probe", "kind", "round", "visit", "order", "design", "purpose", "phase",
           "asked", "drift_protected", "plan", "rounds", "seed")


def _event(e: Any) -> list[Any]:
    p = e.payload
    out: list[Any] = [e.type, {k: p[k] for k in DECIDED if k in p}]
    if e.type in ("design_chosen", "design_changed", "context_finished"):
        out.append(p.get("why"))
    return out


def _sweep(models: Any, binary: Path, order: str | None, missing: bool) -> Sweep:
    cands = [Candidate(id=f"t{i}", runtime="llama-server", model=str(models.target), binary=str(binary),
                       args=["-t", "1"]) for i in range(2)]
    if missing:
        cands.append(Candidate(id="gone", runtime="llama-server", model="/nonexistent/model.gguf",
                               binary=str(binary), startup_timeout_s=30))
    return Sweep(name=f"golden-{order}", contexts=[128, 256], gen_tokens=8, probes=2, warmup=1, eval_tier="none",
                 order=order, sustained=Sustained(tokens=16, window=8),  # type: ignore[arg-type]
                 starts="once",  # the skeleton recorded with resident servers (per-round starts: test_verdicts_real)
                 cooldown=Cooldown(policy="fixed", seconds=0.0, max_seconds=0.0), candidates=cands)


def _skeleton(tmp: Path, sweep: Sweep, job_id: str) -> dict[str, Any]:
    config = Config.resolve(state_dir=tmp / "state", cache_dir=tmp / "cache")
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep, job_id=job_id)
    store.transition(job.id, "job_started", {}, state="running", started_at=utcnow())
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
    store.transition(job.id, "job_finished", {}, state=outcome.state, finished_at=utcnow())
    for e in store.events.iterate(job.id):  # every event a real sweep writes decodes into its struct
        assert set(e.payload) <= set(type(events.payload(e)).__struct_fields__), (e.type, sorted(e.payload))
    rb = runbook.build_runbook(config, store, job.id)
    return {
        "outcome": outcome.state,
        "events": [_event(e) for e in store.events.iterate(job.id)],
        "rows": [[r.candidate, r.context, r.kind, r.probe, r.round, r.visit, r.status, (r.error or "")[:40]]
                 for r in store.results.rows(job.id)],
        "design": None if rb.design is None else [rb.design.order, rb.design.drift_protected],
    }


@pytest.mark.parametrize(("order", "missing"), [(None, True), ("blocked", False), ("sequential", False)])
def test_the_engine_decides_what_it_decided_before_the_split(order: str | None, missing: bool, tmp_path: Path,
                                                              tiny_models: Any, llama_server_bin: Path) -> None:
    name = f"{order or 'interleaved'}"
    got = _skeleton(tmp_path, _sweep(tiny_models, llama_server_bin, order, missing), f"golden-{name}-0001")
    assert_golden(GOLDEN, name, got, indent=1)
