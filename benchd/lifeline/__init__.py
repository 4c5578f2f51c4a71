"""The `preexec_fn` every spawn passes so the process dies with the daemon (Linux PR_SET_PDEATHSIG, a macOS
watcher, elsewhere none). Reasons: docs/runtimes.md#process-groups."""

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
