"""The human lock and its rechecks: `lockfile` (`<state>/locked.toml`), `recheck` (the sweep and its
verdict), `watch` (what the daemon's timer asks), `notify` (the desktop notification). See docs/locking.md.
"""
