"""The daemon suite's fixtures; they live in `tests/testlib.py`, shared with the fault suite."""

from testlib import poll, run_daemon, shared_daemon, short_base  # noqa: F401  (pytest collects fixtures from here)
