"""macOS memory facts via `proc_pid_rusage(pid, RUSAGE_INFO_V4)` (ctypes, libSystem): isolated here.

Why phys_footprint and not RSS: on Apple silicon, Metal buffers (the MLX weights and KV cache, the
llama.cpp Metal backend) live in unified memory that `ri_phys_footprint` counts and RSS does not; it is
what Activity Monitor's "Memory" column shows.

Per-probe peaks: `ri_interval_max_phys_footprint` is the kernel's maximum footprint since the last
`proc_reset_footprint_interval(pid)` (libproc, macOS 10.14+). Reading it with `proc_pid_rusage` does
NOT reset it: XNU's `gather_rusage_info` calls `get_task_phys_footprint_interval_max(task, FALSE)`
(bsd/kern/kern_resource.c), so the sampler may read it every tick and take the last value.

Nothing here can run on Linux: the struct layout is tested against the documented field order of
`struct rusage_info_v4` in <sys/resource.h> (tests/test_memory.py); live tests are marked `darwin`.
"""

from __future__ import annotations

import ctypes
import errno
import sys
from dataclasses import dataclass
from typing import Any

RUSAGE_INFO_V4 = 4

_U64 = ctypes.c_uint64


class RUsageInfoV4(ctypes.Structure):
    """`struct rusage_info_v4` from <sys/resource.h>, field for field, in declaration order."""

    _fields_ = [
        ("ri_uuid", ctypes.c_uint8 * 16),
        ("ri_user_time", _U64),
        ("ri_system_time", _U64),
        ("ri_pkg_idle_wkups", _U64),
        ("ri_interrupt_wkups", _U64),
        ("ri_pageins", _U64),
        ("ri_wired_size", _U64),
        ("ri_resident_size", _U64),
        ("ri_phys_footprint", _U64),
        ("ri_proc_start_abstime", _U64),
        ("ri_proc_exit_abstime", _U64),
        ("ri_child_user_time", _U64),
        ("ri_child_system_time", _U64),
        ("ri_child_pkg_idle_wkups", _U64),
        ("ri_child_interrupt_wkups", _U64),
        ("ri_child_pageins", _U64),
        ("ri_child_elapsed_abstime", _U64),
        ("ri_diskio_bytesread", _U64),
        ("ri_diskio_byteswritten", _U64),
        ("ri_cpu_time_qos_default", _U64),
        ("ri_cpu_time_qos_maintenance", _U64),
        ("ri_cpu_time_qos_background", _U64),
        ("ri_cpu_time_qos_utility", _U64),
        ("ri_cpu_time_qos_legacy", _U64),
        ("ri_cpu_time_qos_user_initiated", _U64),
        ("ri_cpu_time_qos_user_interactive", _U64),
        ("ri_billed_system_time", _U64),
        ("ri_serviced_system_time", _U64),
        ("ri_logical_writes", _U64),
        ("ri_lifetime_max_phys_footprint", _U64),
        ("ri_instructions", _U64),
        ("ri_cycles", _U64),
        ("ri_billed_energy", _U64),
        ("ri_serviced_energy", _U64),
        ("ri_interval_max_phys_footprint", _U64),
        ("ri_runnable_time", _U64),
    ]


@dataclass(frozen=True)
class Footprint:
    """One `proc_pid_rusage` read, in bytes."""

    phys_footprint: int
    interval_max_phys_footprint: int
    lifetime_max_phys_footprint: int
    resident_size: int


_lib: Any = None
_lib_error: str | None = None


def _libsystem() -> Any:
    """libSystem (which carries libproc), loaded once; raises OSError with the reason when absent."""
    global _lib, _lib_error
    if _lib is not None:
        return _lib
    if _lib_error is not None:
        raise OSError(_lib_error)
    if sys.platform != "darwin":
        _lib_error = f"proc_pid_rusage exists only on macOS (this is {sys.platform})"
        raise OSError(_lib_error)
    try:
        lib = ctypes.CDLL("/usr/lib/libSystem.B.dylib", use_errno=True)
        lib.proc_pid_rusage.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.proc_pid_rusage.restype = ctypes.c_int
    except (OSError, AttributeError) as exc:
        _lib_error = f"cannot load proc_pid_rusage from libSystem: {exc}"
        raise OSError(_lib_error) from exc
    _lib = lib
    return lib


def read_footprint(pid: int) -> Footprint | None:
    """The process's footprint now; None when it no longer exists. Other errors raise OSError."""
    lib = _libsystem()
    info = RUsageInfoV4()
    rc = lib.proc_pid_rusage(pid, RUSAGE_INFO_V4, ctypes.byref(info))
    if rc != 0:
        err = ctypes.get_errno()
        if err == errno.ESRCH:
            return None
        raise OSError(err, f"proc_pid_rusage({pid}): {errno.errorcode.get(err, err)}")
    return Footprint(
        phys_footprint=int(info.ri_phys_footprint),
        interval_max_phys_footprint=int(info.ri_interval_max_phys_footprint),
        lifetime_max_phys_footprint=int(info.ri_lifetime_max_phys_footprint),
        resident_size=int(info.ri_resident_size),
    )


def reset_footprint_interval(pid: int) -> str | None:
    """Reset the kernel's interval-max footprint of `pid`; None on success, else the reason."""
    try:
        lib = _libsystem()
        fn = lib.proc_reset_footprint_interval
    except (OSError, AttributeError) as exc:
        return f"proc_reset_footprint_interval unavailable: {exc}"
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    if fn(pid) != 0:
        err = ctypes.get_errno()
        return f"proc_reset_footprint_interval({pid}) failed: {errno.errorcode.get(err, err)}"
    return None


def describe() -> list[dict[str, Any]]:
    """What `benchctl doctor` shows for macOS memory sources."""
    import os

    try:
        fp = read_footprint(os.getpid())
    except OSError as exc:
        return [{"name": "darwin:phys_footprint", "available": False, "reason": str(exc)}]
    reset_err = reset_footprint_interval(os.getpid())
    return [
        {
            "name": "darwin:phys_footprint",
            "available": fp is not None,
            "detail": "proc_pid_rusage(RUSAGE_INFO_V4) ri_phys_footprint per tick",
        },
        {
            "name": "darwin:interval_max_phys_footprint",
            "available": reset_err is None,
            "detail": "per-probe kernel peak, reset with proc_reset_footprint_interval",
            **({"reason": reset_err} if reset_err else {}),
        },
    ]
