"""Cold ÷ warm time to ready of a real llama-server, side by side in one run.

Method: a copy of a tiny GGUF (no other process maps it) is started by benchd's own Supervisor
(the arguments benchd uses) `--pairs` times cold (its pages dropped with posix_fadvise, checked with
mincore: none resident) and warm (all resident), alternating so drift over the run hits both, after one
unrecorded start (the binary's own first-start costs); each start is stopped once health answers. Prints the medians, the ratio of medians and the load average.
Linux only (macOS cannot drop a file's pages without root).

    .venv/bin/python benchmarks/ready_time.py [--pairs 10] [--size small|medium] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import _common
import msgspec

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.servers.supervisor import Supervisor


async def run(pairs: int, size: str) -> dict[str, object]:
    models = _common.tiny(size)
    with tempfile.TemporaryDirectory(prefix="ready-bench-", dir=str(Path.home())) as tmp:
        model = Path(tmp) / "model.gguf"
        shutil.copyfile(models.target, model)
        cand = msgspec.convert({"id": "ready-bench", "runtime": "llama-server", "model": str(model),
                                "binary": str(_common.llama_bin())}, Candidate)
        sup = Supervisor(Config.resolve(state_dir=Path(tmp) / "state", cache_dir=_common.cache_dir()), grace_s=3.0)
        times: dict[str, list[float]] = {"cold": [], "warm": []}
        loads: dict[str, list[float]] = {"cold": [], "warm": []}
        skipped: list[str] = []
        try:
            await sup.stop(await sup.start("bench", cand, 512))  # unrecorded: the binary's own first-start costs
            for i in range(2 * pairs):
                cold = i % 2 == 0
                if not cold:
                    model.read_bytes()
                server = await sup.start("bench", cand, 512, cold=cold)
                await sup.stop(server)
                want = "cold" if cold else "warm"
                if server.cache != want:
                    skipped.append(f"start {i}: asked {want}, was {server.cache} ({server.cache_note})")
                    continue
                times[want].append(server.ready_s)
                if server.load_s is not None:
                    loads[want].append(server.load_s)
        finally:
            await sup.stop_all()
    med = {k: statistics.median(v) if v else None for k, v in times.items()}
    ratio = med["cold"] / med["warm"] if med["cold"] and med["warm"] else None
    return {"model": str(models.target), "pairs": pairs, "ready_s": times, "load_s": loads,
            "median_s": med, "cold_over_warm": ratio, "skipped": skipped, "loadavg": os.getloadavg(),
            "machine": _common.machine()}


def main() -> int:
    if sys.platform != "linux":
        print("Linux only: macOS cannot drop one file's cached pages without root", file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--size", default="small")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    out = asyncio.run(run(a.pairs, a.size))
    out["model_bytes"] = os.path.getsize(str(out["model"]))
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        m = out["median_s"]
        print(f"model {out['model_bytes']} B, {a.pairs} pairs; median ready_s cold {m['cold']} warm {m['warm']}; "  # type: ignore[index]
              f"cold / warm {out['cold_over_warm']}; load average {out['loadavg']}")
        for s in out["skipped"]:  # type: ignore[attr-defined]
            print("skipped:", s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
