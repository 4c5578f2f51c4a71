"""The lifeline's platform selection, and on Linux the plumbing of the macOS watcher (benchd.lifeline):
its kqueue script cannot run here, so a stand-in script reports what the watcher would see. The macOS
watcher itself is untested (no macOS in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchd.lifeline import darwin, die_with_daemon


@pytest.mark.parametrize(("plat", "module"), [("linux", "benchd.lifeline.linux"),
                                               ("darwin", "benchd.lifeline.darwin"),
                                               ("win32", None), ("freebsd14", None)])
def test_each_platform_gets_its_own_hook(plat: str, module: str | None) -> None:
    if plat == "linux" and not sys.platform.startswith("linux"):
        pytest.skip("the Linux hook loads prctl from libc")
    hook = die_with_daemon(plat)
    assert (hook.__module__ if hook is not None else None) == module
    assert (die_with_daemon() is None) == (not sys.platform.startswith("linux") and sys.platform != "darwin")


def test_the_watcher_script_compiles() -> None:
    compile(darwin.WATCHER, "<watcher>", "exec")


_STANDIN = """
import json, os, sys
report = {"argv": sys.argv[1:], "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
          "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")), "env": dict(os.environ)}
with open(PATH + ".part", "w") as fh:
    json.dump(report, fh)
os.rename(PATH + ".part", PATH)
"""


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("new_session", [True, False])
def test_the_watcher_starts_detached_with_the_pids_to_watch(tmp_path: Path, new_session: bool) -> None:
    out = tmp_path / "watcher.json"
    hook = darwin.watcher_preexec(script=f"PATH = {str(out)!r}\n" + _STANDIN)
    child = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             start_new_session=new_session, preexec_fn=hook, env={"BENCHD_SERVER_TOKEN": "t"})
    try:
        deadline = time.monotonic() + 30
        while not out.is_file():
            assert time.monotonic() < deadline, "the stand-in watcher never reported"
            assert child.poll() is None, "the child did not survive its preexec"
            time.sleep(0.05)
        got = json.loads(out.read_text())
    finally:
        child.kill()
        child.wait(timeout=10)
    assert got["argv"] == [str(os.getpid()), str(child.pid), "1" if new_session else "0"]
    assert got["ppid"] != child.pid, "the watcher must not be the server's child (its tree, its memory)"
    assert got["sid"] == got["pid"], "the watcher leads its own session, out of the server's group"
    assert [fd for fd in got["fds"] if fd > 3] == [], got
    assert set(got["env"]) <= {"LC_CTYPE"}, got  # nothing inherited (Python's C-locale coercion sets LC_CTYPE)
    assert child.stdout is not None and child.stdout.read() == b"", "the watcher holds none of the child's pipes"
