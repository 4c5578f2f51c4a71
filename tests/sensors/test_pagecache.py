"""The page-cache state of a start's model files: warm, cold or partial by the resident share."""

from __future__ import annotations

import mmap
from pathlib import Path

from benchd.sensors import pagecache
from benchd.sensors.pagecache import Residency, cache_state


def _res(resident: int, pages: int) -> Residency:
    return Residency(files=1, pages=pages, resident_pages=resident, fraction=resident / pages)


def test_a_few_untouched_pages_leave_a_start_warm() -> None:
    # The demo's SmolLM2 GGUF right after a llama-server start: 4 (up to 19) pages not resident.
    assert cache_state(_res(24_011, 24_015)) == "warm"
    assert cache_state(_res(24_015, 24_015)) == "warm"


def test_cold_and_partial_by_the_share() -> None:
    assert cache_state(_res(0, 24_015)) == "cold"
    assert cache_state(_res(100, 24_015)) == "cold"  # 0.4 %: a page another process maps stayed
    assert cache_state(_res(3_619, 24_015)) == "partial"  # the demo's first start
    assert cache_state(_res(98, 100)) == "partial"


def test_unknown_residency_has_no_state() -> None:
    assert cache_state(Residency(files=0, pages=0, reason="no model file to look at")) is None


def test_a_file_just_written_is_warm(tmp_path: Path) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"\x01" * (1 << 20))
    f.read_bytes()
    res = pagecache.resident([str(f)])
    assert res.reason is None and res.pages == (1 << 20) // mmap.PAGESIZE
    assert cache_state(res) == "warm"
