"""Linux: drop a file's clean pages with posix_fadvise(POSIX_FADV_DONTNEED) (no root), after fdatasync;
mapped and tmpfs pages stay (`resident` tells)."""

from __future__ import annotations

import os


def drop_files(files: list[str]) -> str | None:
    """None when every file was asked to drop, else the first failure's reason."""
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            return f"cannot open {path} to drop its pages: {exc.strerror or exc}"
        try:
            try:
                os.fdatasync(fd)
            except OSError:
                pass  # read-only file systems refuse; their pages are clean anyway
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as exc:
            return f"posix_fadvise(POSIX_FADV_DONTNEED) on {path} failed: {exc.strerror or exc}"
        finally:
            os.close(fd)
    return None
