"""How finely a start's time to ready is known: health checked every 0.1 s (benchd before this change) against
checks 5 % of the time since spawn apart (`supervisor.health_gap`), side by side in one run.

Method: SmolLM2-135M's GGUF (`benchctl models real`; `--tiny` the small tiny model) started by benchd's own
Supervisor `--pairs` times with each schedule, alternating so drift hits both, after one unrecorded start;
stopped once health answers. Prints per schedule the distinct ready times (ms), their median and spread, the
median gap to the check before (the start's resolution), and the load average.

    .venv/bin/python benchmarks/ready_resolution.py [--pairs 10] [--tiny] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

import _common
import msgspec

from benchd.config import Config
from benchd.schemas import Candidate
from benchd.servers import supervisor as sup_mod


def _resolution_ms(note: str) -> float:
    return float(note.split("to within ", 1)[1].split(" ms", 1)[0])


async def run(pairs: int, tiny: bool) -> dict[str, object]:
    from benchctl import realmodel

    model = _common.tiny("small").target if tiny else realmodel.load(_common.cache_dir()).gguf
    cand = msgspec.convert({"id": "ready-res", "runtime": "llama-server", "model": str(model), "args": ["-t", "1"],
                            "binary": str(_common.llama_bin())}, Candidate)
    adaptive = sup_mod.health_gap
    schedules = {"fixed 0.1 s": lambda _since, ceiling: ceiling, "5 % of the time since spawn": adaptive}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in schedules}
    with tempfile.TemporaryDirectory(prefix="ready-res-") as tmp:
        sup = sup_mod.Supervisor(Config.resolve(state_dir=Path(tmp) / "state", cache_dir=_common.cache_dir()),
                                 grace_s=3.0)
        try:
            await sup.stop(await sup.start("bench", cand, 512))  # the binary's first start: not recorded
            for _ in range(pairs):
                for name, gap in schedules.items():
                    sup_mod.health_gap = gap  # type: ignore[assignment]
                    s = await sup.start("bench", cand, 512)
                    got[name].append((s.ready_s * 1000, _resolution_ms(s.ready_note)))
                    await sup.stop(s)
        finally:
            sup_mod.health_gap = adaptive
            await sup.stop_all()
    out: dict[str, object] = {"model": str(model), "pairs": pairs, "load_avg_1m": _common.machine()["loadavg_1m"]}
    for name, xs in got.items():
        ready = [r for r, _ in xs]
        out[name] = {"distinct_ready_ms": sorted({round(r) for r in ready}), "median_ms": statistics.median(ready),
                     "min_ms": min(ready), "max_ms": max(ready),
                     "median_resolution_ms": statistics.median(res for _, res in xs)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = asyncio.run(run(a.pairs, a.tiny))
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"{res['model']}: {res['pairs']} starts per schedule, alternated; load average {res['load_avg_1m']:.2f}")
    for name in ("fixed 0.1 s", "5 % of the time since spawn"):
        r = res[name]
        assert isinstance(r, dict)
        print(f"  {name:28s} median {r['median_ms']:.1f} ms (min {r['min_ms']:.1f}, max {r['max_ms']:.1f}); "
              f"resolution (gap to the check before) median {r['median_resolution_ms']:.0f} ms; "
              f"distinct ms: {r['distinct_ready_ms']}")


if __name__ == "__main__":
    main()
