"""Between-start and within-start spread of one llama-server's decode rate, quiet and under a CPU hog.

Method: `--starts` starts of one tiny-model llama-server through benchd's own Supervisor (the arguments
benchd uses), each serving `--probes` native /completion requests (unique prompt, `cache_prompt: false`,
`--gen` tokens, greedy); the rate of each request is the server's own `timings.predicted_per_second`.
On the logs of those rates a one-way random-effects split (start = group): within-start SD from the
within-group mean square, between-start SD from (MS_between − MS_within) / probes (floored at 0). A
between-start SD well above the within-start one is why a start, not a probe, is the sample
(docs/measuring.md#server-starts). The loaded phase re-runs this script under tests/cpu_hog.py (one busy
process per core). Prints both phases and the load average beside each.

    .venv/bin/python benchmarks/start_spread.py [--starts 6] [--probes 5] [--gen 128] [--size medium]
                                                [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path

import _common
import msgspec

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.servers.supervisor import Supervisor


def _rate(base_url: str, gen: int) -> float:
    body = json.dumps({"prompt": f"[{uuid.uuid4().hex}] Tell me a story about the sea.", "n_predict": gen,
                       "temperature": 0, "cache_prompt": False}).encode()
    req = urllib.request.Request(base_url + "/completion", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return float(json.load(resp)["timings"]["predicted_per_second"])


def split(groups: list[list[float]]) -> dict[str, float | None]:
    """One-way random-effects split of log values: within- and between-group SD (as fractions)."""
    logs = [[math.log(x) for x in g] for g in groups if len(g) >= 2]
    if len(logs) < 2:
        return {"within_sd": None, "between_sd": None}
    p = statistics.fmean(len(g) for g in logs)
    grand = statistics.fmean(x for g in logs for x in g)
    means = [statistics.fmean(g) for g in logs]
    ms_within = sum(sum((x - m) ** 2 for x in g) for g, m in zip(logs, means, strict=True)) / sum(
        len(g) - 1 for g in logs)
    ms_between = sum(len(g) * (m - grand) ** 2 for g, m in zip(logs, means, strict=True)) / (len(logs) - 1)
    return {"within_sd": math.sqrt(ms_within), "between_sd": math.sqrt(max(0.0, (ms_between - ms_within) / p))}


async def run(starts: int, probes: int, gen: int, threads: int | None, size: str) -> dict[str, object]:
    models = _common.tiny(size)
    args = ["-t", str(threads)] if threads else []
    cand = msgspec.convert({"id": "spread-bench", "runtime": "llama-server", "model": str(models.target),
                            "binary": str(_common.llama_bin()), "args": args}, Candidate)
    load_before = os.getloadavg()
    groups: list[list[float]] = []
    with tempfile.TemporaryDirectory(prefix="spread-bench-") as tmp:
        sup = Supervisor(Config.resolve(state_dir=Path(tmp) / "state", cache_dir=_common.cache_dir()), grace_s=3.0)
        try:
            for _ in range(starts):
                server = await sup.start("bench", cand, 512)
                try:
                    await asyncio.to_thread(_rate, server.base_url, 8)  # warm-up, not recorded
                    groups.append([await asyncio.to_thread(_rate, server.base_url, gen) for _ in range(probes)])
                finally:
                    await sup.stop(server)
        finally:
            await sup.stop_all()
    medians = [statistics.median(g) for g in groups]
    return {"rates": groups, "start_medians": medians, "max_over_min_start": max(medians) / min(medians),
            **split(groups), "loadavg_before": load_before, "loadavg_after": os.getloadavg()}


def _line(name: str, r: dict[str, object]) -> str:
    def pct(x: object) -> str:
        return "n/a" if x is None else f"{100 * float(x):.1f} %"  # type: ignore[arg-type]

    med = ", ".join(f"{m:.0f}" for m in r["start_medians"])  # type: ignore[attr-defined]
    return (f"{name}: between-start SD {pct(r['between_sd'])}, within-start SD {pct(r['within_sd'])} (log scale); "
            f"start medians {med} tok/s (max/min {r['max_over_min_start']:.2f}); "
            f"load average {r['loadavg_before'][0]:.2f} -> {r['loadavg_after'][0]:.2f}")  # type: ignore[index]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--starts", type=int, default=6)
    p.add_argument("--probes", type=int, default=5)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--size", default="medium", help="the tiny model's size (small: a request takes milliseconds)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    p.add_argument("--one-phase", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    measure = (a.starts, a.probes, a.gen, a.threads, a.size)
    if a.one_phase:
        print(json.dumps(asyncio.run(run(*measure))))
        return 0
    quiet = asyncio.run(run(*measure))
    argv = [sys.executable, __file__, "--one-phase", "--starts", str(a.starts), "--probes", str(a.probes),
            "--gen", str(a.gen), "--size", a.size] + (["--threads", str(a.threads)] if a.threads else [])
    hog = _common.ROOT / "tests" / "cpu_hog.py"
    out = subprocess.run([sys.executable, str(hog), "--", *argv], check=True, capture_output=True, text=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    result = {"quiet": quiet, "loaded": loaded, "machine": _common.machine(),
              "starts": a.starts, "probes": a.probes, "gen": a.gen, "threads": a.threads, "size": a.size}
    if a.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{a.size} tiny model, {a.starts} starts x {a.probes} probes of {a.gen} tokens, threads "
              f"{a.threads or 'server default'}")
        print(_line("quiet", quiet))
        print(_line("loaded (a busy process per core)", loaded))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
