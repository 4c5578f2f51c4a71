"""Run the fault suite (tests/faults, issue 8) and print its figures.

    .venv/bin/python benchmarks/fault_report.py [--seed N] [--json] [-- extra pytest args]

Every figure is what this run measured, written by the tests themselves (tests/faults/faultlib.py
`figure()`) to a JSON file whose path this script passes in `$BENCHD_FAULT_FIGURES`; nothing here is a
constant. A figure a test did not reach (skipped, failed early) prints as "not measured". Exit status:
pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: (label, figure key, what it means)
LINES: list[tuple[str, str, str]] = [
    ("kills survived", "kills_survived", "kill -9 of benchd at seeded random points of real sweeps (+1 before a runbook)"),
    ("kills by phase", "kills_by_phase", "where each kill landed (last event committed before it)"),
    ("rows lost", "rows_lost", "rows committed before a kill that were missing or changed at the end"),
    ("duplicate rows", "duplicate_rows", "probe_finished events for a row key beyond the first"),
    ("orphans after restarts", "orphan_servers_after_restart", "servers of a killed daemon alive after the restart"),
    ("orphans at session end", "orphan_servers_at_session_end", "any server of the suite still alive at its end"),
    ("API fuzz requests", "fuzz_api_requests", "invalid requests to the real daemon (hypothesis)"),
    ("sweep-file fuzz cases", "fuzz_sweep_files", "generated sweep files through benchctl.sweepfile"),
    ("5xx answers", "fuzz_5xx_answers", "server errors among the fuzz answers"),
    ("shell injection attempts", "shell_injection_attempts", "candidate args that a shell would have run"),
    ("server faults checked", "server_faults_checked",
     "crash, hang x2, garbage, early close, never healthy, tokenizer hang, warm-up crash/hang"),
    ("rows kept on full disk", "full_disk_rows_kept", "rows committed before the tmpfs filled up"),
    ("chatty log max bytes", "chatty_log_max_bytes", "largest server .log seen while it wrote 3x the cap"),
    ("log cap bytes", "log_cap_bytes", "benchd.config.LOG_CAP_BYTES"),
    ("RSS 5,000 cells (MiB)", "rss_5000_cells_peak_mib", "daemon peak RSS over the sweep and its runbook"),
    ("concurrent clients", "concurrent_clients", "clients submitting, tailing and cancelling at once"),
    ("health max ms (50 clients)", "concurrent_clients_health_max_ms", "slowest /v1/health meanwhile"),
    ("health max ms (stuck readers)", "stuck_followers_health_max_ms", "with 5 never-reading followers"),
    ("RSS growth, stuck readers (MiB)", "stuck_followers_rss_growth_mib", "daemon RSS growth meanwhile"),
    ("idle connections dropped", "idle_connections_dropped", "connections that never sent complete headers"),
    ("SIGTERM cases", "sigterm_cases", "cooldown, server start, probe"),
    ("SIGTERM slowest exit (s)", "sigterm_exit_max_s", "must be under 10 s"),
    ("seed", "seed", "replay with BENCHD_FAULT_SEED"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None, help="BENCHD_FAULT_SEED for the run")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="benchd-faults-") as tmp:
        figures_file = Path(tmp) / "figures.json"
        env = {**os.environ, "BENCHD_FAULT_FIGURES": str(figures_file)}
        if args.seed is not None:
            env["BENCHD_FAULT_SEED"] = str(args.seed)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/faults", "-m", "slow", "-q", "-p",
                               "no:cacheprovider", *args.pytest_args], cwd=REPO, env=env)
        elapsed = time.monotonic() - t0
        figures: dict[str, Any] = json.loads(figures_file.read_text()) if figures_file.exists() else {}
    figures["suite_seconds"] = round(elapsed, 1)
    figures["pytest_exit"] = proc.returncode
    if args.json:
        print(json.dumps(figures, indent=1, sort_keys=True))
        return proc.returncode
    print("\nbenchd fault suite — figures measured by this run")
    for label, key, what in LINES:
        value = figures.get(key, "not measured")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        print(f"  {label:<34} {value!s:<40} {what}")
    print(f"  {'suite wall time (s)':<34} {figures['suite_seconds']!s:<40} measured around pytest")
    print(f"  {'pytest exit status':<34} {proc.returncode!s:<40} 0 = every fault test passed")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
