"""The Pareto memory axis compares like with like (issue 14, finding 5), on real llama-servers.

The same GGUF served twice through the real engine: `--load-mode mmap` (the weights are file-backed
pages) and `--load-mode none` (read into anonymous memory). The axis (`mem_peak_bytes`: what the
candidate occupies including its weights) must agree within 5 % between the two, while the row keeps
both components with their sources: the anonymous/footprint peak differs by about the model size, and
the mapped model files' resident bytes are the model size in one and zero in the other. The medium tiny
model (50 MB f16) makes the weights most of the process, so leaving them out could not hide under 5 %.

macOS's definition (footprint peak + resident mapped model files) is checked on the same rows with
Linux's figures for the footprint (RssAnon): it agrees as well, which is the point of that definition.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchd.config import Config
from benchd.engine.scheduler import run_job
from benchd.results.pareto import pareto_from_rows
from benchd.schemas import Candidate, Cooldown, Row, Sustained, Sweep
from benchd.store import Store

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def medium_gguf(cache_dir: Path) -> Path:
    from benchctl.tinymodels import ensure

    return ensure(cache_dir, "medium", 0).gguf["f16"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def rows(medium_gguf: Path, llama_server_bin: Path, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Row]:
    cands = [
        Candidate(id=f"gguf-{mode}", runtime="llama-server", model=str(medium_gguf), binary=str(llama_server_bin),
                  args=["-t", "1", "--load-mode", mode])
        for mode in ("mmap", "none")
    ]
    sweep = Sweep(name="memory-axis", contexts=[128], gen_tokens=16, probes=1, warmup=0, eval_tier="none",
                  sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  candidates=cands)
    config = Config.resolve(state_dir=tmp_path_factory.mktemp("axis"), cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda e: None))
    assert outcome.state == "succeeded", outcome
    got = {r.candidate: r for r in store.results.rows(job.id) if r.kind == "probe"}
    assert all(r.status == "ok" for r in got.values()), [(r.candidate, r.error) for r in got.values()]
    return got


def test_axis_agrees_with_and_without_mmap(rows: dict[str, Row], medium_gguf: Path) -> None:
    mapped, copied = rows["gguf-mmap"], rows["gguf-none"]
    assert mapped.mem_peak_bytes and copied.mem_peak_bytes
    assert abs(mapped.mem_peak_bytes - copied.mem_peak_bytes) <= 0.05 * copied.mem_peak_bytes, (
        mapped.mem_peak_bytes, copied.mem_peak_bytes)
    size = medium_gguf.stat().st_size
    assert mapped.mem_peak_bytes > size and copied.mem_peak_bytes > size  # the weights are in both
    # The Pareto view reads that same figure: neither candidate wins memory by how it loads its weights.
    point = {p.candidate: p.values["mem_peak_bytes"] for p in pareto_from_rows(list(rows.values()), [])[0].points}
    assert point == {"gguf-mmap": mapped.mem_peak_bytes, "gguf-none": copied.mem_peak_bytes}


def test_rows_keep_both_components_with_sources(rows: dict[str, Row], medium_gguf: Path) -> None:
    mapped, copied = rows["gguf-mmap"], rows["gguf-none"]
    size = medium_gguf.stat().st_size
    for r in (mapped, copied):
        assert r.sources["mem_resident_peak_bytes"] == "kernel:VmHWM" and r.mem_resident_peak_bytes == r.mem_peak_bytes
        assert r.sources["mem_footprint_peak_bytes"].startswith("kernel:RssAnon (sampled max)")
        assert r.sources["mem_model_resident_bytes"] == "kernel:smaps Rss of the model files"
        assert r.sources["mem_load_mode"].startswith("load mode ")
    assert mapped.mem_model_resident_bytes is not None and mapped.mem_model_resident_bytes >= 0.9 * size
    assert copied.mem_model_resident_bytes is not None and copied.mem_model_resident_bytes < 0.05 * size
    assert mapped.mem_footprint_peak_bytes is not None and copied.mem_footprint_peak_bytes is not None
    assert copied.mem_footprint_peak_bytes - mapped.mem_footprint_peak_bytes >= 0.8 * size  # the copy is anonymous


def test_macos_definition_agrees_too(rows: dict[str, Row]) -> None:
    """footprint peak + resident mapped model files: what the axis is on macOS, computed from these rows."""
    def mac_axis(r: Row) -> int:
        assert r.mem_footprint_peak_bytes is not None and r.mem_model_resident_bytes is not None
        return r.mem_footprint_peak_bytes + r.mem_model_resident_bytes

    a, b = mac_axis(rows["gguf-mmap"]), mac_axis(rows["gguf-none"])
    assert abs(a - b) <= 0.05 * b, (a, b)


def test_footprint_alone_would_have_misled(rows: dict[str, Row]) -> None:
    """Why the axis is not the footprint: compared alone, the mmap'd GGUF looks smaller by about the model."""
    mapped, copied = rows["gguf-mmap"], rows["gguf-none"]
    assert mapped.mem_footprint_peak_bytes is not None and copied.mem_footprint_peak_bytes is not None
    assert mapped.mem_footprint_peak_bytes < 0.5 * copied.mem_footprint_peak_bytes
