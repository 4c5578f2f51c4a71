"""The report's session and parallel-request lines: figures through the one set of formatters, null said as null."""

from __future__ import annotations

from benchd.results.agentic import level_lines, session_lines
from benchd.schemas import Row


def _row(kind: str, probe: int, **kw: object) -> Row:
    return Row(job="j", candidate="a", runtime="llama-server", context=256, kind=kind, probe=probe,  # type: ignore[arg-type]
               status="ok", **kw)  # type: ignore[arg-type]


def test_a_session_line_gives_the_warm_turns_and_null_where_no_turn_reports_cached_tokens() -> None:
    turns = [_row("session", 1, ttft_ms=80.0, prompt_tokens=100), _row("session", 2, ttft_ms=20.0, prompt_tokens=120),
             _row("session", 3, ttft_ms=30.0, prompt_tokens=140)]
    assert session_lines(turns) == [
        "sessions (warm prompt cache):",
        "  a ctx 256: warm-turn TTFT 25.0 ms (median of turns >= 2), reuse null, cache misses 0 of 2; "
        "TTFT per turn: 80.0 ms, 20.0 ms, 30.0 ms"]
    cached = [*turns[:1], *(_row("session", r.probe, ttft_ms=r.ttft_ms, prompt_tokens=100, cached_tokens=75)
                            for r in turns[1:])]
    assert "reuse 75%" in session_lines(cached)[1]


def test_a_parallel_level_line_writes_its_peak_memory_as_every_byte_count_is_written() -> None:
    batch = [_row("parallel", i, concurrency=2, batch=0, gen_tps=50.0, ttft_ms=10.0 * (i + 1), agg_gen_tps=95.0,
                  mem_peak_bytes=3 << 20) for i in range(2)]
    line = level_lines(batch)[1]
    assert line.startswith("  a ctx 256 x2: aggregate 95.0 tok/s (median over 1 batch), per request 50.0 tok/s")
    assert line.endswith("peak memory 3.00 MiB (2 requests)")
    no_mem = [Row(**{**{f: getattr(r, f) for f in r.__struct_fields__}, "mem_peak_bytes": None}) for r in batch]
    assert level_lines(no_mem)[1].endswith("peak memory null (2 requests)")
