"""macOS memory readers (benchd.sensors.memory.darwin): ctypes layouts against the header declarations,
the parsers on packed bytes, the refusal off macOS, and the live paths (marked `darwin`).

The offsets below are derived from the C declarations independently of ctypes: `<sys/resource.h>`
(rusage_info_v4), `<sys/proc_info.h>` (proc_regioninfo, vinfo_stat, vnode_info, vnode_info_path,
proc_regionwithpathinfo), `<mach/vm_statistics.h>` (vm_statistics64, revision 1).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

import pytest

from benchd.sensors.memory import darwin as memory_darwin
from benchd.sensors.memory import sampler as memory

MB = 1024 * 1024

DOCUMENTED_V4_ORDER = [
    "ri_user_time", "ri_system_time", "ri_pkg_idle_wkups", "ri_interrupt_wkups", "ri_pageins",
    "ri_wired_size", "ri_resident_size", "ri_phys_footprint", "ri_proc_start_abstime",
    "ri_proc_exit_abstime", "ri_child_user_time", "ri_child_system_time", "ri_child_pkg_idle_wkups",
    "ri_child_interrupt_wkups", "ri_child_pageins", "ri_child_elapsed_abstime", "ri_diskio_bytesread",
    "ri_diskio_byteswritten", "ri_cpu_time_qos_default", "ri_cpu_time_qos_maintenance",
    "ri_cpu_time_qos_background", "ri_cpu_time_qos_utility", "ri_cpu_time_qos_legacy",
    "ri_cpu_time_qos_user_initiated", "ri_cpu_time_qos_user_interactive", "ri_billed_system_time",
    "ri_serviced_system_time", "ri_logical_writes", "ri_lifetime_max_phys_footprint", "ri_instructions",
    "ri_cycles", "ri_billed_energy", "ri_serviced_energy", "ri_interval_max_phys_footprint",
    "ri_runnable_time",
]


def test_rusage_info_v4_layout_matches_header() -> None:
    S = memory_darwin.RUsageInfoV4
    assert S.ri_uuid.offset == 0 and S.ri_uuid.size == 16
    for i, name in enumerate(DOCUMENTED_V4_ORDER):
        field = getattr(S, name)
        assert field.offset == 16 + 8 * i, name
        assert field.size == 8, name
    assert ctypes.sizeof(S) == 16 + 8 * len(DOCUMENTED_V4_ORDER) == 296
    assert S.ri_phys_footprint.offset == 72 and S.ri_resident_size.offset == 64
    assert S.ri_proc_exit_abstime.offset == 88
    assert S.ri_lifetime_max_phys_footprint.offset == 240 and S.ri_interval_max_phys_footprint.offset == 280
    assert memory_darwin.RUSAGE_INFO_V4 == 4


def test_region_with_path_layout_matches_header() -> None:
    R = memory_darwin.ProcRegionInfo
    assert ctypes.sizeof(R) == 96  # 4 u32 + u64 + 14 u32 + 2 u64
    assert (R.pri_offset.offset, R.pri_pages_resident.offset, R.pri_share_mode.offset) == (16, 36, 60)
    assert (R.pri_obj_id.offset, R.pri_depth.offset, R.pri_address.offset, R.pri_size.offset) == (72, 76, 80, 88)
    W = memory_darwin.ProcRegionWithPathInfo
    # vinfo_stat: u32 dev, u16 mode, u16 nlink, u64 ino, uid, gid, 8 x i64 times, off_t size, i64 blocks,
    # i32 blksize, u32 flags, u32 gen, u32 rdev, i64 qspare[2] = 136; vnode_info adds type, pad, fsid = 152
    assert struct.calcsize("=IHHQII8qqqiIIIqq") == 136
    assert ctypes.sizeof(W) == 96 + 152 + 1024 == 1272
    assert W.prp_vip.offset == 96 and memory_darwin.VnodeInfoPath.vip_path.offset == 152
    assert memory_darwin.PROC_PIDREGIONPATHINFO == 8


def test_vm_statistics64_layout_matches_header() -> None:
    V = memory_darwin.VmStatistics64
    assert ctypes.sizeof(V) == 152 and memory_darwin.HOST_VM_INFO64_COUNT == 38
    assert (V.pageins.offset, V.pageouts.offset) == (32, 40)
    assert (V.swapins.offset, V.swapouts.offset) == (112, 120)
    assert V.total_uncompressed_pages_in_compressor.offset == 144
    assert memory_darwin.HOST_VM_INFO64 == 4


def _v4(**values: int) -> bytes:
    order = [n.removeprefix("ri_") for n in DOCUMENTED_V4_ORDER]
    return struct.pack("<16s35Q", bytes(16), *(values.get(n, 0) for n in order))


def test_peak_is_never_below_the_footprint() -> None:
    """Finding 4: up to xnu-8792 an interval reset sets the max to 0; later ones to the current footprint."""
    old = memory_darwin.parse_rusage_v4(_v4(phys_footprint=50 * MB, interval_max_phys_footprint=0))
    assert old is not None and old.peak == 50 * MB
    dropped = memory_darwin.parse_rusage_v4(_v4(phys_footprint=40 * MB, interval_max_phys_footprint=30 * MB))
    assert dropped is not None and dropped.peak == 40 * MB  # footprint fell first on an old kernel
    new = memory_darwin.parse_rusage_v4(_v4(phys_footprint=40 * MB, interval_max_phys_footprint=90 * MB,
                                            lifetime_max_phys_footprint=95 * MB, resident_size=60 * MB))
    assert new is not None and new.peak == 90 * MB and new.resident_size == 60 * MB
    assert new.lifetime_max_phys_footprint == 95 * MB


def test_a_zombie_is_gone() -> None:
    """Finding 7: proc_pid_rusage answers for a zombie, with footprint 0 and its exit time set."""
    assert memory_darwin.parse_rusage_v4(_v4(phys_footprint=0, proc_exit_abstime=123456789)) is None
    assert memory_darwin.parse_rusage_v4(_v4(phys_footprint=0)) is not None  # alive, just tiny


def test_swap_is_swapins_not_pageins() -> None:
    """Finding 3: psutil's sin/sout on macOS are pageins/pageouts (a GGUF read counts); swap is swapins."""
    raw = struct.pack("<4I9Q2I4Q4IQ", 0, 0, 0, 0, 0, 0, 777, 888, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 5, 0, 0, 0, 0, 0)
    assert memory_darwin.parse_vm_statistics64(raw, 16384) == (3 * 16384, 5 * 16384)


def test_region_parser_and_model_file_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk's answers (packed as the kernel writes them) summed over the model's regions only."""
    def region(addr: int, size: int, pages: int, path: str) -> bytes:
        info = struct.pack("<4IQ14I2Q", 1, 1, 0, 0, 0, 0, 0, 0, pages, 0, 0, 0, 1, 0, 2, 0, pages, 7, 0, addr, size)
        return info + bytes(152) + path.encode().ljust(1024, b"\0")

    raws = [region(0x1000, 0x4000, 1, ""), region(0x10000, 8 * MB, 512, "/m/model.gguf"),
            region(0x900000, MB, 64, "/m/model.gguf"), region(0xA00000, MB, 64, "/usr/lib/dyld")]
    assert memory_darwin.parse_region(raws[1]) == (0x10000, 8 * MB, 512, "/m/model.gguf")
    monkeypatch.setattr(memory_darwin, "walk_regions_raw", lambda pid: raws)
    monkeypatch.setattr(memory_darwin.os, "sysconf", lambda name: 16384)
    assert memory_darwin.Darwin().mapped_file_bytes(1, ["/m/model.gguf"]) == (512 + 64) * 16384
    assert memory_darwin.Darwin().mapped_file_bytes(1, ["/m"]) == (512 + 64) * 16384  # an MLX model dir
    assert memory_darwin.Darwin().mapped_file_bytes(1, ["/other"]) == 0


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the non-macOS refusal")
def test_darwin_reader_refuses_off_macos() -> None:
    with pytest.raises(OSError, match="only on macOS"):
        memory_darwin.read_footprint(os.getpid())
    with pytest.raises(OSError, match="only on macOS"):
        memory_darwin.read_swap()
    assert memory_darwin.reset_footprint_interval(os.getpid()) is not None


# ------------------------------------------------------------------------------------------- live


@pytest.mark.darwin
@pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS")
def test_darwin_live_readers(tmp_path) -> None:  # type: ignore[no-untyped-def]  # pragma: no cover - macOS only
    fp = memory_darwin.read_footprint(os.getpid())
    assert fp is not None and fp.phys_footprint > 0 and fp.resident_size > 0
    assert memory_darwin.reset_footprint_interval(os.getpid()) is None
    import mmap

    f = tmp_path / "m.bin"
    f.write_bytes(b"\x01" * (8 * MB))
    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        sum(mm[i] for i in range(0, len(mm), 4096))
        got = memory_darwin.Darwin().mapped_file_bytes(os.getpid(), [os.path.realpath(f)])
    assert got >= 7 * MB
    sin, sout = memory_darwin.read_swap()
    assert sin >= 0 and sout >= 0
    assert memory.MemorySampler(os.getpid()).backend.peak_of == "footprint"
