"""The pair stop rule's verdict: the question the Pareto view asks, asked of one pair's rows so far.

The engine's stop rule imports it directly, so a context stops on the answer the view will give.
Reasons and facts: docs/measuring.md#when-a-context-stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchd.schemas import Row
from benchd.stats.axes import Direction, probe_axes
from benchd.stats.comparison import ALPHA, AxisVerdict, compare_axis, dominance, paired_samples


def stop_verdict(rows_a: Sequence[Row], rows_b: Sequence[Row], *, metric: str, better: Direction, order: str,
                 margin_pct: float, alpha: float = ALPHA) -> AxisVerdict:
    """The pair stop rule's question, asked as the context's Pareto view asks it: B against A on `metric`
    at the α each axis gets there (α / k over the per-probe core axes both sides' rows measure; the
    `dominance` verdict itself when `metric` is one of them), paired by round as `order` allows.
    `rows_a`, `rows_b`: the pair's valid probe rows of one context so far. Axes measured outside the
    probe rounds (pass rates, sustained runs, sessions, levels, images, time to ready) are not counted;
    where they join the view, its k is larger."""
    names = [a.name for a in probe_axes() if a.name in Row.__struct_fields__]
    sa: dict[str, Any] = {}
    sb: dict[str, Any] = {}
    paired: dict[str, bool] = {}
    for axis in names:
        s = paired_samples(rows_a, rows_b, axis, order=order)
        sa[axis], sb[axis], paired[axis] = s.a, s.b, s.paired
    d = dominance(sa, sb, axes=names, alpha=alpha, margin_pct=margin_pct, paired=paired)
    if metric in d.verdicts:
        return d.verdicts[metric]
    s = paired_samples(rows_a, rows_b, metric, order=order)  # not a core axis, or skipped there
    return compare_axis(s.a, s.b, axis=metric, better=better, margin_pct=margin_pct, alpha=d.alpha_axis,
                        paired=s.paired)
