"""Per-OS readers of one process's memory, and the Linux /proc walk that finds a server's process tree.

Why a module of its own: `benchd.sensors.memory.sampler` is about *sampling* (ticks, peaks across a tree, the probe's
result); what one process's memory is, and how its kernel peak is reset, differs per OS and is the part
a new platform adds to. Each backend names its sources (`source`, `current_source`), which
`MemoryResult.source` reports; see `benchd.sensors.memory.sampler` for which is used when and why.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Protocol

import psutil

_KB = 1024


@dataclass(frozen=True)
class ProcMem:
    """One process at one instant, bytes. `peak` is the kernel's peak since reset, when it has one."""

    current: int
    peak: int | None
    anon: int | None
    file: int | None


class Backend(Protocol):
    source: str  # the name of the kernel peak source
    current_source: str  # the name of what the series samples

    def read(self, pid: int) -> ProcMem | None: ...  # None: the process is gone

    def reset(self, pid: int) -> str | None: ...  # None: ok, else why not


class LinuxProc:
    """/proc/PID/status (VmRSS, VmHWM, RssAnon, RssFile) and /proc/PID/clear_refs."""

    source = "kernel:VmHWM"
    current_source = "kernel:VmRSS"

    def read(self, pid: int) -> ProcMem | None:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                data = f.read()
        except (FileNotFoundError, ProcessLookupError):
            return None
        fields: dict[bytes, int] = {}
        for line in data.splitlines():
            if line[:2] in (b"Vm", b"Rs"):
                key, _, rest = line.partition(b":")
                if key in (b"VmRSS", b"VmHWM", b"RssAnon", b"RssFile", b"RssShmem"):
                    fields[key] = int(rest.split()[0]) * _KB
        if b"VmRSS" not in fields:  # zombie or kernel thread: no memory of its own any more
            return None
        file_ = fields.get(b"RssFile")
        if file_ is not None and b"RssShmem" in fields:
            file_ += fields[b"RssShmem"]  # shared memory is not anonymous heap either
        return ProcMem(fields[b"VmRSS"], fields.get(b"VmHWM"), fields.get(b"RssAnon"), file_)

    def reset(self, pid: int) -> str | None:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except FileNotFoundError:
            return None  # gone: nothing to reset
        except OSError as exc:
            return f"cannot write /proc/{pid}/clear_refs: {exc.strerror or exc}"
        return None


class Darwin:
    """proc_pid_rusage phys_footprint; the kernel's interval max is the peak (benchd.sensors.memory.darwin)."""

    source = "darwin:phys_footprint"
    current_source = "darwin:phys_footprint"

    def read(self, pid: int) -> ProcMem | None:
        from benchd.sensors.memory import darwin as memory_darwin

        fp = memory_darwin.read_footprint(pid)
        if fp is None:
            return None
        peak = fp.interval_max_phys_footprint or None  # 0: kernel built without interval max
        return ProcMem(fp.phys_footprint, peak, None, None)

    def reset(self, pid: int) -> str | None:
        from benchd.sensors.memory import darwin as memory_darwin

        return memory_darwin.reset_footprint_interval(pid)


class PsutilRss:
    """Portable fallback: psutil RSS, no kernel peak."""

    source = "psutil:rss"
    current_source = "psutil:rss"

    def read(self, pid: int) -> ProcMem | None:
        try:
            rss = psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        return ProcMem(int(rss), None, None, None)

    def reset(self, pid: int) -> str | None:
        return "psutil has no resettable kernel peak"


def default_backend() -> Backend:
    if sys.platform.startswith("linux") and os.path.exists("/proc/self/status"):
        return LinuxProc()
    if sys.platform == "darwin":
        return Darwin()
    return PsutilRss()



def proc_tree(root: int) -> set[int] | None:
    """{root} + descendants from /proc/PID/task/TID/children; None when that file is unavailable
    (not Linux, or a kernel without CONFIG_PROC_CHILDREN): the caller falls back to psutil."""
    if not sys.platform.startswith("linux"):
        return None
    seen = {root}
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            if pid == root:
                return set()
            continue  # a descendant exited meanwhile
        except OSError:
            return None
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                if os.path.exists(f"/proc/{pid}/task/{tid}"):
                    return None  # the task lives but has no children file: CONFIG_PROC_CHILDREN off
                continue  # that thread (or the process) exited meanwhile
            except OSError:
                return None
            for c in data.split():
                child = int(c)
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
    return seen
