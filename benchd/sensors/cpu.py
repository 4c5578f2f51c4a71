"""System CPU load as a fraction of the machine, measured by benchd (no load-average lag)."""

from __future__ import annotations

import math

import psutil

#: The first CPU-load window when benchd measures load itself (a delta needs an interval).
FIRST_LOAD_WINDOW_S = 0.5


class CpuLoad:
    """System CPU busy fraction (0..1 = load per core) since the previous call (or construction)."""

    def __init__(self) -> None:
        self._last = psutil.cpu_times()

    @staticmethod
    def _busy_total(t: object) -> tuple[float, float]:
        fields = t._asdict()  # type: ignore[attr-defined]
        # Linux counts guest time inside user/nice already; psutil's cpu_percent subtracts it the same way.
        total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
        idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
        return total - idle, total

    def __call__(self) -> float:
        now = psutil.cpu_times()
        b0, t0 = self._busy_total(self._last)
        b1, t1 = self._busy_total(now)
        self._last = now
        if t1 - t0 <= 0:
            return math.nan  # no interval elapsed: no measurement (never a guessed 0)
        return min(1.0, max(0.0, (b1 - b0) / (t1 - t0)))
