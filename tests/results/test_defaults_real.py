"""At the defaults (`probes` and `order` omitted: interleaved rounds from three until every pair is resolved), a small and a large tiny model
on llama-server: the large one is dominated — slower and bigger, both different — in the runbook's
Pareto view, the report, the page, and `compare` (the small model's runbook against the large one's)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results.compare import compare_runbooks
from benchd.results.html import render_compare_page, render_page, vega_runtime
from benchd.results.report import render_pareto_text
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Runbook, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]


def _run(tmp: Path, cache_dir: Path, cands: list[Candidate]) -> Runbook:
    sweep = Sweep(name="defaults", contexts=[128], gen_tokens=32, candidates=cands, sustained=Sustained(tokens=0))
    config = Config.resolve(state_dir=tmp, cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    try:
        job, _ = store.create_job(sweep)
        asyncio.run(run_job(job.id, sweep, store, config, lambda e: None))
        return build_runbook(config, store, job.id)
    finally:
        store.close()


def test_the_large_model_is_dominated_at_the_defaults(tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    from benchctl.tinymodels import ensure

    large = ensure(cache_dir, "medium", 0, lambda _m: None)
    small_c = Candidate(id="small", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"])
    large_c = Candidate(id="large", runtime="llama-server", model=str(large.target), args=["-t", "1"])
    rb = _run(tmp_path / "both", cache_dir, [small_c, large_c])
    assert rb.design is not None and rb.design.order == "interleaved"
    ok = [r for r in rb.rows if r.kind == "probe" and r.status == "ok"]
    per_cand = Counter(r.candidate for r in ok)
    assert per_cand["small"] == per_cand["large"] and 3 <= per_cand["small"] <= 12, per_cand  # rounds, not a count
    (p,) = rb.pareto
    assert p.frontier == ["small"], p
    (d,) = p.dominated["large"]
    assert d.by == "small" and {"gen_tps", "mem_peak_bytes"} <= set(d.better_on), d
    # each verdict is a sentence whose subject is the dominated candidate, the way it is worse
    said = {"gen_tps": " slower than small at generation (", "mem_peak_bytes": " more peak memory than small ("}
    for axis, words in said.items():
        assert d.verdicts[axis].startswith("large ") and words in d.verdicts[axis], d.verdicts
    report = render_pareto_text(rb)
    assert "too few probes" not in report and d.text in report
    page = render_page(rb, vega_runtime(cache_dir)).decode()
    assert "small dominates large" in page
    # compare: the small model's runbook (A) against the large one's (B), the same candidate id
    ra = _run(tmp_path / "a", cache_dir, [Candidate(id="m", runtime="llama-server", model=str(tiny_models.target),
                                                    args=["-t", "1"])])
    rbb = _run(tmp_path / "b", cache_dir, [Candidate(id="m", runtime="llama-server", model=str(large.target),
                                                     args=["-t", "1"])])
    cmp = compare_runbooks(ra, rbb)
    (cell,) = cmp.cells
    by = {m.metric: m for m in cell.metrics}
    for metric in ("gen_tps", "mem_peak_bytes"):  # B (large) slower and bigger
        assert by[metric].verdict == "different" and by[metric].b_better is False, by[metric]
    assert by["gen_tps"].text in render_compare_page(cmp, vega_runtime(cache_dir)).decode()
