"""Hand-built jobs in a temp Store for the runbook/report/compare/lock tests.

Rows are plain data (no server needed to test rendering and decisions); the model files are real
files written here, so the provenance sha256 is checked against real bytes. The real-server path
(`locked --command` starting llama-server) lives in tests/results/test_lock_real.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from benchd.config import Config
from benchd.schemas import Candidate, Cooldown, Deferred, EvalResult, Row, Spec, Sweep, ThermalReading
from benchd.store import Store

CONTEXTS = [512, 1024]


def write_models(root: Path) -> dict[str, Path]:
    """A GGUF-named file, a draft file and an MLX-style directory with real (arbitrary) bytes."""
    root.mkdir(parents=True, exist_ok=True)
    gguf = root / "tiny-q8_0.gguf"
    gguf.write_bytes(b"GGUF" + hashlib.sha256(b"target").digest() * 512)
    draft = root / "tiny-draft.gguf"
    draft.write_bytes(b"GGUF" + hashlib.sha256(b"draft").digest() * 64)
    mlx = root / "tiny-mlx"
    mlx.mkdir(exist_ok=True)
    (mlx / "config.json").write_text('{"model_type": "llama"}')
    (mlx / "model.safetensors").write_bytes(hashlib.sha256(b"weights").digest() * 256)
    return {"gguf": gguf, "draft": draft, "mlx": mlx}


def make_sweep(models: dict[str, Path], probes: int = 3, cooldown: Cooldown | None = None) -> Sweep:
    return Sweep(
        name="fixture-sweep",
        contexts=CONTEXTS,
        gen_tokens=32,
        probes=probes,
        warmup=1,
        eval_tier="smoke",
        deferred=[Deferred(axis="concurrency", reason="single-user daily driver")],
        cooldown=cooldown or Cooldown(policy="fixed", seconds=1.0, max_seconds=5.0),
        candidates=[
            Candidate(id="gguf-spec", runtime="llama-server", model=str(models["gguf"]), args=["-t", "1"],
                      ctx_size=4096, spec=Spec(kind="draft", draft_model=str(models["draft"]), draft_max=8),
                      binary="/opt/llama/llama-server"),
            Candidate(id="gguf-plain", runtime="llama-server", model=str(models["gguf"]), args=["-t", "1"],
                      binary="/opt/llama/llama-server"),
            Candidate(id="mlx-lm", runtime="mlx_lm.server", model=str(models["mlx"])),
            Candidate(id="broken", runtime="llama-server", model=str(models["gguf"]) + ".missing"),
        ],
    )


# gen_tps per (candidate, context): three probes each. gguf-spec at 1024 is deliberately noisy (CV > 5 %).
GEN = {
    ("gguf-spec", 512): [120.0, 121.0, 119.0], ("gguf-spec", 1024): [100.0, 80.0, 120.0],
    ("gguf-plain", 512): [100.0, 101.0, 99.0], ("gguf-plain", 1024): [90.0, 91.0, 89.0],
    ("mlx-lm", 512): [130.0, 131.0, 129.0], ("mlx-lm", 1024): [70.0, 71.0, 69.0],
}
MEM = {"gguf-spec": 3_000_000, "gguf-plain": 2_000_000, "mlx-lm": 2_500_000}


def _row(job: str, cand: str, runtime: str, ctx: int, probe: int, **kw: object) -> Row:
    return Row(job=job, candidate=cand, runtime=runtime, context=ctx, kind="probe", probe=probe,
               **kw)  # type: ignore[arg-type]


def fill_job(store: Store, sweep: Sweep, job_id: str = "20261130-020000-abcd", state: str = "succeeded",
             started_at: str = "2026-11-30T02:00:00.000Z", gen_scale: float = 1.0) -> str:
    store.create_job(sweep, job_id=job_id)
    store.transition(job_id, "job_started", {}, state="running", started_at=started_at)
    for cand in sweep.candidates:
        if cand.id == "broken":
            for ctx in CONTEXTS:
                store.results.commit_row(_row(job_id, cand.id, cand.runtime, ctx, 0, status="failed",
                                      error="server exited before ready (status 1)"))
            continue
        version = "b1-0c1e570" if cand.runtime == "llama-server" else "mlx-lm 0.32.2"
        store.events.append(job_id, "server_ready", {"candidate": cand.id, "server_version": version,
                                                    "binary": cand.binary or "mlx_lm.server"})
        for ctx in CONTEXTS:
            for probe, g in enumerate(GEN[(cand.id, ctx)]):
                store.events.append(job_id, "cooldown_finished", {
                    "candidate": cand.id, "context": ctx, "probe": probe,
                    "record": {"policy": "fixed", "waited_s": 1.0, "reason": "fixed"}})
                mlx = cand.runtime == "mlx_lm.server"
                spec = cand.spec is not None
                nulls: dict[str, str] = {}
                if mlx:
                    nulls["prompt_tps"] = "mlx_lm.server reports no prompt timing"
                if not spec:
                    nulls.update(draft_n="no spec configured", draft_accepted="no spec configured",
                                 draft_acceptance="no spec configured")
                store.results.commit_row(_row(
                    job_id, cand.id, cand.runtime, ctx, probe, status="ok", ctx_size=cand.ctx_size or ctx + 64,
                    binary=cand.binary or "/venv/bin/mlx_lm.server", server_version=version,
                    prompt_tokens=ctx, cached_tokens=0, gen_tokens=32,
                    prompt_tps=None if mlx else 800.0 - ctx / 10 + probe, gen_tps=g * gen_scale,
                    gen_tps_client=g * gen_scale * 0.99, ttft_ms=50.0 + ctx / 20 + probe,
                    e2e_ms=400.0 + probe, draft_n=40 if spec else None, draft_accepted=38 if spec else None,
                    draft_acceptance=0.95 if spec else None, mem_peak_bytes=MEM[cand.id] + ctx,
                    mem_source="kernel:VmHWM", cooldown_s=1.0, cooldown_reason="fixed",
                    sources={"gen_tps": "client:stream-window" if mlx else "server:timings",
                             "mem_peak_bytes": "kernel:VmHWM"},
                    null_reasons=nulls,
                ))
        store.results.commit_row(Row(
            job=job_id, candidate=cand.id, runtime=cand.runtime, context=max(CONTEXTS), kind="sustained", probe=0,
            status="ok", gen_tokens=256, window_tps=[100.0, 98.0], sustain_ratio=0.98,
            thermal_before=ThermalReading(source="psutil", available=False, reason="no sensors"),
            thermal_after=ThermalReading(source="psutil", available=False, reason="no sensors"),
        ))
        for task, ok in (("add", True), ("capital", cand.id != "mlx-lm")):
            store.results.put_eval(EvalResult(job=job_id, candidate=cand.id, tier="smoke", task=task, passed=ok))
    store.transition(job_id, "job_finished" if state == "succeeded" else "job_failed", {}, state=state,
                     finished_at="2026-11-30T02:30:00.000Z")
    return job_id


def setup_state(tmp: Path, **kw: object) -> tuple[Config, Store, Sweep, dict[str, Path]]:
    config = Config.resolve(state_dir=tmp / "state", cache_dir=tmp / "cache")
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    models = write_models(tmp / "models")
    sweep = make_sweep(models, **kw)  # type: ignore[arg-type]
    return config, store, sweep, models
