"""Every process the daemon spawns dies with it (issue 36), not only its servers: a process that runs
`kld.run_tool` (how llama-perplexity runs), an eval in the sandbox or the sensors' keep-awake helper is
SIGKILLed, and on Linux its child (PR_SET_PDEATHSIG, benchd.lifeline) must die at once. Real processes, no server or cache needed;
each wait is bounded (the hang guard), and whatever is left is killed at the end."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from testlib import wait_until

pytestmark = [pytest.mark.timeout(90),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")]

# Each spawner starts one long child through the daemon's own code path; the child writes its pid to PIDFILE.
_RUN_TOOL = """
import asyncio, sys
from pathlib import Path
from benchd.engine.kld import run_tool
child = [sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)",
         sys.argv[1]]
asyncio.run(run_tool(child, Path(sys.argv[1] + ".log"), deadline_s=120))
"""
_SANDBOX = """
import sys
from benchd.servers import sandbox
program = f"import os, time\\nopen({sys.argv[1]!r}, 'w').write(str(os.getpid()))\\ntime.sleep(120)\\n"
sandbox.run(program, 120, sandbox=sandbox.Sandbox("none", None, "test"))
"""
# The sensors' long-lived spawn: keep_awake's helper, here macOS's path with a stand-in `caffeinate` first on PATH.
_KEEP_AWAKE = """
import asyncio, os, sys
from pathlib import Path
from benchd.sensors.power.status import keep_awake
bin_dir = Path(sys.argv[1] + ".bin")
bin_dir.mkdir()
(bin_dir / "caffeinate").write_text(f"#!/bin/sh\\necho $$ > {sys.argv[1]}\\nexec sleep 120\\n")
(bin_dir / "caffeinate").chmod(0o755)
os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
async def hold():
    async with keep_awake(os.getpid(), platform="darwin", which=lambda name: str(bin_dir / name)):
        await asyncio.sleep(120)
asyncio.run(hold())
"""


def _gone(p: psutil.Process) -> bool:
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("code", [_RUN_TOOL, _SANDBOX, _KEEP_AWAKE], ids=["kld.run_tool", "sandbox.run", "keep_awake"])
def test_a_spawned_child_dies_with_its_sigkilled_spawner(code: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    spawner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(pidfile)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child: psutil.Process | None = None
    try:
        wait_until(lambda: pidfile.is_file() and pidfile.read_text().strip().isdigit(), timeout=30,
                   what="the child's pid file")
        child = psutil.Process(int(pidfile.read_text()))
        assert child.ppid() == spawner.pid  # the spawner's own child, the one PR_SET_PDEATHSIG is set on
        spawner.send_signal(signal.SIGKILL)
        spawner.wait(timeout=10)
        wait_until(lambda: _gone(child), timeout=30,  # type: ignore[arg-type]
                   what="the child's death after its spawner's")
    finally:
        if spawner.poll() is None:
            spawner.kill()
            spawner.wait(timeout=10)
        if child is not None and not _gone(child):
            child.kill()
