"""A sweep with image probes on the REAL servers: mlx_vlm.server and llama-server --mmproj on the tiny
idefics3 VLM beside a text candidate. Vision rows per resolution carry their sources; image tokens grow
with the resolution; each probe's images are new (no hash repeats, no cached tokens); the text candidate
has no image rows and the runbook's deferred lines say why; the vision candidates have no such line."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchctl.tinymodels import vision as tiny_vision
from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results import records
from benchd.results.compare import compare_runbooks
from benchd.results.deferred import automatic_deferred
from benchd.results.report import render_markdown, render_text
from benchd.results.runbook import build_runbook
from benchd.schemas import VISION_PROBE_STRIDE, Candidate, Cooldown, Row, Sustained, Sweep, Vision
from benchd.store import Store, planned_probes

pytestmark = [pytest.mark.slow]

RESOLUTIONS = [(tiny_vision.TILE, tiny_vision.TILE), (4 * tiny_vision.TILE, 4 * tiny_vision.TILE)]


@pytest.fixture(scope="module")
def vision_run(vision_models: Any, tiny_models: Any, cache_dir: Path,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cands = [
        Candidate(id="vlm", runtime="mlx_vlm.server", model=str(vision_models.mlx_vlm_dir), vision=True),
        Candidate(id="llv", runtime="llama-server", model=str(vision_models.text_gguf),
                  mmproj=str(vision_models.mmproj), vision=True, args=["-t", "1"]),
        Candidate(id="text", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"]),
    ]
    sweep = Sweep(name="vision", contexts=[128], gen_tokens=8, probes=2, warmup=1, eval_tier="none",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  vision=Vision(resolutions=RESOLUTIONS), candidates=cands)
    config = Config.resolve(state_dir=tmp_path_factory.mktemp("vision-sweep"), cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
    return {"sweep": sweep, "outcome": outcome, "rows": store.results.rows(job.id), "store": store, "job": job.id,
            "config": config}


def _vision_rows(run: dict[str, Any], cand: str) -> list[Row]:
    return [r for r in run["rows"] if r.candidate == cand and r.kind == "vision"]


@pytest.mark.parametrize("cand", ["vlm", "llv"])
def test_vision_rows_per_resolution(vision_run: dict[str, Any], cand: str) -> None:
    assert vision_run["outcome"].state == "succeeded"
    rows = _vision_rows(vision_run, cand)
    assert len(rows) == 2 * len(RESOLUTIONS) and all(r.status == "ok" for r in rows), [r.error for r in rows]
    by_res: dict[tuple[int, int], list[Row]] = {}
    for r in rows:
        assert (r.image_width, r.image_height) == RESOLUTIONS[r.probe // VISION_PROBE_STRIDE]
        by_res.setdefault((r.image_width, r.image_height), []).append(r)  # type: ignore[arg-type]
        assert r.cached_tokens == 0 and r.images == 1
        assert r.image_ttft_ms is not None and r.text_ttft_ms is not None and r.image_tokens is not None
        assert r.prompt_tps is not None and r.gen_tps is not None and r.mem_peak_bytes is not None
        for f in ("image_tokens", "image_ttft_ms", "text_ttft_ms", "image_extra_ttft_ms", "image_sha256", "prompt"):
            assert f in r.sources, f
        assert r.image_encode_ms is None and "image_encode_ms" in r.null_reasons
    small, big = (by_res[res] for res in RESOLUTIONS)
    assert max(r.image_tokens or 0 for r in small) < min(r.image_tokens or 0 for r in big)
    hashes = [h for r in rows for h in r.image_sha256 or []]
    assert len(hashes) == len(set(hashes))  # never the same image twice: no image cache can serve one
    started = [e.payload for e in vision_run["store"].events.iterate(vision_run["job"])
               if e.type == "probe_started" and e.payload["candidate"] == cand and e.payload["kind"] == "vision"]
    assert sorted(p["probe"] for p in started) == sorted(r.probe for r in rows)  # one event per image pair
    assert all(p["round"] is None and p["visit"] is None for p in started)  # image pairs run outside the rounds


def test_text_candidate_gets_no_image_rows_and_a_reason(vision_run: dict[str, Any]) -> None:
    assert not _vision_rows(vision_run, "text")
    assert [r for r in vision_run["rows"] if r.candidate == "text" and r.kind == "probe" and r.status == "ok"]
    lines = [d for d in automatic_deferred(vision_run["sweep"], vision_run["rows"]) if d.axis == "vision"]
    assert len(lines) == 1 and lines[0].reason.startswith("text (llama-server): no image probe")
    assert len(vision_run["rows"]) == planned_probes(vision_run["sweep"])


def test_truncated_png_fails_its_row_with_the_servers_error_and_the_job_goes_on(
        vision_models: Any, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first probe's image is cut in half on purpose (our generator's output truncated, the real
    server parses it): that row fails with the server's own words, the next probes run and succeed."""
    from benchd.engine import vision as vision_mod

    real = vision_mod.make_images

    def breaking(seed: int, cand_id: str, resolution: tuple[int, int], count: int, key: str,
                 broken: bool = False) -> list[Any]:
        return real(seed, cand_id, resolution, count, key, broken=broken or key.endswith("/0"))

    monkeypatch.setattr(vision_mod, "make_images", breaking)
    sweep = Sweep(name="broken", contexts=[64], gen_tokens=4, probes=2, warmup=0, eval_tier="none",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  vision=Vision(resolutions=[(256, 256)]),
                  candidates=[Candidate(id="llv", runtime="llama-server", model=str(vision_models.text_gguf),
                                        mmproj=str(vision_models.mmproj), vision=True, args=["-t", "1"])])
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None))
    assert outcome.state == "succeeded"
    rows = sorted((r for r in store.results.rows(job.id) if r.kind == "vision"), key=lambda r: r.probe)
    assert [r.status for r in rows] == ["failed", "ok"]
    assert rows[0].error is not None and "HTTP 400" in rows[0].error and "image" in rows[0].error.lower()
    assert "image request failed" in rows[0].null_reasons["image_tokens"]


def test_image_ttft_joins_pareto_and_the_report(vision_run: dict[str, Any]) -> None:
    """Each resolution is a Pareto axis (image_ttft_ms@WxH) of the context the images sit in: the vision
    candidates have values, the text candidate none (the pairs with it name the axis as skipped); the
    report shows the image section with the text candidate's null figures and why."""
    rb = build_runbook(vision_run["config"], vision_run["store"], vision_run["job"])
    (ctx,) = rb.pareto
    axes = [f"image_ttft_ms@{w}x{h}" for w, h in RESOLUTIONS]
    points = {p.candidate: p for p in ctx.points}
    for cand in ("vlm", "llv"):
        assert all(points[cand].values.get(a) is not None for a in axes)
    assert all(points["text"].values.get(a) is None for a in axes)
    assert any("text" in sp.pair and set(axes) <= set(sp.axes) for sp in ctx.skipped_pairs)
    assert not [d for d in rb.deferred.automatic if d.axis == "vision" and ("vlm (" in d.reason or "llv (" in d.reason)]
    text = render_text(rb)
    assert "image probes" in text and "text: no image figures (null): vision = false" in text
    w, h = RESOLUTIONS[-1]
    assert f"vlm {w}x{h} x1: image tokens" in text and f"llv {w}x{h} x1: image tokens" in text
    assert "## Image probes" in render_markdown(rb)
    # the page: the image axes are charted, lower is better, the text candidate's value null with why
    assert set(axes) <= set(records.axes_present(rb))
    assert all(records.direction(a) == "lower" for a in axes)
    recs = {r.candidate: r for r in records.pareto_points(rb, rb.pareto[0])}
    assert recs["vlm"].values[axes[0]] is not None and recs["text"].values.get(axes[0]) is None
    assert recs["text"].tips.get(axes[0], "null").startswith("null")
    # compare: each (vision candidate, resolution) through the one comparison; a runbook against itself ties.
    cmp = compare_runbooks(rb, rb)
    assert {(c.candidate, c.resolution) for c in cmp.images} == {(c, f"{w}x{h}") for c in ("vlm", "llv")
                                                                for w, h in RESOLUTIONS}
    assert all(c.verdict.verdict != "different" and c.image_tokens_a == c.image_tokens_b for c in cmp.images)
