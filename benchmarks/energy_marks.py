"""What energy sampling costs the probe client: phase marks (3 counter reads per probe) and the
sustained trace (50 reads a second), measured side by side in one run.

Method: one real llama-server (tiny model, `-t 1`); probes alternate A (no marks) and B (PhaseMarks over
a powercap tree of 3 zones) for `--pairs` pairs with the same prompt size and generated tokens. Per
probe: the client's CPU (`time.process_time()`, this process), TTFT and the client stream window. Then
the bare cost of one `sample()` and of one `delta()` on the same tree (timeit), set against the median
interval between content chunks. The tree is the test double of tests.testlib.FakeRapl (no RAPL on this
VM): sysfs reads of a real kernel cost about the same as these file reads, which is the part measured.

    .venv/bin/python benchmarks/energy_marks.py [--pairs 15] [--gen 128] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import timeit
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from benchd.engine import probe
from benchd.engine.energy import PhaseMarks
from benchd.schemas import Candidate
from benchd.sensors.energy.linux import open_rapl
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings


def fake_tree(root: Path) -> Path:
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"), ("intel-rapl:0:1", "dram")):
        d = root / zone
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text("123456789\n")
        (d / "max_energy_range_uj").write_text("262143328850\n")
    return root


async def one(base: str, cand: Candidate, prompt: str, gen: int, marks: Any) -> dict[str, float | None]:
    adapter = get_adapter("llama-server")
    cpu0 = time.process_time()
    r = await probe.run_chat(adapter, base, cand, prompt=prompt, settings=ChatSettings(gen), timeout_s=120, marks=marks)
    cpu = time.process_time() - cpu0
    gaps = [b - a for a, b in pairwise(r.chunk_times)]
    return {"cpu_ms": cpu * 1000, "ttft_ms": r.ttft_ms, "gen_tps_client": r.gen_tps_client(),
            "gap_ms": statistics.median(gaps) * 1000 if gaps else None, "ok": float(r.ok)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    m = C.tiny()
    cand = Candidate(id="bench", runtime="llama-server", model=str(m.target))
    with tempfile.TemporaryDirectory() as tmp:
        reader = open_rapl(fake_tree(Path(tmp) / "powercap"))
        sample_us = min(timeit.repeat(reader.sample, number=2000, repeat=5)) / 2000 * 1e6
        a, b = reader.sample(), reader.sample()
        delta_us = min(timeit.repeat(lambda: reader.delta(a, b), number=2000, repeat=5)) / 2000 * 1e6
        with C.llama_server(str(m.target), ctx=2048, threads=1) as srv:
            words = " ".join(f"w{i}" for i in range(args.prompt_words))
            results: dict[str, list[dict[str, float | None]]] = {"A": [], "B": []}
            for i in range(args.pairs + 1):
                for arm in ("A", "B"):
                    got = await one(srv.base, cand, f"{i}{arm} {words}", args.gen, None if arm == "A" else PhaseMarks(reader))
                    if i > 0:  # pair 0 warms the server up
                        results[arm].append(got)
    med = {arm: {k: statistics.median([x[k] for x in rs if x[k] is not None])  # type: ignore[misc]
                 for k in ("cpu_ms", "ttft_ms", "gen_tps_client", "gap_ms")} for arm, rs in results.items()}
    return {
        "machine": C.machine(), "pairs": args.pairs, "gen_tokens": args.gen,
        "median": med,
        "ratio_B_over_A": {k: med["B"][k] / med["A"][k] for k in med["A"]},
        "sample_us": round(sample_us, 2), "delta_us": round(delta_us, 2),
        "marks_cost_pct_of_one_chunk_gap": round(3 * sample_us / (med["A"]["gap_ms"] * 1000) * 100, 3),
        "trace_hz": reader.trace_hz, "trace_pct_of_one_core": round(sample_us * reader.trace_hz / 1e6 * 100, 4),
        "ok": all(x["ok"] for rs in results.values() for x in rs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = asyncio.run(run(args))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    r = out["ratio_B_over_A"]
    print(f"{out['pairs']} A/B pairs, {out['gen_tokens']} generated tokens, llama-server -t 1 (tiny model)")
    for k in ("cpu_ms", "ttft_ms", "gen_tps_client", "gap_ms"):
        print(f"  {k:<15} A {out['median']['A'][k]:9.3f}   B (marks) {out['median']['B'][k]:9.3f}   B/A {r[k]:.3f}")
    print(f"  one sample(): {out['sample_us']} µs, one delta(): {out['delta_us']} µs (3 zones)")
    print(f"  3 samples per probe = {out['marks_cost_pct_of_one_chunk_gap']} % of ONE median chunk interval")
    print(f"  sustained trace at {out['trace_hz']:g} Hz = {out['trace_pct_of_one_core']} % of one core")


if __name__ == "__main__":
    main()
