"""What one process's memory reader gives the sampler, and the portable fallback (psutil RSS).
Reasons and facts: docs/measuring.md#memory-readers."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

import psutil

PeakOf = Literal["resident", "footprint"]


@dataclass(frozen=True)
class ProcMem:
    """One process at one instant, bytes. `peak` is the kernel's peak since reset, when it has one."""

    current: int  # what the series samples (the backend's `current_source`)
    peak: int | None
    anon: int | None  # Linux RssAnon
    file: int | None  # Linux RssFile + RssShmem
    resident: int | None = None
    footprint: int | None = None


class Backend(Protocol):
    source: str  # the name of the kernel peak source
    current_source: str  # the name of what the series samples
    peak_of: PeakOf  # which of the two figures the kernel peak is a peak of
    resident_source: str
    footprint_source: str
    mapped_source: str  # how the resident bytes of mapped model files are read

    def read(self, pid: int) -> ProcMem | None: ...  # None: the process is gone

    def reset(self, pid: int) -> str | None: ...  # None: ok, else why not

    def mapped_file_bytes(self, pid: int, paths: list[str]) -> int: ...  # raises OSError with the reason


def real_paths(paths: Iterable[str]) -> list[str]:
    """Model paths as the kernel names mappings (symlinks resolved: /var -> /private/var on macOS)."""
    return sorted({os.path.realpath(os.path.expanduser(p)) for p in paths if p})


def is_under(path: str, roots: list[str]) -> bool:
    """Is a mapped file one of `roots` (a model file) or inside one (an MLX model directory)?"""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


class PsutilRss:
    """Portable fallback: psutil RSS, no kernel peak, no footprint."""

    source = "psutil:rss"
    current_source = "psutil:rss"
    peak_of: PeakOf = "resident"
    resident_source = "psutil:rss"
    footprint_source = "psutil: no footprint"
    mapped_source = "psutil:memory_maps rss of the model files"

    def read(self, pid: int) -> ProcMem | None:
        try:
            rss = psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        return ProcMem(int(rss), None, None, None, resident=int(rss))

    def reset(self, pid: int) -> str | None:
        return "psutil has no resettable kernel peak"

    def mapped_file_bytes(self, pid: int, paths: list[str]) -> int:
        try:
            maps = psutil.Process(pid).memory_maps(grouped=True)
        except (psutil.Error, NotImplementedError, AttributeError) as exc:
            raise OSError(f"psutil memory_maps: {type(exc).__name__}: {exc}") from exc
        return sum(int(m.rss) for m in maps if is_under(m.path, paths))
