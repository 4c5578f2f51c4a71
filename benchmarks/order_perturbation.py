"""Perturbation of interleaving: a server's decode rate with the other candidates' idle servers resident
next to it, divided by its rate alone (goal >= 0.99). Real llama-servers on the tiny models.

    .venv/bin/python benchmarks/order_perturbation.py [--rounds 6] [--probes 4] [--neighbours 2]
                                                      [--size small] [--tokens 128] [--json]

The measured server runs throughout; each round measures it `--probes` times alone and `--probes` times
with `--neighbours` idle llama-servers (same model, started and warmed, then left idle — what
interleaving does between visits) resident, in the order alone/with on even rounds and with/alone on
odd ones (ABBA, so a drift of the machine cancels). Decode rate = the server's own timings
(predicted_per_second) of a /completion with `cache_prompt: false`. Printed: the medians and the
ratio of the per-round medians (with / alone), with the load average before and after. Run it on a
quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

CTX = 512


def decode(base: str, tokens: int, i: int) -> float:
    body = {"prompt": f"Probe {i}: the quick brown fox jumps over the lazy dog. " * 8, "n_predict": tokens,
            "cache_prompt": False, "temperature": 0, "ignore_eos": True}
    got = C.http_json(base + "/completion", body, timeout=300)
    return float(got["timings"]["predicted_per_second"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--probes", type=int, default=4)
    ap.add_argument("--neighbours", type=int, default=2)
    ap.add_argument("--size", default="small")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    model = str(C.tiny(a.size).target)
    load0 = os.getloadavg()
    alone: list[list[float]] = []
    near: list[list[float]] = []
    i = 0
    with C.llama_server(model, CTX, threads=1) as srv:
        decode(srv.base, 16, -1)  # warm-up
        for rnd in range(a.rounds):
            for cond in (("alone", "with") if rnd % 2 == 0 else ("with", "alone")):
                with contextlib.ExitStack() as stack:
                    if cond == "with":
                        for _ in range(a.neighbours):
                            other = stack.enter_context(C.llama_server(model, CTX, threads=1))
                            decode(other.base, 16, -2)  # warmed, then left idle
                    vals = []
                    for _ in range(a.probes):
                        vals.append(decode(srv.base, a.tokens, i))
                        i += 1
                (alone if cond == "alone" else near).append(vals)
    load1 = os.getloadavg()
    per_round = [statistics.median(w) / statistics.median(x) for w, x in zip(near, alone, strict=True)]
    out: dict[str, Any] = {
        "machine": C.machine(), "rounds": a.rounds, "probes": a.probes, "neighbours": a.neighbours,
        "alone_median_tps": statistics.median(v for r in alone for v in r),
        "with_median_tps": statistics.median(v for r in near for v in r),
        "ratio_with_over_alone": statistics.median(per_round), "ratio_per_round": per_round,
        "loadavg_before": load0, "loadavg_after": load1}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"decode rate of one server, {a.rounds} rounds x {a.probes} probes per condition, {a.neighbours} idle "
          f"neighbour server(s) resident in 'with'")
    print(f"  alone {out['alone_median_tps']:.1f} tok/s   with neighbours {out['with_median_tps']:.1f} tok/s   "
          f"ratio with/alone {out['ratio_with_over_alone']:.3f} (per round {', '.join(f'{r:.3f}' for r in per_round)})")
    print(f"  load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


if __name__ == "__main__":
    main()
