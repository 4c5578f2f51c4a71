"""`make demo-real`'s sweep file (benchctl.demo._real_sweep_toml) on the real model, one cell of it run.

The whole real demo takes minutes (RESULTS.md §3c), over this suite's budget; this runs the file the demo
writes through `benchctl validate` (as a user would), then its quantized-KV candidate through the engine at
the smallest context with one probe and two HumanEval tasks, and the demo's evals line over that runbook.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchctl.demo import REAL_CODE_TASKS, _real_sweep_toml, mlx_real_minutes, real_evals_line
from benchctl.sweepfile import load_sweep
from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results import runbook
from benchd.schemas import Cooldown, EvalLimit
from benchd.store import Store

pytestmark = [pytest.mark.slow]

BENCHCTL = str(Path(sys.executable).parent / "benchctl")


def test_the_real_demo_sweep_validates_and_one_cell_runs(real_model: Any, llama_server_bin: Path, cache_dir: Path,
                                                          eval_suites: Path, tmp_path: Path) -> None:
    path = tmp_path / "demo-real-sweep.toml"
    path.write_text(_real_sweep_toml(real_model))
    checked = subprocess.run([BENCHCTL, "validate", str(path)], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "BENCHD_STATE_DIR": str(tmp_path / "v")}, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"code {REAL_CODE_TASKS} tasks" in checked.stdout
    assert "too few" not in checked.stdout + checked.stderr  # the demo's probes give every cell a verdict
    sweep = load_sweep(path)
    assert [c.id for c in sweep.candidates] == ["smollm2-f16kv", "smollm2-q8kv"]
    assert {c.model for c in sweep.candidates} == {str(real_model.gguf)}
    # the MLX copy is not silently dropped: a deferred line with its measured rate and the minutes it would add
    mlx = [d for d in sweep.deferred if "mlx_lm.server" in d.axis]
    assert len(mlx) == 1 and f"~{mlx_real_minutes()} minutes" in mlx[0].reason

    q8 = msgspec.structs.replace(sweep.candidates[1], binary=str(llama_server_bin))
    assert q8.args[-4:] == ["-ctk", "q8_0", "-ctv", "q8_0"]
    cell = msgspec.structs.replace(sweep, contexts=[min(sweep.contexts)], probes=1, warmup=0, candidates=[q8],
                                   eval_limit=EvalLimit(code=2), cooldown=Cooldown(policy="fixed", seconds=0,
                                                                                  max_seconds=0))
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    created, _ = store.create_job(cell)
    outcome = asyncio.run(run_job(created.id, cell, store, config, lambda e: None))
    assert outcome.state == "succeeded", outcome
    ok = [r for r in store.results.rows(created.id) if r.kind == "probe" and r.status == "ok"]
    assert len(ok) == 1 and ok[0].gen_tps and ok[0].mem_peak_bytes
    rid = runbook.write_runbook(config, store, created.id, charts=False)
    store.close()
    rb = runbook.load_runbook(rid, config)
    code = [r for r in rb.evals if r.tier == "code"]
    assert len(code) == 2 and all(r.passed or r.failure for r in code), code  # every failure has its class
    line = real_evals_line(config.runbooks_dir / f"{rid}.json")
    assert line.startswith("HumanEval pass@1 on 2 tasks, greedy: smollm2-q8kv "), line
    assert "95 % CI" in line
