"""The measuring orders on real llama-servers (two tiny-model candidates): interleaved rounds with every
server resident, a tiny memory budget (the test knob) forcing blocked with its reason, blocked's balanced
server starts, and the runbook's record of the design. Design only: nothing here asserts speed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.plan import job_seed, round_order
from benchd.engine.scheduler import run_job
from benchd.results.comparison import compare_axis
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, Event, Runbook, Sustained, Sweep
from benchd.sensors.memory.budget import ENV_BUDGET
from benchd.store import Store

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _sweep(model: str, **kw: Any) -> Sweep:  # (candidates= replaces the two twins on `model`)
    base: dict[str, Any] = dict(
        name="order", contexts=[64], gen_tokens=16, warmup=1, eval_tier="none", sustained=Sustained(tokens=32, window=8),
        cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), sentinel=False,
        candidates=[Candidate(id=c, runtime="llama-server", model=model, args=["-t", "1"]) for c in ("a", "b")])
    base.update(kw)
    return Sweep(**base)


def _run(tmp: Path, cache_dir: Path, sweep: Sweep) -> tuple[Runbook, list[Event]]:
    config = Config.resolve(state_dir=tmp, cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    events: list[Event] = []
    try:
        asyncio.run(run_job(job.id, sweep, store, config, events.append, judge=compare_axis))
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
        by = {c: {r.round: float(r.gen_tps) for r in ok if r.candidate == c and r.round is not None and r.round < k
                  and r.gen_tps} for c in ("small", "large")}
        both = sorted(set(by["small"]) & set(by["large"]))
        return compare_axis([by["small"][x] for x in both], [by["large"][x] for x in both], axis="gen_tps",
                            better="higher", margin_pct=plan.target_ci_pct, paired=True).verdict

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
