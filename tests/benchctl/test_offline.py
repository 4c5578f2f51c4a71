"""`--state-dir` on every command that touches the state dir; `jobs` and `logs` with the daemon up (through
it, found by --state-dir alone) and down (the store read-only and the log files read directly, said so)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from testlib import BENCHCTL, clean_env, start_benchd

from benchd.schemas import Candidate, Sweep
from benchd.store import Store

JOB_STATE_COMMANDS = ("ping", "submit", "jobs", "status", "tail", "cancel", "logs", "recheck", "report", "compare",
                      "runbooks", "export", "lock", "locked", "doctor", "prune")


def ctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BENCHCTL, *args], capture_output=True, text=True, timeout=60, env=clean_env())


@pytest.mark.parametrize("command", JOB_STATE_COMMANDS)
def test_every_state_dir_command_takes_state_dir(command: str) -> None:
    done = ctl(command, "--help")
    assert done.returncode == 0, done.stderr
    assert "--state-dir" in done.stdout


def test_service_commands_take_state_dir() -> None:
    for sub in ("install", "uninstall", "status"):
        assert "--state-dir" in ctl("service", sub, "--help").stdout


def _stored_jobs(state: Path) -> tuple[str, str]:
    """Two jobs in a store no daemon runs on: one finished, one left `running` (its daemon killed)."""
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    store = Store(state / "benchd.sqlite3")
    try:
        sweep = Sweep(name="offline", contexts=[128], gen_tokens=4, probes=3, warmup=0,
                      candidates=[Candidate(id="cand-a", runtime="llama-server", model="/m.gguf")])
        done, _ = store.create_job(sweep)
        store.update_job(done.id, state="succeeded")
        running, _ = store.create_job(sweep)
        store.update_job(running.id, state="running")
    finally:
        store.close()
    return done.id, running.id


def test_jobs_offline_reads_the_store_and_notes_a_stopped_job(short_base: Path) -> None:
    state = short_base / "s"
    done_id, running_id = _stored_jobs(state)
    before = (state / "benchd.sqlite3").read_bytes()
    got = ctl("jobs", "--state-dir", str(state))
    assert got.returncode == 0, got.stderr
    assert "offline: benchd is not running" in got.stderr and "job store" in got.stderr
    assert done_id in got.stdout and running_id in got.stdout
    line = next(x for x in got.stdout.splitlines() if x.startswith(running_id))
    assert " running " in line
    assert "its daemon stopped mid-job" in got.stdout
    as_json = ctl("jobs", "--state-dir", str(state), "--json")
    assert as_json.returncode == 0, as_json.stderr
    page = json.loads(as_json.stdout)
    by_id = {j["id"]: j for j in page["jobs"]}
    assert by_id[running_id]["state"] == "running" and "stopped mid-job" in by_id[running_id]["offline_note"]
    assert "offline_note" not in by_id[done_id]
    assert page["offline"]["store"] == str(state / "benchd.sqlite3")
    assert (state / "benchd.sqlite3").read_bytes() == before  # read-only: not a byte changed


def test_jobs_offline_without_a_store_exits_3(short_base: Path) -> None:
    got = ctl("jobs", "--state-dir", str(short_base / "none"))
    assert got.returncode == 3
    assert "cannot be read offline" in got.stderr and "Traceback" not in got.stderr


def test_logs_offline_reads_the_files(short_base: Path) -> None:
    state = short_base / "s"
    _, running_id = _stored_jobs(state)
    (state / "logs" / running_id).mkdir(parents=True)
    (state / "logs" / "benchd.log").write_text("daemon line 1\ndaemon line 2\n")
    (state / "logs" / running_id / "cand-a.log").write_text("server line\n")
    got = ctl("logs", "--state-dir", str(state), "-n", "1")
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["daemon line 2"]
    assert "offline: benchd is not running" in got.stderr
    got = ctl("logs", "--state-dir", str(state), "--server", "cand-a")  # the job the store says runs
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["server line"]


def test_logs_offline_without_a_state_dir_exits_3(short_base: Path) -> None:
    got = ctl("logs", "--state-dir", str(short_base / "none"))
    assert got.returncode == 3
    assert "no state dir at" in got.stderr and "Traceback" not in got.stderr


def test_jobs_and_logs_through_the_daemon_found_by_state_dir(short_base: Path) -> None:
    d = start_benchd(short_base)
    try:
        got = ctl("jobs", "--state-dir", str(d.state_dir))
        assert got.returncode == 0, got.stderr
        assert "offline" not in got.stderr and "(no jobs)" in got.stdout
        assert ctl("ping", "--state-dir", str(d.state_dir)).returncode == 0
        got = ctl("logs", "--state-dir", str(d.state_dir))
        assert got.returncode == 0, got.stderr
        assert "offline" not in got.stderr and "listening on" in got.stdout
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=20)
    got = ctl("jobs", "--state-dir", str(d.state_dir))  # the same state dir, its daemon gone
    assert got.returncode == 0, got.stderr
    assert "offline" in got.stderr and "(no jobs)" in got.stdout
