"""The public suites through real servers: a sweep with `evals = ["code", "tools"]` and small limits on
llama-server, mlx_lm.server and mlx_vlm.server (tiny random-weight models) writes per-task results, CIs
and provenance; random weights fail every task with a class (irrelevance, where no call is right, may
pass), never a crash; `eval_budget_s` stops a suite with the tasks done marked partial."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchd.config import Config
from benchd.engine import suites
from benchd.engine.scheduler import run_job
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, EvalLimit, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]

CLASSES = {"no_call", "wrong_function", "bad_arguments_json", "argument_mismatch", "leaked_markup", "dropped_call",
           "extra_call", "server_error", "wrong_answer", "timeout", "no_code"}
LIMIT = EvalLimit(code=2, tools=6)


def _sweep(cands: list[Candidate], **kw: Any) -> Sweep:
    base: dict[str, Any] = dict(
        name="suites-test", contexts=[256], gen_tokens=8, probes=1, warmup=0, eval_tier="none",
        evals=["code", "tools"], eval_limit=LIMIT, sustained=Sustained(tokens=0),
        cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), candidates=cands)
    base.update(kw)
    return Sweep(**base)


def _run(config: Config, sweep: Sweep) -> tuple[Store, str]:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    asyncio.run(run_job(job.id, sweep, store, config, lambda e: None))
    return store, job.id


@pytest.fixture(scope="module")
def suite_sweep(tiny_models: Any, eval_suites: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    m = tiny_models
    cands = [
        Candidate(id="llama", runtime="llama-server", model=str(m.target), args=["-t", "2"]),
        Candidate(id="mlx-lm", runtime="mlx_lm.server", model=str(m.mlx_dir)),
        Candidate(id="mlx-vlm", runtime="mlx_vlm.server", model=str(m.mlx_vlm_dir)),
    ]
    config = Config.resolve(state_dir=tmp_path_factory.mktemp("suites"), cache_dir=eval_suites)
    store, job = _run(config, _sweep(cands))
    rb = build_runbook(config, store, job)
    return {"store": store, "job": job, "runbook": rb, "doc": msgspec.to_builtins(rb)}


def test_every_candidate_gets_every_task_with_a_class(suite_sweep: dict[str, Any], eval_suites: Path) -> None:
    rb = suite_sweep["runbook"]
    want = {s: [t.id for t in suites.subset(suites.load(s, eval_suites), LIMIT.of(s))] for s in ("code", "tools")}
    for cand in ("llama", "mlx-lm", "mlx-vlm"):
        for suite, ids in want.items():
            got = [e for e in rb.evals if e.candidate == cand and e.tier == suite]
            assert sorted(e.task for e in got) == sorted(ids), (cand, suite)
            for e in got:
                assert e.latency_s is not None and e.latency_s > 0, e
                assert set(e.sources) >= {"latency_s", "failure"}, e
                if e.passed:
                    assert e.failure is None and e.category == "irrelevance", e
                else:
                    assert e.failure in CLASSES, e
                for key in ("prompt_tokens", "completion_tokens", "reasoning_tokens"):
                    assert (getattr(e, key) is None) == (key in e.null_reasons), (e.task, key)


def test_summary_has_cis_failures_and_provenance(suite_sweep: dict[str, Any], eval_suites: Path) -> None:
    rb = suite_sweep["runbook"]
    src = {s.suite: s for s in rb.eval_sources}
    assert set(src) == {"code", "tools"}
    for suite, s in src.items():
        data = suites.load(suite, eval_suites)
        assert s.package == data.package.name and s.version == data.package.version
        assert s.sha256 == data.sha256 and s.license == data.package.license
        assert s.task_ids == [t.id for t in suites.subset(data, LIMIT.of(suite))]
    for summ in rb.eval_summary:
        assert summ.ci_low is not None and summ.ci_high is not None
        assert summ.ci_low <= summ.pass_rate <= summ.ci_high
        assert sum(summ.failures.values()) == summ.total - summ.passed
        assert summ.planned == len(src[summ.tier].task_ids) and not summ.partial
    llama_tools = next(s for s in rb.eval_summary if s.candidate == "llama" and s.tier == "tools")
    assert llama_tools.parser and llama_tools.parser.startswith("llama-server chat format")


def test_eval_budget_stops_a_suite_marked_partial(tiny_models: Any, eval_suites: Path, tmp_path: Path) -> None:
    cand = Candidate(id="llama", runtime="llama-server", model=str(tiny_models.target), args=["-t", "2"])
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=eval_suites)
    sweep = _sweep([cand], evals=["tools"], eval_limit=EvalLimit(tools=6), eval_budget_s=0.001)
    store, job = _run(config, sweep)
    rb = build_runbook(config, store, job)
    summ = [s for s in rb.eval_summary if s.tier == "tools"]
    events = [e.type for e in store.events.page(job)]
    assert "eval_budget_reached" in events
    # the first task starts before the budget is looked at again; the suite stops after it
    assert len(summ) == 1 and summ[0].total == 1 and summ[0].partial and summ[0].planned == 6
    assert summ[0].partial_reason
