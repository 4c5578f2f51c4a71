"""The memory and swap areas of the platform report: the OS reader run on a child this process starts.

The child allocates, maps a file and exits on command, so each path the sampler relies on is exercised
on this machine: the footprint (or VmRSS), its kernel peak and reset, the resident size, the lifetime
max, the resident bytes of a mapped file, and the zombie check. Raw kernel answers are kept (macOS: the
`rusage_info_v4`, `proc_regionwithpathinfo` and `vm_statistics64` bytes as hex; Linux: the status text)
beside what benchd's parsers made of them, so `replay_memory` can re-parse a user's file here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any

from benchctl.platform_report.context import Context

MB = 1024 * 1024
ALLOC_MIB = 64
MAP_MIB = 8

# A child that allocates N MiB (touching every page) then frees it, or maps a file and touches it.
CHILD = """
import mmap, sys
keep = []
for line in sys.stdin:
    cmd = line.split(maxsplit=1)
    if cmd[0] == "alloc":
        n = int(cmd[1]) * 1024 * 1024
        buf = bytearray(n)
        buf[::4096] = b"\\x01" * (n // 4096)
        del buf
    elif cmd[0] == "map":
        fh = open(cmd[1].strip(), "rb")
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        sum(m[i] for i in range(0, len(m), 4096))
        keep.append((fh, m))
    elif cmd[0] == "quit":
        break
    print("done", flush=True)
"""


def _ask(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    if proc.stdout.readline().strip() != "done":
        raise RuntimeError(f"memory child did not answer {line.split()[0]!r}")


def _footprint_dict(fp: Any) -> dict[str, int] | None:
    return None if fp is None else {**asdict(fp), "peak": fp.peak}


def _darwin_read(pid: int) -> dict[str, Any]:
    from benchd.sensors.memory import darwin as memory_darwin

    raw = memory_darwin.read_rusage_raw(pid)
    return {"rusage_v4_hex": None if raw is None else raw.hex(),
            "parsed": None if raw is None else _footprint_dict(memory_darwin.parse_rusage_v4(raw))}


def _linux_read(pid: int) -> dict[str, Any]:
    from benchd.sensors.memory import linux as memory_linux

    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            lines = [ln for ln in f.read().splitlines() if ln[:2] in (b"Vm", b"Rs") or ln.startswith(b"State")]
    except FileNotFoundError:
        return {"status": None, "parsed": None}
    text = b"\n".join(lines) + b"\n"
    m = memory_linux.parse_status(text)
    return {"status": text.decode(), "parsed": None if m is None else asdict(m)}


def _read(pid: int) -> dict[str, Any]:
    return _darwin_read(pid) if sys.platform == "darwin" else _linux_read(pid)


def collect_memory(ctx: Context) -> dict[str, Any]:
    """Start a child, read it at each step, reset its peak, let it allocate, map a file, exit."""
    from benchd.sensors.memory import sources
    from benchd.sensors.memory.readers import real_paths

    backend = sources.default_backend()
    mapped = ctx.tmp / "mapped-model.bin"
    mapped.write_bytes(b"\x01" * (MAP_MIB * MB))
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    steps: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    try:
        _ask(proc, "noop")
        steps["start"] = _read(proc.pid)
        steps["reset"] = {"error": backend.reset(proc.pid)}
        steps["after_reset"] = _read(proc.pid)
        _ask(proc, f"alloc {ALLOC_MIB}")
        steps["after_alloc_and_free"] = _read(proc.pid)
        _ask(proc, f"map {mapped}")
        steps["after_map"] = _read(proc.pid)
        try:
            got = backend.mapped_file_bytes(proc.pid, real_paths([str(mapped)]))
            steps["mapped_file"] = {"bytes": got, "source": backend.mapped_source}
            checks["mapped_file_counted"] = got >= 0.9 * MAP_MIB * MB
        except OSError as exc:
            steps["mapped_file"] = {"error": str(exc), "source": backend.mapped_source}
        if sys.platform == "darwin":
            steps["mapped_regions"] = _darwin_regions(proc.pid, str(mapped))
        assert proc.stdin is not None
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 5
        while _alive_not_zombie(proc.pid) and time.monotonic() < deadline:  # no poll(): it would reap
            time.sleep(0.01)
        steps["exited_not_reaped"] = _read(proc.pid)
        checks["zombie_reads_as_gone"] = steps["exited_not_reaped"]["parsed"] is None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    checks.update(_memory_checks(steps))
    return {"backend": type(backend).__name__, "sources": {"peak": backend.source, "resident": backend.resident_source,
            "footprint": backend.footprint_source}, "steps": steps, "checks": checks}


def _alive_not_zombie(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _darwin_regions(pid: int, path: str) -> list[dict[str, Any]]:
    from benchd.sensors.memory import darwin as memory_darwin
    from benchd.sensors.memory.readers import is_under, real_paths

    roots = real_paths([path])
    out = []
    for raw in memory_darwin.walk_regions_raw(pid):
        addr, size, pages, where = memory_darwin.parse_region(raw)
        if where and is_under(where, roots):
            out.append({"raw_hex": raw.hex(), "parsed": [addr, size, pages, where]})
    return out


def _memory_checks(steps: dict[str, Any]) -> dict[str, Any]:
    """What must hold on any machine: the kernel peak saw the freed allocation, and a reset lowered it."""
    after = (steps.get("after_alloc_and_free") or {}).get("parsed") or {}
    start = (steps.get("after_reset") or {}).get("parsed") or {}
    now_key = "phys_footprint" if sys.platform == "darwin" else "current"
    out: dict[str, Any] = {}
    if after.get("peak") is not None and start.get(now_key) is not None:
        out["peak_saw_the_freed_allocation"] = after["peak"] >= start[now_key] + 0.9 * ALLOC_MIB * MB
    if sys.platform == "darwin" and after:
        out["lifetime_max_ge_interval_peak"] = after["lifetime_max_phys_footprint"] >= after["interval_max_phys_footprint"]
    return out


def collect_swap(ctx: Context) -> dict[str, Any]:
    """The swap counters the sampler diffs per probe, and (macOS) psutil's pageins beside them."""
    import psutil

    from benchd.sensors.memory.sources import read_swap

    sin, sout, source = read_swap()
    out: dict[str, Any] = {"source": source, "swap_in_bytes": sin, "swap_out_bytes": sout}
    try:
        ps = psutil.swap_memory()
        out["psutil_sin_sout"] = [int(ps.sin), int(ps.sout)]
    except (OSError, RuntimeError) as exc:
        out["psutil_sin_sout"] = f"unavailable: {exc}"
    if sys.platform == "darwin":
        from benchd.sensors.memory import darwin as memory_darwin

        out["page_size"] = os.sysconf("SC_PAGE_SIZE")
        try:
            out["vm_statistics64_hex"] = memory_darwin.read_swap_raw().hex()
        except OSError as exc:
            out["vm_statistics64_hex"] = None
            out["error"] = str(exc)
    elif os.path.exists("/proc/vmstat"):
        with open("/proc/vmstat") as f:
            out["vmstat"] = "".join(ln for ln in f if ln.startswith(("pswpin", "pswpout", "pgpgin", "pgpgout")))
    return out


def replay_memory(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    """Re-parse every raw read of a report; the differences from the recorded parsed values."""
    from benchd.sensors.memory import darwin as memory_darwin
    from benchd.sensors.memory import linux as memory_linux

    out: list[str] = []
    for name, step in (area.get("steps") or {}).items():
        if not isinstance(step, dict):
            continue
        if step.get("rusage_v4_hex") is not None:
            got: Any = _footprint_dict(memory_darwin.parse_rusage_v4(bytes.fromhex(step["rusage_v4_hex"])))
        elif step.get("status") is not None:
            m = memory_linux.parse_status(step["status"].encode())
            got = None if m is None else asdict(m)
        else:
            continue
        if got != step.get("parsed"):
            out.append(f"memory.{name}: parsed {got}, report says {step.get('parsed')}")
    for i, region in enumerate((area.get("steps") or {}).get("mapped_regions") or []):
        got = list(memory_darwin.parse_region(bytes.fromhex(region["raw_hex"])))
        if got != region["parsed"]:
            out.append(f"memory.mapped_regions[{i}]: parsed {got}, report says {region['parsed']}")
    return out


def replay_swap(area: dict[str, Any], platform: dict[str, Any]) -> list[str]:
    from benchd.sensors.memory import darwin as memory_darwin

    raw = area.get("vm_statistics64_hex")
    if raw is None:
        return []
    got = list(memory_darwin.parse_vm_statistics64(bytes.fromhex(raw), int(area["page_size"])))
    want = [area.get("swap_in_bytes"), area.get("swap_out_bytes")]
    return [] if got == want else [f"swap: parsed {got}, report says {want}"]
