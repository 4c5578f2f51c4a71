"""How many eval tasks a suite needs to tell a 10-point pass-rate gap (no timing: pure arithmetic on the
project's own statistics, `stats.ranktests.clopper_pearson` and `results.comparison.compare_outcomes`).

    .venv/bin/python benchmarks/eval_resolution.py [--gap 10] [--json]

1. **Unpaired** (two candidates' pass rates each with its exact 95 % interval, as the runbook shows them):
   the smallest n at which the Clopper–Pearson intervals of p and p + gap no longer overlap.
2. **Paired** (the same task ids on both sides, as `compare` and the Pareto view judge them): the
   smallest n at which `compare_outcomes` says "different" when B passes gap % more tasks, with the
   discordant share d split (gap + d) / 2 for B, (d - gap) / 2 for A; d = gap is the cleanest case (B
   solves every task A solves and gap % more), larger d is the realistic case of two models that fail
   different tasks.
Each n is searched over 10..2000 (steps of 10); "None" = not resolved within 2000 tasks (or the split
is impossible: B's pass rate plus A's own wins above 100 %).
"""

from __future__ import annotations

import argparse
import json

from benchd.stats.comparison import compare_outcomes
from benchd.stats.ranktests import clopper_pearson

BASES = (0.5, 0.7, 0.85)
DISCORDANT = (1.0, 2.0, 3.0)  # discordant share as multiples of the gap


def unpaired_n(p: float, gap: float) -> int | None:
    for n in range(10, 2001, 10):
        ka, kb = round(p * n), round((p + gap) * n)
        if clopper_pearson(ka, n, 0.95)[1] < clopper_pearson(kb, n, 0.95)[0]:
            return n
    return None


def paired_n(p: float, gap: float, disc: float) -> int | None:
    for n in range(10, 2001, 10):
        only_b, only_a = round((disc + gap) / 2 * n), round((disc - gap) / 2 * n)
        both = round(p * n) - only_a
        if both < 0 or both + only_a + only_b > n:
            continue  # this n cannot hold the split after rounding (or the split is impossible at all)
        a: dict[str, bool] = {}
        b: dict[str, bool] = {}
        for i in range(n):
            kind = "both" if i < both else "a" if i < both + only_a else "b" if i < both + only_a + only_b else "none"
            a[f"t{i}"] = kind in ("both", "a")
            b[f"t{i}"] = kind in ("both", "b")
        if compare_outcomes(a, b, axis="tool_pass_rate").verdict == "different":
            return n
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gap", type=float, default=10.0, help="pass-rate gap in percentage points")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    gap = args.gap / 100
    out = {"gap_pp": args.gap, "unpaired": {str(p): unpaired_n(p, gap) for p in BASES},
           "paired": {str(p): {f"d={m:g}x": paired_n(p, gap, m * gap) for m in DISCORDANT} for p in BASES}}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"tasks needed to tell a {args.gap:g}-point gap (A's pass rate p, B's p + gap)")
    for p in BASES:
        paired = ", ".join(f"discordant {m:g}x gap: {out['paired'][str(p)][f'd={m:g}x']}" for m in DISCORDANT)
        print(f"  p = {p:.2f}: unpaired (CIs apart) {out['unpaired'][str(p)]}; paired on shared tasks: {paired}")


if __name__ == "__main__":
    main()
