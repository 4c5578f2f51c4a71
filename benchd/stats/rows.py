"""Which rows count, and which metrics a probe row carries: one test and one list for every stage.
Reasons and facts: docs/measuring.md#the-axis-table."""

from __future__ import annotations

from typing import Any

from benchd.schemas import ENERGY_FIELDS
from benchd.stats.axes import AXES

#: The metrics a probe row carries: each null one has a reason (engine.rows) and a deferred line (results.deferred).
PROBE_METRICS: tuple[str, ...] = (
    "prompt_tokens", "cached_tokens", "gen_tokens", "prompt_tps", "gen_tps", "gen_tps_client", "ttft_ms",
    "e2e_ms", "draft_n", "draft_accepted", "draft_acceptance", "mem_peak_bytes", "mem_rss_anon_bytes",
    "mem_rss_file_bytes", "swap_in_bytes", "swap_out_bytes", "thermal_before", "server_version",
    "layer_split", "reasoning_tokens", "thinking", "ttfat_ms", *ENERGY_FIELDS,
)
#: A sustained run's row carries these besides.
SUSTAINED_METRICS: tuple[str, ...] = (*PROBE_METRICS, "thermal_after", "window_tps", "sustain_ratio")


def usable(row: Any, kind: str | None = "probe") -> bool:
    """The row counts in medians, comparisons and the stop rule: ok (a failed or invalidated probe is
    not) and full length (a short probe did other work); of `kind` unless `kind` is None."""
    return row.status == "ok" and not row.short and (kind is None or row.kind == kind)


def row_metrics() -> tuple[str, ...]:
    """The per-probe metrics a probe row carries and the cell statistics summarize, in table order."""
    return tuple(a.name for a in AXES.values() if a.source == "probe" and a.compare)


def carried_metrics(kind: str) -> tuple[str, ...]:
    """The metrics a row of `kind` carries (`PROBE_METRICS`, and `SUSTAINED_METRICS` for a sustained run)."""
    return SUSTAINED_METRICS if kind == "sustained" else PROBE_METRICS
