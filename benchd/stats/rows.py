"""Which rows count, and which metrics a probe row carries: one test and one list for every stage.
Reasons and facts: docs/measuring.md#the-axis-table."""

from __future__ import annotations

from typing import Any

from benchd.stats.axes import AXES


def usable(row: Any, kind: str | None = "probe") -> bool:
    """The row counts in medians, comparisons and the stop rule: ok (a failed or invalidated probe is
    not) and full length (a short probe did other work); of `kind` unless `kind` is None."""
    return row.status == "ok" and not row.short and (kind is None or row.kind == kind)


def row_metrics() -> tuple[str, ...]:
    """The per-probe metrics a probe row carries and the cell statistics summarize, in table order."""
    return tuple(a.name for a in AXES.values() if a.source == "probe" and a.compare)
