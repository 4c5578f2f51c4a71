"""Pareto charts: generation tok/s against peak memory, one panel per context, frontier drawn.

Optional: needs the `plot` extra (matplotlib). `available()` says whether it is installed and
`write_charts` raises a BenchdError with the install hint when it is not, so the runbook writer can
skip charts quietly and `benchctl report` can say why there are none. The Agg backend is forced:
the daemon has no display.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from benchd.errors import BenchdError

if TYPE_CHECKING:
    from benchd.runbook import Runbook

MISSING = "matplotlib is not installed: install the plot extra (pip install 'benchd[plot]') to get Pareto charts"


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def write_charts(rb: Runbook, out_dir: Path) -> list[Path]:
    """Write `<id>.pareto.png` and `<id>.pareto.svg` into `out_dir`; returns their paths."""
    if not available():
        raise BenchdError("plot_unavailable", MISSING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in rb.pareto if p.points]
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4.5), squeeze=False)
    for ax, p in zip(axes[0], panels, strict=False):
        pts = [(pt.candidate, pt.values.get("mem_peak_bytes"), pt.values.get("gen_tps")) for pt in p.points]
        drawn = [(c, m / (1 << 20), g) for c, m, g in pts if m is not None and g is not None]
        missing = [c for c, m, g in pts if m is None or g is None]
        for c, x, y in drawn:
            front = c in p.frontier
            ax.scatter([x], [y], marker="o" if front else "x", color="tab:blue" if front else "tab:gray", zorder=3)
            ax.annotate(c, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        front_pts = sorted((x, y) for c, x, y in drawn if c in p.frontier)
        if len(front_pts) > 1:
            ax.plot([x for x, _ in front_pts], [y for _, y in front_pts], "--", color="tab:blue", lw=1,
                    label="frontier (all axes)")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_title(f"context {p.context}")
        ax.set_xlabel("peak memory (MiB, median) — lower is better")
        ax.set_ylabel("generation tok/s (median) — higher is better")
        ax.grid(True, alpha=0.3)
        if missing:
            ax.text(0.01, 0.01, "not plotted (null metric): " + ", ".join(missing), transform=ax.transAxes,
                    fontsize=7, color="tab:red")
    if not panels:
        axes[0][0].text(0.5, 0.5, "no successful probes to plot", ha="center", va="center")
    fig.suptitle(f"{rb.id}: Pareto view (frontier over gen/prompt tok/s, memory, evals, sustain)", fontsize=9)
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        final = out_dir / f"{rb.id}.pareto.{ext}"
        tmp = out_dir / f".{rb.id}.pareto.tmp.{ext}"
        fig.savefig(tmp, format=ext, dpi=110)
        tmp.replace(final)
        paths.append(final)
    plt.close(fig)
    return paths
