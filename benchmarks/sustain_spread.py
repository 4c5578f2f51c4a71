"""Run-to-run spread of one sustained run's sustain ratio, read from the runbooks a state dir holds.

Method: every `ok` sustained row of every runbook under `--runbooks` (default `state/runbooks`, where
`make demo` writes), grouped by candidate id. Per candidate: the runs, median and CV of the ratio; and,
over every two runs of the same candidate (an A/A pair: the same server, the same model), the share whose
ratios differ by more than 2 % and by more than 10 % (the ratio of the larger to the smaller). A
sustain ratio is one run a candidate, so that share is how often an A/A pair's single values would block
a dominance at that margin (docs/measuring.md#the-one-comparison). Prints the load average beside it.

    .venv/bin/python benchmarks/sustain_spread.py [--runbooks state/runbooks]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path


def ratios(folder: Path) -> dict[str, list[float]]:
    """Candidate id -> the sustain ratios of its ok sustained rows, one per runbook."""
    out: dict[str, list[float]] = defaultdict(list)
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for row in doc.get("rows", []) if isinstance(doc, dict) else []:
            if row.get("kind") == "sustained" and row.get("status") == "ok" and row.get("sustain_ratio"):
                out[row["candidate"]].append(float(row["sustain_ratio"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runbooks", type=Path, default=Path("state/runbooks"))
    args = ap.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("candidate        runs  median  cv      A/A pairs  > 2 %   > 10 %")
    for cand, vals in sorted(ratios(args.runbooks).items()):
        if len(vals) < 2:
            continue
        pairs = [max(x, y) / min(x, y) - 1 for x, y in itertools.combinations(vals, 2)]
        cv = statistics.pstdev(vals) / statistics.fmean(vals)
        over = [sum(p > m for p in pairs) / len(pairs) for m in (0.02, 0.10)]
        print(f"{cand:<16} {len(vals):>4}  {statistics.median(vals):.3f}   {cv:>5.1%}  {len(pairs):>9}  "
              f"{over[0]:>5.0%}   {over[1]:>5.0%}")


if __name__ == "__main__":
    main()
