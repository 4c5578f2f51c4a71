"""The report's image-probe section: per vision candidate and resolution, the medians of its ok image
probes; a text candidate is named with why it has no image figures."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from benchd.results.text import fmt_or_null
from benchd.schemas import Row, Sweep


def _median(values: Iterable[float | int | None]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.median(got) if got else None


def image_lines(sweep: Sweep, rows: Sequence[Row]) -> list[str]:
    """The section's lines (empty when no candidate asked for image probes)."""
    if not any(c.vision for c in sweep.candidates):
        return []
    out = ["image probes (median of ok probes; extra = TTFT with the images minus without; encode not timed apart):"]
    for cand in sweep.candidates:
        if not cand.vision:
            out.append(f"  {cand.id}: no image figures (null): vision = false, a text candidate or its vision "
                       "model not asked for")
            continue
        cells = _cells(r for r in rows if r.candidate == cand.id and r.kind == "vision")
        if not cells:
            out.append(f"  {cand.id}: no image probe row")
        out += [_cell_line(f"{cand.id} {w}x{h}", cell) for (w, h), cell in cells.items()]
    return out


def _cells(rows: Iterable[Row]) -> dict[tuple[int, int], list[Row]]:
    cells: dict[tuple[int, int], list[Row]] = {}
    for r in rows:
        if r.image_width and r.image_height:
            cells.setdefault((r.image_width, r.image_height), []).append(r)
    return cells


def _cell_line(name: str, cell: list[Row]) -> str:
    ok = [r for r in cell if r.status == "ok"]
    failed = len(cell) - len(ok)
    if not ok:
        err = next((r.error for r in cell if r.error), "no ok probe")
        return f"  {name}: failed: {err}"
    def fig(field: str, template: str, scale: float = 1) -> str:
        return fmt_or_null(_median(getattr(r, field) for r in ok), template, scale)
    ms = "{:.1f} ms"
    return (
        f"  {name} x{ok[0].images or 1}: image tokens {fig('image_tokens', '{:g}')}, "
        f"TTFT {fig('image_ttft_ms', ms)} (text only {fig('text_ttft_ms', ms)}, "
        f"extra {fig('image_extra_ttft_ms', ms)}), prompt "
        f"{fig('prompt_tps', '{:.1f} tok/s')} incl. image tokens, peak memory "
        f"{fig('mem_peak_bytes', '{:.1f} MiB', 1 << 20)} ({len(ok)} ok"
        + (f", {failed} failed" if failed else "") + ")")
