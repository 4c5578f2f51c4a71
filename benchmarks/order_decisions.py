"""Decisions per sweep: the fraction of candidate pairs resolved on the demo grid, the rule before the one
comparison function against the one comparison function, on the SAME rows (same probe count).

    .venv/bin/python benchmarks/order_decisions.py [--probes 3] [--order interleaved] [--json]

Runs the demo sweep (`benchctl/demo.py`: its candidates and contexts; no evals, no sustained run, no
sentinel, cooldown 0 s) through the real engine once, then judges every pair of candidates on every
per-probe axis of the Pareto table twice:
- before: medians more than the margin apart and, with six probes or more per side, the two
  distribution-free 95 % CIs of the median apart, else an exact Mann–Whitney p < 0.05 (which 3 vs 3
  can never reach) — the rule the Pareto view, `compare` and the report used before, written out
  here (ranks from benchd.stats.ranktests) so the script keeps measuring it after it was replaced;
- now: `benchd.stats.comparison.compare_rows` (paired by round in interleaved / blocked rows).
Printed: resolved pairs x axes under each rule, the ratio now / before, and the load average before
and after. Run it on a quiet machine (no other suite or benchmark).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
import msgspec

from benchctl.demo import _sweep_toml
from benchd.engine.metrics import median_ci
from benchd.schemas import Cooldown, Row, Sustained, Sweep
from benchd.stats.axes import AXES
from benchd.stats.comparison import compare_rows
from benchd.stats.ranktests import mann_whitney_min_p, mann_whitney_p

ALPHA = 0.05


def old_rule(a: list[float], b: list[float], margin_pct: float) -> bool:
    """The rule before the one comparison function: True = "different"."""
    if not a or not b:
        return False
    ma, mb = statistics.median(a), statistics.median(b)
    if not ma or abs(mb - ma) / abs(ma) * 100 <= margin_pct:
        return False
    ca, cb = median_ci(a), median_ci(b)
    if ca is not None and cb is not None:
        return ca[1] < cb[0] or cb[1] < ca[0]
    if mann_whitney_min_p(len(a), len(b)) > ALPHA:
        return False
    return mann_whitney_p(a, b)[0] < ALPHA


def run(sweep: Sweep, state: Path) -> tuple[list[Row], float, str]:
    def read(r: C.EngineRun) -> tuple[list[Row], float, str]:
        order = next((str(e.payload["order"]) for e in r.store.events.page(r.job) if e.type == "design_chosen"),
                     "sequential")
        return r.store.results.rows(r.job), r.wall_s, order
    return C.run_engine(sweep, state, read)  # type: ignore[no-any-return]


def judge_all(rows: list[Row], order: str, margin_pct: float) -> dict[str, Any]:
    ok = [r for r in rows if r.kind == "probe" and r.status == "ok" and not r.short]
    cands = sorted({r.candidate for r in ok})
    contexts = sorted({r.context for r in ok})
    axes = [x for x in AXES if x in Row.__struct_fields__ and x != "sustain_ratio"]
    before = now = total = 0
    detail = []
    for ctx, (a, b), axis in itertools.product(contexts, itertools.combinations(cands, 2), axes):
        ra = [r for r in ok if r.candidate == a and r.context == ctx]
        rb = [r for r in ok if r.candidate == b and r.context == ctx]
        va = [float(v) for r in ra if (v := getattr(r, axis, None)) is not None]
        vb = [float(v) for r in rb if (v := getattr(r, axis, None)) is not None]
        if not va or not vb:
            continue
        total += 1
        old = old_rule(va, vb, margin_pct)
        new = compare_rows(ra, rb, axis, order=order, margin_pct=margin_pct)
        before += old
        now += new.verdict != "unresolved"
        detail.append({"context": ctx, "pair": [a, b], "axis": axis, "before": "different" if old else "not resolved",
                       "now": new.text})
    return {"pairs_axes": total, "resolved_before": before, "resolved_now": now, "detail": detail}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--order", choices=["interleaved", "blocked", "sequential"], default="interleaved")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    demo = msgspec.convert(tomllib.loads(_sweep_toml(C.tiny("small"))), Sweep)
    sweep = msgspec.structs.replace(demo, probes=a.probes, order=a.order, eval_tier="none",
                                    sustained=Sustained(tokens=0), sentinel=False,
                                    cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0))
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-order-") as tmp:
        rows, wall, order = run(sweep, Path(tmp) / "state")
    out = judge_all(rows, order, sweep.probe_plan().target_ci_pct)
    load1 = os.getloadavg()
    out.update(machine=C.machine(), probes=a.probes, order=order, wall_s=round(wall, 1),
               loadavg_before=load0, loadavg_after=load1,
               ratio_now_over_before=(out["resolved_now"] / out["resolved_before"]) if out["resolved_before"] else None)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    t = out["pairs_axes"]
    print(f"demo grid, {a.probes} probes per cell, order {order}, wall {wall:.0f} s")
    print(f"  resolved (pair x axis): before {out['resolved_before']}/{t}   now {out['resolved_now']}/{t}"
          f"   ratio now/before {C.fmt(out['ratio_now_over_before'])}")
    for d in out["detail"]:
        print(f"    ctx {d['context']:>5} {d['pair'][0]} vs {d['pair'][1]} {d['axis']:<16} before {d['before']:<13} now {d['now']}")
    print(f"  load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
