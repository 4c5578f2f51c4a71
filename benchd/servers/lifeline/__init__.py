"""A spawned server dies with the daemon: the per-platform hook `Supervisor.start` passes to the spawn.

Linux (`linux.py`): PR_SET_PDEATHSIG, so a SIGKILLed daemon's servers get SIGKILL at once. Elsewhere no
hook yet (macOS: the orphan reaper at the next start kills them). Reasons: docs/runtimes.md#process-groups.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def die_with_daemon() -> Callable[[], None] | None:
    """The `preexec_fn` that ties a server's life to this thread's (the spawning loop's), or None."""
    if sys.platform.startswith("linux"):
        from benchd.servers.lifeline.linux import pdeathsig_preexec

        return pdeathsig_preexec()
    return None
