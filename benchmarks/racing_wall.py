"""Racing a flag matrix on real servers (issue 38, item 6): wall time to the final frontier, raced ÷ every
candidate to 12 rounds, and the frontier over repeats.

    .venv/bin/python benchmarks/racing_wall.py [--grid near-ties|compute] [--repeats 3] [--fixed-repeats 1] [--json]

The grid (`--grid near-ties`, the default): 8 configurations of the small tiny model (`-t` 1/2 x `-ub`
64/256 x `-fa` on/off, one matrix candidate) plus one clearly worse model (the medium tiny model, `-t 1`).
The small model's compute is too little for its flags to matter: the 8 sets are near-ties. `--grid
compute`: the same 8 flag sets of the medium tiny model (25 M parameters, where a thread is most of a
probe's time on 2 cores) plus the medium model's f32 file at `-t 1` as the worse one. Both: contexts [64, 256], 16 tokens,
one warm-up, cooldown 0, no sustained run, no sentinel, the sweep's defaults otherwise (interleaved, a
server start per candidate and round). Raced: the default probes (rounds 3-12 by the stop rule) with
`racing = true`, `--repeats` times; fixed: `probes = 12`, `racing = false`, `--fixed-repeats` times (the
first is the ratio's denominator; more say how often 12 rounds of every candidate give one frontier). Each run is the daemon's
engine (`run_job`) on real llama-servers; its wall time includes the server starts and warm-ups. Printed:
each run's wall time, probes, starts, drops (who, where, by whom), and the frontier per context (the
runbook's Pareto view); then raced ÷ fixed (median wall) and how many repeats share one frontier. The load
average is printed beside every figure: run it on a quiet machine (the ratio moves with the load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from benchd.engine import sweepcheck
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, Runbook, Sustained, Sweep


def grid_sweep(raced: bool, grid: str = "near-ties") -> Sweep:
    small, medium = C.tiny("small"), C.tiny("medium")
    flagged, worse = (small.target, medium.target) if grid == "near-ties" else \
        (medium.target, medium.target.with_name("target-f32.gguf"))
    cands = [Candidate(id="tiny", runtime="llama-server", model=str(flagged),
                       matrix={"-t": ["1", "2"], "-ub": ["64", "256"], "-fa": ["on", "off"]}),
             Candidate(id="worse", runtime="llama-server", model=str(worse), args=["-t", "1"])]
    sweep = Sweep(name="racing-wall", contexts=[64, 256], gen_tokens=16, warmup=1, sentinel=False,
                  probes=None if raced else 12, racing=raced, sustained=Sustained(tokens=0),
                  cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), candidates=cands)
    return sweepcheck.expand(sweep).sweep


def run(sweep: Sweep, state: Path) -> tuple[Runbook, float, int]:
    def read(r: C.EngineRun) -> tuple[Runbook, float, int]:
        starts = sum(1 for e in r.store.events.iterate(r.job) if e.type == "server_ready")
        return build_runbook(r.config, r.store, r.job), r.wall_s, starts
    return C.run_engine(sweep, state, read)  # type: ignore[no-any-return]


def frontier(rb: Runbook) -> dict[int, list[str]]:
    return {p.context: sorted(p.frontier) for p in rb.pareto}


def one(label: str, sweep: Sweep, state: Path) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    rb, wall, starts = run(sweep, state)
    load1 = os.getloadavg()[0]
    probes = sum(1 for r in rb.rows if r.kind == "probe")
    out = {"wall_s": round(wall, 1), "probes": probes, "starts": starts, "load": [load0, load1],
           "dropped": [(d.candidate, d.context, d.round, d.by) for d in rb.race], "frontier": frontier(rb)}
    print(f"{label}: {wall:.1f} s, {probes} probes, {starts} server starts, {len(rb.race)} dropped "
          f"{[(d.candidate, d.context, d.round) for d in rb.race]}, frontier {frontier(rb)} "
          f"(load {load0:.2f} -> {load1:.2f})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", choices=["near-ties", "compute"], default="near-ties")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fixed-repeats", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print(f"grid {a.grid}; load average at start: {os.getloadavg()[:3]}; machine: {C.machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bd-race-wall-") as tmp:
        raced = [one(f"raced #{i + 1}", grid_sweep(True, a.grid), Path(tmp) / f"raced{i}") for i in range(a.repeats)]
        fixes = [one(f"fixed 12 rounds #{i + 1}", grid_sweep(False, a.grid), Path(tmp) / f"fixed{i}")
                 for i in range(max(1, a.fixed_repeats))]
    fixed = fixes[0]
    walls = [r["wall_s"] for r in raced]
    fronts = [json.dumps(r["frontier"], sort_keys=True) for r in raced]
    fixed_fronts = [json.dumps(r["frontier"], sort_keys=True) for r in fixes]
    out = {"raced": raced, "fixed": fixed, "fixed_repeats": fixes,
           "fixed_same_frontier": f"{max(fixed_fronts.count(f) for f in fixed_fronts)} of {len(fixed_fronts)}",
           "ratio_median_wall": round(statistics.median(walls) / fixed["wall_s"], 3),
           "ratio_range": [round(min(walls) / fixed["wall_s"], 3), round(max(walls) / fixed["wall_s"], 3)],
           "ratio_probes": round(statistics.median(r["probes"] for r in raced) / fixed["probes"], 3),
           "same_frontier": f"{max(fronts.count(f) for f in fronts)} of {len(fronts)}",
           "raced_frontier_equals_fixed": sum(f == json.dumps(fixed["frontier"], sort_keys=True) for f in fronts),
           "load_end": os.getloadavg()[:3]}
    print(f"raced / fixed, wall: median {out['ratio_median_wall']} (range {out['ratio_range']}); probes "
          f"{out['ratio_probes']}; same frontier in {out['same_frontier']} repeats, {out['raced_frontier_equals_fixed']}"
          f" of {len(fronts)} equal to the fixed run's; fixed runs: same frontier in {out['fixed_same_frontier']} "
          f"(load at the end {out['load_end']})")
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
