"""The measuring orders on real llama-servers (two tiny-model candidates): interleaved rounds with every
server resident, a tiny memory budget (the test knob) forcing blocked with its reason, a budget between
one and two warmed servers' measured footprints (mlx_lm.server twins) making interleaved fall back to
blocked once both are resident, blocked's balanced server starts, an invalidated probe re-run in its
block, and the runbook's record of the design. Design only: nothing here asserts speed."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from testlib import printed_comparison

from benchd.config import Config
from benchd.engine.plan import job_seed, round_order
from benchd.engine.scheduler import run_job
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, Event, Runbook, Sustained, Sweep
from benchd.sensors.memory.budget import ENV_BUDGET
from benchd.stats.stop import stop_verdict
from benchd.store import Store

pytestmark = [pytest.mark.slow]


def _sweep(model: str, **kw: Any) -> Sweep:  # (candidates= replaces the two twins on `model`)
    base: dict[str, Any] = dict(
        name="order", contexts=[64], gen_tokens=16, warmup=1, eval_tier="none", sustained=Sustained(tokens=32, window=8),
        cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), sentinel=False,
        starts="once",  # the resident design and its memory-budget fallback (a start per round: test_verdicts_real)
        candidates=[Candidate(id=c, runtime="llama-server", model=model, args=["-t", "1"]) for c in ("a", "b")])
    base.update(kw)
    return Sweep(**base)


def _run(tmp: Path, cache_dir: Path, sweep: Sweep,
         on_event: Callable[[Event], None] | None = None) -> tuple[Runbook, list[Event]]:
    config = Config.resolve(state_dir=tmp, cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    events: list[Event] = []

    def notify(e: Event) -> None:
        events.append(e)
        if on_event is not None:
            on_event(e)

    try:
        asyncio.run(run_job(job.id, sweep, store, config, notify))
        return build_runbook(config, store, job.id), events
    finally:
        store.close()


def test_interleaved_rounds_visit_every_candidate_in_the_seeded_order(tiny_models: Any, cache_dir: Path,
                                                                     tmp_path: Path) -> None:
    rb, events = _run(tmp_path, cache_dir, _sweep(str(tiny_models.target), probes=4))
    types = [e.type for e in events]
    # both servers started and warmed before the first recorded probe
    first_probe = next(i for i, e in enumerate(events) if e.type == "probe_started" and e.payload["kind"] == "probe")
    assert types[:first_probe].count("server_ready") == 2
    probes = [r for r in rb.rows if r.kind == "probe"]
    assert len(probes) == 8 and all(r.status == "ok" for r in probes), [r.error for r in probes]
    seed = job_seed(rb.job.id)
    started = [e.payload["candidate"] for e in events if e.type == "probe_started" and e.payload["kind"] == "probe"]
    expected = [c for rnd in range(4) for c in round_order(["a", "b"], seed=seed, context=64, round_=rnd)]
    assert started == expected
    for r in probes:
        assert r.round is not None and r.visit is not None and f"seed {seed}" in r.sources["round"]
        assert round_order(["a", "b"], seed=seed, context=64, round_=r.round)[r.visit] == r.candidate
    # the tail ran per candidate at the end, alone
    sustained = [r for r in rb.rows if r.kind == "sustained"]
    assert {r.candidate for r in sustained} == {"a", "b"} and all(r.round is None for r in sustained)
    assert rb.design is not None and rb.design.order == "interleaved" and rb.design.seed == seed
    assert rb.design.drift_protected and "default order" in rb.design.why
    (stop,) = rb.design.contexts
    assert stop.context == 64 and stop.rounds == 4 and "fixed count" in stop.why


def test_tiny_budget_forces_blocked_with_balanced_server_starts(tiny_models: Any, cache_dir: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BUDGET, "1")
    rb, events = _run(tmp_path, cache_dir, _sweep(str(tiny_models.target), probes=3, rounds=3))
    (chosen,) = [e.payload for e in events if e.type == "design_chosen"]
    assert chosen["order"] == "blocked" and "do not fit side by side" in chosen["why"] and ENV_BUDGET in chosen["why"]
    assert rb.design is not None and rb.design.order == "blocked" and "do not fit" in rb.design.why
    starts = [e.payload["candidate"] for e in events if e.type == "server_starting"]
    assert starts[:6] == list("abbaab"), starts  # 3 starts each, ABBA...; then the tails
    probes = [r for r in rb.rows if r.kind == "probe"]
    assert sorted((r.round, r.candidate) for r in probes) == sorted((k, c) for k in range(3) for c in "ab")
    assert all("order blocked" in r.sources["round"] for r in probes)
    # one server at a time: every start of the probe phase is followed by its stop before the next start
    phase = [e for e in events if e.type in ("server_starting", "server_stopped")][:12]
    assert [e.type for e in phase] == ["server_starting", "server_stopped"] * 6


def test_sequential_rows_say_they_have_no_rounds(tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    rb, events = _run(tmp_path, cache_dir, _sweep(str(tiny_models.target), probes=2, order="sequential",
                                                  sustained=Sustained(tokens=0)))
    starts = [e.payload["candidate"] for e in events if e.type == "probe_started"]
    assert starts == ["a", "a", "b", "b"]
    assert all(r.round is None and "sequential" in r.null_reasons["round"] for r in rb.rows)
    assert rb.design is not None and not rb.design.drift_protected


def test_auto_rounds_stop_where_the_rows_resolve_every_pair(tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    """probes = "auto" with two candidates (a small and a larger tiny model): the context's rounds stop at
    the first round after `min` where the paired comparison of the rows resolves the pair, or at `max`;
    replayed over the stored rows, never asserted of the machine. The runbook says why it stopped."""
    from benchctl.tinymodels import ensure
    from benchd.schemas import Probes

    large = ensure(cache_dir, "medium", 0, lambda _m: None)
    cands = [Candidate(id="small", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"]),
             Candidate(id="large", runtime="llama-server", model=str(large.target), args=["-t", "1"])]
    plan = Probes(min=6, max=10)
    rb, _ = _run(tmp_path, cache_dir, _sweep("", candidates=cands, probes=plan, sustained=Sustained(tokens=0)))
    assert rb.design is not None
    (stop,) = rb.design.contexts
    ok = [r for r in rb.rows if r.kind == "probe" and r.status == "ok" and not r.short]

    def verdict_after(k: int) -> str:
        by = {c: [r for r in ok if r.candidate == c and r.round is not None and r.round < k and r.gen_tps]
              for c in ("small", "large")}
        return stop_verdict(by["small"], by["large"], metric="gen_tps", better="higher", order="interleaved",
                            margin_pct=plan.target_ci_pct).verdict

    print(f"\n[auto] {stop}")
    assert plan.min <= stop.rounds <= plan.max
    for k in range(plan.min, stop.rounds):
        assert verdict_after(k) == "unresolved", k  # not stopped early
    if "resolved" in stop.why:
        assert verdict_after(stop.rounds) in ("different", "tied") and "small vs large" in stop.why
    else:
        assert stop.rounds == plan.max and f"max {plan.max}" in stop.why, stop


@pytest.mark.parametrize("order", ["interleaved", "blocked", "sequential"])
def test_draft_mlx_and_llama_candidates_run_in_every_order(tiny_models: Any, cache_dir: Path, tmp_path: Path,
                                                           order: str) -> None:
    from benchd.schemas import Spec

    m = tiny_models
    cands = [Candidate(id="llama", runtime="llama-server", model=str(m.target), args=["-t", "1"]),
             Candidate(id="draft", runtime="llama-server", model=str(m.target), args=["-t", "1"],
                       spec=Spec(draft_model=str(m.draft_identical), draft_max=4)),
             Candidate(id="mlx", runtime="mlx_lm.server", model=str(m.mlx_dir))]
    rb, _ = _run(tmp_path, cache_dir, _sweep("", candidates=cands, probes=2, rounds=2, order=order,
                                         contexts=[64, 128]))
    probes = [r for r in rb.rows if r.kind == "probe"]
    assert sorted((r.candidate, r.context) for r in probes) == sorted(
        (c, x) for c in ("llama", "draft", "mlx") for x in (64, 128) for _ in range(2))
    assert all(r.status == "ok" for r in probes), [(r.candidate, r.error) for r in probes if r.status != "ok"]
    assert {r.candidate for r in rb.rows if r.kind == "sustained"} == {"llama", "draft", "mlx"}
    assert all(r.draft_acceptance is not None for r in probes if r.candidate == "draft")
    assert rb.design is not None and rb.design.order == order
    if order != "sequential":
        assert all(r.round is not None for r in probes)
        assert {c.context for c in rb.design.contexts} == {64, 128}


def _warmed_footprint(cand: Candidate, sweep: Sweep, tmp: Path, cache_dir: Path) -> int:
    """One server of `cand` started as the sweep starts it, warmed by one request: its measured footprint."""
    from benchd.engine import probe
    from benchd.engine.groups import plan_groups
    from benchd.sensors.memory.budget import footprint_bytes
    from benchd.servers.runtimes import get_adapter
    from benchd.servers.runtimes.base import ChatSettings
    from benchd.servers.supervisor import Supervisor

    async def go() -> int:
        adapter = get_adapter(cand.runtime)
        g = plan_groups(adapter, cand, sweep)[0]
        sup = Supervisor(Config.resolve(state_dir=tmp, cache_dir=cache_dir), grace_s=1.5)
        server = await sup.start("footprint", cand, g.ctx_size)
        try:
            r = await probe.run_chat(adapter, server.base_url, cand, prompt="hello " * 40,
                                     settings=ChatSettings(sweep.gen_tokens, sweep.sampling), timeout_s=300.0)
            assert r.ok, r.error
            size = footprint_bytes(server.pid)
            assert size is not None
            return size
        finally:
            await sup.stop_all()

    return asyncio.run(go())


def test_measured_footprints_over_the_budget_fall_back_to_blocked(tiny_models: Any, cache_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Two mlx_lm.server twins: their model files plus the KV estimate fit a budget of 1.5 warmed
    footprints, so interleaved is chosen; once both are warmed their measured footprints exceed it, so
    the servers are stopped before any probe and the context runs blocked. The runbook records the
    fallback with its reason and blocked's plan; the rows carry blocked's rounds and visits (ABBA...),
    and the report's comparison is the one computed from the block medians paired by round."""
    from benchd.engine.plan import block_order

    cands = [Candidate(id=c, runtime="mlx_lm.server", model=str(tiny_models.mlx_dir)) for c in ("a", "b")]
    sweep = _sweep("", candidates=cands, probes=3, rounds=3, sustained=Sustained(tokens=0))
    one = _warmed_footprint(cands[0], sweep, tmp_path / "footprint", cache_dir)
    budget = int(one * 1.5)
    monkeypatch.setenv(ENV_BUDGET, str(budget))
    rb, events = _run(tmp_path / "job", cache_dir, sweep)
    (chosen,) = [e.payload for e in events if e.type == "design_chosen"]
    assert chosen["order"] == "interleaved" and chosen["budget_bytes"] == budget, chosen  # the estimate fit
    (changed,) = [e.payload for e in events if e.type == "design_changed"]
    assert changed["order"] == "blocked" and changed["context"] == 64
    assert "measured resident sets" in changed["why"] and ENV_BUDGET in changed["why"], changed["why"]
    # both were started (and warmed) side by side, then stopped before any probe ran
    first_probe = next(i for i, e in enumerate(events) if e.type == "probe_started")
    before = [e for e in events[:first_probe] if e.type in ("server_starting", "server_stopped", "design_changed")]
    assert [e.type for e in before][:5] == ["server_starting", "server_starting", "server_stopped", "server_stopped",
                                            "design_changed"], [e.type for e in before]
    assert rb.design is not None and rb.design.order == "blocked" and rb.design.changed == [changed["why"]]
    assert rb.design.plan.startswith("3 rounds") and "server starts" in rb.design.plan, rb.design.plan
    assert rb.design.contexts[0].order == "blocked"
    probes = [r for r in rb.rows if r.kind == "probe"]
    assert len(probes) == 6 and all(r.status == "ok" for r in probes), [r.error for r in probes]
    for r in probes:
        assert r.round is not None and r.visit is not None and "order blocked" in r.sources["round"]
        assert block_order(["a", "b"], r.round)[r.visit] == r.candidate
    starts = [e.payload["candidate"] for e in events if e.type == "server_starting"]
    assert starts[2:8] == list("abbaab"), starts  # after the two resident ones: one start per block
    # the comparison the report prints for the pair is the one on the block medians paired by round
    # (memory: measured on every row; a rate can be null with its reason on a starved client)
    from benchd.results.report import render_pareto_text
    from benchd.stats.comparison import paired_samples

    ok = {c: [r for r in probes if r.candidate == c and not r.short] for c in ("a", "b")}
    s = paired_samples(ok["a"], ok["b"], "mem_peak_bytes", order="blocked")
    assert s.paired and s.design == "block medians paired by round" and len(s.a) == 3
    line, printed = printed_comparison(render_pareto_text(rb), "peak memory", s.a, s.b, "mem_peak_bytes", ("a", "b"),
                                       family_alpha=rb.pareto[0].alpha, starts=s.starts)
    assert line in printed, (line, printed)


def test_an_invalidated_probe_of_a_block_is_re_run_in_its_block(tiny_models: Any, cache_dir: Path,
                                                                tmp_path: Path) -> None:
    """Blocked with a fixed count (2 probes over 2 blocks per candidate): b's first probe has its server
    stopped (SIGSTOP, continued after 3 s), so it is invalidated; the block runs another probe on the same
    server start, and every cell ends with its 2 valid probes, one per round."""
    sweep = _sweep(str(tiny_models.target), probes=2, rounds=2, order="blocked", sustained=Sustained(tokens=0))
    pids: dict[str, int] = {}
    stopped: list[int] = []

    def on_event(e: Event) -> None:
        if e.type == "server_ready":
            pids[str(e.payload["candidate"])] = int(e.payload["pid"])
        if e.type == "probe_started" and e.payload.get("candidate") == "b" and e.payload.get("kind") == "probe" \
                and not stopped:
            stopped.append(pids["b"])
            os.kill(pids["b"], signal.SIGSTOP)
            threading.Timer(3.0, os.kill, (pids["b"], signal.SIGCONT)).start()

    rb, events = _run(tmp_path, cache_dir, sweep, on_event)
    assert stopped
    probes = [r for r in rb.rows if r.kind == "probe"]
    bad = [r for r in probes if r.invalidated is not None]
    assert len(bad) == 1 and bad[0].candidate == "b" and bad[0].invalidated == "server-stopped", bad
    assert bad[0].round == 0 and bad[0].status == "failed"
    for c in ("a", "b"):
        valid = [r for r in probes if r.candidate == c and r.invalidated is None]
        assert sorted(r.round for r in valid) == [0, 1] and all(r.status == "ok" for r in valid), valid
    again = [r for r in probes if r.candidate == "b" and r.round == 0 and r.invalidated is None]
    assert len(again) == 1 and again[0].visit == bad[0].visit
    starts = [e.payload["candidate"] for e in events if e.type == "server_starting"]
    assert starts == list("abba"), starts  # the re-run took no server start of its own
    cell = next(c for c in rb.cells if c.candidate == "b")
    assert cell.n_ok == 2 and cell.verdict is not None and cell.verdict.invalidated == 1
