"""The job queue: FIFO over the store, one job at a time, `not_before` / `when`, restart recovery.
Reasons and facts: docs/architecture.md#the-job-queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from benchd.config import Config
from benchd.daemon.hub import EventHub
from benchd.daemon.jobend import JobEnded, JobEnds
from benchd.errors import BenchdError
from benchd.schemas import TERMINAL_JOB_STATES, Event, Job, Sweep
from benchd.sensors.conditions import unmet
from benchd.sensors.power.status import keep_awake
from benchd.store import Store, utcnow

log = logging.getLogger("benchd.daemon.queue")

RunJob = Callable[..., Awaitable[object]]

#: How often the `when` conditions of waiting jobs are polled (no event tells us the machine went idle).
CONDITION_POLL_S = 30.0
#: How long `cancel` waits for a running job to stop (the contract: within 2 s).
CANCEL_WAIT_S = 2.0


def parse_time(value: str) -> datetime:
    """RFC 3339 with an offset (`Z` allowed) → aware datetime; ValueError otherwise."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("time has no UTC offset")
    return parsed


def _load_engine() -> RunJob:
    # The sweep engine, imported when the first job starts: the daemon answers its socket sooner.
    from benchd.engine.scheduler import run_job

    return run_job


@contextlib.asynccontextmanager
async def _keep_awake() -> AsyncIterator[dict[str, object]]:
    """The sleep guard held while a job runs, as the job_started/job_resumed payload (the runbook's
    provenance says whether sleep was prevented, how, or why not)."""
    async with keep_awake(os.getpid()) as guard:
        yield {"sleep_prevented": guard.prevented, "sleep_method": guard.method, "sleep_reason": guard.reason}


class _Running:
    def __init__(self, job_id: str, task: asyncio.Task[object]) -> None:
        self.job_id = job_id
        self.task = task
        self.cancel_reason: str | None = None  # "user" | "shutdown"
        self.done = asyncio.Event()


class JobQueue:
    def __init__(self, store: Store, config: Config, hub: EventHub, run_job: RunJob | None = None) -> None:
        self.store = store
        self.config = config
        self.hub = hub
        self._run_job = run_job
        self._wake = asyncio.Event()
        self._running: _Running | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        #: The last store write failure (disk full…), shown by /v1/health; cleared by the next success.
        self.store_error: str | None = None
        #: The job whose run that failure stopped (the API shows the failure on it while it lasts).
        self.store_error_job: str | None = None
        self.ends = JobEnds(store, config, self._emit, self._store_failed)

    @property
    def job_ended(self) -> list[JobEnded]:
        """Hooks for a job's end (the lock's rechecker); a failing hook is logged, never raised."""
        return self.ends.hooks

    def _store_failed(self, error: str) -> None:
        self.store_error = error

    # -------------------------------------------------------------------------------- public

    @property
    def running_job(self) -> str | None:
        return self._running.job_id if self._running else None

    def wake(self) -> None:
        self._wake.set()

    def _emit(self, event: Event) -> Event:
        self.hub.notify(event)
        return event

    def recover(self) -> list[str]:
        """Jobs left `running` by a dead daemon become `interrupted` (resumed first by `run`)."""
        ids = []
        for job in self.store.jobs_in_states("running"):
            self._emit(self.store.transition(
                job.id, "job_interrupted", {"reason": "benchd stopped while this job ran; it resumes now"},
                state="interrupted",
            ))
            ids.append(job.id)
        if ids:
            log.warning("recovered interrupted jobs: %s", ", ".join(ids))
        return ids

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="benchd-queue")

    def submit(self, sweep: Sweep, not_before: str | None, when: list[str]) -> Job:
        job, event = self.store.create_job(sweep, not_before=not_before, when=when)
        self._emit(event)
        self.wake()
        return job

    async def cancel(self, job_id: str) -> Job:
        job = self.store.get_job(job_id, with_sweep=False)
        if job.state in TERMINAL_JOB_STATES:
            raise BenchdError("not_cancellable", f"job {job_id} has already ended ({job.state})", "id", status=409)
        running = self._running
        if running is not None and running.job_id == job_id:
            running.cancel_reason = "user"
            running.task.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(running.done.wait()), CANCEL_WAIT_S + 1.0)
            return self.store.get_job(job_id, with_sweep=False)
        # Not running: no await between this check and the transition, so the queue cannot pick it meanwhile.
        self._emit(self.store.transition(
            job_id, "job_cancelled", {"reason": "cancelled before it ran" if job.state != "interrupted"
                                      else "cancelled while interrupted"},
            state="cancelled", finished_at=utcnow(), waiting_reason=None,
        ))
        if job.state == "interrupted" and self.store.results.count_rows(job_id):
            await self.ends.write_runbook(job_id, "cancelled")
        else:
            await self.ends.ended(job_id, "cancelled", None)
        self.wake()
        return self.store.get_job(job_id, with_sweep=False)

    async def stop(self, wait_s: float = 7.0) -> None:
        """Shutdown: take no more jobs, cancel the running one (engine aborts the probe, tears down
        servers), mark it interrupted. Bounded by `wait_s`."""
        self._stopping = True
        running = self._running
        if running is not None:
            running.cancel_reason = "shutdown"
            running.task.cancel()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(running.done.wait()), wait_s)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(self._task, 1.0)
        if running is not None and not running.done.is_set():
            # The engine did not stop in time: record the interruption ourselves.
            self.ends.interrupt(running.job_id, "benchd shut down (engine did not stop in time)")

    # -------------------------------------------------------------------------------- loop

    async def run(self) -> None:
        await self.ends.catch_up_runbooks(lambda: self._stopping)
        while not self._stopping:
            try:
                self._recover_stranded()
                job, delay = await self._pick()
            except sqlite3.Error as exc:
                self.store_error = f"{type(exc).__name__}: {exc}"
                log.error("store error while picking a job: %s", exc)
                job, delay = None, 5.0
            except Exception:  # a bug, not a job's fault (`_pick` fails unreadable jobs itself): retry later
                log.exception("the queue could not pick a job")
                job, delay = None, 5.0
            if self._stopping:
                return
            if job is None:
                self._wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            try:
                await self._run_one(job)
            except sqlite3.Error as exc:
                self.store_error = f"{type(exc).__name__}: {exc}"
                log.error("store error while running job %s: %s", job.id, exc)
                await asyncio.sleep(5.0)
            except Exception as exc:  # one job never stops the queue: it fails with the reason
                log.exception("job %s: the queue could not run it", job.id)
                await self.ends.fail_unrunnable(job.id, f"benchd could not run this job: {type(exc).__name__}: {exc}")

    def _recover_stranded(self) -> None:
        """A job the store still calls `running` while no task runs it: a store write failed (disk full)
        while its end was being recorded. Interrupt it once the store writes again, so it resumes;
        raises sqlite3.Error while the store still cannot write (the loop retries)."""
        if self._running is not None or not self.store.jobs_in_states("running"):
            return
        reason = f"the state store could not be written ({self.store_error or 'unknown error'}); it resumes now"
        for job in self.store.jobs_in_states("running"):
            self._emit(self.store.transition(job.id, "job_interrupted", {"reason": reason}, state="interrupted"))
            log.warning("job %s resumes after a store write failure", job.id)
        self.store_error = None
        self.store_error_job = None

    async def _pick(self) -> tuple[Job | None, float | None]:
        """The next job to run (interrupted first, then FIFO of the eligible), or how long to sleep."""
        for job in self.store.jobs_in_states("interrupted"):
            if not await self._failed_unreadable(job.id):
                return job, None
        now = datetime.now(UTC)
        delay: float | None = None
        for job in self.store.jobs_in_states("queued", "waiting"):
            if await self._failed_unreadable(job.id):
                continue
            hold = await self._hold(job, now)
            if hold is None:
                return job, None
            reason, wait_s = hold
            delay = wait_s if delay is None else min(delay, wait_s)
            if job.state != "waiting" or job.waiting_reason != reason:
                self.store.update_job(job.id, state="waiting", waiting_reason=reason)
        return None, delay

    async def _hold(self, job: Job, now: datetime) -> tuple[str, float] | None:
        """(why `job` waits, seconds until the queue looks again), or None when it may run now."""
        if job.not_before:
            at = parse_time(job.not_before)
            if at > now:
                return f"not before {job.not_before}", (at - now).total_seconds() + 0.05
        if job.when:
            reason = await unmet(list(job.when), self.store.get_sweep(job.id).cooldown)
            if reason is not None:
                return reason, CONDITION_POLL_S
        return None

    async def _failed_unreadable(self, job_id: str) -> bool:
        """A stored job that no longer decodes is failed with the reason (its text stays in the store,
        shown as `sweep_raw`), so the queue goes on to the next; True when that happened."""
        why = self.store.unreadable(job_id)
        if why is None:
            return False
        log.error("job %s: %s; it fails, the queue goes on", job_id, why)
        await self.ends.fail_unrunnable(job_id, f"{why}; the job cannot run (its stored text is kept: `sweep_raw`)")
        return True

    async def _run_one(self, picked: Job) -> None:
        job_id = picked.id
        job = self.store.get_job(job_id, with_sweep=False)
        if job.state not in ("queued", "waiting", "interrupted"):
            return  # cancelled while `_pick` awaited a condition check
        resume = job.state == "interrupted" or self.store.results.count_rows(job_id) > 0
        sweep = self.store.get_sweep(job_id)
        async with _keep_awake() as sleep_info:
            if self.store.job_state(job_id) not in ("queued", "waiting", "interrupted"):
                return  # cancelled while the sleep guard started; no await from here to the transition
            progress = {"done": self.store.results.count_rows(job_id), "total": job.progress.total if job.progress else 0}
            self._emit(self.store.transition(
                job_id, "job_resumed" if resume else "job_started", {**progress, **sleep_info},
                state="running", waiting_reason=None, started_at=job.started_at or utcnow(),
            ))
            self.store_error = None
            task = asyncio.create_task(self._engine(job_id, sweep), name=f"job-{job_id}")
            running = self._running = _Running(job_id, task)
            try:
                outcome, error = await self._await_engine(running)
                # Recorded before the sleep guard is released (that may take seconds): a cancel
                # waiting on `done` must see the job cancelled within its 2 s.
                self.ends.record(job_id, outcome, error)
            finally:
                self._running = None
                running.done.set()
        if outcome in ("succeeded", "failed", "cancelled"):
            await self.ends.write_runbook(job_id, outcome)

    async def _engine(self, job_id: str, sweep: Sweep) -> object:
        run_job = self._run_job or _load_engine()
        return await run_job(job_id, sweep, self.store, self.config, self.hub.notify)

    async def _await_engine(self, running: _Running) -> tuple[str, str | None]:
        """Wait for the engine; map its result, cancellation or crash to (outcome, error)."""
        task = running.task
        try:
            result = await task
        except asyncio.CancelledError:
            if not task.done():  # we ourselves were cancelled: stop the engine, then re-raise
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, 5.0)
                running.cancel_reason = running.cancel_reason or "shutdown"
            if running.cancel_reason == "user":
                return "cancelled", None
            return "interrupted", "benchd shut down while the job ran"
        except sqlite3.Error as exc:
            # Not the job's fault (disk full, I/O error): interrupt it, resume once the store writes again.
            self.store_error = f"{type(exc).__name__}: {exc}"
            self.store_error_job = running.job_id
            log.error("job %s stopped: the state store failed: %s", running.job_id, exc)
            return "interrupted", f"the state store could not be written ({self.store_error})"
        except Exception as exc:
            log.exception("job %s: the engine raised", running.job_id)
            return "failed", f"engine error: {type(exc).__name__}: {exc}"
        # The engine returned (it may have finished just as a cancel arrived): its outcome stands.
        state = getattr(result, "state", "failed")
        error = getattr(result, "error", None)
        if state not in ("succeeded", "failed"):
            return "failed", f"engine returned an unknown outcome {state!r}"
        return state, error
