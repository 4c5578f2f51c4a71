"""Writes platform_report_sample.json: what `benchctl doctor --platform-report` would record on a Mac
running macOS 13.0 (xnu-8792, where an interval reset sets the interval max to 0), SYNTHESIZED here.

Independent of benchd on purpose: the kernel structs are packed with `struct` from the header
declarations (not with benchd's ctypes classes), the text outputs are the committed samples, and every
"parsed" value is written by hand from what the header or pmset.c says the bytes mean. The replay test
then checks benchd's parsers against these expectations. Replace with a real report when one arrives.

Run: python tests/data/darwin/make_platform_report_sample.py
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HERE = Path(__file__).parent
PAGE = 16384  # arm64 macOS
MB = 1024 * 1024

# <sys/resource.h> rusage_info_v4: uint8_t ri_uuid[16]; then 35 uint64_t in declaration order.
V4 = ["user_time", "system_time", "pkg_idle_wkups", "interrupt_wkups", "pageins", "wired_size", "resident_size",
      "phys_footprint", "proc_start_abstime", "proc_exit_abstime", "child_user_time", "child_system_time",
      "child_pkg_idle_wkups", "child_interrupt_wkups", "child_pageins", "child_elapsed_abstime", "diskio_bytesread",
      "diskio_byteswritten", "cpu_time_qos_default", "cpu_time_qos_maintenance", "cpu_time_qos_background",
      "cpu_time_qos_utility", "cpu_time_qos_legacy", "cpu_time_qos_user_initiated", "cpu_time_qos_user_interactive",
      "billed_system_time", "serviced_system_time", "logical_writes", "lifetime_max_phys_footprint", "instructions",
      "cycles", "billed_energy", "serviced_energy", "interval_max_phys_footprint", "runnable_time"]


def rusage(**values: int) -> str:
    fields = {"user_time": 41_000_000, "system_time": 12_000_000, "proc_start_abstime": 912_345_678_901, **values}
    return struct.pack("<16s35Q", bytes(range(16)), *(fields.get(n, 0) for n in V4)).hex()


def footprint(fp: int, interval: int, lifetime: int, resident: int) -> dict[str, int]:
    """What the parser must make of it: the peak is max(interval max, footprint) (xnu <= 8792 resets to 0)."""
    return {"phys_footprint": fp, "interval_max_phys_footprint": interval, "lifetime_max_phys_footprint": lifetime,
            "resident_size": resident, "peak": max(interval, fp)}


def region(addr: int, size: int, pages: int, path: str) -> str:
    """<sys/proc_info.h> proc_regionwithpathinfo: proc_regioninfo (4 u32, u64 offset, 14 u32, 2 u64: 96 bytes),
    then vnode_info_path: vnode_info (vinfo_stat 136 + vi_type, vi_pad, fsid: 152 bytes) + char[MAXPATHLEN]."""
    info = struct.pack("<4IQ14I2Q", 1, 1, 0, 0, 0, 0, 0, 0, pages, 0, 0, 0, 1, 0, 2, 0, pages, 7, 0, addr, size)
    return (info + bytes(152) + path.encode().ljust(1024, b"\0")).hex()


def vm_statistics64(pageins: int, pageouts: int, swapins: int, swapouts: int) -> str:
    """<mach/vm_statistics.h> vm_statistics64, revision 1 (152 bytes)."""
    return struct.pack("<4I9Q2I4Q4IQ", 81920, 400000, 380000, 120000, 9_000_000, 150_000, pageins, pageouts,
                       30_000_000, 2_000_000, 0, 0, 1_000, 3_000, 20_000, 5_000_000, 5_400_000, swapins, swapouts,
                       60_000, 0, 250_000, 650_000, 140_000).hex()


def text(name: str) -> str:
    return (HERE / name).read_text()


def main() -> None:
    model = "~/benchd-report-x/mapped-model.bin"
    steps = {
        "start": {"rusage_v4_hex": rusage(phys_footprint=9_961_472, interval_max_phys_footprint=10_010_624,
                                          lifetime_max_phys_footprint=10_010_624, resident_size=14_680_064),
                  "parsed": footprint(9_961_472, 10_010_624, 10_010_624, 14_680_064)},
        "reset": {"error": None},
        # macOS 13.0: the reset set the interval max to 0, so only max(.., footprint) gives a true peak
        "after_reset": {"rusage_v4_hex": rusage(phys_footprint=9_961_472, interval_max_phys_footprint=0,
                                                lifetime_max_phys_footprint=10_010_624, resident_size=14_680_064),
                        "parsed": footprint(9_961_472, 0, 10_010_624, 14_680_064)},
        "after_alloc_and_free": {"rusage_v4_hex": rusage(phys_footprint=10_043_392, interval_max_phys_footprint=77_152_256,
                                                         lifetime_max_phys_footprint=77_152_256, resident_size=14_712_832),
                                 "parsed": footprint(10_043_392, 77_152_256, 77_152_256, 14_712_832)},
        # mapping 8 MiB of a file: resident grows, the footprint does not (clean file-backed pages)
        "after_map": {"rusage_v4_hex": rusage(phys_footprint=10_059_776, interval_max_phys_footprint=77_152_256,
                                              lifetime_max_phys_footprint=77_152_256, resident_size=23_101_440),
                      "parsed": footprint(10_059_776, 77_152_256, 77_152_256, 23_101_440)},
        "mapped_file": {"bytes": 8 * MB, "source": "darwin:PROC_PIDREGIONPATHINFO resident pages of the model files"},
        "mapped_regions": [{"raw_hex": region(0x1_0480_0000, 8 * MB, 8 * MB // PAGE, "/private/var/folders/x/T/" + model[2:]),
                            "parsed": [0x1_0480_0000, 8 * MB, 8 * MB // PAGE, "/private/var/folders/x/T/" + model[2:]]}],
        # a zombie still answers proc_pid_rusage, with footprint 0 and its exit time set: gone
        "exited_not_reaped": {"rusage_v4_hex": rusage(phys_footprint=0, proc_exit_abstime=913_000_000_000,
                                                      lifetime_max_phys_footprint=77_152_256),
                              "parsed": None},
    }
    report = {
        "report_version": 1,
        "benchd_version": "0.1.0",
        "created_at": "2026-11-30T06:00:00Z",
        "synthesized": "made by tests/data/darwin/make_platform_report_sample.py, not captured on a Mac",
        "platform": {"sys_platform": "darwin", "release": "22.1.0", "macos": "13.0", "machine": "arm64",
                     "python": "3.12.7", "page_size": PAGE},
        "areas": {
            "memory": {"backend": "Darwin", "steps": steps,
                       "checks": {"mapped_file_counted": True, "zombie_reads_as_gone": True,
                                  "peak_saw_the_freed_allocation": True, "lifetime_max_ge_interval_peak": True}},
            "swap": {"source": "darwin:vm_statistics64 swapins/swapouts", "page_size": PAGE,
                     "vm_statistics64_hex": vm_statistics64(pageins=1_234_567, pageouts=45_678, swapins=321, swapouts=4_321),
                     "swap_in_bytes": 321 * PAGE, "swap_out_bytes": 4_321 * PAGE,
                     # psutil's sin/sout on macOS: the pager's pageins/pageouts (a GGUF read counts), not swap
                     "psutil_sin_sout": [1_234_567 * PAGE, 45_678 * PAGE]},
            "thermal": {
                "notifyutil": {"argv": ["notifyutil", "-g", "com.apple.system.thermalpressurelevel"], "returncode": 0,
                               "stdout": text("notifyutil_nominal.txt"), "stderr": "", "parsed": "nominal"},
                "pmset_therm": {"argv": ["pmset", "-g", "therm"], "returncode": 0,
                                "stdout": text("pmset_therm_limited_stdout_only.txt"), "stderr": "CPU Power notify\n",
                                "parsed": {"CPU_Scheduler_Limit": 100, "CPU_Available_CPUs": 4, "CPU_Speed_Limit": 62,
                                           "thermal_warning_level": None, "thermal_warning_recorded": False,
                                           "performance_warning_level": None, "performance_warning_recorded": False,
                                           "cpu_power_status_recorded": True, "errors": []}},
                "powermetrics": {"error": "needs root (not run)"},
            },
            "power": {"status": {"source": "ac", "percent": 100.0, "method": "pmset -g batt", "reason": None},
                      "pmset_batt": {"argv": ["pmset", "-g", "batt"], "returncode": 0,
                                     "stdout": text("pmset_ac_not_charging.txt"), "stderr": "",
                                     "parsed": {"source": "ac", "drawing_from": "AC Power", "percent": 100.0,
                                                "state": "AC attached", "remaining_min": None,
                                                "estimate": "not charging", "present": True}}},
            "sleep_prevention": {"prevented": True, "method": "caffeinate -i -w 48213", "reason": None},
            # <sys/ucred.h> xucred: u_int cr_version (0), uid_t cr_uid, short cr_ngroups, pad, gid_t cr_groups[16]
            "peer_credentials": {"raw_hex": struct.pack("=IIh2x16I", 0, 501, 3, 20, 12, 61, *([0] * 13)).hex(),
                                 "parsed_uid": 501, "peer_uid_matches_own": True},
            "service": {"launchctl_print": {"argv": ["launchctl", "print", "gui/501/dev.benchd"], "returncode": 0,
                                            "stdout": text("launchctl_print_running.txt"), "stderr": "",
                                            "parsed": {"active count": "1", "path": "/Users/ada/Library/LaunchAgents/dev.benchd.plist",
                                                       "type": "LaunchAgent", "state": "running",
                                                       "program": "/Users/ada/src/benchd/.venv/bin/benchd",
                                                       "working directory": "/Users/ada/Library/Application Support/benchd",
                                                       "stdout path": "/Users/ada/Library/Application Support/benchd/logs/launchd.stdout.log",
                                                       "stderr path": "/Users/ada/Library/Application Support/benchd/logs/launchd.stderr.log",
                                                       "domain": "gui/501 [100005]", "asid": "100005",
                                                       "minimum runtime": "30", "exit timeout": "30", "runs": "2",
                                                       "pid": "48213", "immediate reason": "speculative", "forks": "0",
                                                       "execs": "1", "initialized": "1", "trampolined": "1",
                                                       "started suspended": "0", "proxy started suspended": "0",
                                                       "last exit code": "1", "spawn type": "interactive (4)",
                                                       "jetsam priority": "40",
                                                       "jetsam memory limit (active)": "(unlimited)",
                                                       "jetsam memory limit (inactive)": "(unlimited)",
                                                       "properties": "keepalive | runatload | inferred program"}},
                        "plutil_lint": {"argv": ["plutil", "-lint", "~/benchd-report-x/dev.benchd.plist"],
                                        "returncode": 0, "stdout": "~/benchd-report-x/dev.benchd.plist: OK\n", "stderr": ""}},
            # IOReport Energy Model over 0.5 s: the channel walk of ioreport_energy_model_m1.json (ENERGY_SAMPLES.md);
            # only the four totals count, in their units (per-core, per-cluster, CPM and GPU SRAM are parts of them)
            "energy": {"kind": "IOReportReader",
                       "reader": {"source": "ioreport:Energy Model (CPU Energy + GPU Energy + ANE + DRAM)", "available": True,
                                  "reason": None, "granularity": "IOReport Energy Model counters", "scope": "system energy"},
                       "raw_channels": json.loads(text("ioreport_energy_model_m1.json"))["channels"],
                       "parsed": {"seconds": 0.5, "channels": {"CPU": 1745 * 1e-3, "GPU": 4320 * 1e-3, "ANE": 0.0,
                                                               "DRAM": 610 * 1e-3},
                                  "total_j": 1745 * 1e-3 + 4320 * 1e-3 + 0.0 + 610 * 1e-3, "reason": None},
                       "powermetrics": {"error": "needs root (not run)"}},
        },
    }
    (HERE / "platform_report_sample.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
