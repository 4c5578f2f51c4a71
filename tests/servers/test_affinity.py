"""`pin_client`: which cores a server and benchd's probe client get (a real llama-server started on its
cores: test_affinity_real.py)."""

from __future__ import annotations

import os

import msgspec
import pytest

from benchd.schemas import Candidate
from benchd.servers import affinity
from benchd.servers.runtimes import get_adapter

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
    assert not full.applied and (full.reason or "").startswith(
        f"no core left for the client: {len(cores)} server threads (-t) on {len(cores)} usable cores")
    unknown = affinity.plan(True, None, "no -t N")
    assert not unknown.applied and "unknown: no -t N" in (unknown.reason or "")


def test_a_single_core_is_said_in_the_singular(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "usable_cpus", lambda: [0])
    assert affinity.plan(True, 1, "-t 1").reason == "no core left for the client: 1 server thread (-t 1) on 1 usable core [0]"
