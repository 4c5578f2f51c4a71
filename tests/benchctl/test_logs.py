"""`benchctl logs` against a real benchd on a temporary state dir (the daemon tells where its logs are).

The server logs here are files the test writes where a job's servers write theirs: `logs` only reads
files, and starting real inference servers would add nothing to what this tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from testlib import wait_until

from benchctl.commands.logs import tail_lines

BIN = Path(sys.executable).parent
JOB = "job-0001-logs"


@pytest.fixture(scope="module")
def daemon() -> Iterator[Path]:
    state = Path(tempfile.mkdtemp(prefix="bd-logs-"))
    proc = subprocess.Popen([str(BIN / "benchd"), "--state-dir", str(state)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        sock = state / "benchd.sock"
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "benchd did not create its socket"
            time.sleep(0.1)
        yield state
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def logs(*args: str, state: Path | None = None, sock: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHD_")}
    socket = sock or (state / "benchd.sock" if state else Path("/nonexistent/benchd.sock"))
    return subprocess.run([str(BIN / "benchctl"), "logs", "--socket", str(socket), *args],
                          capture_output=True, text=True, env=env, timeout=30)


def test_unreachable_daemon_exits_3(short_base: Path) -> None:
    # short: pytest's tmp_path is over 104 bytes on macOS; no state dir either, so nothing to read offline
    done = logs("--state-dir", str(short_base / "none"), sock=short_base / "benchd.sock")
    assert done.returncode == 3
    assert "benchd is not running" in done.stderr and "Traceback" not in done.stderr


def test_daemon_log(daemon: Path) -> None:
    done = logs(state=daemon)
    assert done.returncode == 0, done.stderr
    assert "listening on" in done.stdout


def _server_logs(state: Path) -> Path:
    job_dir = state / "logs" / JOB
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "cand-a.log.1").write_text("".join(f"old {i}\n" for i in range(100)))
    (job_dir / "cand-a.log").write_text("".join(f"new {i}\n" for i in range(50)))
    (job_dir / "cand-b.log").write_text("b only line\n")
    return job_dir


def test_server_log_tail_spans_rotation(daemon: Path) -> None:
    _server_logs(daemon)
    done = logs(JOB, "--server", "cand-a", "-n", "3", state=daemon)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["new 47", "new 48", "new 49"]
    done = logs(JOB, "--server", "cand-a", "-n", "52", state=daemon)
    assert done.stdout.splitlines()[:3] == ["old 98", "old 99", "new 0"]
    assert len(done.stdout.splitlines()) == 52


def test_job_without_server_shows_every_log(daemon: Path) -> None:
    _server_logs(daemon)
    done = logs(JOB, "-n", "1", "--json", state=daemon)
    assert done.returncode == 0, done.stderr
    got = {Path(item["path"]).name: item["lines"] for item in json.loads(done.stdout)}
    assert got == {"cand-a.log": ["new 49"], "cand-b.log": ["b only line"]}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("nosuchjob-123",), "no server logs for job nosuchjob-123"),
        ((JOB, "--server", "cand-z"), "this job has logs for: cand-a, cand-b"),
        (("../../etc",), "is not a job id"),
        ((JOB, "--server", "../x"), "is not a candidate id"),
        (("--server", "cand-a"), "needs a JOB when no job is running"),
    ],
)
def test_bad_ids_exit_2(daemon: Path, args: tuple[str, ...], needle: str) -> None:
    _server_logs(daemon)
    done = logs(*args, state=daemon)
    assert done.returncode == 2, done.stdout
    assert needle in done.stderr and "Traceback" not in done.stderr


def test_follow_prints_appended_lines(daemon: Path) -> None:
    job_dir = _server_logs(daemon)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHD_")}
    proc = subprocess.Popen(
        [str(BIN / "benchctl"), "logs", "--socket", str(daemon / "benchd.sock"), JOB, "--server", "cand-b", "-n", "0", "-f"],
        stdout=subprocess.PIPE, text=True, env=env,
        # a shell without job control starts background commands with SIGINT ignored, and Python keeps an
        # ignored SIGINT: give the child the default, as a terminal's Ctrl-C would find it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        log = str(job_dir / "cand-b.log")
        wait_until(lambda: any(f.path == log for f in psutil.Process(proc.pid).open_files()), timeout=30,
                   what="benchctl logs -f opened the log")  # it opens at the end (-n 0): what is appended next is new
        with (job_dir / "cand-b.log").open("a") as fh:
            fh.write("appended while following\n")
        assert proc.stdout is not None
        assert proc.stdout.readline() == "appended while following\n"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    assert proc.returncode == 0


def test_tail_lines_unit(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"{i}\n" for i in range(100_000)))
    assert tail_lines(log, 2) == ["99998", "99999"]
    assert tail_lines(log, 0) == []
    assert tail_lines(tmp_path / "missing.log", 5) == []
