"""Where benchd's marginal client CPU goes: the engine's CPU per probe, split into a fixed part (per
probe, whatever its length) and the stream (per token), in this process — no daemon, no store reader.

    .venv/bin/python benchmarks/engine_per_probe.py [--repeats 3] [--size small] [--gen 256]

Method: `benchd.engine.scheduler.run_job` on a real llama-server (the tiny GGUF, `-t 1`, prompt 512,
cooldown fixed 0 s, warm-up 1), jobs of 5 and 25 probes; CPU per probe = (CPU(25) - CPU(5)) / 20, so the
server start, warm-up and first sizing cancel. Run once with 2 generated tokens (the per-probe
bookkeeping: events and row committed, prompt sizing, the memory sampler, normalization) and once with
`--gen` tokens; the difference over the extra tokens is the stream's cost per token.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", default="small")
    p.add_argument("--gen", type=int, default=256)
    a = p.parse_args()
    import uvloop

    from benchd.config import Config
    from benchd.engine.scheduler import run_job
    from benchd.schemas import Candidate, Cooldown, Sustained, Sweep
    from benchd.store import Store

    model = str(C.tiny(a.size).target)
    with tempfile.TemporaryDirectory(prefix="bench-epp-") as tmp:
        config = Config.resolve(state_dir=Path(tmp) / "state", cache_dir=C.cache_dir())
        config.state_dir.mkdir(parents=True)
        store = Store(config.db_path)

        def cpu(probes: int, gen: int) -> float:
            sweep = Sweep(name="epp", contexts=[512], gen_tokens=gen, probes=probes, warmup=1,
                          sustained=Sustained(tokens=0), cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                          candidates=[Candidate(id="t", runtime="llama-server", model=model, args=["-t", "1"])])
            job, _ = store.create_job(sweep)
            c0 = time.process_time()
            uvloop.run(run_job(job.id, sweep, store, config, lambda e: None))
            return time.process_time() - c0

        cpu(2, 2)  # imports, first server start
        load0 = os.getloadavg()[0]
        per: dict[int, list[float]] = {2: [], a.gen: []}
        for _ in range(a.repeats):
            for gen in per:
                per[gen].append((cpu(25, gen) - cpu(5, gen)) / 20)
        store.close()
    short, long_ = statistics.median(per[2]), statistics.median(per[a.gen])
    stream = (long_ - short) / (a.gen - 2) * 1000
    m = C.machine()
    print(f"engine_per_probe  {m['date_utc']} UTC  load {load0:.2f} -> {m['loadavg_1m']:.2f}  tiny {a.size}, -t 1, prompt 512")
    print(f"  CPU per probe, 2 tokens:   {short * 1000:.1f} ms (runs: {', '.join(f'{x * 1000:.1f}' for x in per[2])})")
    print(f"  CPU per probe, {a.gen} tokens: {long_ * 1000:.1f} ms (runs: {', '.join(f'{x * 1000:.1f}' for x in per[a.gen])})")
    print(f"  the stream: {stream:.3f} CPU-s per 1k tokens; per-probe bookkeeping at {a.gen} tokens: "
          f"{short / a.gen * 1000:.3f} CPU-s per 1k tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
