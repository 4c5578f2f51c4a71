"""A sweep of the scripted thinking model on the three REAL servers (issue 13): rows carry thinking,
reasoning tokens, time to the first answer token, `--fit` and the layer split; probes that stop at EOS
are marked short and kept out of the medians; the servers start without inherited runtime knobs, and
the runbook records what they were given and flags unlike cells.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, Event, Row, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]

#: Inherited knobs a shell might export: none may reach the server that reads it (`runtimes.environment`).
INHERITED = {"LLAMA_ARG_THREADS": "2", "LLAMA_ARG_N_GPU_LAYERS": "0", "APC_ENABLED": "1", "KV_BITS": "4",
             "MLX_VLM_MAX_TOKENS": "3", "MLX_GDN_PACKED": "1"}
READS = {"llama": ("LLAMA_ARG_THREADS", "LLAMA_ARG_N_GPU_LAYERS"), "mlx-lm": ("MLX_GDN_PACKED",),
         "mlx-vlm": ("APC_ENABLED", "KV_BITS", "MLX_VLM_MAX_TOKENS", "MLX_GDN_PACKED")}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _sweep(models: Any, **kw: Any) -> Sweep:
    cands = [
        Candidate(id="llama", runtime="llama-server", model=str(models.target), args=["-t", "1"],
                  env={"BENCHD_TEST_API_TOKEN": "s3cret"}),
        Candidate(id="mlx-lm", runtime="mlx_lm.server", model=str(models.mlx_dir)),
        Candidate(id="mlx-vlm", runtime="mlx_vlm.server", model=str(models.mlx_dir)),
    ]
    base: dict[str, Any] = dict(name="real-models", contexts=[128], gen_tokens=64, probes=2, warmup=1,
                                eval_tier="none", sustained=Sustained(tokens=0),
                                cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), candidates=cands)
    base.update(kw)
    return Sweep(**base)


def _run(config: Config, sweep: Sweep, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    for k, v in INHERITED.items():
        monkeypatch.setenv(k, v)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    environs: dict[str, dict[str, str]] = {}
    events: list[Event] = []

    def notify(e: Event) -> None:
        events.append(e)
        if e.type == "server_ready":  # the server is running now: read what it was started with
            environs[e.payload["candidate"]] = _environ(e.payload["pid"])

    outcome = asyncio.run(run_job(job.id, sweep, store, config, notify))
    return {"store": store, "job": job.id, "outcome": outcome, "rows": store.results.rows(job.id), "events": events,
            "environs": environs, "config": config}


@pytest.fixture(scope="module")
def sweep_run(scripted_models: Any, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        config = Config.resolve(state_dir=tmp_path_factory.mktemp("real-models"), cache_dir=cache_dir)
        return _run(config, _sweep(scripted_models), mp)


def _rows(run: dict[str, Any], cand: str) -> list[Row]:
    return [r for r in run["rows"] if r.candidate == cand and r.kind == "probe"]


def test_rows_carry_thinking_and_run_to_length(sweep_run: dict[str, Any], scripted_models: Any) -> None:
    assert sweep_run["outcome"].state == "succeeded"
    k = scripted_models.reasoning_tokens
    for cand, thinking in (("llama", "on"), ("mlx-lm", "on"), ("mlx-vlm", "off")):  # mlx_vlm: off by default
        rows = _rows(sweep_run, cand)
        assert len(rows) == 2
        for r in rows:
            assert r.status == "ok" and not r.short and r.gen_tokens == 64, (cand, r.error, r.short_reason)
            assert r.thinking == thinking and r.sources["thinking"].endswith("sweep asked: default")
            assert r.reasoning_tokens == (k if thinking == "on" else 0)
            assert r.ttfat_ms is not None and r.ttft_ms is not None and r.ttft_ms <= r.ttfat_ms
            assert r.layer_split is None and r.null_reasons["layer_split"]
        if cand == "llama":
            assert all(r.fit == "off" and r.null_reasons["layer_split"].startswith("CPU-only build") for r in rows)
        else:
            assert all(r.fit is None and "no layer split" in r.null_reasons["layer_split"] for r in rows)


def test_inherited_knobs_never_reach_a_server(sweep_run: dict[str, Any]) -> None:
    assert set(sweep_run["environs"]) == set(READS)
    for cand, env in sweep_run["environs"].items():
        for name in READS[cand]:
            assert name not in env, (cand, name)
    assert sweep_run["environs"]["llama"]["BENCHD_TEST_API_TOKEN"] == "s3cret"  # the candidate's env is passed
    ready = {e.payload["candidate"]: e.payload for e in sweep_run["events"] if e.type == "server_ready"}
    assert {"LLAMA_ARG_THREADS", "LLAMA_ARG_N_GPU_LAYERS"} <= set(ready["llama"]["env_removed"])
    assert {"APC_ENABLED", "KV_BITS", "MLX_VLM_MAX_TOKENS"} <= set(ready["mlx-vlm"]["env_removed"])
    assert ready["llama"]["env"] == {"BENCHD_TEST_API_TOKEN": "<redacted>"}  # never a secret-looking value
    assert ready["mlx-lm"]["env"]["HF_HUB_OFFLINE"] == "1"


def test_runbook_records_environment_and_flags_unlike_thinking(sweep_run: dict[str, Any]) -> None:
    rb = build_runbook(sweep_run["config"], sweep_run["store"], sweep_run["job"])
    prov = {c.candidate: c for c in rb.provenance.candidates}
    assert prov["llama"].server_env == {"BENCHD_TEST_API_TOKEN": "<redacted>"}
    assert "APC_ENABLED" in prov["mlx-vlm"].env_removed
    flags = [f for f in rb.flags if f.flag == "thinking_mixed"]
    assert len(flags) == 1 and "mlx-vlm off" in flags[0].detail and "llama on" in flags[0].detail
    from benchd.results.report import render_markdown, render_text

    assert "unlike work: context 128" in render_text(rb, pareto=True)
    assert "**thinking_mixed**" in render_markdown(rb)


def test_eos_left_alone_marks_rows_short_and_out_of_the_medians(
    scripted_models: Any, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = _sweep(scripted_models, ignore_eos=False, thinking="off", warmup=0)
    sweep = Sweep(**{**{f: getattr(sweep, f) for f in sweep.__struct_fields__},
                     "candidates": [c for c in sweep.candidates if c.id == "mlx-lm"]})
    run = _run(Config.resolve(state_dir=tmp_path / "s", cache_dir=cache_dir), sweep, monkeypatch)
    rows = _rows(run, "mlx-lm")
    expected = scripted_models.generated_tokens(thinking=False)
    for r in rows:
        assert r.status == "ok" and r.short and r.gen_tokens == expected and r.thinking == "off"
        assert r.short_reason == (f"generated {expected} of 64 tokens (finish_reason stop): the sweep lets the "
                                  "model stop (ignore_eos = false)")
    rb = build_runbook(run["config"], run["store"], run["job"])
    cell = rb.cells[0]
    assert (cell.n_ok, cell.n_short) == (0, 2) and cell.gen_tps.median is None
    assert any(f.flag == "short_probes" and f.candidate == "mlx-lm" for f in rb.flags)

