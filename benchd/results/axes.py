"""Moved to `benchd.stats.axes` (the statistics floor); this name stays for callers not yet updated."""

from benchd.stats.axes import *  # noqa: F403
