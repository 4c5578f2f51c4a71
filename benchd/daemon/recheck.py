"""The lock's recheck timer and its queueing (`Rechecker`, `GET`/`POST /v1/recheck`); what to check and
what a verdict means is `benchd.lock` (docs/locking.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta

import msgspec
from aiohttp import web

from benchd.config import Config
from benchd.config_toml import load_settings, settings_path
from benchd.daemon.queue import JobQueue
from benchd.errors import BenchdError, NotFound, from_validation
from benchd.lock import watch
from benchd.lock.lockfile import LockFile, append_recheck, read_lock
from benchd.lock.notify import message, notify
from benchd.lock.recheck import finish_entry, recheck_sweep, summary
from benchd.schemas import (
    TERMINAL_JOB_STATES,
    Fingerprint,
    PendingRecheck,
    RecheckStatus,
    recheck_request_decoder,
)
from benchd.store import Store, utcnow

log = logging.getLogger("benchd.daemon.recheck")

_enc = msgspec.json.Encoder()


def next_local_time(hhmm: str, now: datetime) -> str:
    """The next `HH:MM` local wall-clock time after `now`, as RFC 3339 UTC (the queue's `not_before`)."""
    hour, minute = (int(x) for x in hhmm.split(":"))
    local_now = now.astimezone()
    naive = local_now.replace(tzinfo=None, hour=hour, minute=minute, second=0, microsecond=0)
    if naive <= local_now.replace(tzinfo=None):
        naive += timedelta(days=1)
    return naive.astimezone().astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Rechecker:
    """Detection at start and on a timer, the pending recheck, its verdict; `status()` for the API."""

    def __init__(self, config: Config, store: Store, queue: JobQueue) -> None:
        self.config = config
        self.store = store
        self.queue = queue
        loaded, self.settings_error = load_settings(settings_path(config.state_dir))
        self.settings = loaded.recheck
        self.lock_error: str | None = None
        self.state_file = watch.StateFile(config.state_dir)
        self.state = self.state_file.state
        self.next_check_at: str | None = None
        self._mutex = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        queue.job_ended.append(self.on_job_end)

    # ------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self.settings_error:
            log.error("recheck settings: %s", self.settings_error)
        async with self._mutex:
            await self._settle()
        self._task = asyncio.create_task(self._loop(), name="benchd-recheck")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        """Check at start, then every `recheck_hours` (detection off: `enabled = false`)."""
        if not self.settings.enabled:
            log.info("recheck detection is off ([recheck] enabled = false)")
            return
        while True:
            try:
                await self.check()
            except Exception:  # a bug here must not stop the timer or the daemon
                log.exception("recheck detection failed")
            delay = self.settings.recheck_hours * 3600.0
            self.next_check_at = (datetime.now().astimezone() + timedelta(seconds=delay)).isoformat(timespec="seconds")
            await asyncio.sleep(delay)

    async def _settle(self) -> None:
        """With the mutex held: a pending recheck whose job ended without its verdict being written
        (benchd stopped in between) gets it now; a job that still owes its runbook gets it from the
        queue's catch-up, which calls `on_job_end`. A job that is gone (pruned) is forgotten."""
        pending = self.state.pending
        if pending is None:
            return
        try:
            job = self.store.get_job(pending.job, with_sweep=False)
        except NotFound:
            log.warning("pending recheck job %s is gone (pruned?): forgetting it", pending.job)
            self.state.pending = None
            self.state_file.save()
            return
        if job.state in TERMINAL_JOB_STATES and (job.runbook_id or not (job.progress and job.progress.done)):
            await self._record(pending, job.state, job.runbook_id)

    # ------------------------------------------------------------------------------- detection

    def _inspect(self) -> tuple[LockFile | None, Fingerprint | None, list[str]]:
        """(lock, current fingerprint, what changed since the baseline); no lock: (None, None, [])."""
        lf, current, changed, self.lock_error = watch.inspect(self.config)
        return lf, current, changed

    def _pending_active(self) -> PendingRecheck | None:
        """The pending recheck until its verdict is written, unless its job is gone."""
        pending = self.state.pending
        if pending is None:
            return None
        try:
            self.store.get_job(pending.job, with_sweep=False)
        except NotFound:
            return None
        return pending

    async def check(self) -> list[str]:
        """Compare fingerprints; queue a recheck when something changed and none is pending."""
        async with self._mutex:
            await self._settle()
            lf, current, changed = await asyncio.to_thread(self._inspect)
            at = utcnow()
            said = changed or ([f"no change ({lf.locked.candidate})"] if lf else ["no lock"])
            if lf is not None and changed:
                if (pending := self._pending_active()) is not None:
                    log.info("lock changed (%s); recheck job %s already pending", "; ".join(changed), pending.job)
                else:
                    try:
                        await self._queue(lf, current, changed, now=False)
                    except BenchdError as exc:  # e.g. the evidence runbook was pruned: said in the status
                        log.error("lock changed (%s) but %s", "; ".join(changed), exc.message)
                        said = [*changed, exc.message]
            # set together, after the queueing: a status read never sees the time without the words
            self.state.last_check_at, self.state.last_check = at, said
            self.state_file.save()
            return changed

    async def request(self, now: bool) -> PendingRecheck:
        """`benchctl recheck [--now]`: queue one by hand (409 while one is pending)."""
        async with self._mutex:
            await self._settle()
            if (pending := self._pending_active()) is not None:
                raise BenchdError("recheck_pending", f"a recheck is already queued: job {pending.job}", status=409)
            lf, current, changed = await asyncio.to_thread(self._inspect)
            if lf is None:
                raise BenchdError("no_lock", self.lock_error or f"no lock file at {self.config.locked_path} "
                                  "(create one with `benchctl lock --candidate ID`)", status=409)
            return await self._queue(lf, current, ["requested by hand", *changed], now=now)

    async def _queue(self, lf: LockFile, current: Fingerprint | None, cause: list[str], now: bool,
                     confirms: str | None = None) -> PendingRecheck:
        sweep = await asyncio.to_thread(recheck_sweep, lf.locked, self.config)
        at = self.settings.at if confirms is None else ""  # a confirmation follows the recheck it confirms
        not_before = None if now or not at else next_local_time(at, datetime.now().astimezone())
        when: list[str] = [] if now else [str(w) for w in self.settings.when]
        job = self.queue.submit(sweep, not_before, when)
        self.state.pending = PendingRecheck(job=job.id, queued_at=utcnow(), candidate=lf.locked.candidate,
                                            locked_at=lf.locked.locked_at, lock_runbook=lf.locked.runbook,
                                            cause=cause, fingerprint=current, confirms=confirms, now=now)
        self.state_file.save()
        log.warning("lock %s: %s; recheck job %s queued (not before %s, when %s)", lf.locked.candidate,
                    "; ".join(cause), job.id, not_before or "now", ", ".join(when) or "-")
        return self.state.pending

    # ------------------------------------------------------------------------------- verdict

    async def on_job_end(self, job_id: str, outcome: str, runbook_id: str | None) -> None:
        """The queue's hook: a pending recheck ended; write its verdict into the lock's history."""
        async with self._mutex:
            pending = self.state.pending
            if pending is not None and pending.job == job_id:
                await self._record(pending, outcome, runbook_id)

    async def _record(self, pending: PendingRecheck, outcome: str, runbook_id: str | None) -> None:
        """With the mutex held: the verdict into the lock, then the pending recheck is done (whatever
        happened: a pending that never clears would block every later recheck)."""
        try:
            await self._finish(pending, outcome, runbook_id)
        except Exception:
            log.exception("recheck job %s: could not record the verdict", pending.job)
        if self.state.pending is pending:  # not replaced by a confirmation recheck
            self.state.pending = None
        self.state_file.save()

    async def _finish(self, pending: PendingRecheck, outcome: str, runbook_id: str | None) -> None:
        path = self.config.locked_path
        lf = await asyncio.to_thread(read_lock, path)
        error = self.store.get_job(pending.job, with_sweep=False).error
        entry = await asyncio.to_thread(
            finish_entry, self.config, lf, job=pending.job, outcome=outcome, runbook_id=runbook_id,
            lock_runbook=pending.lock_runbook, locked_at=pending.locked_at, cause=pending.cause,
            fingerprint=pending.fingerprint, threshold_pct=self.settings.threshold_pct, error=error)
        entry = msgspec.structs.replace(entry, confirms=pending.confirms)
        step = watch.after_verdict(entry, self.settings, pending.confirms)
        if step == "confirm":
            again = await self._queue(lf, pending.fingerprint, [f"confirming the regression found by recheck job "
                                                                f"{pending.job}", *pending.cause],
                                      now=pending.now, confirms=pending.job)
            entry = msgspec.structs.replace(entry, confirming=again.job,
                                            notified=f"held until recheck job {again.job} confirms it")
        elif step == "notify":
            entry = msgspec.structs.replace(entry, notified=await notify(*message(lf, entry),
                                                                         self.settings.notify_command))
        await asyncio.to_thread(append_recheck, path, entry)
        log.warning("recheck job %s of %s: %s", pending.job, entry.candidate, summary(entry))

    # ------------------------------------------------------------------------------- status

    def status(self) -> RecheckStatus:
        pending = self._pending_active()
        job = self.store.get_job(pending.job, with_sweep=False) if pending else None
        record, self.lock_error = watch.status(self.config, self.settings, self.settings_error, self.state,
                                               pending, job, self.next_check_at)
        return record


def routes(rechecker: Rechecker) -> list[web.RouteDef]:
    """`GET /v1/recheck` (status) and `POST /v1/recheck` (`{"now": bool}`: queue one by hand)."""

    def answer(body: object, status: int = 200) -> web.Response:
        return web.Response(status=status, body=_enc.encode(body), content_type="application/json")

    async def get_recheck(request: web.Request) -> web.Response:
        return answer(rechecker.status())

    async def post_recheck(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = recheck_request_decoder.decode(raw or b"{}")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise from_validation(exc) from exc
        await rechecker.request(body.now)
        return answer(rechecker.status(), status=201)

    return [web.get("/v1/recheck", get_recheck), web.post("/v1/recheck", post_recheck)]
