"""macOS: no PR_SET_PDEATHSIG, so a watcher process (double-forked, kqueue NOTE_EXIT on the daemon and the
child) kills the child's group when the daemon dies. UNTESTED ON macOS: docs/runtimes.md#process-groups."""

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
