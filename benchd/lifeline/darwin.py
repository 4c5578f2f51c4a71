"""macOS: no PR_SET_PDEATHSIG, so a tiny watcher process does its job. UNTESTED ON macOS (CI runs Linux):
`tests/servers/test_lifeline.py` covers the platform selection and, on Linux, the fork/exec plumbing with a
stand-in for the watcher script; the kqueue part has never run.

Between fork and exec the child (the future server, same pid) forks twice: the middle process exits at once,
so the watcher is launchd's child, not the server's (outside the server's process tree and, after setsid,
its process group: memory samples and group kills never see it). The watcher, stdio on /dev/null, no other
fd, an empty environment (no server token: the orphan reaper never takes it for a server), execs
`python -I -S -c WATCHER <daemon pid> <child pid> <group>` and waits on kqueue NOTE_EXIT for both: the
child exiting first ends it; the daemon exiting first (or already gone) makes it SIGKILL the child, its
whole process group when the child leads one (`start_new_session`). One python process (~10 MB) per spawn
while it runs. A pid reused in the instant between an exit and the kill is the known gap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

WATCHER = r'''
import os, select, signal, sys
daemon, child, group = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
kq = select.kqueue()
def watch(pid):
    try:
        kq.control([select.kevent(pid, select.KQ_FILTER_PROC, select.KQ_EV_ADD | select.KQ_EV_ONESHOT,
                                  select.KQ_NOTE_EXIT)], 0)
        return True
    except OSError:  # ESRCH: already gone
        return False
if not watch(child):
    sys.exit(0)
if watch(daemon) and kq.control(None, 1)[0].ident == child:
    sys.exit(0)
try:
    (os.killpg if group else os.kill)(child, signal.SIGKILL)
except OSError:
    pass
'''

_MAX_FD = 1 << 16


def watcher_preexec(python: str = sys.executable, script: str = WATCHER) -> Callable[[], None]:
    """A preexec_fn: starts the watcher that SIGKILLs this child when the daemon (this process) exits;
    a parent already gone by then makes the child exit at once."""
    parent = os.getpid()
    top = min(os.sysconf("SC_OPEN_MAX"), _MAX_FD) if hasattr(os, "sysconf") else 256

    def preexec() -> None:
        child = os.getpid()
        argv = [python, "-I", "-S", "-c", script, str(parent), str(child), "1" if os.getpgrp() == child else "0"]
        middle = os.fork()
        if middle == 0:
            try:
                if os.fork() == 0:  # the watcher
                    os.setsid()
                    null = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):
                        os.dup2(null, fd)
                    os.closerange(3, max(top, 3))
                    os.execve(python, argv, {})
            finally:
                os._exit(0)
        os.waitpid(middle, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec
