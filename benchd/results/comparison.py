"""Moved to `benchd.stats.comparison` (the statistics floor); this name stays for callers not yet updated."""

from benchd.stats.comparison import *  # noqa: F403
