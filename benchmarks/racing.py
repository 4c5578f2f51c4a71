"""Racing a matrix to its frontier (issue 38), simulated through the engine itself: time to the decision
raced ÷ every candidate to 12 rounds, the frontier over repeats, and false drops.

    .venv/bin/python benchmarks/racing.py [--sweeps 100] [--cv 0.05] [--seed 38] [--json]

Each sweep is the daemon's own engine (`benchd.engine.scheduler.run_job`: the designs, the stop rule,
`racing.Race`'s looks and its settled stop, all through `benchd.stats`) on the fast seam's fake pool
(tests/fakeengine.py), whose probe values are drawn here: per probe, the candidate's true gen tok/s times
a factor shared by every candidate in that round (CV `--cv`, the machine's state) times one of its own
(CV `--cv`); prompt tok/s 10x it, TTFT and e2e from it; memory 1e8 bytes (the worse model 3e8) with 0.5 %
noise. Counts, not wall times: the "time" of a run is the probe rows it ran and the seconds its rows say
they took (the sum of their e2e at the drawn rates), so a busy machine does not move a figure.

The grid (as the tiny-model grid of RESULTS.md section 16: 8 flag sets of one model a few per cent apart,
plus one clearly worse model), contexts [64, 256], 16 tokens, interleaved, no sustained run:
- "near-ties": t1.* four at 100 tok/s (the true frontier), t2.* four at 98 tok/s (2 % slower: on the
  margin), worse at 10 tok/s;
- "spread": four at 100 (the true frontier), four at 90/80/70/60 tok/s, worse at 10.
Per sweep and grid: raced with the settled stop (the daemon's rule: a context's rounds end when no pair
can resolve in the rounds left, a candidate's when none of its pairs can), raced without it (the rule
before: `Race.settled` and `Race.settle` switched off, every undecided pair to 12 rounds), fixed (`probes = 12`, `racing = false`).
A false drop: a true-frontier candidate dropped. The frontier: the candidates not dropped at the largest
context. Load average printed beside the figures (counts do not depend on it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fakeengine

import msgspec

from benchd.config import Config
from benchd.engine import racing
from benchd.engine.scheduler import Seam, run_job
from benchd.schemas import Candidate, Cooldown, Row, Sustained, Sweep
from benchd.store import Store
from tests.fakeengine import FakePool, FakeRunner, Script

GRIDS: dict[str, dict[str, float]] = {
    "near-ties": {**{f"t1.c{i}": 100.0 for i in range(4)}, **{f"t2.c{i}": 98.0 for i in range(4)}, "worse": 10.0},
    "spread": {**{f"f{i}": 100.0 for i in range(4)}, "w90": 90.0, "w80": 80.0, "w70": 70.0, "w60": 60.0,
               "worse": 10.0},
}
CONTEXTS = [64, 256]
GEN_TOKENS = 16


class World:
    """The drawn probe values of one sweep: a shared factor per (context, round) and one per probe."""

    def __init__(self, rates: dict[str, float], cv: float, seed: int) -> None:
        self.rates, self.cv, self.seed = rates, cv, seed
        self.shared: dict[tuple[int, int], float] = {}

    def value(self, cand: str, context: int, probe: int) -> tuple[float, int]:
        rng = random.Random(f"{self.seed}/{cand}/{context}/{probe}")  # the same draw whatever runs before it
        shared = self.shared.setdefault((context, probe), math.exp(random.Random(
            f"{self.seed}/shared/{context}/{probe}").gauss(0, self.cv)))
        gen = self.rates[cand] * shared * math.exp(rng.gauss(0, self.cv))
        mem = (3e8 if cand == "worse" else 1e8) * math.exp(rng.gauss(0, 0.005))
        return gen, int(mem)


class NoisyRunner(FakeRunner):
    """The fast seam's runner with this sweep's drawn values."""

    def __init__(self, recorder: Any, script: Script, sweep: Sweep, world: World) -> None:
        super().__init__(recorder, script, sweep)
        self.world = world

    async def probe(self, server: Any, cell: Any, gen_tokens: int, series: Any = None) -> Row:
        gen, mem = self.world.value(cell.candidate.id, cell.context, cell.probe)
        self.script.rate[cell.candidate.id] = gen
        row = await super().probe(server, cell, gen_tokens, series)
        return msgspec.structs.replace(row, mem_peak_bytes=mem) if row.status == "ok" else row


def sweep_of(tmp: Path, rates: dict[str, float], raced: bool) -> Sweep:
    cands = []
    for cid in rates:
        model = tmp / f"{cid}.gguf"
        model.write_bytes(b"GGUF fake " + cid.encode())
        cands.append(Candidate(id=cid, runtime="llama-server", model=str(model), binary="/fake/llama-server"))
    return Sweep(name="racing-sim", contexts=CONTEXTS, gen_tokens=GEN_TOKENS, warmup=1, eval_tier="none",
                 probes=None if raced else 12, racing=raced, sentinel=False, sustained=Sustained(tokens=0),
                 cooldown=Cooldown(policy="fixed", seconds=0.0, max_seconds=0.0), candidates=cands)


@contextmanager
def settled_off() -> Iterator[None]:
    """The rule before the settled stop: `Race.settled` answers None and `Race.settle` nobody (undecided
    pairs run every candidate to the maximum)."""
    saved, saved_each = racing.Race.settled, racing.Race.settle
    racing.Race.settled = lambda self, *a, **k: None  # type: ignore[method-assign]
    racing.Race.settle = lambda self, *a, **k: []  # type: ignore[method-assign]
    try:
        yield
    finally:
        racing.Race.settled, racing.Race.settle = saved, saved_each  # type: ignore[method-assign]


def one(tmp: Path, rates: dict[str, float], raced: bool, cv: float, seed: int, name: str) -> dict[str, Any]:
    """One engine run: its probe rows, the seconds they say they took, who left where, the survivors."""
    d = tmp / name
    d.mkdir()
    config = Config.resolve(state_dir=d / "state", cache_dir=d / "cache")
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    sweep = sweep_of(d, rates, raced)
    job, _ = store.create_job(sweep, job_id=f"sim-{name}")
    script, world = Script(), World(rates, cv, seed)
    seam = Seam(pool=lambda rec: FakePool(rec, script), runner=lambda rec, pool: NoisyRunner(rec, script, sweep, world))
    asyncio.run(run_job(job.id, sweep, store, config, lambda _e: None, seam=seam))
    rows = [r for r in store.results.rows(job.id) if r.kind == "probe"]
    events = list(store.events.iterate(job.id))
    drops = [e.payload for e in events if e.type == "candidate_dropped"]
    settles = sum(e.type == "candidate_settled" for e in events)
    stops = [(e.payload["context"], e.payload["rounds"], e.payload["why"]) for e in events if e.type == "context_finished"]
    store.close()
    gone = {p["candidate"] for p in drops}
    return {"probes": len(rows), "seconds": sum((r.e2e_ms or 0) + (r.ttft_ms or 0) for r in rows) / 1000,
            "drops": [(p["candidate"], p["context"], p["round"]) for p in drops], "stops": stops, "settles": settles,
            "frontier": sorted(c for c in rates if c not in gone)}


def simulate(grid: str, sweeps: int, cv: float, seed: int, tmp: Path) -> dict[str, Any]:
    rates = GRIDS[grid]
    best = max(r for c, r in rates.items())
    true_front = [c for c, r in rates.items() if r == best]
    runs: dict[str, list[dict[str, Any]]] = {"raced": [], "raced_before": [], "fixed": []}
    for i in range(sweeps):
        s = seed * 100_000 + i
        runs["raced"].append(one(tmp, rates, True, cv, s, f"{grid}-r{i}"))
        with settled_off():
            runs["raced_before"].append(one(tmp, rates, True, cv, s, f"{grid}-b{i}"))
        runs["fixed"].append(one(tmp, rates, False, cv, s, f"{grid}-f{i}"))
    out: dict[str, Any] = {"grid": grid, "rates": rates, "sweeps": sweeps, "cv": cv, "seed": seed}
    for key in ("raced", "raced_before"):
        rs = runs[key]
        ratio_p = [r["probes"] / f["probes"] for r, f in zip(rs, runs["fixed"], strict=True)]
        ratio_s = [r["seconds"] / f["seconds"] for r, f in zip(rs, runs["fixed"], strict=True)]
        fronts = [json.dumps(r["frontier"]) for r in rs]
        top = max(set(fronts), key=fronts.count)
        false = sum(c in {d[0] for d in r["drops"]} for r in rs for c in true_front)
        rounds = [n for r in rs for (_, n, _) in r["stops"]]
        out[key] = {
            "probes_ratio_median": round(statistics.median(ratio_p), 3),
            "seconds_ratio_median": round(statistics.median(ratio_s), 3),
            "seconds_ratio_max": round(max(ratio_s), 3),
            "rounds_per_context_median": statistics.median(rounds),
            "settled_stops": sum("race settled" in (w or "") for r in rs for (_, _, w) in r["stops"]),
            "candidates_settled": sum(r["settles"] for r in rs),
            "contexts": len(rounds),
            "false_drops_per_frontier_candidate": round(false / (sweeps * len(true_front)), 4),
            "sweeps_with_a_false_drop": sum(any(c in {d[0] for d in r["drops"]} for c in true_front) for r in rs),
            "worse_model_dropped": sum("worse" in {d[0] for d in r["drops"]} for r in rs),
            "frontier_most_common": json.loads(top), "frontier_most_common_share": f"{fronts.count(top)} of {sweeps}",
            "frontier_holds_the_true_frontier": sum(set(true_front) <= set(r["frontier"]) for r in rs),
            "frontier_size_median": statistics.median(len(r["frontier"]) for r in rs),
        }
    out["fixed_probes"] = runs["fixed"][0]["probes"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweeps", type=int, default=100)
    ap.add_argument("--cv", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--grid", choices=sorted(GRIDS), action="append")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[:3]}", flush=True)
    result: dict[str, Any] = {"alpha": racing.RACE_ALPHA, "grids": []}
    with tempfile.TemporaryDirectory(prefix="bd-race-sim-") as tmp:
        for grid in a.grid or sorted(GRIDS):
            got = simulate(grid, a.sweeps, a.cv, a.seed, Path(tmp))
            result["grids"].append(got)
            for key in ("raced", "raced_before"):
                g = got[key]
                print(f"{grid} {key}: probes ratio {g['probes_ratio_median']}, seconds ratio {g['seconds_ratio_median']} "
                      f"(max {g['seconds_ratio_max']}), rounds/context median {g['rounds_per_context_median']}, "
                      f"settled stops {g['settled_stops']} of {g['contexts']}, candidate-contexts settled early "
                      f"{g['candidates_settled']}, false drops "
                      f"{g['false_drops_per_frontier_candidate']} per frontier candidate ({g['sweeps_with_a_false_drop']} "
                      f"sweeps), worse dropped {g['worse_model_dropped']} of {a.sweeps}, frontier "
                      f"{g['frontier_most_common']} in {g['frontier_most_common_share']}, holds the true frontier "
                      f"{g['frontier_holds_the_true_frontier']} of {a.sweeps}",
                      flush=True)
    print(f"load average at end: {os.getloadavg()[:3]}")
    if a.json:
        print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
