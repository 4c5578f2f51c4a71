"""The queue survives any stored job (issue 36): a stored sweep that no longer decodes (a tighter schema
after an upgrade, a hand-edited store) fails that job with the reason — its stored text kept and shown as
`sweep_raw` —, the queue goes on to the next job, `GET /v1/jobs` answers 200, and a daemon starting on
such a job (left `running` by a dead daemon) does the same. Real daemon over its socket; the store is
edited with sqlite3 the way an older or newer benchd would have left it."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

from faultlib import read_events, wait_until

from benchd.store import Store

FUTURE = "2099-01-01T00:00:00Z"
TERMINAL = ("succeeded", "failed", "cancelled")


def _sweep(name: str) -> dict[str, Any]:
    return {"name": name, "contexts": [128], "gen_tokens": 4, "probes": 1, "warmup": 0, "sustained": {"tokens": 0},
            "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
            "candidates": [{"id": "a", "runtime": "llama-server", "model": "/nonexistent/m.gguf",
                            "binary": "/nonexistent/llama-server"}]}


def _db(state: Path) -> sqlite3.Connection:
    return sqlite3.connect(state / "benchd.sqlite3", timeout=30)


def _stored(state: Path, job: str) -> str:
    with _db(state) as db:
        return str(db.execute("SELECT sweep FROM jobs WHERE id = ?", (job,)).fetchone()[0])


def _set(state_dir: Path, job: str, **cols: Any) -> None:
    with _db(state_dir) as db:
        db.execute(f"UPDATE jobs SET {', '.join(f'{k} = ?' for k in cols)} WHERE id = ?", (*cols.values(), job))


def _tighter(raw: str) -> str:
    """What a tighter constraint after an upgrade makes of a stored sweep: gen_tokens 0 is out of range."""
    doc = json.loads(raw)
    doc["gen_tokens"] = 0
    return json.dumps(doc)


def _failed_unreadable(job: dict[str, Any], raw: str) -> None:
    assert job["state"] == "failed", job
    assert "no longer decode" in (job["error"] or ""), job["error"]
    assert job["sweep"] is None and job["sweep_raw"] == raw


def test_a_daemon_starting_on_unreadable_jobs_fails_them_and_runs_the_rest(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    c = d.client()
    running, queued, good = (c.submit(_sweep(n), not_before=FUTURE)["id"] for n in ("running", "queued", "good"))
    d.signal(signal.SIGTERM)
    assert d.wait(30) == 0
    state = d.state_dir
    raw_running = _tighter(_stored(state, running))
    raw_queued = _stored(state, queued).replace('"name":', '"a_field_removed_since":1,"name":', 1)
    _set(state, running, sweep=raw_running, state="running")  # its daemon died while it ran
    _set(state, queued, sweep=raw_queued, state="queued", not_before=None)
    _set(state, good, state="queued", not_before=None)

    d2 = run_daemon()
    c2 = d2.client()
    # ids in one second sort randomly: the queue meets them in any order
    wait_until(lambda: all(c2.job(j)["state"] in TERMINAL for j in (running, queued, good)), timeout=120,
               what="every job ended")
    _failed_unreadable(c2.job(running), raw_running)
    _failed_unreadable(c2.job(queued), raw_queued)
    assert "job_started" in [e["type"] for e in read_events(state, good)]
    assert [e["type"] for e in read_events(state, running)][-2:] == ["job_interrupted", "job_failed"]
    listed = c2.jobs()["jobs"]  # 200, every job listed
    assert sorted(j["id"] for j in listed) == sorted([running, queued, good])
    assert c2.health()["pid"] == d2.pid and d2.proc.poll() is None
    assert _stored(state, running) == raw_running, "the stored text was rewritten"
    assert "Traceback" not in d2.output()


def test_a_job_that_stops_decoding_while_queued_fails_and_the_queue_goes_on(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    c = d.client()
    bad = c.submit(_sweep("bad"), not_before=FUTURE)["id"]
    raw = _stored(d.state_dir, bad).replace('"contexts":[128]', '"contexts":[]', 1)
    assert raw != _stored(d.state_dir, bad)
    _set(d.state_dir, bad, sweep=raw)
    # read paths answer 200 while the queue has not looked at it yet
    assert bad in [j["id"] for j in c.jobs()["jobs"]]
    assert c.job(bad)["sweep_raw"] == raw
    good = c.submit(_sweep("good"))["id"]  # wakes the queue
    wait_until(lambda: all(c.job(j)["state"] in TERMINAL for j in (bad, good)), timeout=120, what="both jobs ended")
    _failed_unreadable(c.job(bad), raw)
    assert "job_started" in [e["type"] for e in read_events(d.state_dir, good)]
    assert c.health()["pid"] == d.pid and d.proc.poll() is None


def test_unreadable_names_each_stored_field(tmp_path: Path) -> None:
    """Store.unreadable: sweep, `when` and `not_before` each named; a readable job is None."""
    import msgspec

    from benchd.schemas import Sweep

    store = Store(tmp_path / "s.sqlite3")
    sweep = msgspec.convert(_sweep("x"), Sweep)
    ids = [store.create_job(sweep, not_before=FUTURE, when=["idle"])[0].id for _ in range(4)]
    store.close()
    assert Store(tmp_path / "s.sqlite3").unreadable(ids[0]) is None
    with sqlite3.connect(tmp_path / "s.sqlite3") as db:
        db.execute("UPDATE jobs SET sweep = 'not json' WHERE id = ?", (ids[1],))
        db.execute("UPDATE jobs SET when_ = '[\"full-moon\"]' WHERE id = ?", (ids[2],))
        db.execute("UPDATE jobs SET not_before = '2030-01-01T00:00:00' WHERE id = ?", (ids[3],))
    store = Store(tmp_path / "s.sqlite3")
    assert "sweep no longer decodes" in (store.unreadable(ids[1]) or "")
    assert "`when` / `not_before`" in (store.unreadable(ids[2]) or "")
    assert "UTC offset" in (store.unreadable(ids[3]) or "")
    assert len(store.list_jobs().jobs) == 4  # listing never decodes its way into an exception
