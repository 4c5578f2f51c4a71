"""The page cache of a model's files: how much is resident (mincore) and dropping it before a cold start
(per OS); `files_of` expands an MLX model directory."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from benchd.sensors.pagecache.resident import WARM_FRACTION, Residency, cache_state, resident


def files_of(paths: Iterable[str]) -> list[str]:
    """The regular files under `paths` (a file as is, a directory's files recursively), sorted."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out += [os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs if os.path.isfile(os.path.join(d, f))]
        elif os.path.isfile(p):
            out.append(p)
    return sorted(out)


def drop(paths: Iterable[str]) -> str | None:
    """Drop the files' clean pages from the page cache; None when asked of the kernel, else why not.
    Whether it worked is for `resident` to say (tmpfs, or pages another process maps, stay)."""
    files = files_of(paths)
    if sys.platform == "linux":
        from benchd.sensors.pagecache.linux import drop_files

        return drop_files(files)
    from benchd.sensors.pagecache.darwin import drop_files as drop_darwin

    return drop_darwin(files)


__all__ = ["WARM_FRACTION", "Residency", "cache_state", "drop", "files_of", "resident"]
