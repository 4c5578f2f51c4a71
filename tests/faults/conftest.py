"""Fault suite fixtures: the daemon fixtures of `tests/testlib.py`, the seed,
and the end-of-session figures.

"""

from __future__ import annotations

import contextlib
import os
import random

import pytest
from testlib import run_daemon, short_base  # noqa: F401  (fixtures shared with tests/daemon)

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
