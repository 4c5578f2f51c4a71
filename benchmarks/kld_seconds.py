"""Seconds per 10k tokens scored: benchd's `[kld]` runner against `llama-perplexity --kl-divergence` run by hand.

Same candidate (the tiny medium model's q8_0 weights), same reference file (its f16 weights, made once by
hand with --kl-divergence-base), same context and chunks; alternating, `--reps` each. benchd's figure is
the wall clock of `KldRunner.score` (resolving and hashing the tool, sampling memory, parsing, and the
repeated runs when the pinned build's log loses its summary: `attempts`); by hand is one subprocess.
Prints the load average before and after: the figures are wall clock on a shared machine.

    .venv/bin/python benchmarks/kld_seconds.py [--reps 3] [--ctx 512] [--chunks 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchctl.tinymodels import ensure
from benchd.config import default_cache_dir
from benchd.engine import kld
from benchd.schemas import Candidate, Kld, Sweep
from benchd.servers.locate import resolve_llama_binary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    a = ap.parse_args()
    cache = default_cache_dir()
    models = ensure(cache, "medium", 0)
    exe, _ = resolve_llama_binary(None, cache, "llama-perplexity")
    tmp = Path(tempfile.mkdtemp(prefix="kld-bench-"))
    base = tmp / "ref.bin"
    print("load average before:", os.getloadavg())
    subprocess.run([str(exe), "-m", str(models.gguf["f16"]), "-f", str(kld.DEFAULT_CORPUS), "-c", str(a.ctx),
                    "--chunks", str(a.chunks), "--kl-divergence-base", str(base), "-t", "2"],
                   check=True, capture_output=True)
    cand = Candidate(id="q8", runtime="llama-server", model=str(models.gguf["q8_0"]), args=["-t", "2"])
    ref = Candidate(id="f16", runtime="llama-server", model=str(models.gguf["f16"]), args=["-t", "2"])
    sweep = Sweep(name="b", contexts=[64], gen_tokens=8, candidates=[ref, cand],
                  kld=Kld(reference="f16", contexts=[a.ctx], tokens=a.ctx * a.chunks))
    runner = kld.KldRunner("bench", sweep, cache, tmp / "state", lambda *_a, **_k: None, set())
    tokens = a.chunks * (a.ctx - 1 - a.ctx // 2)
    by_hand: list[float] = []
    benchd: list[float] = []
    attempts: list[int] = []
    argv = [str(exe), "-m", cand.model, "--kl-divergence-base", str(base), "--kl-divergence", "-c", str(a.ctx),
            "-t", "2"]
    for _ in range(a.reps):
        t0 = time.monotonic()
        subprocess.run(argv, check=True, capture_output=True)
        by_hand.append(time.monotonic() - t0)
        t0 = time.monotonic()
        r = asyncio.run(runner.score(cand, a.ctx, base, None))
        benchd.append(time.monotonic() - t0)
        attempts.append(r.attempts)
        assert r.status == "ok", r.reason
    per = 10_000 / tokens
    print(f"tokens scored per run: {tokens} (ctx {a.ctx}, {a.chunks} chunks)")
    print(f"by hand: median {statistics.median(by_hand) * per:.1f} s per 10k tokens  runs {[round(x, 2) for x in by_hand]}")
    print(f"benchd:  median {statistics.median(benchd) * per:.1f} s per 10k tokens  runs {[round(x, 2) for x in benchd]}"
          f"  attempts {attempts}")
    print(f"benchd / by hand, per attempt: {statistics.median(b / n for b, n in zip(benchd, attempts, strict=True)) / statistics.median(by_hand):.2f}")
    print("load average after:", os.getloadavg())


if __name__ == "__main__":
    main()
