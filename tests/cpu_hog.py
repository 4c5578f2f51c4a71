"""Run a command with a CPU hog on every core: `python tests/cpu_hog.py [--per-core N] -- COMMAND...`.

What `make test-stress` runs the real-server suites under: one busy process per core (`os.cpu_count()`,
times `--per-core`), each in its own session so the kernel's autogroups give it the share of any other
session (a server, pytest), started before COMMAND and killed after it, whatever way it ends. A hog also
ends by itself when this script's process is gone (it checks its parent), so a SIGKILL of the script
leaves no busy loop behind. Exits with COMMAND's exit status; prints the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from types import FrameType

#: The hog: spin, and stop once its parent (this script, whose pid is its argument) is gone, even if that
#: happened before the hog's interpreter was up.
HOG = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unavailable"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-core", type=int, default=1, help="busy processes per core (default 1)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run under the hog (after --)")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (after --)")
    n = (os.cpu_count() or 1) * max(1, args.per_core)
    hogs: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        for _ in range(n):
            hogs.append(subprocess.Popen([sys.executable, "-c", HOG, str(os.getpid())], start_new_session=True))
        print(f"[cpu_hog] {n} busy processes on {os.cpu_count()} cores; load average {loadavg()}", file=sys.stderr)
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
        print(f"[cpu_hog] {len(hogs)} busy processes killed; load average {loadavg()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
