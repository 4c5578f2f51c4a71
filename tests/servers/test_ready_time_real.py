"""Time to ready on real llama-server starts: warm and cold (the model file's pages dropped with
posix_fadvise, checked with mincore: none resident before the spawn) and the model-load time from the
server's log. Figures are never asserted beyond their order (load before ready). The whole-job path is
tests/daemon/test_ready_real.py."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.sensors import pagecache
from benchd.sensors.suspend.sensor import STALL_TOLERANCE_S
from benchd.servers.runtimes import get_adapter
from benchd.servers.supervisor import Supervisor

linux = pytest.mark.skipif(sys.platform != "linux", reason="posix_fadvise page dropping is Linux's")


@pytest.fixture
def own_model(tiny_models, tmp_path: Path) -> Path:
    """A copy of the tiny GGUF no other test's server maps (mapped pages do not drop)."""
    dst = tmp_path / "models" / "ready-tiny.gguf"
    dst.parent.mkdir()
    shutil.copyfile(tiny_models.target, dst)
    return dst


@pytest.fixture
async def sup(tmp_path: Path, cache_dir: Path) -> AsyncIterator[Supervisor]:
    s = Supervisor(Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir), grace_s=3.0)
    yield s
    await s.stop_all()


@linux
def test_drop_leaves_no_page_resident(tmp_path: Path) -> None:
    f = tmp_path / "blob"
    f.write_bytes(b"x" * (4 << 20))
    f.read_bytes()
    assert pagecache.resident([str(f)]).fraction == 1.0
    assert pagecache.drop([str(f)]) is None
    after = pagecache.resident([str(f)])
    assert after.resident_pages == 0 and after.pages > 0 and after.fraction == 0.0
    f.read_bytes()
    assert pagecache.resident([str(f)]).fraction == 1.0


@linux
async def test_warm_and_cold_starts(sup: Supervisor, own_model: Path, llama_server_bin: Path) -> None:
    cand = msgspec.convert({"id": "ready-tiny", "runtime": "llama-server", "model": str(own_model),
                            "binary": str(llama_server_bin)}, Candidate)
    await asyncio.to_thread(own_model.read_bytes)  # in the page cache
    warm = await sup.start("job-ready", cand, 256)
    await sup.stop(warm)
    cold = await sup.start("job-ready", cand, 256, cold=True)
    await sup.stop(cold)
    assert warm.cache == "warm" and warm.resident_before == 1.0 and not warm.cold_requested
    assert cold.cache == "cold" and cold.resident_before == 0.0 and cold.cold_requested
    assert "posix_fadvise" in cold.cache_note and "mincore" in cold.cache_note
    for s in (warm, cold):
        assert s.ready_s > 0
        within = re.fullmatch(r"benchd: spawn -> health answered \(monotonic clock\), to within (\d+) ms "
                              r"\(the check before it\)", s.ready_note)
        assert within is not None and int(within[1]) <= round(s.ready_s * 1000), s.ready_note
        assert s.load_s is not None and 0 < s.load_s <= s.ready_s, s.load_note
        assert "model loaded" in s.load_note


async def test_a_start_benchd_did_not_run_through_is_measured(
        sup: Supervisor, own_model: Path, llama_server_bin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process (the supervisor) SIGSTOPs itself at the start's first health check and a child shell
    SIGCONTs it 0.8 s later: the start's watch measures the stall beside the server's own state (running).
    A start without the pause is measured too, never null (tests/results/test_ready_results.py: the rule)."""
    cand = msgspec.convert({"id": "ready-tiny", "runtime": "llama-server", "model": str(own_model),
                            "binary": str(llama_server_bin)}, Candidate)
    plain = await sup.start("job-ready", cand, 256)
    await sup.stop(plain)
    assert plain.ready_stalled_s is not None and plain.ready_stopped_s == 0.0
    launcher = get_adapter("llama-server").launcher
    real_check = launcher.check_ready
    paused: list[float] = []

    async def check_ready(base_url: str) -> Any:
        if not paused:
            waker = await asyncio.create_subprocess_exec("sh", "-c", f"sleep 0.8; kill -CONT {os.getpid()}")
            t0 = time.monotonic()
            os.kill(os.getpid(), signal.SIGSTOP)
            paused.append(time.monotonic() - t0)
            await waker.wait()
        return await real_check(base_url)

    monkeypatch.setattr(launcher, "check_ready", check_ready)
    stalled = await sup.start("job-ready", cand, 256)
    await sup.stop(stalled)
    assert paused and paused[0] >= 0.7
    assert stalled.ready_stopped_s == 0.0 and stalled.ready_stalled_s is not None
    assert stalled.ready_stalled_s >= paused[0] - 0.1 - STALL_TOLERANCE_S and stalled.ready_s >= paused[0]
