"""macOS memory facts via libSystem (ctypes): isolated here, tested on layouts and captured bytes.
Reasons and facts: docs/measuring.md#memory-on-macos."""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from dataclasses import dataclass
from typing import Any

from benchd.sensors.memory.readers import PeakOf, ProcMem, is_under

RUSAGE_INFO_V4 = 4
PROC_PIDREGIONPATHINFO = 8
HOST_VM_INFO64 = 4
MAXPATHLEN = 1024
MAX_REGIONS = 1_000_000  # a bound on the region walk, far above any real process

_U64 = ctypes.c_uint64
_U32 = ctypes.c_uint32
_RUSAGE_V4_ORDER = (
    "user_time system_time pkg_idle_wkups interrupt_wkups pageins wired_size resident_size phys_footprint "
    "proc_start_abstime proc_exit_abstime child_user_time child_system_time child_pkg_idle_wkups "
    "child_interrupt_wkups child_pageins child_elapsed_abstime diskio_bytesread diskio_byteswritten "
    "cpu_time_qos_default cpu_time_qos_maintenance cpu_time_qos_background cpu_time_qos_utility "
    "cpu_time_qos_legacy cpu_time_qos_user_initiated cpu_time_qos_user_interactive billed_system_time "
    "serviced_system_time logical_writes lifetime_max_phys_footprint instructions cycles billed_energy "
    "serviced_energy interval_max_phys_footprint runnable_time"
).split()


class RUsageInfoV4(ctypes.Structure):
    """`struct rusage_info_v4` from <sys/resource.h>: a 16-byte uuid, then 35 uint64_t (296 bytes)."""

    _fields_ = [("ri_uuid", ctypes.c_uint8 * 16), *((f"ri_{n}", _U64) for n in _RUSAGE_V4_ORDER)]


class ProcRegionInfo(ctypes.Structure):
    """`struct proc_regioninfo` from <sys/proc_info.h> (96 bytes)."""

    _fields_ = [
        ("pri_protection", _U32), ("pri_max_protection", _U32), ("pri_inheritance", _U32), ("pri_flags", _U32),
        ("pri_offset", _U64), ("pri_behavior", _U32), ("pri_user_wired_count", _U32), ("pri_user_tag", _U32),
        ("pri_pages_resident", _U32), ("pri_pages_shared_now_private", _U32), ("pri_pages_swapped_out", _U32),
        ("pri_pages_dirtied", _U32), ("pri_ref_count", _U32), ("pri_shadow_depth", _U32), ("pri_share_mode", _U32),
        ("pri_private_pages_resident", _U32), ("pri_shared_pages_resident", _U32), ("pri_obj_id", _U32),
        ("pri_depth", _U32), ("pri_address", _U64), ("pri_size", _U64),
    ]


class VnodeInfoPath(ctypes.Structure):
    """`struct vnode_info_path`: `struct vnode_info` (vinfo_stat 136 + type, pad, fsid: 152) + MAXPATHLEN path."""

    _fields_ = [("vip_vi", ctypes.c_uint8 * 152), ("vip_path", ctypes.c_char * MAXPATHLEN)]


class ProcRegionWithPathInfo(ctypes.Structure):
    """`struct proc_regionwithpathinfo` (PROC_PIDREGIONPATHINFO's answer, 1272 bytes)."""

    _fields_ = [("prp_prinfo", ProcRegionInfo), ("prp_vip", VnodeInfoPath)]


class VmStatistics64(ctypes.Structure):
    """`struct vm_statistics64` from <mach/vm_statistics.h>, revision 1 (152 bytes, 38 integer_t)."""

    _fields_ = [
        ("free_count", _U32), ("active_count", _U32), ("inactive_count", _U32), ("wire_count", _U32),
        ("zero_fill_count", _U64), ("reactivations", _U64), ("pageins", _U64), ("pageouts", _U64),
        ("faults", _U64), ("cow_faults", _U64), ("lookups", _U64), ("hits", _U64), ("purges", _U64),
        ("purgeable_count", _U32), ("speculative_count", _U32), ("decompressions", _U64), ("compressions", _U64),
        ("swapins", _U64), ("swapouts", _U64), ("compressor_page_count", _U32), ("throttled_count", _U32),
        ("external_page_count", _U32), ("internal_page_count", _U32),
        ("total_uncompressed_pages_in_compressor", _U64),
    ]


HOST_VM_INFO64_COUNT = ctypes.sizeof(VmStatistics64) // 4  # 38: the kernel fills this revision's prefix


@dataclass(frozen=True)
class Footprint:
    """One `proc_pid_rusage` read, in bytes. `peak` is max(interval max, footprint): right on every xnu."""

    phys_footprint: int
    interval_max_phys_footprint: int
    lifetime_max_phys_footprint: int
    resident_size: int

    @property
    def peak(self) -> int:
        return max(self.interval_max_phys_footprint, self.phys_footprint)


def parse_rusage_v4(raw: bytes) -> Footprint | None:
    """A `rusage_info_v4` as bytes → Footprint; None for a zombie (exit time set, footprint meaningless)."""
    info = RUsageInfoV4.from_buffer_copy(raw[: ctypes.sizeof(RUsageInfoV4)])
    if info.ri_proc_exit_abstime != 0:
        return None
    return Footprint(phys_footprint=int(info.ri_phys_footprint),
                     interval_max_phys_footprint=int(info.ri_interval_max_phys_footprint),
                     lifetime_max_phys_footprint=int(info.ri_lifetime_max_phys_footprint),
                     resident_size=int(info.ri_resident_size))


def parse_region(raw: bytes) -> tuple[int, int, int, str]:
    """A `proc_regionwithpathinfo` as bytes → (address, size, resident pages, backing file path or "")."""
    r = ProcRegionWithPathInfo.from_buffer_copy(raw[: ctypes.sizeof(ProcRegionWithPathInfo)])
    p = r.prp_prinfo
    return int(p.pri_address), int(p.pri_size), int(p.pri_pages_resident), r.prp_vip.vip_path.decode(errors="replace")


def parse_vm_statistics64(raw: bytes, page_size: int) -> tuple[int, int]:
    """A `vm_statistics64` as bytes → (swapped-in bytes, swapped-out bytes) since boot."""
    s = VmStatistics64.from_buffer_copy(raw[: ctypes.sizeof(VmStatistics64)])
    return int(s.swapins) * page_size, int(s.swapouts) * page_size


_lib: Any = None
_lib_error: str | None = None


def libsystem() -> Any:
    """libSystem (libproc + mach), loaded once; raises OSError with the reason when absent."""
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
        lib.proc_pidinfo.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int]
        lib.proc_pidinfo.restype = ctypes.c_int
        lib.mach_host_self.restype = ctypes.c_uint32
        lib.host_statistics64.argtypes = [ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        lib.host_statistics64.restype = ctypes.c_int
    except (OSError, AttributeError) as exc:
        _lib_error = f"cannot load libproc/mach from libSystem: {exc}"
        raise OSError(_lib_error) from exc
    _lib = lib
    return lib


def _errno_text(err: int) -> str:
    return errno.errorcode.get(err, str(err))


def read_rusage_raw(pid: int) -> bytes | None:
    """The raw `rusage_info_v4` of `pid`; None when it does not exist. Other errors raise OSError."""
    lib = libsystem()
    info = RUsageInfoV4()
    if lib.proc_pid_rusage(pid, RUSAGE_INFO_V4, ctypes.byref(info)) != 0:
        err = ctypes.get_errno()
        if err == errno.ESRCH:
            return None
        raise OSError(err, f"proc_pid_rusage({pid}): {_errno_text(err)}")
    return bytes(info)


def read_footprint(pid: int) -> Footprint | None:
    """The process's footprint now; None when it no longer exists (or is a zombie)."""
    raw = read_rusage_raw(pid)
    return None if raw is None else parse_rusage_v4(raw)


def reset_footprint_interval(pid: int) -> str | None:
    """Reset the kernel's interval-max footprint of `pid`; None on success, else the reason."""
    try:
        fn = libsystem().proc_reset_footprint_interval
    except (OSError, AttributeError) as exc:
        return f"proc_reset_footprint_interval unavailable: {exc}"
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    if fn(pid) != 0:
        return f"proc_reset_footprint_interval({pid}) failed: {_errno_text(ctypes.get_errno())}"
    return None


def walk_regions_raw(pid: int) -> list[bytes]:
    """Every VM region of `pid` as raw `proc_regionwithpathinfo` bytes, in address order."""
    lib = libsystem()
    buf = ProcRegionWithPathInfo()
    out: list[bytes] = []
    addr = 0
    for _ in range(MAX_REGIONS):
        n = lib.proc_pidinfo(pid, PROC_PIDREGIONPATHINFO, addr, ctypes.byref(buf), ctypes.sizeof(buf))
        if n <= 0:
            err = ctypes.get_errno()
            if err in (0, errno.EINVAL) and out:  # past the last region
                return out
            raise OSError(err, f"proc_pidinfo({pid}, PROC_PIDREGIONPATHINFO): {_errno_text(err)}")
        raw = bytes(buf)
        out.append(raw)
        start, size, _, _ = parse_region(raw)
        if start + size <= addr:
            return out
        addr = start + size
    return out


def walk_regions(pid: int) -> list[tuple[int, int, int, str]]:
    """Every VM region of `pid` with its backing file: (address, size, resident pages, path)."""
    return [parse_region(raw) for raw in walk_regions_raw(pid)]


def read_swap_raw() -> bytes:
    """The raw `vm_statistics64` of this host (HOST_VM_INFO64). Raises OSError with the reason."""
    lib = libsystem()
    stats = VmStatistics64()
    count = ctypes.c_uint32(HOST_VM_INFO64_COUNT)
    kr = lib.host_statistics64(lib.mach_host_self(), HOST_VM_INFO64, ctypes.byref(stats), ctypes.byref(count))
    if kr != 0:
        raise OSError(f"host_statistics64(HOST_VM_INFO64) returned kern_return {kr}")
    return bytes(stats)


def read_swap() -> tuple[int, int]:
    """(swapped-in bytes, swapped-out bytes) since boot, from vm_statistics64.swapins/swapouts."""
    return parse_vm_statistics64(read_swap_raw(), os.sysconf("SC_PAGE_SIZE"))


class Darwin:
    """Footprint per tick with its kernel peak, resident size beside it, model files by region walk."""

    source = "darwin:phys_footprint"
    current_source = "darwin:phys_footprint"
    peak_of: PeakOf = "footprint"
    resident_source = "darwin:ri_resident_size (sampled max)"
    footprint_source = "darwin:max(interval_max_phys_footprint, phys_footprint)"
    mapped_source = "darwin:PROC_PIDREGIONPATHINFO resident pages of the model files"

    def read(self, pid: int) -> ProcMem | None:
        fp = read_footprint(pid)
        if fp is None:
            return None
        return ProcMem(fp.phys_footprint, fp.peak, None, None, resident=fp.resident_size, footprint=fp.phys_footprint)

    def reset(self, pid: int) -> str | None:
        return reset_footprint_interval(pid)

    def mapped_file_bytes(self, pid: int, paths: list[str]) -> int:
        page = os.sysconf("SC_PAGE_SIZE")
        return sum(pages * page for _, _, pages, path in walk_regions(pid) if path and is_under(path, paths))


def describe() -> list[dict[str, object]]:
    """What `benchctl doctor` shows for macOS memory sources (checked on this process)."""
    try:
        fp = read_footprint(os.getpid())
    except OSError as exc:
        return [{"name": "darwin:phys_footprint", "available": False, "reason": str(exc)}]
    reset_err = reset_footprint_interval(os.getpid())
    out: list[dict[str, object]] = [
        {"name": "darwin:phys_footprint", "available": fp is not None,
         "detail": "proc_pid_rusage(RUSAGE_INFO_V4) ri_phys_footprint and ri_resident_size per tick"},
        {"name": "darwin:interval_max_phys_footprint", "available": reset_err is None,
         "detail": "per-probe kernel peak, reset with proc_reset_footprint_interval (private SPI)",
         **({"reason": reset_err} if reset_err else {})},
    ]
    try:
        n = len(walk_regions(os.getpid()))
        out.append({"name": "darwin:region-walk", "available": True,
                    "detail": f"PROC_PIDREGIONPATHINFO ({n} regions here): resident bytes of mapped model files"})
    except OSError as exc:
        out.append({"name": "darwin:region-walk", "available": False, "reason": str(exc)})
    try:
        read_swap()
        out.append({"name": "darwin:vm_statistics64", "available": True, "detail": "swapins/swapouts per probe"})
    except OSError as exc:
        out.append({"name": "darwin:vm_statistics64", "available": False, "reason": str(exc)})
    return out
