"""The engine's decisions through the fast seam (tests/fakeengine.py: a fake pool and runner, rows from a
table): the designs, the stop rule, fallback to blocked, a server that never starts, resume mid-round and
cancellation, each in milliseconds; and the golden sweeps (tests/data/golden/fake_sweeps.json: every row
and event, timestamps aside, recorded through the same fakes on the engine before its split;
BENCHD_GOLDEN_RECORD=1 rewrites them). A runbook is a function of its job's rows and events
(`results.runbook.build_runbook`), so the same rows and events give the same runbook whatever the results
stage does with them."""

from __future__ import annotations

import asyncio
import itertools
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchd.config import Config
from benchd.schemas import Candidate, Cooldown, Probes, Sustained, Sweep
from benchd.schemas.events import CandidateDropped, payload
from benchd.store import Store
from tests.fakeengine import Script, seam
from tests.testlib import assert_golden

GOLDEN = Path(__file__).parent.parent / "data" / "golden" / "fake_sweeps.json"
#: Wall-clock fields (and what the machine it ran on says about itself): not the engine's decisions.
VARYING = {"time", "generated_at", "started_at", "finished_at", "created_at", "elapsed_s", "id", "host", "machine",
           "platform", "conditions", "facts", "sensors", "load", "duration_s", "eta_s"}
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")


def _cands(tmp: Path, ids: list[str]) -> list[Candidate]:
    out = []
    for cid in ids:
        model = tmp / f"{cid}.gguf"
        model.write_bytes(b"GGUF fake " + cid.encode())
        out.append(Candidate(id=cid, runtime="llama-server", model=str(model), binary="/fake/llama-server"))
    return out


def _sweep(tmp: Path, ids: list[str], **kw: Any) -> Sweep:
    """A sweep of fake candidates; `starts = "once"` (resident servers) unless the test says otherwise: the
    scenarios recorded before per-round starts were the default are about the resident-server design."""
    base: dict[str, Any] = dict(name="fast", contexts=[128, 256], gen_tokens=8, probes=3, warmup=1, eval_tier="none",
                                starts="once",
                                sustained=Sustained(tokens=16, window=8),
                                cooldown=Cooldown(policy="fixed", seconds=0.0, max_seconds=0.0),
                                candidates=_cands(tmp, ids))
    base.update(kw)
    return Sweep(**base)


def _store(tmp: Path) -> tuple[Config, Store]:
    config = Config.resolve(state_dir=tmp / "state", cache_dir=tmp / "cache")
    config.state_dir.mkdir(parents=True, exist_ok=True)
    return config, Store(config.db_path)


async def _run(store: Store, job: str, sweep: Sweep, script: Script, config: Config) -> Any:
    from benchd.engine.scheduler import run_job

    return await run_job(job, sweep, store, config, lambda _e: None, seam=seam(script, sweep))


def _job(store: Store, sweep: Sweep, name: str = "fast-0001") -> str:
    job, _ = store.create_job(sweep, job_id=name)
    return job.id


def _masked(doc: Any, tmp: str) -> Any:
    if isinstance(doc, dict):
        return {k: ("<varies>" if k in VARYING else _masked(v, tmp)) for k, v in doc.items()
                if v not in (None, [], {})}  # (every field is in the JSON: a null one says nothing more)
    if isinstance(doc, list):
        return [_masked(v, tmp) for v in doc]
    if isinstance(doc, str):
        return _STAMP.sub("<time>", doc.replace(tmp, "<tmp>"))
    return doc


def _events(store: Store, job: str, *types: str) -> list[Any]:
    return [e for e in store.events.iterate(job) if not types or e.type in types]


SCENARIOS: dict[str, dict[str, Any]] = {
    "interleaved": dict(ids=["a", "b", "gone"], script=dict(rate={"a": 100.0, "b": 50.0}, never={"gone"})),
    "blocked": dict(ids=["a", "b"], sweep=dict(order="blocked", rounds=3), script=dict(rate={"a": 100.0, "b": 50.0})),
    "sequential": dict(ids=["a", "b"], sweep=dict(order="sequential"), script=dict(rate={"a": 100.0})),
    "fallback": dict(ids=["a", "b"], script=dict(fit=1)),
    "auto": dict(ids=["a", "b"], sweep=dict(probes=Probes(min=6, max=12)),
                 script=dict(rate={"a": lambda p: 100.0 + p % 3, "b": lambda p: 50.0 + p % 2})),
    "failing": dict(ids=["a", "b"], script=dict(failing={"b"})),
}


def _scenario(tmp: Path, name: str) -> tuple[Config, Store, str, Sweep, Script]:
    sc = SCENARIOS[name]
    config, store = _store(tmp)
    sweep = _sweep(tmp, sc["ids"], **sc.get("sweep", {}))
    return config, store, _job(store, sweep, f"fast-{name}-0001"), sweep, Script(**sc.get("script", {}))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_rows_and_events_are_the_ones_recorded_before_the_split(name: str, tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, name)
    await _run(store, job, sweep, script, config)
    rows = [msgspec.to_builtins(r) for r in store.results.rows(job)]
    for row in rows:  # the fake runner's (what the real one writes there is tested against real servers)
        del row["sources"], row["null_reasons"]
    events = [[e.seq, e.type, msgspec.to_builtins(e.payload)] for e in store.events.iterate(job)]
    doc = _masked({"rows": rows, "events": events}, str(tmp_path))
    assert_golden(GOLDEN, name, doc)


async def test_interleaved_visits_every_candidate_once_per_round_in_a_seeded_order(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "interleaved")
    await _run(store, job, sweep, script, config)
    rounds = _events(store, job, "round_started")
    assert [(e.payload["context"], e.payload["round"]) for e in rounds] == [(c, r) for c in (128, 256) for r in range(3)]
    for e in rounds:
        rows = [r for r in store.results.rows(job) if r.kind == "probe" and r.context == e.payload["context"]
                and r.round == e.payload["round"]]
        assert [r.candidate for r in sorted(rows, key=lambda r: r.visit or 0)] == [c for c in e.payload["order"]
                                                                                  if c != "gone"]
    assert len({tuple(e.payload["order"]) for e in rounds}) > 1  # a fresh shuffle per round


def _starts_by_round(store: Store, job: str) -> dict[tuple[int, int], list[str]]:
    """(context, round) -> the candidates whose `server_ready` came after that round's `round_started`
    and before the next one (the starts the round itself made)."""
    out: dict[tuple[int, int], list[str]] = {}
    key: tuple[int, int] | None = None
    for e in _events(store, job, "round_started", "server_ready", "context_finished"):
        if e.type == "round_started":
            key = (e.payload["context"], e.payload["round"])
            out.setdefault(key, [])
        elif e.type == "context_finished":
            key = None
        elif key is not None:
            out[key].append(e.payload["candidate"])
    return out


async def test_starts_round_starts_every_candidate_once_per_round_and_rows_carry_their_start(tmp_path: Path) -> None:
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b"], starts="round", probes=4)
    job = _job(store, sweep)
    await _run(store, job, sweep, Script(rate={"a": 100.0, "b": 50.0}), config)
    by_round = _starts_by_round(store, job)
    assert sorted(by_round) == [(c, r) for c in (128, 256) for r in range(4)]
    for order in by_round.values():
        assert sorted(order) == ["a", "b"]  # one fresh start per candidate in every round
    # no server is resident during another's visit: every start is stopped before the next one
    seq = [(e.type, e.payload["candidate"]) for e in _events(store, job, "server_ready", "server_stopped")]
    for (t1, c1), (t2, c2) in itertools.pairwise(seq):
        if t1 == "server_ready":
            assert (t2, c2) == ("server_stopped", c1)
    probes = [r for r in store.results.rows(job) if r.kind == "probe"]
    for cid in "ab":
        mine = [r for r in probes if r.candidate == cid]
        assert len(mine) == 8 and len({r.start for r in mine}) == 8  # every row its own start
        starts = [e.payload["start"] for e in _events(store, job, "server_ready") if e.payload["candidate"] == cid]
        assert starts == list(range(1, len(starts) + 1))
    assert {e.payload["design"] for e in _events(store, job, "context_finished")} == {"interleaved"}


async def test_starts_once_starts_every_candidate_once_and_its_rows_share_that_start(tmp_path: Path) -> None:
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b"], starts="once", probes=4, contexts=[128])
    job = _job(store, sweep)
    await _run(store, job, sweep, Script(rate={"a": 100.0, "b": 50.0}), config)
    assert all(not starts for starts in _starts_by_round(store, job).values())  # started ahead of the rounds
    seq = _events(store, job, "server_ready", "context_finished")
    ready = [e.payload["candidate"] for e in seq[:[e.type for e in seq].index("context_finished")]]
    assert sorted(ready) == ["a", "b"]  # one start each for all the rounds (the sustained run has its own)
    for cid in "ab":
        assert {r.start for r in store.results.rows(job) if r.candidate == cid and r.kind == "probe"} == {1}


def test_starts_defaults_to_a_start_per_round_when_there_is_a_pair() -> None:
    def sweep(ids: str) -> Sweep:
        return Sweep(name="x", contexts=[128], gen_tokens=8,
                     candidates=[Candidate(id=c, runtime="llama-server", model="/m.gguf") for c in ids])
    assert sweep("ab").starts is None and sweep("ab").starts_mode() == "round"
    assert sweep("a").starts_mode() == "once"  # no pair: no verdict rests on one start's luck


async def test_a_server_that_never_starts_fails_its_cells_once_and_the_sweep_goes_on(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "interleaved")
    outcome = await _run(store, job, sweep, script, config)
    assert outcome.state == "succeeded"
    gone = [r for r in store.results.rows(job) if r.candidate == "gone"]
    assert {(r.context, r.kind, r.probe) for r in gone} == {(c, "probe", p) for c in (128, 256) for p in range(3)} | {
        (128, "sustained", 0)}
    assert all(r.status == "failed" and "never became ready" in (r.error or "") for r in gone)
    assert script.starts.count("gone") == 3  # once per planned start (128, 256, the sustained one), never retried
    assert len([r for r in store.results.rows(job) if r.candidate == "a" and r.kind == "probe"]) == 6


async def test_blocked_runs_one_server_start_per_block_in_mirrored_order(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "blocked")
    await _run(store, job, sweep, script, config)
    rounds = _events(store, job, "round_started")
    assert [e.payload["order"] for e in rounds[:3]] == [["a", "b"], ["b", "a"], ["a", "b"]]
    probes = [r for r in store.results.rows(job) if r.kind == "probe"]
    assert len(probes) == 12 and {r.round for r in probes} == {0, 1, 2}
    ready = [e.payload["candidate"] for e in _events(store, job, "server_ready")]
    assert ready[:6] == ["a", "b", "b", "a", "a", "b"]  # a fresh start per block


async def test_sequential_runs_each_candidate_then_its_tail(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "sequential")
    await _run(store, job, sweep, script, config)
    assert not _events(store, job, "round_started")
    kinds = [(c, k) for c, _, k, _ in script.probes]
    first_b = kinds.index(("b", "probe"))
    assert ("a", "sustained") in kinds[:first_b]  # a's tail before b's probes
    assert all(r.round is None for r in store.results.rows(job))


async def test_interleaved_falls_back_to_blocked_when_the_warmed_servers_do_not_fit(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "fallback")
    await _run(store, job, sweep, script, config)
    changed = _events(store, job, "design_changed")
    assert len(changed) == 1 and changed[0].payload["context"] == 128
    assert {e.payload["design"] for e in _events(store, job, "context_finished")} == {"blocked"}
    assert len([r for r in store.results.rows(job) if r.kind == "probe" and r.status == "ok"]) == 12


async def test_the_estimate_chooses_blocked_before_any_start(tmp_path: Path) -> None:
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b"])
    job = _job(store, sweep)
    await _run(store, job, sweep, Script(fit_estimate=False), config)
    chosen = _events(store, job, "design_chosen")[0].payload
    assert chosen["order"] == "blocked" and "do not fit side by side" in chosen["why"]


async def test_the_pair_stop_rule_ends_a_clear_gap_after_min_rounds(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "auto")
    await _run(store, job, sweep, script, config)
    finished = _events(store, job, "context_finished")
    assert all("every pair resolved at the planned look after 6 rounds" in e.payload["why"] for e in finished), finished
    assert all(e.payload["rounds"] == 6 for e in finished)


async def test_the_pair_stop_rule_goes_to_max_when_the_pair_stays_unresolved(tmp_path: Path) -> None:
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b"], probes=Probes(min=6, max=8), contexts=[128])
    job = _job(store, sweep)
    noisy = {"a": lambda p: [100.0, 60.0, 140.0, 80.0, 120.0][p % 5], "b": lambda p: [90.0, 130.0, 70.0, 110.0, 95.0][p % 5]}
    await _run(store, job, sweep, Script(rate=noisy), config)
    why = _events(store, job, "context_finished")[0].payload["why"]
    assert why.startswith("max 8 probes reached")
    assert len([r for r in store.results.rows(job) if r.kind == "probe" and r.candidate == "a"]) == 8


async def test_every_probe_failing_ends_the_rounds_and_fails_the_job(tmp_path: Path) -> None:
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a"], contexts=[128])
    job = _job(store, sweep)
    outcome = await _run(store, job, sweep, Script(failing={"a"}), config)
    assert outcome.state == "failed" and "no probe succeeded" in (outcome.error or "")


async def test_cancel_mid_round_stores_the_probe_aborted_and_resume_completes_exactly_once(tmp_path: Path) -> None:
    config, store, job, sweep, script = _scenario(tmp_path, "interleaved")
    script.hang_at = 3  # round 1 of context 128, its second visit
    task = asyncio.create_task(_run(store, job, sweep, script, config))
    await asyncio.wait_for(script.hanging.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert script.closed == 1  # the servers were torn down
    aborted = [r for r in store.results.rows(job) if r.status == "aborted"]
    assert len(aborted) == 1 and aborted[0].round == 1
    again = Script(rate=script.rate, never=script.never)
    await _run(store, job, sweep, again, config)
    assert again.probes[0][:2] == (aborted[0].candidate, 128)  # the aborted probe runs first
    rows = [r for r in store.results.rows(job) if r.status != "aborted" and r.kind == "probe" and r.candidate != "gone"]
    keys = [(r.candidate, r.context, r.probe) for r in rows]
    assert sorted(keys) == sorted({(c, x, p) for c in "ab" for x in (128, 256) for p in range(3)})
    # the resumed round visits only the candidates it had not visited yet, in the same order
    resumed = [e for e in _events(store, job, "round_started") if e.payload["round"] == 1 and e.payload["context"] == 128]
    assert len(resumed) == 2 and resumed[0].payload["order"] == resumed[1].payload["order"]
    fresh_config, fresh = _store(tmp_path / "fresh")
    fresh_job = _job(fresh, sweep, job)
    await _run(fresh, fresh_job, sweep, Script(rate=script.rate, never=script.never), fresh_config)
    placed = sorted((r.candidate, r.context, r.probe, r.round, r.visit) for r in rows)
    assert placed == sorted((r.candidate, r.context, r.probe, r.round, r.visit) for r in fresh.results.rows(fresh_job)
                            if r.kind == "probe" and r.candidate != "gone")


async def test_a_raced_sweep_whose_candidate_is_dropped_ends_with_done_equal_to_total(tmp_path: Path) -> None:
    """A dropped candidate's unrun planned rows (its larger context, its sustained row) leave the job's plan
    from its `candidate_dropped` event on (store progress and the event's planned rows agree), so a raced
    sweep whose survivors stop at the first look ends with done == total."""
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b", "slow"], probes=None, racing=True)  # rounds 3-12 by the pair rule
    job = _job(store, sweep, "fast-race-0001")
    planned = store.get_job(job).progress
    script = Script(rate={"a": lambda p: 100.0 + 0.01 * (p % 3), "b": lambda p: 100.0 + 0.01 * ((p + 1) % 3),
                          "slow": lambda p: 20.0 + 0.5 * (p % 2)})
    outcome = await _run(store, job, sweep, script, config)
    assert outcome.state == "succeeded"
    (drop,) = _events(store, job, "candidate_dropped")
    assert drop.payload["candidate"] == "slow" and drop.payload["context"] == 128 and drop.payload["round"] == 3
    typed = payload(drop)  # the typed event: every key the engine wrote is a field of its struct
    assert isinstance(typed, CandidateDropped) and set(drop.payload) <= set(CandidateDropped.__struct_fields__)
    assert typed.by == ["a", "b"] or typed.by == ["a"] or typed.by == ["b"], typed.by
    assert drop.payload["unrun_rows"] == 3 + 1  # its 3 probes at 256 and its sustained row
    assert drop.payload["unrun_rows_max"] == 9 + 12 + 1
    prog = store.get_job(job).progress
    assert (prog.total, prog.total_max) == (drop.payload["planned_rows"], drop.payload["planned_rows_max"])
    assert (prog.total, prog.total_max) == (planned.total - 4, (planned.total_max or 0) - 22)
    assert not [r for r in store.results.rows(job) if r.candidate == "slow" and r.context == 256]
    assert prog.done == prog.total == len(store.results.rows(job))
    # the Pareto view is the survivors': slow is out of it from its context on, with the race's reason
    from benchd.results.runbook import build_runbook

    views = {v.context: v for v in build_runbook(config, store, job).pareto}
    assert sorted(views) == [128, 256]
    for v in views.values():
        assert "slow" not in {p.candidate for p in v.points} and "slow" not in v.frontier and "slow" not in v.dominated
        assert v.excluded["slow"].startswith("left the race at context 128 after round 3: dominated by "), v.excluded
    # locking it is refused as for any dominated candidate, and --force records the race's dominators
    from benchd.errors import BenchdError
    from benchd.lock.lockfile import build_lock

    rb = build_runbook(config, store, job)
    with pytest.raises(BenchdError, match=r"is dominated .*at context 128: .*the race, after round 3"):
        build_lock(rb, "slow")
    assert "128" in build_lock(rb, "slow", force=True).dominated_by


async def test_racing_asked_for_with_a_fixed_count_drops_at_its_looks_and_the_survivors_run_the_count(
        tmp_path: Path) -> None:
    """`probes = 6` with `racing = true`: the race looks after rounds 3 and 6 (`race_looks`), the worse
    candidate leaves at round 3 with its record, and the survivors run all 6 probes at both contexts."""
    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b", "slow"], probes=6, racing=True)
    job = _job(store, sweep, "fast-race-fixed")
    script = Script(rate={"a": lambda p: 100.0 + 0.01 * (p % 3), "b": lambda p: 100.0 + 0.01 * ((p + 1) % 3),
                          "slow": lambda p: 20.0 + 0.5 * (p % 2)})
    assert (await _run(store, job, sweep, script, config)).state == "succeeded"
    (drop,) = _events(store, job, "candidate_dropped")
    assert (drop.payload["candidate"], drop.payload["context"], drop.payload["round"]) == ("slow", 128, 3)
    assert drop.payload["alpha"] == pytest.approx(0.05 / 2)  # α over the race's two looks
    probes = [(r.candidate, r.context) for r in store.results.rows(job) if r.kind == "probe"]
    assert {c: probes.count((c, 128)) for c in ("a", "b", "slow")} == {"a": 6, "b": 6, "slow": 3}
    assert {c: probes.count((c, 256)) for c in ("a", "b", "slow")} == {"a": 6, "b": 6, "slow": 0}
    assert not _events(store, job, "candidate_settled")  # a fixed count: nobody's rounds end early
    prog = store.get_job(job).progress
    assert prog.done == prog.total == len(store.results.rows(job))
    # the runbook says why slow's planned probes are missing: the race, not a count below the CI's minimum
    from benchd.results.runbook import build_runbook

    rb = build_runbook(config, store, job)
    (cell,) = [c for c in rb.cells if (c.candidate, c.context) == ("slow", 128)]
    assert cell.verdict is not None and cell.verdict.reason.endswith("(3 of the fixed 6 probes ran)"), cell.verdict
    missing = [d.reason for d in rb.deferred.automatic if d.axis == "probes"]
    assert missing == ["slow (llama-server): context 128: 3 of 6 planned probes have no row (it left the race at "
                       "context 128 after round 3)", "slow (llama-server): context 256: 6 of 6 planned probes have "
                       "no row (it left the race at context 128 after round 3)"], missing
    assert "no sustained row (it left the race at context 128 after round 3) — slow (llama-server)" in {
        d.reason for d in rb.deferred.automatic if d.axis == "sustained"}


async def test_a_fixed_count_with_many_candidates_does_not_race_unless_asked(tmp_path: Path) -> None:
    """Racing is on by default above 4 candidates only with adaptive probes: five candidates at `probes = 3`
    all run every round, and the runbook says racing was off."""
    from benchd.results.race import race_text
    from benchd.results.runbook import build_runbook

    config, store = _store(tmp_path)
    ids = ["a", "b", "c", "d", "slow"]
    sweep = _sweep(tmp_path, ids, contexts=[128])
    job = _job(store, sweep, "fast-race-off")
    script = Script(rate={**{c: 100.0 + ids.index(c) for c in ids}, "slow": 20.0})
    assert (await _run(store, job, sweep, script, config)).state == "succeeded"
    assert not sweep.racing_on() and not _events(store, job, "candidate_dropped")
    probes = [r.candidate for r in store.results.rows(job) if r.kind == "probe"]
    assert {c: probes.count(c) for c in ids} == dict.fromkeys(ids, 3)
    assert race_text(build_runbook(config, store, job)).startswith("Racing off")


async def test_the_drift_sentinel_runs_the_first_candidate_the_race_kept(tmp_path: Path) -> None:
    """The first candidate is dropped by the race at its first look: the sentinel re-runs the first cell of
    the first survivor (no row of the dropped one after its drop), the runbook's drift names that
    candidate, and done == total."""
    from benchd.results.runbook import build_runbook

    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["slow", "a", "b"], probes=None, racing=True, sentinel=True)
    job = _job(store, sweep, "fast-race-sentinel-0001")
    script = Script(rate={"a": lambda p: 100.0 + 0.01 * (p % 3), "b": lambda p: 100.0 + 0.01 * ((p + 1) % 3),
                          "slow": lambda p: 20.0 + 0.5 * (p % 2)})
    assert (await _run(store, job, sweep, script, config)).state == "succeeded"
    (drop,) = _events(store, job, "candidate_dropped")
    assert drop.payload["candidate"] == "slow"
    sentinel = [r for r in store.results.rows(job) if r.kind == "sentinel"]
    assert sentinel and {r.candidate for r in sentinel} == {"a"} and {r.context for r in sentinel} == {128}
    after = [e for e in _events(store, job, "probe_started") if e.seq > drop.seq]
    assert "slow" not in {e.payload["candidate"] for e in after}
    rb = build_runbook(config, store, job)
    assert rb.drift is not None and rb.drift.candidate == "a" and rb.drift.n_sentinel == len(sentinel)
    prog = store.get_job(job).progress
    assert prog.done == prog.total == len(store.results.rows(job))


def _settle_scenario(tmp_path: Path) -> tuple[Config, Store, str, Sweep, Script]:
    """p and q 15 % apart at 5 % noise with the same memory (an open pair for a few looks); s 3x faster and
    3x larger than both (a trade-off with each, answered at the first look)."""
    import random

    def noisy(mean: float, seed: int) -> Any:
        rng = random.Random(seed)
        values = [mean * (1 + rng.gauss(0, 0.05)) for _ in range(40)]
        return lambda p: values[p % len(values)]

    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["p", "q", "s"], probes=None, racing=True, contexts=[128], sustained=Sustained(tokens=0))
    job = _job(store, sweep, "fast-race-settle-0001")
    script = Script(rate={"p": noisy(100.0, 20), "q": noisy(115.0, 30), "s": lambda p: 300.0 * (1 + 0.003 * (p % 3))},
                    mem={"p": 100_000_000, "q": 100_000_000, "s": 300_000_000})
    return config, store, job, sweep, script


async def test_a_candidate_whose_pairs_are_answered_ends_its_rounds_of_a_context_and_stays_in_the_race(
        tmp_path: Path) -> None:
    """p and q 15 % apart at 5 % noise, the same memory: their pair is still open at the first look (3
    rounds). s is 3x faster and 3x larger: a trade-off with each, answered. At that look s's rounds of the context
    end (`candidate_settled`, its cell's verdict then), while p and q go on; s is not dropped, and the
    runbook and its race paragraph record it."""
    from benchd.results.race import race_text
    from benchd.results.runbook import build_runbook
    from benchd.schemas.events import CandidateSettled

    config, store, job, sweep, script = _settle_scenario(tmp_path)
    assert (await _run(store, job, sweep, script, config)).state == "succeeded"
    for drop in _events(store, job, "candidate_dropped"):  # the open pair may resolve later, never s's
        assert drop.payload["candidate"] in ("p", "q") and drop.payload["round"] > 3
    (ev,) = _events(store, job, "candidate_settled")
    settled = payload(ev)
    assert isinstance(settled, CandidateSettled) and set(ev.payload) <= set(CandidateSettled.__struct_fields__)
    assert (settled.candidate, settled.context, settled.round) == ("s", 128, 3)
    assert set(settled.pairs) == {"p", "q"} and all("trade-off" in w for w in settled.pairs.values())
    rows = [r for r in store.results.rows(job) if r.kind == "probe"]
    assert sorted(r.round for r in rows if r.candidate == "s") == [0, 1, 2]
    assert max(r.round or 0 for r in rows if r.candidate == "p") >= 5  # the open pair went on
    (done,) = _events(store, job, "context_finished")
    assert done.payload["rounds"] >= 6
    assert [e.payload["candidate"] for e in _events(store, job, "cell_finished")].count("s") == 1
    rb = build_runbook(config, store, job)
    assert [(s.candidate, s.context, s.round) for s in rb.race_settled] == [("s", 128, 3)]
    assert "s at context 128 after round 3" in race_text(rb) and "s" not in {d.candidate for d in rb.race}


async def test_a_resumed_context_does_not_run_a_settled_candidate_again(tmp_path: Path) -> None:
    """Cancelled in round 3 (after s settled at the first look), the resumed job rebuilds the settle from its
    event: s gets no more probes at the context, no second `candidate_settled`, one cell verdict."""
    config, store, job, sweep, script = _settle_scenario(tmp_path)
    script.hang_at = 10  # rounds 0-2: 9 probes; round 3 visits p and q only
    task = asyncio.create_task(_run(store, job, sweep, script, config))
    await asyncio.wait_for(script.hanging.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e.payload["candidate"] for e in _events(store, job, "candidate_settled")] == ["s"]
    again = Script(rate=script.rate, mem=script.mem)
    assert (await _run(store, job, sweep, again, config)).state == "succeeded"
    assert "s" not in {c for c, *_ in again.probes} and again.probes
    assert len(_events(store, job, "candidate_settled")) == 1
    assert [e.payload["candidate"] for e in _events(store, job, "cell_finished")].count("s") == 1


async def test_six_sustained_runs_make_the_sustain_ratio_comparable(tmp_path: Path) -> None:
    """`[sustained] runs = 6`: six sustained rows a candidate, back to back on its last start and counted in
    the plan; on them the view compares the sustain ratio. b holds 0.90 where a falls to 0.70: different,
    so a (twice as fast at the probes) and b are a trade-off, where one run each could only block."""
    from benchd.results.runbook import build_runbook

    config, store = _store(tmp_path)
    sweep = _sweep(tmp_path, ["a", "b"], probes=6, sustained=Sustained(tokens=16, window=8, runs=6))
    job = _job(store, sweep)
    script = Script(rate={"a": lambda p: 100.0 + p % 3, "b": lambda p: 50.0 + p % 2},
                    sustain={"a": lambda p: 0.70 + 0.01 * (p % 3), "b": lambda p: 0.90 + 0.01 * (p % 2)})
    await _run(store, job, sweep, script, config)
    rows = store.results.rows(job)
    assert sorted((r.candidate, r.probe) for r in rows if r.kind == "sustained") == [
        (c, p) for c in ("a", "b") for p in range(6)]
    assert {r.start for r in rows if r.kind == "sustained" and r.candidate == "a"} == {3}  # its last start
    prog = store.get_job(job).progress
    assert prog.done == prog.total == 2 * (2 * 6 + 6)
    rb = build_runbook(config, store, job)
    for view in rb.pareto:
        assert view.frontier == ["a", "b"] and not view.ties, view
        (trade,) = view.tradeoffs
        assert "sustain ratio" in (trade.text or "") and "sustain_ratio" in trade.axes, trade.text
