"""Linux memory of one process from /proc, and the /proc walk that finds a server's process tree.
Reasons and facts: docs/measuring.md#memory-on-linux."""

from __future__ import annotations

import os
import sys

from benchd.sensors.memory.readers import PeakOf, ProcMem, is_under

_KB = 1024


class LinuxProc:
    """/proc/PID/status (VmRSS, VmHWM, RssAnon, RssFile), /proc/PID/clear_refs and /proc/PID/smaps."""

    source = "kernel:VmHWM"
    current_source = "kernel:VmRSS"
    peak_of: PeakOf = "resident"
    resident_source = "kernel:VmHWM"
    footprint_source = "kernel:RssAnon (sampled max)"
    mapped_source = "kernel:smaps Rss of the model files"

    def read(self, pid: int) -> ProcMem | None:
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                return parse_status(f.read())
        except (FileNotFoundError, ProcessLookupError):
            return None

    def reset(self, pid: int) -> str | None:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except FileNotFoundError:
            return None  # gone: nothing to reset
        except OSError as exc:
            return f"cannot write /proc/{pid}/clear_refs: {exc.strerror or exc}"
        return None

    def mapped_file_bytes(self, pid: int, paths: list[str]) -> int:
        """Resident bytes of the mappings of `paths` (files, or files under a directory), from smaps."""
        try:
            with open(f"/proc/{pid}/smaps", "rb") as f:
                data = f.read()
        except OSError as exc:
            raise OSError(f"cannot read /proc/{pid}/smaps: {exc.strerror or exc}") from exc
        return parse_smaps_rss(data, paths)


def parse_status(data: bytes) -> ProcMem | None:
    """`/proc/PID/status` → ProcMem; None for a zombie or kernel thread (no memory of its own any more)."""
    fields: dict[bytes, int] = {}
    for line in data.splitlines():
        if line[:2] in (b"Vm", b"Rs"):
            key, _, rest = line.partition(b":")
            if key in (b"VmRSS", b"VmHWM", b"RssAnon", b"RssFile", b"RssShmem"):
                fields[key] = int(rest.split()[0]) * _KB
    if b"VmRSS" not in fields:
        return None
    file_ = fields.get(b"RssFile")
    if file_ is not None and b"RssShmem" in fields:
        file_ += fields[b"RssShmem"]  # shared memory is not anonymous heap either
    anon = fields.get(b"RssAnon")
    return ProcMem(fields[b"VmRSS"], fields.get(b"VmHWM"), anon, file_, resident=fields[b"VmRSS"], footprint=anon)


def parse_smaps_rss(data: bytes, paths: list[str]) -> int:
    """Sum `Rss:` of the smaps entries whose mapped path is one of `paths` (or under one)."""
    total = 0
    counting = False
    for line in data.splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and b"-" in head[0] and not head[0].endswith(b":"):  # a mapping header
            path = head[5].decode(errors="replace") if len(head) == 6 else ""
            counting = bool(path) and is_under(path.removesuffix(" (deleted)"), paths)
        elif counting and line.startswith(b"Rss:"):
            total += int(line.split()[1]) * _KB
    return total


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
        children = _task_children(pid, tasks)
        if children is None:
            return None
        for child in children:
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def _task_children(pid: int, tasks: list[str]) -> list[int] | None:
    """The children of `pid`'s tasks (tasks that exited meanwhile skipped); None when they cannot be read."""
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if os.path.exists(f"/proc/{pid}/task/{tid}"):
                return None  # the task lives but has no children file: CONFIG_PROC_CHILDREN off
            continue
        except OSError:
            return None
        out += [int(c) for c in data.split()]
    return out


def describe() -> list[dict[str, object]]:
    """What `benchctl doctor` shows for Linux memory sources (checked on this process)."""
    reader = LinuxProc()
    m = reader.read(os.getpid())
    out: list[dict[str, object]] = []
    hwm = m is not None and m.peak is not None
    out.append({"name": "kernel:VmHWM", "available": hwm, "detail": "/proc/PID/status VmHWM"}
               | ({} if hwm else {"reason": "VmHWM missing from /proc/self/status"}))
    err = reader.reset(os.getpid())  # resets only this process's own peak: harmless
    out.append({"name": "kernel:clear_refs", "available": err is None,
                "detail": "per-probe reset of VmHWM via /proc/PID/clear_refs"} | ({"reason": err} if err else {}))
    split = m is not None and m.anon is not None
    out.append({"name": "kernel:RssAnon/RssFile", "available": split, "detail": "heap vs mmap'd file pages"}
               | ({} if split else {"reason": "kernel older than 4.5: no RssAnon/RssFile"}))
    try:
        reader.mapped_file_bytes(os.getpid(), [])
        out.append({"name": "kernel:smaps", "available": True, "detail": "resident bytes of mapped model files"})
    except OSError as exc:
        out.append({"name": "kernel:smaps", "available": False, "reason": str(exc)})
    return out
