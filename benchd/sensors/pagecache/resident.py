"""How much of a set of files is in the page cache: mincore(2) over a read-only shared mapping of each file
(libc through ctypes, Linux and macOS). Mapping does not read a file, so measuring does not warm the cache."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable

from msgspec import Struct

_PAGE = mmap.PAGESIZE
_MAP_FAILED = ctypes.c_void_p(-1).value


class Residency(Struct, kw_only=True, frozen=True):
    """Resident pages of the files (`fraction` of their pages), or null with `reason`."""

    files: int
    pages: int
    resident_pages: int | None = None
    fraction: float | None = None
    source: str = "mincore(2)"
    reason: str | None = None


#: The resident share from which a start is warm, and up to whose complement it is cold (docs/metrics.md).
WARM_FRACTION = 0.99


def cache_state(res: Residency) -> str | None:
    """"warm", "cold" or "partial" by `WARM_FRACTION`; None when the residency is unknown."""
    if res.fraction is None:
        return None
    return "warm" if res.fraction >= WARM_FRACTION else "cold" if res.fraction <= 1 - WARM_FRACTION else "partial"


def _libc() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None
    if not all(hasattr(lib, f) for f in ("mmap", "munmap", "mincore")):
        return None
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.mmap.restype = ctypes.c_void_p
    lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return lib


def _file_pages(lib: ctypes.CDLL, path: str) -> tuple[int, int]:
    """(pages, resident pages) of one file; an empty file has none."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    n = (size + _PAGE - 1) // _PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap: {os.strerror(err)}")
        try:
            vec = (ctypes.c_ubyte * n)()
            if lib.mincore(addr, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore: {os.strerror(err)}")
            return n, sum(b & 1 for b in vec)
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)


def resident(files: Iterable[str]) -> Residency:
    """The resident share of the files' pages, null with the reason when it cannot be read."""
    paths = list(files)
    lib = _libc()
    if lib is None:
        return Residency(files=len(paths), pages=0, reason="libc has no mmap/mincore here")
    if not paths:
        return Residency(files=0, pages=0, reason="no model file to look at")
    pages = res = 0
    for p in paths:
        try:
            n, r = _file_pages(lib, p)
        except OSError as exc:
            return Residency(files=len(paths), pages=pages, reason=f"{p}: {exc.strerror or exc}")
        pages, res = pages + n, res + r
    return Residency(files=len(paths), pages=pages, resident_pages=res,
                     fraction=res / pages if pages else None,
                     reason=None if pages else "the model files are empty")
