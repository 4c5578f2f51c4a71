"""Runbook views rendered in a worker process (`benchd.results.render`): the files land beside the
runbook, this process never imports matplotlib, and a failing worker is reported, not raised."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runbook_factory import fill_job, setup_state

from benchd.results import render, runbook


@pytest.fixture()
def written(tmp_path: Path):
    config, store, sweep, _ = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep), charts=False)
    store.close()
    return config.runbooks_dir / f"{rid}.json"


def test_worker_writes_the_charts_off_this_process(written: Path) -> None:
    """One render in a fresh interpreter: it writes the page and both charts, and the calling process has
    not imported matplotlib for them (the render ran in the worker)."""
    assert not list(written.parent.glob("*.pareto.*"))  # charts=False wrote none
    probe = subprocess.run([sys.executable, "-c", "import sys, asyncio, json\nfrom pathlib import Path\n"
                            "from benchd.results import render\n"
                            f"out = asyncio.run(render.render_off_loop(Path({str(written)!r})))\n"
                            "assert out.problem() is None, out.errors\n"
                            "assert 'matplotlib' not in sys.modules, 'rendered in-process'\n"
                            "print(json.dumps(out.written))\n"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert probe.returncode == 0, probe.stderr
    got = [Path(p) for p in json.loads(probe.stdout)]
    assert sorted(p.name for p in got) == [f"{written.stem}.{ext}" for ext in ("html", "pareto.png", "pareto.svg")]
    assert all(p.stat().st_size > 1000 for p in got)


async def test_a_broken_runbook_is_reported_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "2026-11-30-x.json"
    bad.write_text("{not json")
    out = await render.render_off_loop(bad)
    assert out.written == [] and "worker" in out.errors and "not a benchd runbook" in out.errors["worker"]


async def test_a_view_without_its_extra_is_skipped_with_the_reason(written: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchd.results import plot

    monkeypatch.setattr(plot, "available", lambda: False)
    out = await render.render_off_loop(written)
    assert "matplotlib is not installed" in out.skipped["charts"] and out.problem() is None
    assert [Path(p).name for p in out.written] == [f"{written.stem}.html"]  # the page needs no extra
