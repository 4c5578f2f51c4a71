"""Racing a matrix to its frontier (issue 38): raced ÷ every candidate to 12 rounds, the frontier over
repeats, and simulated false drops.

    .venv/bin/python benchmarks/racing.py [--repeats 3] [--sims 2000] [--skip-real] [--json]

1. Real servers: a matrix of 8 configurations of the tiny model (`-t` 1/2 x `-ub` 64/256 x `-fa` on/off)
   plus one clearly worse model (the medium tiny model), contexts [64, 256], 16 tokens, cooldown 0, no
   sustained run, no sentinel. Raced: the default probes (rounds 3-12 by the pair stop rule) with
   `racing = true`, `--repeats` times; fixed: `probes = 12`, `racing = false` (every candidate to 12
   rounds), once. Printed: each run's wall time (the engine's whole run), the ratio raced ÷ fixed, who was
   dropped where, and each run's final frontier per context (the runbook's Pareto view).
2. Simulation (no server): the real `racing.Race.look` (the one dominance function) over synthetic rounds
   for 4 candidates with the same true distribution on every axis (all on the true frontier) and 4 worse
   ones (10-40 % slower, more memory), looks at rounds 3..12, lognormal per-probe noise (CV `--cv`) with a
   shared per-round factor; a false drop is a true-frontier candidate dropped. Printed: per frontier
   candidate and per sweep, against the race's α.
Load average printed beside every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
from order_time_to_decision import run  # one engine run, timed: (runbook, wall s, load average after)

from benchd.engine import racing, sweepcheck
from benchd.schemas import Candidate, Cooldown, Row, Runbook, Sustained, Sweep
from benchd.stats import stop


def grid_sweep(raced: bool) -> Sweep:
    small, medium = C.tiny("small"), C.tiny("medium")
    cands = [Candidate(id="tiny", runtime="llama-server", model=str(small.target),
                       matrix={"-t": ["1", "2"], "-ub": ["64", "256"], "-fa": ["on", "off"]}),
             Candidate(id="worse", runtime="llama-server", model=str(medium.target), args=["-t", "1"])]
    sweep = Sweep(name="racing-bench", contexts=[64, 256], gen_tokens=16, warmup=1, sentinel=False,
                  probes=None if raced else 12, racing=raced, sustained=Sustained(tokens=0),
                  cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), candidates=cands)
    return sweepcheck.expand(sweep).sweep


def frontier(rb: Runbook) -> dict[int, list[str]]:
    return {p.context: sorted(p.frontier) for p in rb.pareto}


def real(repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"raced": []}
    with tempfile.TemporaryDirectory(prefix="bd-race-") as tmp:
        for i in range(repeats):
            load0 = os.getloadavg()[:2]
            rb, wall, load1 = run(grid_sweep(True), Path(tmp) / f"raced{i}")
            probes = sum(1 for r in rb.rows if r.kind == "probe")
            out["raced"].append({"wall_s": round(wall, 1), "probes": probes, "load_before": load0, "load_after": load1,
                                 "dropped": [(d.candidate, d.context, d.round, d.by) for d in rb.race],
                                 "frontier": frontier(rb)})
            print(f"raced #{i + 1}: {wall:.1f} s, {probes} probes, {len(rb.race)} dropped, frontier {frontier(rb)} "
                  f"(load {load0[0]:.1f} -> {load1[0]:.1f})", flush=True)
        load0 = os.getloadavg()[:2]
        rb, wall, load1 = run(grid_sweep(False), Path(tmp) / "fixed")
        probes = sum(1 for r in rb.rows if r.kind == "probe")
        out["fixed"] = {"wall_s": round(wall, 1), "probes": probes, "load_before": load0, "load_after": load1,
                        "frontier": frontier(rb)}
        print(f"fixed 12 rounds: {wall:.1f} s, {probes} probes, frontier {frontier(rb)} "
              f"(load {load0[0]:.1f} -> {load1[0]:.1f})", flush=True)
    walls = [r["wall_s"] for r in out["raced"]]
    out["ratio_median"] = round(sorted(walls)[len(walls) // 2] / out["fixed"]["wall_s"], 3)
    fronts = [json.dumps(r["frontier"], sort_keys=True) for r in out["raced"]]
    out["same_frontier"] = f"{max(fronts.count(f) for f in fronts)} of {len(fronts)}"
    out["raced_frontier_equals_fixed"] = sum(f == json.dumps(out["fixed"]["frontier"], sort_keys=True) for f in fronts)
    print(f"raced / fixed (median wall): {out['ratio_median']}; same frontier in {out['same_frontier']} repeats; "
          f"{out['raced_frontier_equals_fixed']} of {len(fronts)} equal to the fixed run's")
    return out


def sim_rows(cand: str, gen: float, mem: float, rounds: int, cv: float, shared: list[float],
             rng: random.Random) -> list[Row]:
    def noisy(x: float, r: int) -> float:
        return x * shared[r] * math.exp(rng.gauss(0, cv))
    return [Row(job="sim", candidate=cand, runtime="llama-server", context=64, kind="probe", probe=r, round=r,
                status="ok", gen_tps=noisy(gen, r), prompt_tps=noisy(gen * 10, r), mem_peak_bytes=int(noisy(mem, r)))
            for r in range(rounds)]


def simulate(sims: int, cv: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    front = [f"f{i}" for i in range(4)]
    worse = {"w10": 0.9, "w20": 0.8, "w30": 0.7, "w40": 0.6}
    false_cands = sweeps_with_false = dropped_worse = 0
    for _ in range(sims):
        race = racing.Race(on=True, alpha=stop.look_alpha(3, 12, racing.RACE_ALPHA), margin_pct=2.0,
                           order="interleaved")
        shared = [math.exp(rng.gauss(0, cv)) for _ in range(12)]  # the machine's state per round
        rows = {c: sim_rows(c, 100.0, 1e8, 12, cv, shared, rng) for c in front}
        rows |= {c: sim_rows(c, 100.0 * f, 1e8 * (2 - f), 12, cv, shared, rng) for c, f in worse.items()}
        for rnd in stop.looks(3, 12):  # the stop rule's planned looks, as the engine's race
            alive = race.alive(rows)
            race.look(64, rnd, {c: [r for r in rows[c] if r.round is not None and r.round < rnd] for c in alive})
        lost = [c for c in front if c in race.dropped]
        false_cands += len(lost)
        sweeps_with_false += bool(lost)
        dropped_worse += sum(c in race.dropped for c in worse)
    out = {"sims": sims, "cv": cv, "alpha": racing.RACE_ALPHA,
           "false_drop_per_frontier_candidate": round(false_cands / (sims * len(front)), 4),
           "sweeps_with_a_false_drop": round(sweeps_with_false / sims, 4),
           "worse_dropped_share": round(dropped_worse / (sims * len(worse)), 3)}
    print(f"simulation ({sims} sweeps, CV {cv}): false drops {out['false_drop_per_frontier_candidate']} per frontier "
          f"candidate, {out['sweeps_with_a_false_drop']} of sweeps with one (alpha {racing.RACE_ALPHA}); worse "
          f"candidates dropped: {out['worse_dropped_share']}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--cv", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[:3]}")
    result: dict[str, Any] = {"machine": C.machine()}
    result["simulation"] = simulate(a.sims, a.cv, a.seed)
    if not a.skip_real:
        result["real"] = real(a.repeats)
    print(f"load average at end: {os.getloadavg()[:3]}")
    if a.json:
        print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
