"""Pure arithmetic over measurements: stream-window rates, sustained windows, per-cell statistics.
A figure that cannot be computed honestly is null with a reason (docs/measuring.md#cell-statistics)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

from benchd.schemas import CellStats, MetricStats, Row
from benchd.stats.cells import CI_MIN_N, median_ci
from benchd.stats.notation import plural
from benchd.stats.rows import row_metrics, usable

NOISY_CV = 0.05
STAT_METRICS: tuple[str, ...] = row_metrics()


class Measured(NamedTuple):
    """A value or null with the reason it is null."""

    value: float | None
    reason: str | None = None


def stream_window(completion_tokens: int | None, first_t: float | None, last_t: float | None) -> Measured:
    """Client-side decode rate: tokens after the first over the first-to-last content chunk time."""
    if completion_tokens is None:
        return Measured(None, "no completion token count (usage missing)")
    if completion_tokens < 2:
        return Measured(None, f"{plural(completion_tokens, 'completion token')}: a window needs at least 2")
    if first_t is None or last_t is None:
        return Measured(None, "no content chunk timestamps")
    window = last_t - first_t
    if window <= 0:
        return Measured(None, "zero first-to-last chunk window (all tokens arrived in one chunk)")
    return Measured((completion_tokens - 1) / window)


def stream_window_tps(completion_tokens: int | None, first_t: float | None, last_t: float | None) -> float | None:
    """`stream_window(...).value`; use `stream_window` when the null reason is needed."""
    return stream_window(completion_tokens, first_t, last_t).value


def sustained_windows(
    chunk_times: Sequence[float], tokens_per_chunk: Sequence[int] | int = 1, window: int = 128
) -> list[float]:
    """Tokens/s per consecutive window of `window` tokens from chunk arrival times (window 0 from the first
    chunk; partial and zero-length windows dropped). Raises ValueError on bad arguments."""
    if window < 1:
        raise ValueError("window must be >= 1")
    n = len(chunk_times)
    per = [tokens_per_chunk] * n if isinstance(tokens_per_chunk, int) else list(tokens_per_chunk)
    if len(per) != n:
        raise ValueError("tokens_per_chunk must match chunk_times")
    pts = _cumulative(chunk_times, per)
    if not pts:
        return []
    out: list[float] = []
    start_t, start_c = pts[0]
    boundary = window
    for t, c in pts:
        if c < boundary:
            continue
        dt = t - start_t
        if dt > 0 and c > start_c:
            out.append((c - start_c) / dt)
        start_t, start_c = t, c
        while boundary <= c:
            boundary += window
    return out


def _cumulative(chunk_times: Sequence[float], per: Sequence[int]) -> list[tuple[float, int]]:
    """(time, tokens so far) at each chunk that carried tokens."""
    pts: list[tuple[float, int]] = []
    cum = 0
    for t, k in zip(chunk_times, per, strict=True):
        if k > 0:
            cum += k
            pts.append((t, cum))
    return pts


def sustain_ratio(windows: Sequence[float]) -> float | None:
    """Last window's rate over the first's: < 1 means the machine slowed down (thermal, memory)."""
    if len(windows) < 2 or windows[0] <= 0:
        return None
    return windows[-1] / windows[0]


def sustain_ratio_reason(windows: Sequence[float]) -> str | None:
    """Why `sustain_ratio` is null (None when it is not)."""
    if len(windows) < 2:
        return f"{plural(len(windows), 'window')}: a ratio needs at least 2"
    if windows[0] <= 0:
        return "first window rate is zero"
    return None


def sustained_summary(
    chunk_times: Sequence[float], window: int, tokens: int | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """A sustained row's `window_tps` and `sustain_ratio`, and their sources (saying why windows are missing)."""
    windows = sustained_windows(chunk_times, 1, window)
    ratio = sustain_ratio(windows)
    sources = {"window_tps": f"client:chunk-timestamps per {window} tokens",
               "sustain_ratio": "client:last-window/first-window"}
    expected = (tokens if tokens is not None else len(chunk_times)) // window
    if len(windows) < expected:
        why = (f"{len(chunk_times)} content chunks carried {tokens} tokens" if tokens and len(chunk_times) < tokens
               else "their tokens arrived in one read")
        sources["window_tps"] += f"; {expected - len(windows)} of {expected} windows unmeasurable ({why})"
    if ratio is None:
        sources["sustain_ratio"] = f"null: {sustain_ratio_reason(windows)}"
    return {"window_tps": windows, "sustain_ratio": ratio}, sources


def metric_stats(metric: str, values: Sequence[float | None], null_reasons: Sequence[str | None] = ()) -> MetricStats:
    """Stats over the non-null values; nulls are counted and their reasons kept (deduplicated)."""
    present = [float(v) for v in values if v is not None]
    reasons: dict[str, str] = {}
    n_null = len(values) - len(present)
    if n_null:
        reasons["value"] = "; ".join(sorted({r for r in null_reasons if r})) or "null in the rows (no reason recorded)"
    n = len(present)
    if n == 0:
        reasons.setdefault("value", "no ok probe rows")
        return MetricStats(metric=metric, n=0, n_null=n_null, null_reasons=reasons)
    mean = statistics.fmean(present)
    cv = _cv(present, mean, reasons)
    ci = _ci(present, reasons)
    return MetricStats(
        metric=metric, n=n, n_null=n_null, median=statistics.median(present), min=min(present),
        max=max(present), mean=mean, cv=cv, ci95_low=ci[0], ci95_high=ci[1],
        ci95_coverage=ci[2], noisy=cv is not None and cv > NOISY_CV, null_reasons=reasons,
    )


def _ci(present: Sequence[float], reasons: dict[str, str]) -> tuple[float | None, float | None, float | None]:
    """`median_ci`'s (low, high, coverage), or Nones with `reasons["ci95"]` set."""
    ci = median_ci(present)
    if ci is None:
        reasons["ci95"] = f"n < {CI_MIN_N}"
        return None, None, None
    return ci


def _cv(present: Sequence[float], mean: float, reasons: dict[str, str]) -> float | None:
    """The coefficient of variation, or None with `reasons["cv"]` set."""
    if len(present) < 2:
        reasons["cv"] = "n < 2"
        return None
    if mean == 0:
        reasons["cv"] = "mean is zero"
        return None
    return statistics.stdev(present) / abs(mean)


def cell_stats(rows: Sequence[Row]) -> list[CellStats]:
    """One CellStats per (candidate, context) with probe rows, in first-seen candidate then context order."""
    cells: dict[tuple[str, int], list[Row]] = {}
    order: dict[str, int] = {}
    for r in rows:
        if r.kind != "probe":
            continue
        order.setdefault(r.candidate, len(order))
        cells.setdefault((r.candidate, r.context), []).append(r)
    return [_cell_stats(cand, ctx, cell)
            for (cand, ctx), cell in sorted(cells.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))]


def _cell_stats(cand: str, ctx: int, cell: list[Row]) -> CellStats:
    ok = [r for r in cell if usable(r)]
    statuses = Counter(r.status for r in cell)
    stats = {m: metric_stats(m, *_metric_values(ok, m)) for m in STAT_METRICS}
    noisy = [m for m in STAT_METRICS if stats[m].noisy]
    return CellStats(
        candidate=cand, runtime=cell[0].runtime, context=ctx, n_ok=len(ok),
        n_failed=statuses["failed"] + statuses["timeout"], n_aborted=statuses["aborted"],
        n_short=statuses["ok"] - len(ok), prompt_tps=stats["prompt_tps"],
        gen_tps=stats["gen_tps"], ttft_ms=stats["ttft_ms"], mem_peak_bytes=stats["mem_peak_bytes"],
        j_per_gen_token=stats["j_per_gen_token"],
        noisy=bool(noisy), noisy_metrics=noisy, errors=_errors(cell),
    )


def _metric_values(ok: list[Row], m: str) -> tuple[list[float | None], list[str | None]]:
    """A metric's values over the ok rows, and the null reasons of the null ones."""
    return [getattr(r, m) for r in ok], [r.null_reasons.get(m) for r in ok if getattr(r, m) is None]


def _errors(cell: list[Row]) -> list[str]:
    return sorted({f"{r.status}: {r.error or 'no error recorded'}" for r in cell if r.status in ("failed", "timeout")})
