"""Job ids never collide: a burst of submits through the API each gets its own id, and a repeat of the
random draw is absorbed by the store (the client never sees a store error for an id it did not choose).

The burst runs against a real `benchd` process; the repeating random source needs the daemon in-process
(`Daemon` async context manager) so the test can patch it. The jobs wait for 2099 and never run.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from benchctl.client import AsyncClient, Client
from benchd import store as store_mod
from benchd.config import Config
from benchd.daemon.lifecycle import Daemon
from benchd.errors import BenchdError
from benchd.schemas import Sweep
from benchd.schemas.sweep import JOB_ID_PATTERN
from benchd.store import Store

LATER = "2099-01-01T00:00:00Z"
SWEEP: dict[str, Any] = {"name": "ids", "contexts": [64], "gen_tokens": 1,
                         "candidates": [{"id": "a", "runtime": "llama-server", "model": "/m"}]}


@pytest.mark.slow
def test_a_thousand_submits_from_fifty_concurrent_clients_get_a_thousand_ids(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    clients, per_client = 50, 20
    ids: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(i: int) -> None:
        c = Client(d.socket, timeout=60)
        start.wait(timeout=60)
        for k in range(per_client):
            try:
                got = c.submit({**SWEEP, "name": f"c{i}-{k}"}, not_before=LATER)["id"]
            except Exception as exc:  # every failure counts, whatever its type
                with lock:
                    errors.append(f"client {i} submit {k}: {type(exc).__name__}: {exc}")
            else:
                with lock:
                    ids.append(got)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert errors == []
    assert len(ids) == clients * per_client
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(JOB_ID_PATTERN, j) for j in ids)
    health = d.client().health()
    assert health.get("store_error") in (None, ""), health


@pytest.fixture
def repeating_random(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The job id's random source patched to return the same digits on every draw; counts the draws."""
    draws: list[int] = []

    def same(digits: int) -> str:
        draws.append(digits)
        return "7" * digits

    monkeypatch.setattr(store_mod, "random_hex", same)
    return draws


@pytest.fixture
async def daemon() -> AsyncIterator[Daemon]:
    base = Path(tempfile.mkdtemp(prefix="bd-", dir="/tmp"))
    cfg = Config.resolve(state_dir=base / "s", cache_dir=base / "c")

    async def never(*args: object) -> None:  # the jobs wait for 2099
        raise AssertionError("no job should run in this test")

    async with Daemon(cfg, run_job=never) as d:
        yield d


async def test_a_repeating_random_source_still_gets_every_submit_accepted(
        daemon: Daemon, repeating_random: list[int]) -> None:
    n = 50

    async def submit(i: int) -> str:
        async with AsyncClient(daemon.config.socket) as c:
            job = await c.submit({**SWEEP, "name": f"r{i}"}, not_before=LATER)
            return str(job["id"])

    ids = await asyncio.gather(*(submit(i) for i in range(n)))
    assert len(repeating_random) >= n  # every id came from the (repeating) source
    assert len(set(ids)) == n
    assert all(re.fullmatch(JOB_ID_PATTERN, j) for j in ids)
    async with AsyncClient(daemon.config.socket) as c:
        listed = await c.request("GET", f"/v1/jobs?limit={n + 10}")
        assert sorted(j["id"] for j in listed["jobs"]) == sorted(ids)
        assert (await c.health()).get("store_error") in (None, "")


def test_a_taken_id_probes_to_the_next_one_and_wraps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod, "random_hex", lambda digits: "f" * digits)
    store = Store(tmp_path / "s.db")
    sweep = msgspec.convert(SWEEP, Sweep)
    first, _ = store.create_job(sweep)
    second, _ = store.create_job(sweep)
    stamp, _, suffix = first.id.rpartition("-")
    assert suffix == "f" * store_mod.JOB_ID_RANDOM_HEX
    if second.id.rpartition("-")[0] == stamp:  # same second: the probe wrapped past the last suffix
        assert second.id == f"{stamp}-{'0' * store_mod.JOB_ID_RANDOM_HEX}"
    assert second.id != first.id


def test_a_chosen_id_that_is_taken_is_a_conflict_not_a_store_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    sweep = msgspec.convert(SWEEP, Sweep)
    store.create_job(sweep, job_id="20261130-020000-abcd")
    with pytest.raises(BenchdError) as exc:
        store.create_job(sweep, job_id="20261130-020000-abcd")
    assert exc.value.status == 409 and exc.value.field == "id"
    assert [j.id for j in store.list_jobs().jobs] == ["20261130-020000-abcd"]
