"""Shutdown and a runbook being written: the store is closed only once no worker thread reads it.

A daemon SIGTERMed while a job's runbook was being written in a worker thread died with SIGSEGV in
libsqlite3 (make test-stress, the full-disk test): cancelling the task that awaits the thread does not stop
the thread, and the store was closed under its query. The runbook writer here is a stand-in that keeps
reading the store until the test lets it go, because a real runbook write is over before a test can act
while it runs; everything else (the store, JobEnds, the thread) is the daemon's own.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from benchd.config import Config
from benchd.daemon.jobend import JobEnds
from benchd.store import Store


class _Rendered:
    def problem(self) -> None:
        return None


async def test_the_store_closes_only_when_no_runbook_write_reads_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "state.db")
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    ends = JobEnds(store, config, lambda e: e, lambda _error: None)
    started, release = threading.Event(), threading.Event()
    reads = 0

    def slow_write(_config: Any, st: Store, _job: str, _outcome: str, charts: bool = True) -> str:
        nonlocal reads
        started.set()
        while not release.is_set():
            st.counts()  # a query in flight whenever the store could be closed under it
            reads += 1
        return "rb-1"

    async def render(_path: Path, cache_dir: Path | None = None) -> _Rendered:
        return _Rendered()

    monkeypatch.setattr("benchd.results.runbook.write_runbook", slow_write)
    monkeypatch.setattr("benchd.results.render.render_off_loop", render)
    task = asyncio.create_task(ends.write_runbook("job-1", "succeeded"))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()  # what shutdown does to the queue's task: the thread goes on
    assert await asyncio.to_thread(ends.close_store, 0.3) is False  # busy: left open, nothing closed under it
    assert store.counts() is not None
    release.set()
    assert await asyncio.to_thread(ends.close_store, 10) is True
    with pytest.raises(sqlite3.ProgrammingError):
        store.counts()
    assert reads > 0
    with pytest.raises(RuntimeError, match="shutting down"):
        ends._write_in_thread("job-2", "succeeded")  # a write after the close fails clearly, reads nothing


async def test_a_runbook_that_failed_is_a_field_and_is_not_written_again(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure is `runbook_error` (the catch-up at the next start reads that, not the words of `error`)."""
    from runbook_factory import fill_job, setup_state

    config, store, sweep, _ = setup_state(tmp_path)
    job = fill_job(store, sweep)
    ends = JobEnds(store, config, lambda e: e, lambda _error: None)
    tries: list[str] = []

    def broken_write(_config: Any, _st: Store, job_id: str, _outcome: str, charts: bool = True) -> str:
        tries.append(job_id)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("benchd.results.runbook.write_runbook", broken_write)
    await ends.write_runbook(job, "succeeded")
    got = store.get_job(job, with_sweep=False)
    assert got.runbook_id is None and got.runbook_error == "OSError: [Errno 28] No space left on device"
    assert got.error is not None and "runbook not written" in got.error
    await ends.catch_up_runbooks(lambda: False)
    assert tries == [job]  # not tried again
    store.update_job(job, runbook_error=None)
    await ends.catch_up_runbooks(lambda: False)
    assert tries == [job, job]  # a job that owes its runbook is written at the next start
    store.close()


def test_a_store_of_an_older_benchd_gains_the_column(tmp_path: Path) -> None:
    """A store created without `runbook_error` opens, reads its jobs (null there) and can record one."""
    path = tmp_path / "old.db"
    from benchd import store as store_mod

    older = store_mod._SCHEMA.replace(",\n    runbook_error TEXT", "")
    assert older != store_mod._SCHEMA
    db = sqlite3.connect(path)
    db.executescript(older)
    db.execute("INSERT INTO jobs (id, name, state, sweep, created_at) VALUES ('j1', 'old', 'succeeded', '{}', 'x')")
    db.commit()
    db.close()
    ro = Store(path, read_only=True)
    assert ro.get_job("j1", with_sweep=False).runbook_error is None  # read before any migration
    ro.close()
    store = Store(path)
    assert store.get_job("j1", with_sweep=False).runbook_error is None
    store.update_job("j1", runbook_error="OSError: disk full")
    assert store.get_job("j1", with_sweep=False).runbook_error == "OSError: disk full"
    store.close()
