"""Linux: a file's clean pages leave the page cache with posix_fadvise(POSIX_FADV_DONTNEED) over the
whole file, which any process that can open the file may ask (no root, unlike drop_caches). Dirty
pages are written back first (fdatasync) so they are clean and can go. Pages some process has mapped
and tmpfs pages stay: `resident` after the drop says what happened."""

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
