"""Pareto charts (gen tok/s against peak memory, and J/token when measured), a panel per context. Needs
the `plot` extra; a bare `Figure`, no pyplot: runbooks are written from a worker without a display."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchd.atomic import atomic_write
from benchd.errors import BenchdError

if TYPE_CHECKING:
    from benchd.schemas import ContextPareto, Runbook

MISSING = "matplotlib is not installed: install the plot extra (pip install 'benchd[plot]') to get Pareto charts"


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


#: Per chart row: the x axis, its scale, its label and its short name.
_CHART_ROWS = (("mem_peak_bytes", 1 << 20, "peak memory (MiB, median) — lower is better", "memory"),
               ("j_per_gen_token", 1, "joules per generated token (median) — lower is better, system energy",
                "J/token"))


def write_charts(rb: Runbook, out_dir: Path) -> list[Path]:
    """Write `<id>.pareto.png` and `<id>.pareto.svg` into `out_dir`; returns their paths."""
    if not available():
        raise BenchdError("plot_unavailable", MISSING)
    from matplotlib.figure import Figure

    panels = [p for p in rb.pareto if p.points]
    n = max(1, len(panels))
    energy = _measured(panels, "j_per_gen_token")
    rows = _CHART_ROWS[:2 if energy else 1]
    fig = Figure(figsize=(5.5 * n, 4.5 * len(rows)))
    axes = fig.subplots(len(rows), n, squeeze=False)
    _draw_rows(rb, axes, panels, rows)
    if not energy:
        for ax in axes[0][:len(panels)]:
            ax.text(0.01, 0.06, f"J/gen token not measured: {rb.provenance.energy.reason or 'no energy counter'}"[:110],
                    transform=ax.transAxes, fontsize=6, color="tab:gray")
    if not panels:
        axes[0][0].text(0.5, 0.5, "no successful probes to plot", ha="center", va="center")
    fig.suptitle(f"{rb.id}: Pareto view (frontier over gen/prompt tok/s, memory, evals, sustain, J/token)", fontsize=9)
    fig.tight_layout()
    return _save(fig, out_dir, rb.id)


def _draw_rows(rb: Runbook, axes: Any, panels: list[ContextPareto], rows: tuple[tuple[str, int, str, str], ...]) -> None:
    for row, x_axis in zip(axes, rows, strict=True):
        for ax, p in zip(row, panels, strict=False):
            _panel(ax, p, _states(rb, p), *x_axis)


def _save(fig: Any, out_dir: Path, rb_id: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        final = out_dir / f"{rb_id}.pareto.{ext}"
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=110)
        atomic_write(final, buf.getvalue())
        paths.append(final)
    return paths


#: Marker and colour per state (the page's fill: full, half, none); the legend says the state's word.
STATE_MARKS = {"frontier": ("o", "tab:blue"), "tied": ("D", "tab:cyan"), "unresolved": ("s", "tab:orange"),
               "dominated": ("x", "tab:gray")}


def _measured(panels: list[ContextPareto], axis: str) -> bool:
    return any(pt.values.get(axis) is not None for p in panels for pt in p.points)


def _states(rb: Runbook, p: ContextPareto) -> dict[str, str]:
    """Candidate -> its state in the context, as the page and the report say it (`records.pareto_points`)."""
    from benchd.results.records import pareto_points

    return {pt.candidate: pt.status for pt in pareto_points(rb, p)}


def _stair(drawn: list[tuple[str, float, float]]) -> list[tuple[float, float]]:
    """The 2-D frontier of a chart's own two axes: each point faster than every lighter one."""
    stair: list[tuple[float, float]] = []
    for _c, x, y in sorted(drawn, key=lambda t: (t[1], -t[2])):
        if not stair or y > stair[-1][1]:
            stair.append((x, y))
    return stair


def _panel(ax: Any, p: ContextPareto, states: dict[str, str], x_axis: str, scale: float, x_label: str,
           short: str) -> None:
    """One context: gen tok/s against `x_axis`, the 2-D frontier of the two, each marker its state."""
    from benchd.results.text import STATE_WORDS

    pts = [(pt.candidate, pt.values.get(x_axis), pt.values.get("gen_tps")) for pt in p.points]
    drawn = [(c, m / scale, g) for c, m, g in pts if m is not None and g is not None]
    missing = [c for c, m, g in pts if m is None or g is None]
    for c, x, y in drawn:
        state = states.get(c, "frontier" if c in p.frontier else "dominated")
        ax.scatter([x], [y], marker=STATE_MARKS[state][0], color=STATE_MARKS[state][1], zorder=3,
                   label=STATE_WORDS[state])
        ax.annotate(c, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    _decorate(ax, f"context {p.context}", (x_label, short), _stair(drawn), missing)


def _decorate(ax: Any, title: str, x_names: tuple[str, str], stair: list[tuple[float, float]],
              missing: list[str]) -> None:
    x_label, short = x_names
    if len(stair) > 1:
        ax.step([x for x, _ in stair], [y for _, y in stair], where="post", ls="--", color="tab:blue", lw=1,
                label=f"frontier of gen tok/s vs {short}")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    if uniq:
        ax.legend(uniq.values(), uniq.keys(), fontsize=7, loc="best")
    ax.set_title(title)
    ax.set_xlabel(x_label)
    ax.set_ylabel("generation tok/s (median) — higher is better")
    ax.grid(True, alpha=0.3)
    if missing:
        ax.text(0.01, 0.01, "not plotted (null metric): " + ", ".join(missing), transform=ax.transAxes,
                fontsize=7, color="tab:red")
