"""`pin_client` on a real llama-server (tiny model): started on its cores (every thread it creates), with the
spawning thread's own mask restored."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.servers import affinity
from benchd.servers.runtimes import get_adapter
from benchd.servers.supervisor import Supervisor
from tests.servers.test_affinity import linux, two_cores


@pytest.fixture
async def sup(tmp_path: Path, cache_dir: Path) -> AsyncIterator[Supervisor]:
    s = Supervisor(Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir), grace_s=3.0)
    yield s
    await s.stop_all()


def _thread_cpus(pid: int) -> set[frozenset[int]]:
    out = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        out.add(frozenset(os.sched_getaffinity(int(tid))))
    return out


@linux
@two_cores
async def test_server_runs_on_its_cores_and_the_spawner_keeps_its_own(sup: Supervisor, tiny_models, llama_server_bin) -> None:
    c = msgspec.convert({"id": "pinned", "runtime": "llama-server", "model": str(tiny_models.target),
                         "binary": str(llama_server_bin), "args": ["-t", "1"]}, Candidate)
    mine = os.sched_getaffinity(0)
    p = affinity.plan(True, *get_adapter("llama-server").launcher.server_threads(c))
    server = await sup.start("job-affinity", c, 256, cpus=p.server_cpus)
    assert os.sched_getaffinity(0) == mine  # the spawning thread got its mask back
    assert _thread_cpus(server.pid) == {frozenset(p.server_cpus)}  # every server thread, not just the first
    assert affinity.confirm(p, server.pid) == p
    assert not affinity.confirm(p, os.getpid()).applied  # a process on other cores is reported, not accepted
