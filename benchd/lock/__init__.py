"""The human lock and its rechecks: the layer between the daemon (which runs the timer and queues the
jobs) and results (whose runbooks and comparisons it reads).

- `lockfile`: `<state>/locked.toml` — built from a runbook's candidate, read, written, the recheck history
  appended (a person writes `[locked]`; benchd only appends).
- `recheck`: the sweep that re-measures the locked candidate, and its verdict against the evidence.
- `watch`: what the daemon's timer asks — has the fingerprint changed since the baseline, what to do
  once a recheck's verdict is in, the `<state>/recheck.json` bookkeeping, the status record.
- `notify`: the desktop notification's message and the notifier that posts it.

The fingerprint itself (what a candidate's speed depends on, read from files) is in
`benchd.servers.fingerprint`: every runbook records it, not only the lock.
"""
