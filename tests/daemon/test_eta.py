"""A running job's ETA counts the eval tasks left, each at the per-task time measured so far (benchd.daemon.eta).

No server: the job's rows and eval results are stored directly (what the scheduler stores as they land),
and the API's ETA is read back from them; the expected figure is recomputed from the stored values.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest

from benchd.daemon import api, eta
from benchd.engine import evals, suites
from benchd.schemas import Candidate, EvalResult, Row, Sweep
from benchd.schemas.sweep import EvalLimit
from benchd.store import Store


def test_estimate_adds_eval_tasks_at_their_measured_time() -> None:
    # 10 rows in 100 s of which 2 code tasks took 8 s each: a row is (100 - 16) / 10 s
    got = eta.estimate(100.0, 10, 5, None, {"code": [8.0, 8.0]}, {"code": 6, "tools": 4})
    per_row = (100.0 - 16.0) / 10
    assert got == (pytest.approx(5 * per_row + 4 * 8.0 + 4 * 8.0), None)  # tools: no task yet, the eval mean
    # no eval task measured yet: each counts as one probe row; a range plan gives both ends
    lo, hi = eta.estimate(60.0, 6, 4, 10, {}, {"smoke": 5}) or (None, None)
    assert lo == pytest.approx((4 + 5) * 10.0) and hi == pytest.approx((10 + 5) * 10.0)
    # only eval tasks so far (the rows are done): what is left is evals
    assert eta.estimate(30.0, 0, 0, None, {"tools": [3.0]}, {"tools": 4}) == (pytest.approx(9.0), None)
    assert eta.estimate(5.0, 0, 3, None, {}, {"code": 2}) is None  # nothing measured: no ETA


def test_planned_tasks_count_the_subsets(eval_suites: Path) -> None:
    cands = [Candidate(id=f"c{i}", runtime="llama-server", model=f"/m{i}.gguf") for i in range(2)]
    sweep = Sweep(name="p", contexts=[256], gen_tokens=8, candidates=cands, eval_tier="smoke",
                  evals=["code", "tools"], eval_limit=EvalLimit(code=3, tools=7))
    got = suites.planned_tasks(sweep, eval_suites)
    assert got == {"smoke": 2 * len(evals.tasks("smoke")), "code": 2 * 3, "tools": 2 * 7}
    for suite, limit in (("code", 3), ("tools", 7)):  # what the scheduler will run
        assert len(suites.subset(suites.load(suite, eval_suites), limit)) == limit
    whole = msgspec.structs.replace(sweep, eval_limit=EvalLimit(code=None, tools=None), eval_tier="none")
    assert suites.planned_tasks(whole, eval_suites) == {
        s: 2 * len(suites.load(s, eval_suites).tasks) for s in ("code", "tools")}


def test_running_job_eta_includes_eval_tasks(eval_suites: Path, tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    cand = Candidate(id="a", runtime="llama-server", model="/m.gguf")
    sweep = Sweep(name="eta", contexts=[256, 512], gen_tokens=8, probes=3, warmup=0, candidates=[cand],
                  eval_tier="none", evals=["code", "tools"], eval_limit=EvalLimit(code=4, tools=6))
    job, _ = store.create_job(sweep)
    started = datetime.now(UTC) - timedelta(seconds=120)
    store.update_job(job.id, state="running", started_at=started.isoformat(timespec="seconds").replace("+00:00", "Z"))
    for probe in range(3):
        store.results.commit_row(Row(job=job.id, candidate="a", runtime="llama-server", context=256, kind="probe",
                             probe=probe, status="ok"))
    for i, (seconds, sandbox) in enumerate(((4.5, 1.5), (10.0, None))):  # a task's time: requests + sandbox
        store.results.put_eval(EvalResult(job=job.id, candidate="a", tier="code", task=f"HumanEval/{i}", passed=True,
                                  latency_s=seconds, grade_s=sandbox))
    ctx = cast(Any, SimpleNamespace(store=store, config=SimpleNamespace(cache_dir=eval_suites)))
    got = api._with_eta(ctx, store.get_job(job.id))
    prog = got.progress
    assert prog is not None and prog.eta_s is not None and prog.done == 3
    elapsed = (datetime.now(UTC) - started).total_seconds()
    per_row = (elapsed - 16.0) / 3
    expected = per_row * (prog.total - 3) + (4 - 2) * 8.0 + 6 * 8.0  # tools: the code tasks' mean so far
    assert prog.eta_s == pytest.approx(expected, abs=2.0)
    rows_only = per_row * (prog.total - 3)
    assert prog.eta_s > rows_only + 6 * 8.0  # the eval tasks left are in it
    # the same job, its rows all done: the ETA is the eval tasks left
    probe = 0
    while store.results.count_rows(job.id) < prog.total:
        store.results.commit_row(Row(job=job.id, candidate="a", runtime="llama-server", context=512, kind="probe",
                             probe=probe, status="ok"))
        probe += 1
    later = api._with_eta(ctx, store.get_job(job.id)).progress
    assert later is not None and later.done == later.total
    assert later.eta_s == pytest.approx((4 - 2) * 8.0 + 6 * 8.0)


def test_running_job_eta_includes_the_kld_step(tmp_path: Path) -> None:
    """With `[kld]` the ETA adds the scoring runs left: each its whole chunks (kld.tokens // context x
    context tokens) at the job's measured probe prompt rate, then, once a scoring run finished, at that
    run's seconds per evaluated token; a context's reference run counts until a candidate there finished."""
    from benchd.schemas import Kld, KldResult

    store = Store(tmp_path / "state.db")
    cands = [Candidate(id=x, runtime="llama-server", model="/m.gguf") for x in ("ref", "q8")]
    sweep = Sweep(name="eta", contexts=[256], gen_tokens=8, probes=2, warmup=0, candidates=cands,
                  kld=Kld(reference="ref", contexts=[512], tokens=2048))
    job, _ = store.create_job(sweep)
    started = datetime.now(UTC) - timedelta(seconds=60)
    store.update_job(job.id, state="running", started_at=started.isoformat(timespec="seconds").replace("+00:00", "Z"))
    total = cast(Any, store.get_job(job.id).progress).total
    for i in range(total):  # every row done, half of them each candidate's: the median prompt rate is 200
        store.results.commit_row(Row(job=job.id, candidate=("ref", "q8")[i % 2], runtime="llama-server", context=256,
                             kind="probe", probe=i // 2, status="ok", prompt_tps=(100.0, 300.0)[i % 2]))
    ctx = cast(Any, SimpleNamespace(store=store, config=SimpleNamespace(cache_dir=tmp_path)))
    prog = api._with_eta(ctx, store.get_job(job.id)).progress
    assert prog is not None and prog.done == prog.total
    # the probes are done: 3 runs (reference logits, ref and q8 scored) of 4 chunks x 512 at 200 tok/s
    assert prog.eta_s == pytest.approx(3 * 2048 / 200.0, abs=0.2)
    done = KldResult(candidate="ref", reference="ref", context=512, status="ok", chunks=4, seconds=4.096)
    store.events.append(job.id, "kld_finished", msgspec.to_builtins(done))
    later = api._with_eta(ctx, store.get_job(job.id)).progress
    assert later is not None and later.eta_s == pytest.approx(2048 * 4.096 / 2048, abs=0.2)  # q8 left, measured
    assert eta.estimate(10.0, 1, 0, None, {}, {}, kld_left_s=7.0) == (pytest.approx(7.0), None)
