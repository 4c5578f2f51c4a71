"""The benchctl suite's shared fixtures (from `tests/testlib.py`)."""

from testlib import short_base  # noqa: F401  (pytest collects fixtures from here)
