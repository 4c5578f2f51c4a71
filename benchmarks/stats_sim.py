"""The error rates of the stop rule and the Pareto view, simulated through the functions the daemon calls.

Each replicate draws a sweep's probe rows round by round (interleaved: one probe per candidate a round,
a drift factor shared by the round, per-probe log-normal noise), runs the engine's stop decision
(`stats.stop.stop_reason`, called after every round exactly as `Engine.stop_reason` calls it, from
`[probes].min` to `max`), then asks the context's Pareto question as the runbook does
(`results.pareto.row_judge` at the view's α from `pareto.view_alpha` and the sweep's planned axes).
Simulation counts do not depend on the machine's load.

    python benchmarks/stats_sim.py [--reps N] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchd.results.pareto import row_judge, view_alpha
from benchd.schemas import Candidate, EvalResult, Point, Row, Sweep
from benchd.stats import stop
from benchd.stats.comparison import PairDominance


@dataclass
class Truth:
    """One candidate's true values and the per-probe noise (coefficient of variation) of each axis."""

    gen: float = 100.0
    prompt: float = 1000.0
    ttft: float = 500.0
    mem: float = 1e9
    passes: int = 0  # of the smoke tier's 5 tasks
    ready: float | None = None  # mean warm-start time to ready (3 starts), None: no ready_s axis
    cv: float = 0.10
    mem_cv: float = 0.005
    start_cv: float = 0.0  # the spread of a server start's speed (log SD), shared by every probe on that start


@dataclass
class Case:
    name: str
    a: Truth
    b: Truth
    probes: Any = None  # None: the default (auto rounds 3..12 for two candidates); an int: fixed
    eval_tier: str = "none"
    starts: str = "round"  # the sweep's `starts`: a fresh server start every round, or one for the sweep
    ask: str = "false_dominance"  # what is counted (see `run_case`)
    goal: str = ""
    notes: list[str] = field(default_factory=list)


def _sweep(case: Case) -> Sweep:
    cands = [Candidate(id=x, runtime="llama-server", model="/m") for x in ("a", "b")]
    return Sweep(name="sim", contexts=[512], gen_tokens=32, candidates=cands, probes=case.probes,
                 eval_tier=case.eval_tier, order="interleaved", starts=case.starts)  # type: ignore[arg-type]


def _row(cand: str, t: Truth, rnd: int, speed: float, rng: random.Random, start: int) -> Row:
    """One probe row; `speed`: the round's drift times the server start's own factor."""
    def noisy(x: float, cv: float) -> float:
        return x * math.exp(rng.gauss(0.0, cv))

    g = noisy(t.gen * speed, t.cv)
    return Row(job="sim", candidate=cand, runtime="llama-server", context=512, kind="probe", probe=rnd, round=rnd,
               status="ok", gen_tps=g, prompt_tps=noisy(t.prompt * speed, t.cv), ttft_ms=noisy(t.ttft / speed, t.cv),
               mem_peak_bytes=noisy(t.mem, t.mem_cv), start=start)


def one(case: Case, rng: random.Random) -> tuple[int, dict[int, PairDominance], PairDominance]:
    """One replicate: (rounds run, the view's verdict at every planned look, the view's final verdict)."""
    sweep = _sweep(case)
    plan = sweep.probe_plan()
    lo, hi = plan.min, plan.max
    alpha, _ = view_alpha(sweep, "interleaved")
    k = len(stop.planned_axes(sweep))
    truths = {"a": case.a, "b": case.b}
    rows: dict[str, list[Row]] = {"a": [], "b": []}
    evals = [EvalResult(job="sim", candidate=c, tier="smoke", task=f"t{i}", passed=i < t.passes)
             for c, t in truths.items() for i in range(5)] if case.eval_tier != "none" else []
    ready = {c: [t.ready * math.exp(rng.gauss(0.0, t.cv)) for _ in range(3)]
             for c, t in truths.items() if t.ready is not None}
    extra = {"ready_s": ready} if ready else None
    looks: dict[int, PairDominance] = {}
    once = {c: math.exp(rng.gauss(0.0, t.start_cv)) for c, t in truths.items()}  # starts = "once": one draw

    def view(n: int) -> PairDominance:
        judge = row_judge(rows["a"] + rows["b"], evals, 512, order="interleaved", alpha=alpha, k=k, extra=extra)
        values = {"gen_tps": 1.0, **({"ready_s": 1.0} if ready else {})}
        return judge(Point(candidate="a", values=values), Point(candidate="b", values=values))

    rnd = 0
    while True:
        adaptive_done = plan.adaptive and stop.stop_reason(rows, rnd, min_rounds=lo, max_rounds=hi,
                                                           order="interleaved", sweep=sweep) is not None
        if adaptive_done or rnd >= hi:
            break
        drift = math.exp(rng.gauss(0.0, 0.05))
        for c in ("a", "b"):
            fresh = case.starts == "round"
            factor = math.exp(rng.gauss(0.0, truths[c].start_cv)) if fresh else once[c]
            rows[c].append(_row(c, truths[c], rnd, drift * factor, rng, start=rnd + 1 if fresh else 1))
        rnd += 1
        if rnd in stop.looks(lo, hi) or rnd == hi:
            looks[rnd] = view(rnd)
    return rnd, looks, looks.get(rnd) or view(rnd)


def run_case(case: Case, reps: int, rng: random.Random) -> dict[str, float]:
    """Counts over `reps` replicates: false domination (either way, unless the case asks for A's), the
    final view's gen_tps verdict `different` (either way, and B better), the same at any planned look,
    and the rounds run."""
    dom_a = dom_any = diff = diff_b = diff_any = diff_b_any = 0
    rounds = 0
    alpha_axis = 0.0
    for _ in range(reps):
        n, looks, final = one(case, rng)
        rounds += n
        alpha_axis = final.alpha_axis
        dom_a += final.winner == "a"
        dom_any += final.winner is not None
        g = final.verdicts.get("gen_tps")
        diff += bool(g and g.verdict == "different")
        diff_b += bool(g and g.verdict == "different" and g.b_better)
        seen = [v.verdicts.get("gen_tps") for v in looks.values()]
        diff_any += any(x is not None and x.verdict == "different" for x in seen)
        diff_b_any += any(x is not None and x.verdict == "different" and x.b_better for x in seen)
    return {"dominates_a": dom_a / reps, "dominates_any": dom_any / reps, "different": diff / reps,
            "different_b": diff_b / reps, "different_any_look": diff_any / reps,
            "different_b_any_look": diff_b_any / reps, "rounds": rounds / reps, "alpha_axis": alpha_axis}


def mc(p: float, reps: int) -> float:
    """The Monte-Carlo standard error of a rate p over reps replicates."""
    return math.sqrt(max(p * (1 - p), 1.0 / reps) / reps)


FAST = Truth(gen=200.0, prompt=2000.0, ttft=250.0, mem=0.8e9)
SLOW = Truth()


def cases() -> list[Case]:
    return [
        Case("identical twins (auto rounds)", Truth(), Truth(), ask="twins",
             goal="false different on gen_tps <= the stated α; false domination <= α"),
        Case("identical twins, a start's speed spread 30 %, a fresh start every round (starts = round)",
             Truth(start_cv=0.3), Truth(start_cv=0.3), ask="twins",
             goal="false different on gen_tps <= the stated α; false domination <= α"),
        Case("contrast: the same twins on one start each (starts = once)", Truth(start_cv=0.3),
             Truth(start_cv=0.3), starts="once", ask="twins", goal="none: shows why one start is not a sample"),
        Case("true ratio on the margin (B 1.02x at generation)", Truth(), Truth(gen=102.0), ask="margin",
             goal="different and B better on gen_tps <= α_axis/2 + MC error"),
        Case("trap: B far better on eval (5/5 vs 0/5), A 2x faster, 20 % smaller", FAST, Truth(passes=5),
             eval_tier="smoke", goal="false domination <= 5 %"),
        Case("trap: B 1.5x faster to ready (3 warm starts each)", Truth(gen=200.0, prompt=2000.0, ttft=250.0,
             mem=0.8e9, ready=1.5), Truth(ready=1.0), goal="false domination <= 5 %"),
        Case("trap: B 5 % faster prompt processing, A 2x faster generation, 20 % smaller",
             Truth(gen=200.0, mem=0.8e9), Truth(prompt=1050.0, ttft=500.0 / 1.05), goal="false domination <= 5 %"),
        Case("true: A 2x faster, 20 % smaller, eval 0/5 vs 0/5, fixed n = 3", FAST, SLOW, probes=3,
             eval_tier="smoke", ask="true", goal="A dominates >= 75 %"),
        Case("true: the same at the defaults (auto, first look at 3 rounds)", FAST, SLOW, eval_tier="smoke",
             ask="true", goal="A dominates >= 75 %; rounds run ÷ 12"),
    ]


def start(name: str, doc: str | None, argv: list[str] | None,
          out: Callable[[str], None]) -> tuple[argparse.Namespace, random.Random]:
    """A simulation's command line (--reps, --seed) and seeded generator; prints its header line."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    out(f"# {name}: {args.reps} replicates a case, seed {args.seed}; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} (counts do not depend on load)")
    return args, random.Random(args.seed)


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> list[tuple[Case, dict[str, float]]]:
    t0 = time.monotonic()
    args, rng = start("stats_sim", __doc__, argv, out)
    got = []
    for case in cases():
        r = run_case(case, args.reps, rng)
        got.append((case, r))
        reps = args.reps
        if case.ask == "twins":
            line = (f"different (final) {r['different']:.4f} ± {mc(r['different'], reps):.4f} vs α_axis "
                    f"{r['alpha_axis']:.4f}; at any look {r['different_any_look']:.4f} ± "
                    f"{mc(r['different_any_look'], reps):.4f}; false domination {r['dominates_any']:.4f}")
        elif case.ask == "margin":
            line = (f"different, B better (final) {r['different_b']:.4f} ± {mc(r['different_b'], reps):.4f} vs "
                    f"α_axis/2 {r['alpha_axis'] / 2:.4f}; at any look {r['different_b_any_look']:.4f}")
        elif case.ask == "true":
            line = f"A dominates {r['dominates_a']:.4f} ± {mc(r['dominates_a'], reps):.4f}"
        else:
            line = f"false domination (A dominates) {r['dominates_a']:.4f} ± {mc(r['dominates_a'], reps):.4f}"
        out(f"| {case.name} | {line} | rounds {r['rounds']:.2f} (÷ 12 = {r['rounds'] / 12:.2f}) | goal: {case.goal} |")
    out(f"# {time.monotonic() - t0:.0f} s")
    return got


if __name__ == "__main__":
    main()
