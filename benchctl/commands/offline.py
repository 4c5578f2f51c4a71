"""Reading the state dir without the daemon: `benchctl jobs` and `benchctl logs` when no benchd answers.

The job store is opened read-only (`Store(..., read_only=True)`: never created, never migrated, no
journal change), the log files are plain files. A job the store says is `running` while no daemon
holds the state dir is shown as stored, with a note: its daemon stopped mid-job, and the next benchd
start marks it `interrupted` and resumes it (benchd.daemon.queue). Whether a daemon holds the state
dir is read from its lock file's pid (written by the daemon, cleared on a clean exit) and whether that
process lives: the lock itself is never taken here (a reader holding it would stop a daemon starting).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

STOPPED_MID_JOB = ("its daemon stopped mid-job (no benchd runs on this state dir): the next benchd start marks it "
                   "interrupted and resumes it")


def lock_holder(config: Any) -> int | None:
    """The pid of a live benchd that holds `config`'s state dir (its lock file names it), else None."""
    try:
        text = Path(config.instance_lock_path).read_text(errors="replace").strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid  # alive, someone else's
    return pid


def offline_line(config: Any, what: str) -> str:
    """The one line that says the output was read offline, and why (stderr, so stdout stays data)."""
    holder = lock_holder(config)
    why = (f"benchd pid {holder} holds {config.state_dir} but does not answer on {config.socket}" if holder
           else f"benchd is not running on {config.socket}")
    return f"offline: {why}; read {what} directly"


def read_jobs(config: Any, state: str | None, limit: int) -> dict[str, Any]:
    """The daemon's `GET /v1/jobs` page, read from the store; running jobs carry `offline_note` when no
    daemon holds the state dir. Raises BenchdError (no store, corrupt store)."""
    import msgspec

    from benchd.store import Store

    store = Store(config.db_path, read_only=True)
    try:
        page = msgspec.to_builtins(store.list_jobs(state=state, limit=limit))
    finally:
        store.close()
    stopped = lock_holder(config) is None
    for job in page["jobs"]:
        if job.get("state") == "running" and stopped:
            job["offline_note"] = STOPPED_MID_JOB
    page["offline"] = {"store": str(config.db_path), "daemon": "not answering"}
    return page  # type: ignore[no-any-return]


def running_job(config: Any) -> str | None:
    """The job the store says runs (None without a store, or when it cannot be read)."""
    from benchd.store import Store

    try:
        store = Store(config.db_path, read_only=True)
        try:
            running = store.jobs_in_states("running")
        finally:
            store.close()
    except Exception:  # a store that cannot be read names no job; the log files are still read
        return None
    return running[-1].id if running else None
