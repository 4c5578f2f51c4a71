"""Which energy reader this machine gets (`$BENCHD_POWERCAP_ROOT`, IOReport, RAPL, else `NullReader`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from benchd.sensors.energy.reader import POWERCAP_ENV, POWERCAP_ROOT, EnergyReader, NullReader


def open_reader(env: Mapping[str, str] | None = None) -> EnergyReader:
    """The best energy source on this machine (see the module docstring for the order)."""
    env = os.environ if env is None else env
    seam = env.get(POWERCAP_ENV)
    if seam:
        from benchd.sensors.energy.linux import open_rapl

        return open_rapl(Path(seam))
    if sys.platform == "darwin":
        from benchd.sensors.energy.darwin import open_darwin

        return open_darwin()
    if sys.platform.startswith("linux"):
        from benchd.sensors.energy.linux import open_rapl

        return open_rapl(Path(POWERCAP_ROOT))
    return NullReader(f"no energy counter reader for {sys.platform} (benchd reads powercap RAPL on Linux "
                      "and IOReport on macOS)")
