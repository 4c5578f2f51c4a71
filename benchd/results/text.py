"""The words and figures every writer shares — terminal report and tail, Markdown, the page, JSON
exports: one value formatter (one unit rule for bytes), one cell-verdict text, one machine line.

A second formatter in a writer is how the report and the page came to disagree on units; a writer
that needs a figure for people calls these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchd.schemas import CellVerdict, MachineInfo

#: Binary units, largest first: a byte count reads in the largest unit it reaches.
BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def fmt_bytes(v: float, digits: int = 2) -> str:
    """`1.50 GiB`, `12.00 MiB`, `512 B`: binary units, `digits` decimals."""
    for unit, scale in BYTE_UNITS:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}f} {unit}"
    return f"{v:.0f} B"


def fmt_value(metric: str, v: Any) -> str:
    """A metric's value for people: bytes in binary units, ratios to three decimals, rates and times to
    one decimal (three significant digits under 10); `null` (or anything not a number) reads `null`."""
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "null"
    if metric.endswith("_bytes"):
        return fmt_bytes(v)
    if metric in ("eval_pass_rate", "code_pass_rate", "tool_pass_rate", "sustain_ratio"):
        return f"{v:.3f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


def fmt_range(metric: str, low: float | None, high: float | None) -> str:
    """`low–high` (an interval or a spread) in the metric's format, or `null` when either end is missing."""
    return f"{fmt_value(metric, low)}–{fmt_value(metric, high)}" if low is not None and high is not None else "null"


def fmt_median(median: float, low: float | None, high: float | None, n: int) -> str:
    """`1.23 (1.01–1.50, n 3)`, or `1.23 (n 1)`: a median of seconds with its spread and count."""
    spread = f"{low:.2f}–{high:.2f}, " if n > 1 and low is not None and high is not None else ""
    return f"{median:.2f} ({spread}n {n})"


def fmt_counts(counts: Mapping[str, int]) -> str:
    """`wrong_function 3, no_call 1`: commonest first, `-` when empty."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def verdict_text(v: CellVerdict | str | None, *, detail: bool = False) -> str:
    """A cell verdict. Short: `steady`, `unsteady ±3.1%`, `drifting -6.2%`, `too few`, or `null`.
    `detail`: then `after N probes (reason; k throttle-suspect; m invalidated and re-run)`, or
    `no verdict: why`. A string is a verdict already in words (a Pareto point's)."""
    if isinstance(v, str):
        return v
    if v is None or v.verdict is None:
        return f"no verdict: {(v.reason if v is not None else None) or 'not measured'}" if detail else "null"
    word: str = v.verdict
    drift = v.trend.drift_pct if v.trend is not None else None
    if word == "unsteady" and v.ci_half_width_pct is not None:
        word = f"unsteady ±{v.ci_half_width_pct:.1f}%"
    elif word == "drifting" and drift is not None:
        word = f"drifting {drift:+.1f}%"
    if not detail:
        return word
    extra = [v.reason]
    if v.throttle_suspects:
        extra.append(f"{v.throttle_suspects} throttle-suspect")
    if v.invalidated:
        extra.append(f"{v.invalidated} invalidated and re-run")
    return f"{word} after {v.probes_used} probes ({'; '.join(x for x in extra if x)})"


def machine_line(m: MachineInfo) -> str:
    """One line naming the machine a runbook was measured on (what is known of it)."""
    parts = [m.hardware_model or m.chip or m.cpu_model, f"{m.cores_logical} logical cores" if m.cores_logical else None,
             fmt_bytes(m.memory_bytes, 1) + " RAM" if m.memory_bytes else None,
             " ".join(x for x in (m.os, m.os_version or m.kernel, m.arch) if x) or None,
             f"power {m.power_source}" if m.power_source else None]
    return ", ".join(p for p in parts if p) or "unknown machine"
