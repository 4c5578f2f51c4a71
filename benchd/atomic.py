"""`atomic_write`: a file is either its old content or its new content, never half of one. Every file
benchd rewrites goes through it (docs/architecture.md#atomic-writes). Raises the OSError after removing
its temporary file."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path


def _sync(fd: int) -> None:
    """Data and metadata to stable storage: F_FULLFSYNC where the platform has it (macOS), else fsync."""
    if sys.platform == "darwin":
        import fcntl

        full = getattr(fcntl, "F_FULLFSYNC", None)
        if full is not None:
            try:
                fcntl.fcntl(fd, full)
                return
            except OSError:
                pass  # a file system without it (some network mounts): fsync is the best there is
    os.fsync(fd)


def _sync_dir(path: Path) -> None:
    """The directory entry of a rename, synced (where a directory can be opened: not on Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory
            _sync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str | Iterable[bytes], *, mode: int | None = None) -> None:
    """`data` may come in pieces (an iterable of bytes: a download, a copied file): a large file is then never
    whole in memory, and a piece that raises (a hash found wrong at the end) leaves the old file. `mode`: the
    file's exact permission bits (else what the umask gives a new file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{threading.get_ident()}")
    try:
        with tmp.open("wb") as f:
            for chunk in (data,) if isinstance(data, (bytes, str)) else data:
                f.write(chunk.encode() if isinstance(chunk, str) else chunk)
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.flush()
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    atomic_replace(tmp, path)


def atomic_replace(tmp: Path, path: Path) -> None:
    """The second half of `atomic_write`, for a file another program wrote at `tmp` (beside `path`, e.g.
    llama-perplexity's logits): synced, renamed over `path`, the directory synced; `tmp` removed on error."""
    try:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            _sync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _sync_dir(path.parent)


def file_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    """`path`'s bytes in pieces, for `atomic_write` to copy a large file without holding it whole."""
    with path.open("rb") as f:
        while chunk := f.read(size):
            yield chunk
