"""The memory budget's readers on sample outputs (Linux /proc/meminfo, macOS sysctl), the test knob, and
the measured footprint of a live process. The macOS reading is marked unverified until a Mac confirms it."""

from __future__ import annotations

import os

from benchd.sensors.memory import budget

MEMINFO = "MemTotal:       24684544 kB\nMemFree:        22432000 kB\nMemAvailable:   23334000 kB\n"
GIB = 1024**3


def test_linux_budget_is_a_share_of_memtotal() -> None:
    assert budget.linux_physical(lambda: MEMINFO) == 24684544 * 1024
    b = budget.read_budget(platform="linux", env={}, meminfo=lambda: 10 * GIB)
    assert b.bytes == int(10 * GIB * budget.BUDGET_FRACTION) and "MemTotal" in b.source

    def unreadable() -> str:
        raise OSError("no /proc")

    assert budget.linux_physical(unreadable) is None
    assert budget.read_budget(platform="linux", env={}, meminfo=lambda: None).bytes is None


def test_darwin_wired_limit_caps_the_budget_and_is_marked_unverified() -> None:
    answers = {"hw.memsize": "68719476736", "iogpu.wired_limit_mb": "16384"}
    phys, wired = budget.darwin_limits(answers.get)
    assert phys == 64 * GIB and wired == 16 * GIB
    b = budget.read_budget(platform="darwin", env={}, darwin=lambda: (phys, wired))
    assert b.bytes == 16 * GIB and "iogpu.wired_limit_mb" in b.source
    assert ("unverified" in b.source) is (not budget.DARWIN_VERIFIED)
    unset = budget.darwin_limits({"hw.memsize": "68719476736", "iogpu.wired_limit_mb": "0"}.get)
    assert unset == (64 * GIB, None)
    b = budget.read_budget(platform="darwin", env={}, darwin=lambda: unset)
    assert b.bytes == int(64 * GIB * budget.BUDGET_FRACTION) and "unset" in b.source


def test_the_knob_replaces_the_budget() -> None:
    b = budget.read_budget(platform="linux", env={budget.ENV_BUDGET: "4096"}, meminfo=lambda: 10 * GIB)
    assert b.bytes == 4096 and budget.ENV_BUDGET in b.source


def test_footprint_of_this_process() -> None:
    n = budget.footprint_bytes(os.getpid())
    assert n is not None and n > 1024 * 1024
