"""The memory sampler's own CPU cost at 10 Hz, as % of one core (goal: < 1 %).

Method: a sleeping child process is the "server". Phase 1 (baseline) runs this process's event loop
idle for `--seconds`; phase 2 samples the child with `benchd.sensors.memory.sampler.MemorySampler` for the same time.
CPU is this process's user+system time (`time.process_time()`, all threads) over each phase, so the
difference between the phases is the sampler's own cost and the baseline shows what an idle loop costs.

    .venv/bin/python benchmarks/sampler_overhead.py [--seconds 10] [--rate 10] [--children 0] [--json]

A third phase runs the sampler as the engine runs it for a recorded probe (`series=False`: the kernel
peak reset before and read after, nothing in between), so its cost shows beside the 10 Hz series'.

Exit status 0 when the sampler's cost is under the goal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from benchd.sensors.memory.sampler import MemorySampler

GOAL_PCT = 1.0


async def phase(seconds: float, sampler: MemorySampler | None) -> tuple[float, float, dict[str, object]]:
    """(cpu seconds, wall seconds, sampler facts) for one phase."""
    facts: dict[str, object] = {}
    cpu0, wall0 = time.process_time(), time.monotonic()
    if sampler is not None:
        sampler.reset_peak()
        await sampler.start()
    await asyncio.sleep(seconds)
    if sampler is not None:
        r = await sampler.stop()
        facts = {"samples": len(r.series), "rate_hz_achieved": r.rate_hz_achieved, "processes": r.processes,
                 "memory_source": r.source, "peak_bytes": r.peak_bytes}
    return time.process_time() - cpu0, time.monotonic() - wall0, facts


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    # The "server": a sleeping process, optionally with sleeping children (a process tree).
    script = (
        "import subprocess, sys, time\n"
        f"kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']) for _ in range({args.children})]\n"
        "time.sleep(3600)\n"
    )
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    try:
        await asyncio.sleep(0.5 + 0.2 * args.children)  # let the tree come up
        base_cpu, base_wall, _ = await phase(args.seconds, None)
        s_cpu, s_wall, facts = await phase(args.seconds, MemorySampler(child.pid, rate_hz=args.rate))
        p_cpu, p_wall, p_facts = await phase(args.seconds, MemorySampler(child.pid, rate_hz=args.rate, series=False))
    finally:
        import psutil

        for k in psutil.Process(child.pid).children(recursive=True):
            k.kill()
        child.kill()
        await child.wait()
    base_pct = 100.0 * base_cpu / base_wall
    s_pct = 100.0 * s_cpu / s_wall
    return {
        "source": "time.process_time() of this process over each phase (user+system, all threads)",
        "loop": type(asyncio.get_running_loop()).__module__,
        "seconds_per_phase": args.seconds,
        "rate_hz": args.rate,
        "tree_processes": 1 + args.children,
        "baseline_idle_loop_pct_of_core": round(base_pct, 3),
        "with_sampler_pct_of_core": round(s_pct, 3),
        "sampler_own_pct_of_core": round(s_pct - base_pct, 3),
        "peak_only_pct_of_core": round(100.0 * p_cpu / p_wall, 3),
        "peak_only_own_pct_of_core": round(100.0 * p_cpu / p_wall - base_pct, 3),
        "peak_only_exact": p_facts.get("memory_source") == "kernel:VmHWM" or None,
        "goal_pct": GOAL_PCT,
        **facts,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--children", type=int, default=0, help="sleeping children under the root (tree size - 1)")
    ap.add_argument("--no-uvloop", action="store_true", help="use asyncio's default loop instead of uvloop")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not args.no_uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"machine: {os.cpu_count()} cores; loop: {out['loop']}; {out['seconds_per_phase']} s per phase; "
              f"{out['tree_processes']} process(es) sampled at {out['rate_hz']} Hz "
              f"(achieved {out.get('rate_hz_achieved')}, {out.get('samples')} samples)")
        print(f"  idle event loop (baseline): {out['baseline_idle_loop_pct_of_core']:.3f} % of one core")
        print(f"  with the sampler running:   {out['with_sampler_pct_of_core']:.3f} % of one core")
        print(f"  sampler's own cost:         {out['sampler_own_pct_of_core']:.3f} % of one core "
              f"(goal < {GOAL_PCT} %)  [{out['source']}]")
        print(f"  peak only (recorded probes): {out['peak_only_pct_of_core']:.3f} % of one core, "
              f"{out['peak_only_own_pct_of_core']:.3f} % over the idle loop")
    own = out["sampler_own_pct_of_core"]
    assert isinstance(own, float)
    return 0 if own < GOAL_PCT else 1


if __name__ == "__main__":
    sys.exit(main())
