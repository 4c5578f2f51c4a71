"""Time to a decision: wall time until every pair of candidates is resolved on the probe metric, with
`probes = "auto"` in interleaved rounds (the pair stop rule) against a fixed count that resolves the same
pairs (goal: auto / fixed <= 0.6). Real servers, the demo's llama-server candidates.

    .venv/bin/python benchmarks/order_time_to_decision.py [--max 30] [--candidates ID,...] [--json]

1. The demo sweep (`benchctl/demo.py`; no evals, no sustained run, no sentinel, cooldown 0 s) with
   `probes = "auto"` (min 6, `--max`), order interleaved: its wall time, its rounds per context, and the
   pairs it resolved (the runbook's `design.contexts[].why`).
2. The same sweep with a fixed count, interleaved: the count a user would have had to choose up front
   to resolve those pairs — tried upward from 6 (doubling, then the largest auto context's rounds) until
   every pair the auto run resolved is resolved on the fixed run's rows too, by the same comparison.
Printed: walls, probes, and the ratio auto / fixed, with the load average before and after each run.
Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
import msgspec

from benchctl.demo import _sweep_toml
from benchd.results.runbook import build_runbook
from benchd.schemas import Cooldown, Probes, Runbook, Sustained, Sweep
from benchd.stats.comparison import compare_rows


def run(sweep: Sweep, state: Path) -> tuple[Runbook, float, tuple[float, float]]:
    return C.run_engine(sweep, state, lambda r: (build_runbook(r.config, r.store, r.job), r.wall_s,  # type: ignore[no-any-return]
                                                 os.getloadavg()[:2]))


def resolved(rb: Runbook, metric: str, margin: float) -> set[tuple[int, str, str]]:
    ok = [r for r in rb.rows if r.kind == "probe" and r.status == "ok" and not r.short]
    order = rb.design.order if rb.design else None
    out = set()
    for ctx in sorted({r.context for r in ok}):
        cands = sorted({r.candidate for r in ok if r.context == ctx})
        for a, b in itertools.combinations(cands, 2):
            v = compare_rows([r for r in ok if r.candidate == a and r.context == ctx],
                             [r for r in ok if r.candidate == b and r.context == ctx], metric, order=order,
                             margin_pct=margin)
            if v.verdict != "unresolved":
                out.add((ctx, a, b))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=30)
    ap.add_argument("--candidates", default="")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    demo = msgspec.convert(tomllib.loads(_sweep_toml(C.tiny("small"))), Sweep)
    cands = [c for c in demo.candidates if c.runtime == "llama-server"]
    if a.candidates:
        cands = [c for c in demo.candidates if c.id in a.candidates.split(",")]
    base = msgspec.structs.replace(demo, candidates=cands, eval_tier="none", sustained=Sustained(tokens=0),
                                   sentinel=False, order="interleaved",
                                   cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0))
    plan = Probes(max=a.max)
    out: dict[str, Any] = {"machine": C.machine(), "candidates": [c.id for c in cands], "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-ttd-") as tmp:
        load = os.getloadavg()[:2]
        rb, wall, after = run(msgspec.structs.replace(base, probes=plan), Path(tmp) / "auto")
        target = resolved(rb, plan.metric, plan.target_ci_pct)
        rounds = max((c.rounds for c in rb.design.contexts), default=0) if rb.design else 0
        out["auto"] = {"wall_s": wall, "probes": sum(r.kind == "probe" for r in rb.rows), "max_rounds_used": rounds,
                       "resolved": sorted(map(list, target)), "stops": [c.why for c in rb.design.contexts] if rb.design else [],
                       "loadavg_before": load, "loadavg_after": after}
        tried = sorted({6, 12, 24, rounds, a.max})
        fixed = None
        for n in (x for x in tried if x >= 6):
            load = os.getloadavg()[:2]
            rbf, wf, after = run(msgspec.structs.replace(base, probes=n), Path(tmp) / f"fixed{n}")
            got = resolved(rbf, plan.metric, plan.target_ci_pct)
            out["runs"].append({"probes": n, "wall_s": wf, "resolves_the_same": target <= got,
                                "loadavg_before": load, "loadavg_after": after})
            if target <= got:
                fixed = {"probes": n, "wall_s": wf}
                break
    out["fixed"] = fixed
    out["ratio_auto_over_fixed"] = out["auto"]["wall_s"] / fixed["wall_s"] if fixed else None
    if a.json:
        print(json.dumps(out, indent=2))
        return
    au = out["auto"]
    print(f"auto interleaved: {au['wall_s']:.0f} s, {au['probes']} probes, resolved {len(au['resolved'])} pair(s) "
          f"(load {au['loadavg_before'][0]:.2f} -> {au['loadavg_after'][0]:.2f})")
    for s in au["stops"]:
        print(f"    stop: {s}")
    for r in out["runs"]:
        print(f"fixed {r['probes']:>3}: {r['wall_s']:.0f} s, resolves the same pairs: {r['resolves_the_same']} "
              f"(load {r['loadavg_before'][0]:.2f} -> {r['loadavg_after'][0]:.2f})")
    print(f"ratio auto / fixed wall: {C.fmt(out['ratio_auto_over_fixed'])}"
          + ("" if fixed else f" (no fixed count up to {a.max} resolved the same pairs)"))


if __name__ == "__main__":
    main()
