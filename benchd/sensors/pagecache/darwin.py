"""macOS: no unprivileged way to evict one file's pages (`purge` needs root and drops everything;
there is no posix_fadvise, and F_NOCACHE only affects later reads), so a cold start cannot be made
here: the reason is what is returned."""

from __future__ import annotations

REASON = "macOS cannot drop a file's cached pages without root (`purge` needs root), so no cold start"


def drop_files(files: list[str]) -> str | None:
    return REASON
