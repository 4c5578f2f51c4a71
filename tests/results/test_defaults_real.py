"""At the defaults (`probes` omitted: three per cell), a small and a large tiny model on the pinned
llama-server: the large one is dominated — slower and larger, both `different` by the one comparison —
in the runbook's Pareto view, the report and the page. What is asserted is what benchd decided from the
rows it recorded: the same verdicts recomputed from those rows; the 5x-class gap between the two models
is the premise, checked on the rows' medians before anything else."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results import html, report
from benchd.results.comparison import compare_axis
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, Sweep
from benchd.store import Store


@pytest.mark.real
@pytest.mark.slow
def test_the_large_model_is_dominated_at_the_defaults(tiny_models: Any, cache_dir: Path, tmp_path: Path) -> None:
    from benchctl.tinymodels import ensure

    medium = ensure(cache_dir, "medium", 0, lambda _m: None)
    sweep = Sweep(name="defaults", contexts=[512], gen_tokens=32, eval_tier="none",
                  cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  candidates=[Candidate(id="small", runtime="llama-server", model=str(tiny_models.target)),
                              Candidate(id="large", runtime="llama-server", model=str(medium.target))])
    assert sweep.probes == 3  # the default
    config = Config.resolve(state_dir=tmp_path, cache_dir=cache_dir)
    store = Store(config.db_path)
    try:
        job, _ = store.create_job(sweep)
        asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
        rb = build_runbook(config, store, job.id)
    finally:
        store.close()
    ok = {c: [r for r in rb.rows if r.candidate == c and r.kind == "probe" and r.status == "ok" and not r.short]
          for c in ("small", "large")}
    assert len(ok["small"]) == len(ok["large"]) == 3
    gen = {c: [float(r.gen_tps) for r in rows if r.gen_tps is not None] for c, rows in ok.items()}
    mem = {c: [float(r.mem_peak_bytes) for r in rows if r.mem_peak_bytes is not None] for c, rows in ok.items()}
    # the premise: the small model is much faster and much smaller on these rows
    assert statistics.median(gen["small"]) > 2 * statistics.median(gen["large"]), gen
    assert statistics.median(mem["small"]) < statistics.median(mem["large"]) / 2, mem
    (ctx,) = rb.pareto
    prompt = {c: [r.prompt_tps for r in rows] for c, rows in ok.items()}
    assert ctx.frontier == ["small"], (ctx.frontier, [t.text for t in ctx.ties], [t.axes for t in ctx.ties],
                                       gen, mem, prompt)
    (d,) = ctx.dominated["large"]
    assert d.by == "small" and {"gen_tps", "mem_peak_bytes"} <= set(d.better_on), d
    # the verdicts are the rows' own: recomputed from them at the pair's α split over its axes
    k = len(d.verdicts)
    for axis, better, vals in (("gen_tps", "higher", gen), ("mem_peak_bytes", "lower", mem)):
        again = compare_axis(vals["large"], vals["small"], axis=axis, better=better, alpha=0.05 / k)  # type: ignore[arg-type]
        assert again.verdict == "different" and again.text == d.verdicts[axis]
    text = report.render_text(rb, pareto=True)
    assert "small dominates large: different and better on" in text and "too few probes" not in text
    page = html.render_page(rb, html.Runtime(None, html.MISSING)).decode()
    assert "small dominates large: different and better on" in page
