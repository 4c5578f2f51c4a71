"""The report's session and parallel-request sections: per cell, figures computed from the rows by the
engine's summaries (`engine.session.session_summary`, `engine.parallel.parallel_summary`), so the report,
`tail` and the page show the same numbers."""

from __future__ import annotations

from collections.abc import Sequence

from benchd.engine.parallel import parallel_summary
from benchd.engine.session import session_summary
from benchd.results.text import fmt_or_null, fmt_value
from benchd.schemas import Row
from benchd.stats.notation import plural
from benchd.stats.rows import usable

#: Axes a sweep measures only when it asks for them (sessions, concurrency levels): they join a pair's
#: comparison when either side has a value (directions from the axis table, `stats.axes`).
SESSION_AXIS = "session_ttft_ms"


def samples(rows: Sequence[Row]) -> dict[tuple[int, str], dict[str, list[float]]]:
    """Per (context, candidate): the session axis over the warm turns' TTFTs (turns >= 2) and each level's
    axis over its batches' aggregate rates (one value per batch); what Pareto and compare judge."""
    from benchd.stats.axes import level_axis

    out: dict[tuple[int, str], dict[str, list[float]]] = {}
    ok = [r for r in rows if usable(r, None)]
    for r in ok:
        if r.kind == "session" and r.probe >= 2 and r.ttft_ms is not None:
            out.setdefault((r.context, r.candidate), {}).setdefault(SESSION_AXIS, []).append(r.ttft_ms)
    for (ctx, cand, level, _), agg in sorted(_batch_rates(ok).items()):
        out.setdefault((ctx, cand), {}).setdefault(level_axis(level).name, []).append(agg)
    return out


def _batch_rates(rows: Sequence[Row]) -> dict[tuple[int, str, int, int], float]:
    return {(r.context, r.candidate, r.concurrency, r.batch): r.agg_gen_tps for r in rows
            if r.kind == "parallel" and r.agg_gen_tps is not None and r.concurrency and r.batch is not None}


def _ms(v: float | None) -> str:
    return fmt_or_null(v, "{:.1f} ms")


def _rate(v: float | None) -> str:
    return fmt_or_null(v, "{:.1f} tok/s")


def _cells(rows: Sequence[Row], kind: str) -> dict[tuple[str, int], list[Row]]:
    out: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        if r.kind == kind:
            out.setdefault((r.candidate, r.context), []).append(r)
    return out


def session_lines(rows: Sequence[Row]) -> list[str]:
    """One line per session cell: warm-turn TTFT, reuse fraction, misses, and TTFT per turn."""
    out = []
    for (cand, ctx), mine in sorted(_cells(rows, "session").items()):
        s = session_summary(mine)
        if s is None:
            err = next((r.error for r in mine if r.error), "no ok turn")
            out.append(f"  {cand} ctx {ctx}: session failed: {err}")
            continue
        reuse = fmt_or_null(s.reuse_fraction, "{:.0%}")
        per_turn = ", ".join(_ms(t) for t in s.ttft_ms)
        out.append(f"  {cand} ctx {ctx}: warm-turn TTFT {_ms(s.warm_ttft_ms)} (median of turns >= 2), reuse {reuse}, "
                   f"cache misses {s.misses} of {s.turns - 1}; TTFT per turn: {per_turn}")
    return (["sessions (warm prompt cache):", *out]) if out else []


def level_lines(rows: Sequence[Row]) -> list[str]:
    """One line per (cell, level): aggregate and per-request gen tok/s, TTFT p50/p95, peak memory."""
    out = []
    for (cand, ctx), mine in sorted(_cells(rows, "parallel").items()):
        for level, s in parallel_summary(mine).items():
            mem = fmt_value("mem_peak_bytes", s.mem_peak_bytes)
            failed = f", {s.failed} failed" if s.failed else ""
            out.append(f"  {cand} ctx {ctx} x{level}: aggregate {_rate(s.agg_gen_tps)} (median over "
                       f"{plural(s.batches, 'batch', 'batches')}), per request {_rate(s.per_request_gen_tps)}, "
                       f"TTFT p50 {_ms(s.ttft_p50_ms)} / p95 {_ms(s.ttft_p95_ms)}, peak memory {mem} "
                       f"({plural(s.requests, 'request')}{failed})")
    return (["parallel requests:", *out]) if out else []
