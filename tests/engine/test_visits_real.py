"""Sessions and parallel levels inside a real sweep (the engine's visits), on llama-server's tiny model:
the rows of every kind with their fields, cooldown events before each session and batch, and a resume
after the job was cancelled mid-session that runs the session again from turn 1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine import parallel
from benchd.engine.scheduler import Engine
from benchd.schemas import Candidate, Cooldown, Event, Session, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]


def _sweep(models: Any) -> Sweep:
    cand = Candidate(id="llama", runtime="llama-server", model=str(models.target), args=["-t", "1"])
    return Sweep(name="visits", contexts=[256], gen_tokens=32, probes=2, warmup=1, candidates=[cand],
                 sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                 session=Session(turns=3, append_tokens=64, gen_tokens=16), concurrency=[1, 2])


def test_sessions_and_levels_in_a_sweep_and_resume(tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    sweep = _sweep(tiny_models)
    job, _ = store.create_job(sweep)
    events: list[Event] = []

    async def cancelled_mid_session() -> None:
        task: asyncio.Task[Any] | None = None

        def notify(e: Event) -> None:
            events.append(e)
            if e.type == "session_turn" and e.payload.get("turn") == 2 and task is not None:
                task.cancel()

        task = asyncio.ensure_future(Engine(job.id, sweep, store, config, notify).run())
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_mid_session())
    first = store.results.rows(job.id)
    assert [r.kind for r in first].count("probe") == 2
    assert not [r for r in first if r.kind == "session"]  # a session is stored whole or not at all

    resumed: list[Event] = []
    outcome = asyncio.run(Engine(job.id, sweep, store, config, resumed.append).run())
    assert outcome.state == "succeeded"
    rows = store.results.rows(job.id)
    assert [r.kind for r in rows].count("probe") == 2  # the cold probes were not run again
    turns = sorted((r for r in rows if r.kind == "session"), key=lambda r: r.probe)
    assert [r.turn for r in turns] == [1, 2, 3] and all(r.status == "ok" for r in turns), [r.error for r in turns]
    assert [e.payload["turn"] for e in resumed if e.type == "session_turn"] == [1, 2, 3]  # from turn 1
    assert all(r.cached_tokens is not None and r.reusable_prefix_tokens is not None for r in turns)
    par = [r for r in rows if r.kind == "parallel"]
    assert len(par) == 2 * 2 and {r.concurrency for r in par} == {2} and {r.batch for r in par} == {0, 1}
    assert {r.probe for r in par} == {parallel.probe_number(2, b, i) for b in (0, 1) for i in (0, 1)}
    assert all(r.status == "ok" and "-np 2" in r.sources["concurrency"] for r in par), [r.error for r in par]
    cooldowns = [e for e in resumed if e.type == "cooldown_started"]
    assert [e.payload.get("kind") for e in cooldowns].count("session") == 1
    assert [e.payload.get("kind") for e in cooldowns].count("parallel") == 2
    finished = [e for e in resumed if e.type == "session_finished"]
    assert finished and finished[0].payload["warm_ttft_ms"] is not None
    assert next(e for e in resumed if e.type == "level_finished").payload["concurrency"] == 2

    # the report and the Pareto view show the session and level figures computed from these rows
    from benchd.results import report
    from benchd.results.runbook import build_runbook

    rb = build_runbook(config, store, job.id)
    text = report.render_text(rb, pareto=True)
    assert "sessions (warm prompt cache):" in text and "llama ctx 256: warm-turn TTFT" in text
    assert "parallel requests:" in text and "llama ctx 256 x2: aggregate" in text
    from benchd.results.text import axis_word

    assert f"{axis_word('session_ttft_ms')} (lower)" in text  # the Pareto table's column, by its label
    point = rb.pareto[0].points[0]
    assert point.values["session_ttft_ms"] is not None
    # a loaded client can let one stream of a batch finish before the other starts: no aggregate then
    overlapped = any(r.agg_gen_tps is not None for r in par)
    assert (f"{axis_word('agg_gen_tps@2')} (higher)" in text) == overlapped
    assert (point.values.get("agg_gen_tps@2") is not None) == overlapped
    assert "## Sessions" in report.render_markdown(rb)
    assert not {"prefix-cache", "concurrency"} & {d.axis for d in rb.deferred.automatic}

    # the page: TTFT per turn per candidate, aggregate vs per-request rate per level, with their tables
    from benchd.results import html

    page = html.render_page(rb, html.vega_runtime(cache_dir)).decode()
    assert "<section id='agentic'>" in page and "chart-sessions" in page and "chart-levels" in page

    # compare: the session axis of a runbook against itself, judged by the one comparison: never different
    from benchd.results.compare import compare_runbooks

    same = [c for c in compare_runbooks(rb, rb).agentic if c.axis == "session_ttft_ms"]
    assert len(same) == 1 and same[0].verdict.n_a == same[0].verdict.n_b == 2  # the two warm turns
    assert same[0].verdict.verdict != "different" and same[0].verdict.ratio == 1.0
