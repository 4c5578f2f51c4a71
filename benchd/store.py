"""The only SQL in benchd: jobs, events, rows and eval results in one SQLite file (WAL); `Store`,
`store.events`, `store.results`. Reasons and facts: docs/architecture.md#the-store."""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import msgspec

from benchd.errors import BenchdError, NotFound
from benchd.schemas import (
    EvalResult,
    Event,
    Job,
    JobList,
    JobState,
    Progress,
    Row,
    Sweep,
    WhenCondition,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    sweep TEXT NOT NULL,
    created_at TEXT NOT NULL,
    not_before TEXT,
    when_ TEXT NOT NULL DEFAULT '[]',
    waiting_reason TEXT,
    started_at TEXT,
    finished_at TEXT,
    error TEXT,
    runbook_id TEXT,
    total INTEGER NOT NULL DEFAULT 0,
    runbook_error TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, created_at);
CREATE TABLE IF NOT EXISTS events (
    job TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time TEXT NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (job, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_type ON events(job, type);
CREATE TABLE IF NOT EXISTS rows (
    job TEXT NOT NULL,
    candidate TEXT NOT NULL,
    context INTEGER NOT NULL,
    kind TEXT NOT NULL,
    probe INTEGER NOT NULL,
    status TEXT NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY (job, candidate, context, kind, probe)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS evals (
    job TEXT NOT NULL,
    candidate TEXT NOT NULL,
    task TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (job, candidate, task)
) WITHOUT ROWID;
"""

_enc = msgspec.json.Encoder()
_row_dec = msgspec.json.Decoder(Row)
_sweep_dec = msgspec.json.Decoder(Sweep)
_eval_dec = msgspec.json.Decoder(EvalResult)
_payload_dec = msgspec.json.Decoder(dict[str, Any])


class CorruptStore(BenchdError):
    """The state database is not a database (or is malformed): benchd refuses to start rather than touch it."""

    def __init__(self, path: Path, exc: sqlite3.DatabaseError) -> None:
        super().__init__("corrupt_store", f"the state database {path} is corrupt (sqlite: {exc}); benchd will not "
                         "start on it or overwrite it: move it aside (it holds the jobs, events and rows; "
                         "`sqlite3 FILE .recover` may save them) and start benchd again for a new one", "state_dir")


class UnreadableJob(BenchdError):
    """A stored job whose sweep no longer decodes: the queue fails it and goes on; the text is never rewritten."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__("unreadable_job", f"job {job_id}: its stored sweep no longer decodes: {reason}", "sweep",
                         status=409)
        self.reason = reason


def _decode_sweep(raw: str | bytes) -> tuple[Sweep | None, str | None]:
    """(the sweep, None), or (None, why it does not decode): any stored text, never an exception."""
    try:
        return _sweep_dec.decode(raw), None
    except (msgspec.MsgspecError, ValueError, TypeError, RecursionError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def utcnow() -> str:
    """RFC 3339 UTC timestamp with milliseconds, the one time format of the store and the API."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: Random hex digits after the second (40 bits); `Store.create_job` probes past a taken id.
JOB_ID_RANDOM_HEX = 10


def random_hex(digits: int) -> str:
    """The job id's random source (`digits` lowercase hex digits)."""
    return secrets.token_hex((digits + 1) // 2)[:digits]


def new_job_id() -> str:
    """`YYYYMMDD-HHMMSS-xxxxxxxxxx`: sortable by time, 26 characters of [a-z0-9-] (the contract's job id)."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{random_hex(JOB_ID_RANDOM_HEX)}"


def _next_job_id(job_id: str) -> str:
    """The id after a taken one: the same second, its random part + 1 (wrapping), so probing always ends."""
    stamp, _, suffix = job_id.rpartition("-")
    width = len(suffix)
    return f"{stamp}-{(int(suffix, 16) + 1) % 16 ** width:0{width}x}"


def planned_probes(sweep: Sweep, bound: Literal["min", "max"] = "min") -> int:
    """Recorded rows a sweep will write (probes, sustained rows, the drift sentinel's re-run, image probes);
    with `probes = "auto"`, `bound` picks the `min` or `max` end."""
    plan = sweep.probe_plan()
    per_cell = plan.min if bound == "min" else plan.max
    return (sum(sum(candidate_planned(sweep, c.vision, bound).values()) for c in sweep.candidates)
            + (per_cell if sweep.sentinel_on() else 0))


def candidate_planned(sweep: Sweep, vision: bool, bound: Literal["min", "max"] = "min") -> dict[str, int]:
    """One candidate's part of `planned_probes` (the sentinel aside)."""
    plan = sweep.probe_plan()
    return {"probe": len(sweep.contexts) * (plan.min if bound == "min" else plan.max),
            "sustained": sweep.sustained.runs if sweep.sustained.tokens > 0 else 0,
            "vision": len(sweep.vision.resolutions) * plan.min if vision else 0}


def dropped_rows(events: Iterable[Event]) -> tuple[int, int]:
    """The planned rows (low, high end) the job's dropped candidates will not run (`candidate_dropped` events)."""
    lo = hi = 0
    for e in events:
        if e.type == "candidate_dropped":
            lo += int(e.payload.get("unrun_rows") or 0)
            hi += int(e.payload.get("unrun_rows_max") or 0)
    return lo, hi


def _connect(path: Path) -> sqlite3.Connection:
    """The daemon's connection: WAL, the schema created if absent (an older store's new column added). Raises
    `CorruptStore` for a file that is no database; an `OperationalError` (disk full, locked) as is."""
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=5000")
        db.executescript(_SCHEMA)
        if "runbook_error" not in {c[1] for c in db.execute("PRAGMA table_info(jobs)")}:
            db.execute("ALTER TABLE jobs ADD COLUMN runbook_error TEXT")
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise  # disk full, locked, I/O: a retry may succeed
        db.close()
        raise CorruptStore(path, exc) from exc
    return db


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A reader's connection (`mode=ro`): no schema, no journal-mode change, never created."""
    if not path.is_file():
        raise BenchdError("not_found", f"no job store at {path}", "state_dir", status=404)
    db = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True, isolation_level=None,
                         check_same_thread=False)
    try:
        db.execute("PRAGMA busy_timeout=5000")
        db.execute("SELECT 1 FROM jobs LIMIT 1")
    except sqlite3.DatabaseError as exc:
        db.close()
        if isinstance(exc, sqlite3.OperationalError):
            raise
        raise CorruptStore(path, exc) from exc
    return db


def _insert_event(db: sqlite3.Connection, job: str, type_: str, payload: dict[str, Any]) -> Event:
    """Append one event to `job` with the next `seq`; the caller holds the transaction (no gaps)."""
    cur = db.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE job = ?", (job,))
    seq = int(cur.fetchone()[0]) + 1
    event = Event(seq=seq, time=utcnow(), type=type_, job=job, payload=payload)
    db.execute(
        "INSERT INTO events(job, seq, time, type, payload) VALUES (?, ?, ?, ?, ?)",
        (job, seq, event.time, type_, _enc.encode(payload).decode()),
    )
    return event


class Store:
    """The state database: its connection, the write lock, the jobs table, and the parts sharing them
    (`events`, `results`). Writes are short transactions serialized by the lock."""

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        """`read_only`: for readers beside (or without) the daemon: `mode=ro`, a missing file is an error."""
        self.path = Path(path)
        self._db = _connect_read_only(self.path) if read_only else _connect(self.path)
        self._tx = _Tx(self._db, threading.Lock())
        self.events = EventLog(self._db, self._tx)
        self.results = ResultTable(self._db, self._tx)

    def close(self) -> None:
        self._db.close()

    # -- jobs --------------------------------------------------------------------------------------

    def create_job(
        self, sweep: Sweep, not_before: str | None = None, when: Iterable[str] = (), job_id: str | None = None
    ) -> tuple[Job, Event]:
        """Queue a job under a fresh id (never failing on it), or under `job_id`: a `BenchdError` (409) if taken."""
        jid = job_id or new_job_id()
        now = utcnow()
        values = (sweep.name, _enc.encode(sweep).decode(), now, not_before, _enc.encode(list(when)).decode(),
                  planned_probes(sweep))
        with self._tx:
            while self._db.execute("SELECT 1 FROM jobs WHERE id = ?", (jid,)).fetchone() is not None:
                if job_id is not None:
                    raise BenchdError("conflict", f"job id {job_id} is taken", "id", status=409)
                jid = _next_job_id(jid)
            self._db.execute(
                "INSERT INTO jobs(id, name, state, sweep, created_at, not_before, when_, total)"
                " VALUES (?, ?, 'queued', ?, ?, ?, ?, ?)", (jid, *values),
            )
            # Which model paths were absent when the job was queued: a later "no longer exists" is then a fact.
            missing = sorted({p for c in sweep.candidates for p in (c.model, c.spec.draft_model if c.spec else None)
                              if p and not os.path.exists(p)})
            event = _insert_event(self._db, jid, "job_queued", {"name": sweep.name, "not_before": not_before,
                                                                "missing_paths": missing})
        return self.get_job(jid), event

    def get_job(self, job_id: str, with_sweep: bool = True) -> Job:
        cur = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,))
        cur_row = cur.fetchone()
        if cur_row is None:
            raise NotFound("job", job_id)
        return self._job_from(cur, cur_row, with_sweep)

    def job_state(self, job_id: str) -> JobState:
        """The job's state alone: one indexed read, where `get_job` also counts its rows and events."""
        got = self._db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if got is None:
            raise NotFound("job", job_id)
        return cast(JobState, got[0])

    def get_sweep(self, job_id: str) -> Sweep:
        cur = self._db.execute("SELECT sweep FROM jobs WHERE id = ?", (job_id,))
        got = cur.fetchone()
        if got is None:
            raise NotFound("job", job_id)
        sweep, why = _decode_sweep(got[0])
        if sweep is None:
            raise UnreadableJob(job_id, why or "unknown")
        return sweep

    def unreadable(self, job_id: str) -> str | None:
        """Why a stored job cannot run as stored (its sweep, `when` or `not_before` no longer decode), or None."""
        cur = self._db.execute("SELECT sweep, when_, not_before FROM jobs WHERE id = ?", (job_id,))
        got = cur.fetchone()
        if got is None:
            raise NotFound("job", job_id)
        _, why = _decode_sweep(got[0])
        if why is not None:
            return f"its stored sweep no longer decodes: {why}"
        try:
            msgspec.json.decode(got[1], type=list[WhenCondition])
            if got[2] is not None and datetime.fromisoformat(got[2]).tzinfo is None:
                raise ValueError("time has no UTC offset")
        except (msgspec.MsgspecError, ValueError, TypeError, RecursionError) as exc:
            return f"its stored `when` / `not_before` no longer decode: {type(exc).__name__}: {exc}"
        return None

    def _job_from(self, cur: sqlite3.Cursor, values: tuple[Any, ...], with_sweep: bool) -> Job:
        d = {desc[0]: v for desc, v in zip(cur.description, values, strict=True)}
        done = self.results.count_rows(d["id"])
        sweep, _ = _decode_sweep(d["sweep"])
        total_max = planned_probes(sweep, "max") if sweep is not None and sweep.probe_plan().adaptive else None
        # A raced job's dropped candidates run no more rows: the plan loses them from the moment they leave.
        gone, gone_max = dropped_rows(self.events.of_type(d["id"], "candidate_dropped"))
        total = max(0, d["total"] - gone)
        total_max = max(0, total_max - gone_max) if total_max is not None else None
        try:
            when = msgspec.json.decode(d["when_"], type=list[str])
        except (msgspec.MsgspecError, RecursionError):
            when = []  # the queue fails the job (`unreadable_job`), whose sweep decodes or not
        return Job(
            id=d["id"], name=d["name"], state=d["state"], created_at=d["created_at"],
            not_before=d["not_before"], when=when,
            waiting_reason=d["waiting_reason"], started_at=d["started_at"], finished_at=d["finished_at"],
            error=d["error"], runbook_id=d["runbook_id"], runbook_error=d.get("runbook_error"),
            progress=Progress(done=done, total=total, total_max=total_max),
            sweep=sweep if with_sweep else None,
            sweep_raw=d["sweep"] if with_sweep and sweep is None else None,
        )

    def list_jobs(self, state: str | None = None, limit: int = 50, before: str | None = None) -> JobList:
        """Newest first; `before` is the cursor (a job id) from the previous page."""
        sql = "SELECT * FROM jobs"
        clauses: list[str] = []
        params: list[str | int] = []
        if state:
            clauses.append("state = ?")
            params.append(state)
        if before:
            clauses.append("id < ?")
            params.append(before)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit + 1)
        cur = self._db.execute(sql, params)
        got = cur.fetchall()
        jobs = [self._job_from(cur, v, with_sweep=False) for v in got[:limit]]
        return JobList(jobs=jobs, next_cursor=jobs[-1].id if len(got) > limit else None)

    def jobs_in_states(self, *states: str) -> list[Job]:
        """Oldest first (FIFO)."""
        marks = ",".join("?" * len(states))
        cur = self._db.execute(f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY id", states)
        return [self._job_from(cur, v, with_sweep=False) for v in cur.fetchall()]

    def queue_depth(self) -> int:
        cur = self._db.execute("SELECT COUNT(*) FROM jobs WHERE state IN ('queued', 'waiting', 'interrupted')")
        return int(cur.fetchone()[0])

    def update_job(self, job_id: str, **fields: str | None) -> None:
        allowed = {"state", "waiting_reason", "started_at", "finished_at", "error", "runbook_id", "runbook_error"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"cannot update job fields {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx:
            self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))

    def transition(self, job_id: str, event_type: str, payload: dict[str, Any] | None = None, **fields: str | None) -> Event:
        """Change a job's fields and append the event that says so, in one transaction."""
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._tx:
            if fields:
                self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))
            return _insert_event(self._db, job_id, event_type, payload or {})

    def delete_jobs(self, job_ids: Iterable[str]) -> int:
        """Forget finished jobs entirely (`benchctl prune`): job, events, rows, evals. Returns jobs deleted."""
        ids = list(job_ids)
        deleted = 0
        with self._tx:
            for jid in ids:
                cur = self._db.execute(
                    "DELETE FROM jobs WHERE id = ? AND state IN ('succeeded', 'failed', 'cancelled')", (jid,)
                )
                if cur.rowcount:
                    deleted += 1
                    for table in ("events", "rows", "evals"):
                        self._db.execute(f"DELETE FROM {table} WHERE job = ?", (jid,))
        return deleted

    def counts(self) -> dict[str, int]:
        """Row counts per table (the fuzz suite checks a rejected request changes none)."""
        return {t: int(self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in ("jobs", "events", "rows", "evals")}


class EventLog:
    """A job's events: appended with the next `seq`, never changed, read in `seq` order (the `Store`'s lock)."""

    def __init__(self, db: sqlite3.Connection, tx: _Tx) -> None:
        self._db = db
        self._tx = tx

    def append(self, job: str, type_: str, payload: dict[str, Any] | None = None) -> Event:
        with self._tx:
            return _insert_event(self._db, job, type_, payload or {})

    def of_type(self, job: str, type_: str) -> list[Event]:
        cur = self._db.execute("SELECT seq, time, type, payload FROM events WHERE job = ? AND seq IN"
                               " (SELECT seq FROM events WHERE job = ? AND type = ?) ORDER BY seq", (job, job, type_))
        return [Event(seq=s, time=t, type=ty, job=job, payload=_payload_dec.decode(p))
                for s, t, ty, p in cur.fetchall()]

    def page(self, job: str, since: int = 0, limit: int = 10_000) -> list[Event]:
        """The job's events after `seq` `since`, at most `limit` of them, in order."""
        cur = self._db.execute(
            "SELECT seq, time, type, payload FROM events WHERE job = ? AND seq > ? ORDER BY seq LIMIT ?",
            (job, since, limit),
        )
        return [
            Event(seq=s, time=t, type=ty, job=job, payload=_payload_dec.decode(p))
            for s, t, ty, p in cur.fetchall()
        ]

    def iterate(self, job: str, exclude_types: Iterable[str] = ()) -> Iterator[Event]:
        """Every event of the job in order, one at a time (no page limit), without the types excluded."""
        skip = sorted(set(exclude_types))
        cur = self._db.cursor()
        cur.arraysize = 256
        cur.execute(f"SELECT seq, time, type, payload FROM events WHERE job = ? AND type NOT IN ({','.join('?' * len(skip))})"
                    " ORDER BY seq", (job, *skip))
        while batch := cur.fetchmany():
            for seq, time_, type_, payload in batch:
                yield Event(seq=seq, time=time_, type=type_, job=job, payload=_payload_dec.decode(payload))

    def last_seq(self, job: str) -> int:
        cur = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM events WHERE job = ?", (job,))
        return int(cur.fetchone()[0])


class ResultTable:
    """A job's probe rows (each committed with its event) and eval results (the `Store`'s lock)."""

    def __init__(self, db: sqlite3.Connection, tx: _Tx) -> None:
        self._db = db
        self._tx = tx

    # -- rows --------------------------------------------------------------------------------------

    def commit_row(self, row: Row, event_type: str = "probe_finished") -> Event:
        """Store a row (replacing an `aborted` one with the same key) and its event, atomically."""
        with self._tx:
            self._db.execute(
                "INSERT INTO rows(job, candidate, context, kind, probe, status, row) VALUES (?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(job, candidate, context, kind, probe) DO UPDATE SET status = excluded.status,"
                " row = excluded.row WHERE rows.status = 'aborted'",
                (row.job, row.candidate, row.context, row.kind, row.probe, row.status, _enc.encode(row).decode()),
            )
            return _insert_event(self._db, row.job, event_type, {"row": msgspec.to_builtins(row)})

    def rows(self, job: str) -> list[Row]:
        return list(self.iter_rows(job))

    def iter_rows(self, job: str) -> Iterator[Row]:
        """The job's rows one at a time, grouped by cell (candidate, context, kind, probe order)."""
        cur = self._db.cursor()
        cur.arraysize = 64
        cur.execute("SELECT row FROM rows WHERE job = ? ORDER BY candidate, context, kind, probe", (job,))
        while batch := cur.fetchmany():
            for (raw,) in batch:
                yield _row_dec.decode(raw)

    def has_ok_row(self, job: str) -> bool:
        cur = self._db.execute("SELECT 1 FROM rows WHERE job = ? AND status = 'ok' LIMIT 1", (job,))
        return cur.fetchone() is not None

    def count_rows(self, job: str) -> int:
        cur = self._db.execute("SELECT COUNT(*) FROM rows WHERE job = ? AND status != 'aborted'", (job,))
        return int(cur.fetchone()[0])

    # -- evals -------------------------------------------------------------------------------------

    def put_eval(self, result: EvalResult) -> None:
        with self._tx:
            self._db.execute(
                "INSERT OR REPLACE INTO evals(job, candidate, task, result) VALUES (?, ?, ?, ?)",
                (result.job, result.candidate, result.task, _enc.encode(result).decode()),
            )

    def evals(self, job: str) -> list[EvalResult]:
        cur = self._db.execute("SELECT result FROM evals WHERE job = ? ORDER BY candidate, task", (job,))
        return [_eval_dec.decode(r[0]) for (r) in cur.fetchall()]


class _Tx:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on error), serialized across threads; stateless between uses."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._lock = lock

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self._lock.release()
