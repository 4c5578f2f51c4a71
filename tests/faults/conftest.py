"""Fault suite fixtures: the daemon helper of `tests/daemon/conftest.py` (reused, not copied), the seed,
and the end-of-session figures.

The daemon helpers are loaded from their file because both folders have a `conftest.py` and no
package: importing by module name would pick up the wrong one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "benchd_daemon_test_helpers", Path(__file__).resolve().parents[1] / "daemon" / "conftest.py")
assert _spec is not None and _spec.loader is not None
daemon_helpers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = daemon_helpers  # dataclasses look their module up there
_spec.loader.exec_module(daemon_helpers)

# Re-exported fixtures (pytest collects fixtures from the conftest's namespace).
short_base = daemon_helpers.short_base
run_daemon = daemon_helpers.run_daemon

SEED_ENV = "BENCHD_FAULT_SEED"


@pytest.fixture(scope="session")
def fault_seed() -> int:
    """The suite's seed: `$BENCHD_FAULT_SEED`, else a fresh one (printed, so a failure can be replayed)."""
    raw = os.environ.get(SEED_ENV)
    seed = int(raw) if raw else random.SystemRandom().randrange(1, 2**31)
    print(f"\n[faults] seed {seed} (replay with {SEED_ENV}={seed})")
    import faultlib

    faultlib.figure("seed", seed, add=False)
    return seed


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The last orphan check: any server process of this session's tests still alive (found by the
    `BENCHD_FAULT_TAG` every test puts in its servers' environment, which names this pytest's pid)."""
    import faultlib
    import psutil

    if not faultlib.FIGURES:
        return
    me = str(os.getpid())
    left = []
    for p in psutil.process_iter():
        try:
            tag = p.environ().get(faultlib.FAULT_TAG_ENV, "")
        except (psutil.Error, OSError):
            continue
        if me in tag.split("-"):
            left.append(p)
    faultlib.figure("orphan_servers_at_session_end", len(left), add=False)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    import faultlib

    if not faultlib.FIGURES:
        return
    terminalreporter.section("benchd fault suite figures (measured by this run)")
    for key in sorted(faultlib.FIGURES):
        terminalreporter.write_line(f"{key}: {faultlib.FIGURES[key]}")
