"""False differences between identical twins under an injected drift: the sequential order vs interleaved
rounds, judged by the one comparison function. Synthetic and fast (no servers): what the orders do to a
drift is arithmetic, and the real-server twins test (tests/engine/test_verdicts_real.py) checks the
design on a real machine.

    .venv/bin/python benchmarks/order_false_differences.py [--sweeps 2000] [--n 6,10,20] [--cv 3]
                                                          [--drift 10] [--step 5] [--seed 0] [--json]

Each sweep: two identical candidates, n probes each, lognormal noise of `--cv` % per probe, and the
machine drifting over the sweep's 2n probe slots — a linear slowdown of `--drift` % end to end, or a
`--step` % step halfway (one candidate's block after it, sequentially). Sequential: A's n probes, then
B's (unpaired comparison); interleaved: n rounds, each visiting A and B in a fresh random order (the
comparison pairs the rounds). Printed side by side per n: the fraction of sweeps that called the twins
"different", sequential and interleaved, and the load average (the figures do not depend on it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchd.stats.comparison import compare_axis


def machine(slot: int, slots: int, drift_pct: float, step_pct: float) -> float:
    """The machine's speed factor at a probe slot: a linear drift plus a step at half time."""
    f = 1.0 - drift_pct / 100.0 * slot / max(1, slots - 1)
    return f * (1.0 - step_pct / 100.0 if slot >= slots // 2 else 1.0)


def one(rng: random.Random, n: int, cv: float, drift: float, step: float) -> tuple[bool, bool]:
    sigma = math.sqrt(math.log(1 + (cv / 100.0) ** 2))
    slots = 2 * n

    def probe(slot: int) -> float:
        return 100.0 * machine(slot, slots, drift, step) * math.exp(rng.gauss(0.0, sigma))

    seq_a = [probe(i) for i in range(n)]
    seq_b = [probe(n + i) for i in range(n)]
    seq = compare_axis(seq_a, seq_b, axis="gen_tps", better="higher").verdict == "different"
    il_a, il_b = [], []
    for r in range(n):
        first_a = rng.random() < 0.5
        a, b = (probe(2 * r), probe(2 * r + 1)) if first_a else (probe(2 * r + 1), probe(2 * r))
        il_a.append(a)
        il_b.append(b)
    il = compare_axis(il_a, il_b, axis="gen_tps", better="higher", paired=True).verdict == "different"
    return seq, il


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=int, default=2000)
    ap.add_argument("--n", default="6,10,20")
    ap.add_argument("--cv", type=float, default=3.0)
    ap.add_argument("--drift", type=float, default=10.0)
    ap.add_argument("--step", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    out = {"sweeps": a.sweeps, "cv_pct": a.cv, "drift_pct": a.drift, "step_pct": a.step, "rows": []}
    for n in (int(x) for x in a.n.split(",")):
        seq = il = 0
        for _ in range(a.sweeps):
            s, i = one(rng, n, a.cv, a.drift, a.step)
            seq += s
            il += i
        out["rows"].append({"n": n, "sequential": seq / a.sweeps, "interleaved": il / a.sweeps})
    out["loadavg"] = os.getloadavg()
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"twins called different, {a.sweeps} sweeps each; noise CV {a.cv:g} %, drift {a.drift:g} % linear, "
          f"step {a.step:g} %")
    print(f"  {'n':>4}  {'sequential':>11}  {'interleaved':>11}")
    for r in out["rows"]:
        print(f"  {r['n']:>4}  {r['sequential']:>11.3f}  {r['interleaved']:>11.3f}")
    la = out["loadavg"]
    print(f"  load average {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")


if __name__ == "__main__":
    main()
