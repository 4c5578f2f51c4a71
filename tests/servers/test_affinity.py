"""`pin_client`: which cores a server and benchd's probe client get, and a real llama-server started
on its cores (every thread it creates), with the spawning thread's own mask restored."""

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

linux = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
two_cores = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                               reason="needs at least 2 usable cores")


def cand(*args: str, **env: str) -> Candidate:
    return msgspec.convert({"id": "c", "runtime": "llama-server", "model": "/m.gguf", "args": list(args), "env": env},
                           Candidate)


def test_llama_server_threads_from_args_and_env() -> None:
    threads = get_adapter("llama-server").launcher.server_threads
    assert threads(cand("-t", "1")) == (1, "the candidate's -t/-tb/-td args")
    assert threads(cand("--threads=2", "-tb", "3"))[0] == 3  # the largest count the server will run
    assert threads(cand(LLAMA_ARG_THREADS="2")) == (2, "env LLAMA_ARG_THREADS")
    assert threads(cand())[0] is None and "-t N" in threads(cand())[1]
    assert threads(cand("-t", "-1"))[0] is None
    assert threads(cand("-t", "1", "-C", "0x2")) == (None, "the candidate's args place threads themselves (-C)")
    mlx = msgspec.convert({"id": "m", "runtime": "mlx_lm.server", "model": "/d"}, Candidate)
    assert get_adapter("mlx_lm.server").launcher.server_threads(mlx)[0] is None


@linux
@two_cores
def test_plan_splits_or_says_why_not() -> None:
    cores = sorted(os.sched_getaffinity(0))
    p = affinity.plan(True, 1, "-t")
    assert p.applied and p.server_cpus == cores[:1] and p.client_cpus == cores[1:]
    assert not affinity.plan(False, 1, "-t").applied and "pin_client is off" in (affinity.plan(False, 1, "-t").reason or "")
    full = affinity.plan(True, len(cores), "-t")
    assert not full.applied and "leave none" in (full.reason or "")
    unknown = affinity.plan(True, None, "no -t N")
    assert not unknown.applied and "unknown: no -t N" in (unknown.reason or "")


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


@pytest.mark.real
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
