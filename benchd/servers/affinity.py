"""Keeping benchd's probe client off the server's cores (the sweep's `pin_client`, Linux only).
Reasons and facts: docs/measuring.md#client-pinning."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from benchd.schemas import CpuAffinity
from benchd.stats.notation import plural

SOURCE = "sched_getaffinity of the server's pid after its start; the event loop thread's own mask"


def usable_cpus() -> list[int] | None:
    """The cores this thread may run on, or None where the OS has no affinity API (macOS)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def plan(requested: bool, threads: int | None, threads_how: str) -> CpuAffinity:
    """Which cores the server and the probe client get, or why they share every core."""
    if not requested:
        return CpuAffinity(requested=False, applied=False, server_threads=threads,
                           reason="pin_client is off: the server and the probe client share every core")
    cpus = usable_cpus()
    if cpus is None:
        return CpuAffinity(requested=True, applied=False, server_threads=threads,
                           reason="this OS has no sched_setaffinity (pinning is Linux-only)")
    if threads is None:
        return CpuAffinity(requested=True, applied=False, reason=f"the server's thread count is unknown: {threads_how}")
    if threads >= len(cpus):
        return CpuAffinity(requested=True, applied=False, server_threads=threads,
                           reason=f"no core left for the client: {plural(threads, 'server thread')} "
                                  f"({threads_how}) on {plural(len(cpus), 'usable core')} {cpus}")
    return CpuAffinity(requested=True, applied=True, server_threads=threads, server_cpus=cpus[:threads],
                       client_cpus=cpus[threads:], source=SOURCE)


@contextlib.contextmanager
def spawning_on(cpus: Sequence[int] | None) -> Iterator[None]:
    """Narrow this thread's mask to `cpus` for a spawn (the child inherits it); restored after."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def confirm(planned: CpuAffinity, server_pid: int) -> CpuAffinity:
    """The plan checked against the server's actual mask (a mismatch is recorded, not hidden)."""
    if not planned.applied:
        return planned
    try:
        actual = sorted(os.sched_getaffinity(server_pid))
    except OSError as exc:
        return CpuAffinity(requested=True, applied=False, server_threads=planned.server_threads,
                           reason=f"cannot read the server's affinity: {exc}")
    if actual != planned.server_cpus:
        return CpuAffinity(requested=True, applied=False, server_threads=planned.server_threads,
                           reason=f"the server runs on cores {actual}, not the planned {planned.server_cpus}")
    return planned


class ClientPin:
    """The event loop thread pinned to the client's cores while a pinned server runs; `release` restores."""

    def __init__(self) -> None:
        self._saved: set[int] | None = None

    def hold(self, cpus: Sequence[int]) -> None:
        if self._saved is None:
            self._saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)

    def release(self) -> None:
        if self._saved is not None:
            os.sched_setaffinity(0, self._saved)
            self._saved = None
