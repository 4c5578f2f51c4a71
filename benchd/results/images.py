"""The report's image-probe section: per vision candidate and resolution, the medians of its ok image
probes (image tokens, TTFT with and without the images and the difference, prompt tok/s including the
image tokens, peak memory); a text candidate is named with why it has no image figures."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from benchd.schemas import Row, Sweep


def _median(values: Iterable[float | int | None]) -> float | None:
    got = [float(v) for v in values if v is not None]
    return statistics.median(got) if got else None


def _ms(v: float | None) -> str:
    return "null" if v is None else f"{v:.1f} ms"


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
        mine = [r for r in rows if r.candidate == cand.id and r.kind == "vision"]
        cells: dict[tuple[int, int], list[Row]] = {}
        for r in mine:
            if r.image_width and r.image_height:
                cells.setdefault((r.image_width, r.image_height), []).append(r)
        if not cells:
            out.append(f"  {cand.id}: no image probe row")
        for (w, h), cell in cells.items():
            ok = [r for r in cell if r.status == "ok"]
            failed = len(cell) - len(ok)
            if not ok:
                err = next((r.error for r in cell if r.error), "no ok probe")
                out.append(f"  {cand.id} {w}x{h}: failed: {err}")
                continue
            tokens = _median(r.image_tokens for r in ok)
            tps = _median(r.prompt_tps for r in ok)
            mem = _median(r.mem_peak_bytes for r in ok)
            n_img = ok[0].images or 1
            out.append(
                f"  {cand.id} {w}x{h} x{n_img}: image tokens {'null' if tokens is None else f'{tokens:g}'}, "
                f"TTFT {_ms(_median(r.image_ttft_ms for r in ok))} (text only {_ms(_median(r.text_ttft_ms for r in ok))}, "
                f"extra {_ms(_median(r.image_extra_ttft_ms for r in ok))}), prompt "
                f"{'null' if tps is None else f'{tps:.1f} tok/s'} incl. image tokens, peak memory "
                f"{'null' if mem is None else f'{mem / (1 << 20):.1f} MiB'} ({len(ok)} ok"
                + (f", {failed} failed" if failed else "") + ")")
    return out
