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
