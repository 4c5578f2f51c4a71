"""Moved to `benchd.stats.ranktests` (the statistics floor); this name stays for callers not yet updated."""

from benchd.stats.ranktests import *  # noqa: F403
