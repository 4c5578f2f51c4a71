"""A spawned process dies with the daemon: the per-platform hook every spawn passes as its `preexec_fn`.

Linux (`linux.py`): PR_SET_PDEATHSIG, so a SIGKILLed daemon's children get SIGKILL at once. macOS
(`darwin.py`, untested there): a watcher process waits on kqueue NOTE_EXIT for the daemon and SIGKILLs the
child. Elsewhere none (the orphan reaper at the next start kills servers). Reasons: docs/runtimes.md#process-groups.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def die_with_daemon(platform: str | None = None) -> Callable[[], None] | None:
    """The `preexec_fn` that ties a child's life to the daemon's (on Linux: to the spawning thread's), or
    None where there is no mechanism. `platform`: `sys.platform` unless given (tests)."""
    plat = platform or sys.platform
    if plat.startswith("linux"):
        from benchd.lifeline.linux import pdeathsig_preexec

        return pdeathsig_preexec()
    if plat == "darwin":
        from benchd.lifeline.darwin import watcher_preexec

        return watcher_preexec()
    return None
