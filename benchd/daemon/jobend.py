"""A job's end: the terminal event, the runbook and its views, the hooks; failures are recorded or logged,
never raised into the queue. Reasons and facts: docs/architecture.md#the-job-queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Awaitable, Callable

from benchd.config import Config
from benchd.schemas import TERMINAL_JOB_STATES, Event
from benchd.store import Store, utcnow

log = logging.getLogger("benchd.daemon.queue")

#: Called with (job id, outcome, runbook id or None) once a job has ended and its runbook is written.
JobEnded = Callable[[str, str, str | None], Awaitable[None]]


class JobEnds:
    """Ends jobs in `store`: `emit` publishes each terminal event, `store_failed` is told of a store
    write that failed (the queue shows it on /v1/health), `hooks` run at every end (the lock's rechecker)."""

    def __init__(self, store: Store, config: Config, emit: Callable[[Event], Event],
                 store_failed: Callable[[str], None]) -> None:
        self.store = store
        self.config = config
        self._emit = emit
        self._store_failed = store_failed
        self.hooks: list[JobEnded] = []
        self._in_thread = 0  # runbook writes running in a worker thread (they read the store there)
        self._closed = False
        self._idle = threading.Condition()

    def close_store(self, timeout_s: float) -> bool:
        """Close the store once no runbook write runs in a worker thread (True), else leave it open after
        `timeout_s` (False). Blocks: call it in a thread. Closing under a running query crashes sqlite."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._in_thread == 0, timeout_s):
                return False
            self._closed = True
            self.store.close()
            return True

    def _write_in_thread(self, job_id: str, outcome: str) -> str:
        from benchd.results.runbook import write_runbook  # lazily: the results stage is for job ends

        with self._idle:
            if self._closed:
                raise RuntimeError("benchd is shutting down: the store is closed (the next start writes it)")
            self._in_thread += 1
        try:
            return str(write_runbook(self.config, self.store, job_id, outcome, charts=False))
        finally:
            with self._idle:
                self._in_thread -= 1
                self._idle.notify_all()

    def record(self, job_id: str, outcome: str, error: str | None) -> None:
        """The engine's outcome as the job's terminal event (`interrupted`: back to the queue)."""
        try:
            if outcome == "interrupted":
                self.interrupt(job_id, error or "benchd shut down")
            else:
                self._finish(job_id, outcome, error)
        except sqlite3.Error as exc:
            self._store_failed(f"{type(exc).__name__}: {exc}")
            log.error("could not record the end of job %s: %s", job_id, exc)

    def _finish(self, job_id: str, outcome: str, error: str | None) -> None:
        done = self.store.results.count_rows(job_id)
        event: str
        payload: dict[str, int | str | None]
        if outcome == "succeeded":
            event, payload = "job_finished", {"done": done}
        elif outcome == "cancelled":
            event, payload = "job_cancelled", {"done": done, "reason": "cancelled by the user"}
        else:
            event, payload = "job_failed", {"done": done, "error": error}
        self._emit(self.store.transition(
            job_id, event, payload, state=outcome, finished_at=utcnow(), **({"error": error} if error else {}),
        ))

    def interrupt(self, job_id: str, reason: str) -> None:
        """A running job becomes `interrupted` (it resumes at the next pick); any other state is left."""
        if self.store.job_state(job_id) != "running":
            return
        self._emit(self.store.transition(job_id, "job_interrupted", {"reason": reason}, state="interrupted"))

    async def fail_unrunnable(self, job_id: str, error: str) -> None:
        """Fail a job the queue cannot run (no runbook: there is no sweep to write one from)."""
        try:
            if self.store.job_state(job_id) in TERMINAL_JOB_STATES:
                return
            self._emit(self.store.transition(
                job_id, "job_failed", {"done": self.store.results.count_rows(job_id), "error": error},
                state="failed", finished_at=utcnow(), waiting_reason=None, error=error))
        except sqlite3.Error as exc:
            self._store_failed(f"{type(exc).__name__}: {exc}")
            log.error("could not record the failure of job %s: %s", job_id, exc)
            return
        await self.ended(job_id, "failed", None)

    async def write_runbook(self, job_id: str, outcome: str) -> None:
        """The runbook, then its views in a worker process, awaited so the next job starts after it; `runbook_id`
        set once both are written (else the next start writes them); a failure recorded on the job, not raised."""
        from benchd.results.render import render_off_loop  # lazily: the results stage is for job ends

        try:
            runbook_id = await asyncio.to_thread(self._write_in_thread, job_id, outcome)
        except Exception as exc:
            log.exception("job %s: writing the runbook failed", job_id)
            self._note_error(job_id, f"runbook not written: {type(exc).__name__}: {exc}")
            with contextlib.suppress(sqlite3.Error):
                self.store.update_job(job_id, runbook_error=f"{type(exc).__name__}: {exc}")
            await self.ended(job_id, outcome, None)
            return
        try:
            path = self.config.runbooks_dir / f"{runbook_id}.json"
            problem = (await render_off_loop(path, cache_dir=self.config.cache_dir)).problem()
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            log.error("job %s: rendering the runbook's views failed: %s", job_id, problem)
            self._note_error(job_id, f"runbook views not rendered: {problem}")
        with contextlib.suppress(sqlite3.Error):
            self.store.update_job(job_id, runbook_id=str(runbook_id))
        await self.ended(job_id, outcome, str(runbook_id))

    async def catch_up_runbooks(self, stopping: Callable[[], bool]) -> None:
        """Write the runbooks a dead daemon owed: it was killed between a job's terminal event and its
        runbook (found by the fault suite's kill -9); not one whose runbook failed (`runbook_error`)."""
        try:
            owed = [j.id for j in self.store.jobs_in_states("succeeded", "failed", "cancelled")
                    if not j.runbook_id and not j.runbook_error and j.progress is not None and j.progress.done > 0]
        except sqlite3.Error as exc:
            log.error("cannot list jobs owing a runbook: %s", exc)
            return
        for job_id in owed:
            if stopping():
                return
            log.warning("job %s ended without its runbook (benchd stopped first): writing it now", job_id)
            await self.write_runbook(job_id, self.store.get_job(job_id, with_sweep=False).state)

    def _note_error(self, job_id: str, note: str) -> None:
        with contextlib.suppress(sqlite3.Error):
            prior = self.store.get_job(job_id, with_sweep=False).error
            self.store.update_job(job_id, error=f"{prior}; {note}" if prior else note)

    async def ended(self, job_id: str, outcome: str, runbook_id: str | None) -> None:
        """Run every end-of-job hook; a failing hook is logged, never raised."""
        for hook in self.hooks:
            try:
                await hook(job_id, outcome, runbook_id)
            except Exception:
                log.exception("job %s: an end-of-job hook failed", job_id)
