"""The sweep engine against real servers (issue 4's "done when"): one real sweep over all three runtimes
on the tiny models, a candidate with a wrong model path, a server killed mid-sweep, and a resume."""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
from pathlib import Path
from typing import Any

import psutil
import pytest

from benchd.config import Config
from benchd.engine.metrics import cell_stats
from benchd.engine.scheduler import run_job
from benchd.schemas import Candidate, Cooldown, Event, Row, Spec, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]

CONTEXTS = [256, 1024]


def _sweep(models: Any, candidates: list[Candidate], **kw: Any) -> Sweep:
    base: dict[str, Any] = dict(
        name="engine-test", contexts=CONTEXTS, gen_tokens=32, probes=2, warmup=1, eval_tier="none",
        sustained=Sustained(tokens=96, window=32), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
        candidates=candidates, starts="once",  # resident servers: these tests are not about starts (CI time)
    )
    base.update(kw)
    return Sweep(**base)


def _run(config: Config, sweep: Sweep, on_event: Any = None) -> tuple[Store, str, Any, list[Event]]:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    events: list[Event] = []

    def notify(e: Event) -> None:
        events.append(e)
        if on_event:
            on_event(e)

    outcome = asyncio.run(run_job(job.id, sweep, store, config, notify))
    return store, job.id, outcome, events


@pytest.fixture(scope="module")
def full_sweep(tiny_models: Any, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    m = tiny_models
    cands = [
        Candidate(id="llama", runtime="llama-server", model=str(m.target), args=["-t", "2"]),
        Candidate(id="llama-same", runtime="llama-server", model=str(m.target), args=["-t", "2"],
                  spec=Spec(kind="draft", draft_model=str(m.draft_identical), draft_max=8)),
        Candidate(id="llama-unrelated", runtime="llama-server", model=str(m.target), args=["-t", "2"],
                  spec=Spec(kind="draft", draft_model=str(m.draft_unrelated), draft_max=8)),
        Candidate(id="mlx-lm", runtime="mlx_lm.server", model=str(m.mlx_dir)),
        Candidate(id="mlx-vlm", runtime="mlx_vlm.server", model=str(m.mlx_vlm_dir)),
        Candidate(id="missing-model", runtime="llama-server", model="/nonexistent/model.gguf", startup_timeout_s=30),
    ]
    config = Config.resolve(state_dir=tmp_path_factory.mktemp("engine"), cache_dir=cache_dir)
    store, job, outcome, events = _run(config, _sweep(m, cands))
    return {"store": store, "job": job, "outcome": outcome, "events": events, "rows": store.results.rows(job)}


def _rows(full: dict[str, Any], cand: str, kind: str = "probe") -> list[Row]:
    return [r for r in full["rows"] if r.candidate == cand and r.kind == kind]


def test_every_cell_has_its_rows_and_the_job_succeeds(full_sweep: dict[str, Any]) -> None:
    assert full_sweep["outcome"].state == "succeeded"
    for cand in ("llama", "llama-same", "llama-unrelated", "mlx-lm", "mlx-vlm", "missing-model"):
        assert len(_rows(full_sweep, cand)) == len(CONTEXTS) * 2, cand
        assert len(_rows(full_sweep, cand, "sustained")) == 1, cand
    seqs = [e.seq for e in full_sweep["events"]]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "event seq has gaps"


def test_prompt_tokens_hit_the_context_and_no_cache(full_sweep: dict[str, Any]) -> None:
    for cand in ("llama", "llama-same", "mlx-lm", "mlx-vlm"):
        for r in _rows(full_sweep, cand):
            assert r.status == "ok", (cand, r.error)
            assert r.prompt_tokens is not None and abs(r.prompt_tokens - r.context) <= 0.01 * r.context, (cand, r.prompt_tokens)
            assert r.cached_tokens == 0, (cand, r.cached_tokens)
            assert r.gen_tokens == 32


def test_llama_rates_come_from_server_timings(full_sweep: dict[str, Any]) -> None:
    for r in _rows(full_sweep, "llama"):
        assert r.sources["prompt_tps"] == "server:timings" and r.prompt_tps and r.prompt_tps > 0
        assert r.sources["gen_tps"] == "server:timings" and r.gen_tps and r.gen_tps > 0
        # The client window may be unmeasurable when the tiny model's tokens arrive in one read; then
        # the row must say so rather than carry a number.
        assert (r.gen_tps_client is not None and r.sources["gen_tps_client"].startswith("client:stream-window")) or (
            "stream window" in r.null_reasons["gen_tps_client"]
        )
        assert r.mem_peak_bytes and r.mem_peak_bytes > 1_000_000 and r.mem_source == "kernel:VmHWM"
        assert r.sources["mem_load_mode"].startswith("load mode auto (default: mmap unless a device cannot); ")
        assert "--cache-ram 0 MiB" in r.sources["mem_load_mode"]
        # The axis's components, each with its source (issue 14): anon peak, VmHWM, and the mapped GGUF.
        assert r.mem_resident_peak_bytes == r.mem_peak_bytes and r.sources["mem_resident_peak_bytes"] == "kernel:VmHWM"
        assert r.mem_footprint_peak_bytes and r.sources["mem_footprint_peak_bytes"].startswith("kernel:RssAnon (sampled max)")
        assert r.mem_model_resident_bytes is not None and r.sources["mem_model_resident_bytes"].startswith("kernel:smaps")
        assert r.server_version and "b1-0c1e570" in r.server_version
        assert r.ctx_size == r.context + 32 + 64


def test_mlx_lm_has_no_prompt_rate_and_client_gen_rate(full_sweep: dict[str, Any]) -> None:
    """Each row's generation rate is the client's stream window, or null naming the socket reads that
    made it unmeasurable (a starved client under load can read every token at once in every probe)."""
    rows = _rows(full_sweep, "mlx-lm")
    assert rows
    for r in rows:
        assert r.prompt_tps is None and "mlx_lm.server" in r.null_reasons["prompt_tps"]
        if r.gen_tps is None:
            assert "stream window unmeasurable: all tokens arrived in" in r.null_reasons["gen_tps"], r.null_reasons
        else:
            assert r.sources["gen_tps"].startswith("client:stream-window")


def test_mlx_vlm_client_and_server_rates_agree(full_sweep: dict[str, Any]) -> None:
    ratios = [r.gen_tps_client / r.gen_tps for r in _rows(full_sweep, "mlx-vlm") if r.gen_tps and r.gen_tps_client]
    assert ratios
    ratios.sort()
    median = ratios[len(ratios) // 2]
    assert 0.95 <= median <= 1.05, ratios


def test_draft_acceptance(full_sweep: dict[str, Any]) -> None:
    same = [r.draft_acceptance for r in _rows(full_sweep, "llama-same")]
    unrelated = [r.draft_acceptance for r in _rows(full_sweep, "llama-unrelated")]
    # The median, not every probe: a random-weight model has near-tied top logits, and the target's batched
    # verification can round differently from the draft's one-token steps, so a single probe of an
    # identical draft has been seen at 0.79 (1 of 4 probes, under load average 12). The scripted models
    # (tests/contract/test_contract_scripted_real.py) have no near ties and check acceptance per run.
    assert all(a is not None for a in same) and statistics.median(same) >= 0.9, same
    assert all(a is not None and a <= 0.1 for a in unrelated), unrelated
    for cand in ("llama", "mlx-lm"):
        for r in _rows(full_sweep, cand):
            assert r.draft_acceptance is None and r.null_reasons["draft_acceptance"]
    assert "server:/metrics" in _rows(full_sweep, "llama-same")[0].sources["draft_acceptance_check"]


def test_sustained_rows_have_one_figure_per_window(full_sweep: dict[str, Any]) -> None:
    for cand in ("llama", "mlx-lm", "mlx-vlm"):
        (r,) = _rows(full_sweep, cand, "sustained")
        assert r.status == "ok", r.error
        assert r.window_tps is not None
        # One figure per window, unless a starved client read a window's tokens at once (then it says so).
        assert len(r.window_tps) == 96 // 32 or "unmeasurable" in r.sources["window_tps"], r.sources
        if len(r.window_tps) >= 2:
            assert r.sustain_ratio == pytest.approx(r.window_tps[-1] / r.window_tps[0])
        else:  # a starved client read the windows at once: no ratio, and the row says why
            assert r.sustain_ratio is None and "a ratio needs at least 2" in r.sources["sustain_ratio"], r.sources


def test_stats_follow_from_rows(full_sweep: dict[str, Any]) -> None:
    stats = {(c.candidate, c.context): c for c in cell_stats(full_sweep["rows"])}
    cell = stats[("llama", 256)]
    values = sorted(r.gen_tps for r in _rows(full_sweep, "llama") if r.context == 256 and r.gen_tps)
    assert cell.gen_tps.n == 2 and cell.gen_tps.median == pytest.approx(sum(values) / 2)
    assert cell.gen_tps.ci95_low is None  # n < 6: no interval rather than a false one
    assert cell.gen_tps.noisy == ((cell.gen_tps.cv or 0) > 0.05)


def test_wrong_model_path_fails_its_rows_only(full_sweep: dict[str, Any]) -> None:
    rows = _rows(full_sweep, "missing-model") + _rows(full_sweep, "missing-model", "sustained")
    assert rows and all(r.status == "failed" for r in rows)
    # Checked before the server starts (issue 18): the row names the path, not a loader error in a log tail.
    assert all("/nonexistent/model.gguf" in (r.error or "") and "does not exist" in (r.error or "") for r in rows)


def test_killed_server_gives_one_failed_row_and_the_sweep_goes_on(
    tiny_models: Any, cache_dir: Path, tmp_path: Path
) -> None:
    cands = [Candidate(id="victim", runtime="llama-server", model=str(tiny_models.target), args=["-t", "2"])]
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    pids: list[int] = []

    def on_event(e: Event) -> None:
        if e.type == "server_ready":
            pids.append(e.payload["pid"])
        if e.type == "probe_started" and e.payload["context"] == 256 and e.payload["probe"] == 1:
            os.kill(pids[-1], signal.SIGKILL)

    store, job, outcome, events = _run(config, _sweep(tiny_models, cands, gen_tokens=256), on_event)
    rows = store.results.rows(job)
    failed = [r for r in rows if r.status != "ok"]
    assert len(failed) == 1 and failed[0].probe == 1 and failed[0].context == 256
    assert failed[0].exit_status == "signal 9" and "crashed" in (failed[0].error or "")
    assert len([r for r in rows if r.status == "ok"]) == len(rows) - 1 == len(CONTEXTS) * 2
    assert any(e.type == "server_crashed" for e in events)
    assert outcome.state == "succeeded"
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_cancel_stores_aborted_and_resume_completes_exactly_once(
    tiny_models: Any, cache_dir: Path, tmp_path: Path
) -> None:
    cands = [Candidate(id="resumed", runtime="llama-server", model=str(tiny_models.target), args=["-t", "2"])]
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    sweep = _sweep(tiny_models, cands, gen_tokens=512, sustained=Sustained(tokens=0))
    job, _ = store.create_job(sweep)

    async def cancel_mid_probe() -> None:
        started = asyncio.Event()

        def notify(e: Event) -> None:
            if e.type == "probe_started" and e.payload["context"] == 1024:
                started.set()

        task = asyncio.create_task(run_job(job.id, sweep, store, config, notify))
        await started.wait()
        await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_probe())
    first = store.results.rows(job.id)
    assert [r.status for r in first if r.context == 1024] == ["aborted"]
    assert not list(config.servers_dir.glob("*.json")), "a server record survived the cancel"
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda e: None))  # a second run of the same job resumes from its stored rows
    assert outcome.state == "succeeded"
    rows = store.results.rows(job.id)
    keys = [(r.candidate, r.context, r.kind, r.probe) for r in rows]
    assert len(keys) == len(set(keys)) == len(CONTEXTS) * 2
    assert all(r.status == "ok" for r in rows)
    assert [r.started_at for r in rows if r.context == 256] == [r.started_at for r in first if r.context == 256]


def test_prompts_sized_outside_probe_windows_and_memory_series_only_when_sustained(
    tiny_models: Any, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/tokenize round trips (prompt sizing) happen before each probe's cooldown, never between its
    probe_started and probe_finished; recorded probes read the kernel peak without a series, the
    sustained run keeps its 10 Hz series. The adapter is the real one, wrapped only to timestamp calls."""
    import time

    from benchd.servers.runtimes import get_adapter

    requests_cls = type(get_adapter("llama-server").requests)
    real_count = requests_cls.count_tokens
    calls: list[float] = []

    async def timed_count(self: Any, base_url: str, text: str) -> int | None:
        calls.append(time.monotonic())
        return await real_count(self, base_url, text)

    monkeypatch.setattr(requests_cls, "count_tokens", timed_count)
    windows: list[list[float]] = []

    def on_event(e: Event) -> None:
        if e.type == "probe_started":
            windows.append([time.monotonic(), float("inf")])
        elif e.type == "probe_finished":
            windows[-1][1] = time.monotonic()

    cands = [Candidate(id="sized", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"])]
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    sweep = _sweep(tiny_models, cands, contexts=[256], warmup=0, sustained=Sustained(tokens=64, window=16),
                   cooldown=Cooldown(policy="fixed", seconds=0.2, max_seconds=0.2))
    store, job, outcome, _events = _run(config, sweep, on_event)
    assert outcome.state == "succeeded" and len(windows) == 3 and calls
    assert not [t for t in calls for a, b in windows if a <= t <= b], "a /tokenize call inside a probe window"
    rows = store.results.rows(job)
    probes = [r for r in rows if r.kind == "probe"]
    (sustained,) = [r for r in rows if r.kind == "sustained"]
    assert all(r.mem_peak_bytes and r.sources["mem_peak_bytes"] == "kernel:VmHWM" for r in probes)
    assert all("no series" in r.sources["mem_rss_anon_bytes"] for r in probes)
    assert "Hz series" in sustained.sources["mem_rss_anon_bytes"]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="pin_client needs Linux and at least 2 usable cores")
def test_pin_client_puts_the_server_and_the_probe_client_on_separate_cores(
    tiny_models: Any, cache_dir: Path, tmp_path: Path
) -> None:
    from benchd.results.runbook import build_runbook

    mine = os.sched_getaffinity(0)
    during: dict[str, set[int]] = {}

    def on_event(e: Event) -> None:  # the engine notifies from its event loop thread: the probe client
        if e.type == "probe_started":  # per candidate: interleaved rounds visit them in a seeded order
            during[e.payload["candidate"]] = os.sched_getaffinity(0)

    cands = [Candidate(id="pinned", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"]),
             Candidate(id="unpinned", runtime="llama-server", model=str(tiny_models.target))]
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    sweep = _sweep(tiny_models, cands, contexts=[256], probes=1, warmup=0, sustained=Sustained(tokens=0), pin_client=True)
    store, job, outcome, events = _run(config, sweep, on_event)
    assert outcome.state == "succeeded"
    ready = {e.payload["candidate"]: e.payload["affinity"] for e in events if e.type == "server_ready"}
    cores = sorted(mine)
    assert ready["pinned"]["applied"] and ready["pinned"]["server_cpus"] == cores[:1]
    assert ready["pinned"]["client_cpus"] == cores[1:] and during["pinned"] == set(cores[1:])
    assert not ready["unpinned"]["applied"] and "no -t N" in ready["unpinned"]["reason"] and during["unpinned"] == mine
    assert os.sched_getaffinity(0) == mine  # released when the job ends
    prov = {c.candidate: c.affinity for c in build_runbook(config, store, job).provenance.candidates}
    assert prov["pinned"] is not None and prov["pinned"].client_cpus == cores[1:]
    assert prov["unpinned"] is not None and not prov["unpinned"].applied
