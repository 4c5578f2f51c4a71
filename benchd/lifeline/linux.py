"""Linux: prctl(PR_SET_PDEATHSIG, SIGKILL) in the child between fork and exec (kept across exec)."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def pdeathsig_preexec() -> Callable[[], None]:
    """A preexec_fn: the child gets SIGKILL when the thread that forked it ends (the daemon's loop
    thread: the daemon's death); a parent already gone by then kills the child at once."""
    parent = os.getpid()

    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec
