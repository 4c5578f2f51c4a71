"""What a client following a job's events costs the sweep: wall time per probe with a follower ÷ without.

    .venv/bin/python benchmarks/follower_cost.py [--probes 200] [--pairs 2]

A real daemon (`python -m benchd`) runs the same sweep, 10 contexts × `--probes` probes, on the fault
suite's fake llama-server (tests/faults/faultlib.py: it answers at once, so the daemon's own work per
probe is what the time measures). The runs alternate: without a follower, then with one reading the whole
event stream as `benchctl tail` does, `--pairs` times. Each run's time is submit → terminal event, in ms
per probe. A follower should cost nothing the sweep can see: the ratio's goal is ≈ 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "faults"), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import _common as C  # noqa: E402
from faultlib import FAKE_MODEL, Follower, sweep_doc, write_fake_server  # noqa: E402
from testlib import start_benchd  # noqa: E402

TERMINAL = ("job_finished", "job_failed", "job_cancelled")


def run_once(base: Path, fake: Path, probes: int, follow: bool) -> float:
    """ms per probe from submit to the job's end (its state, polled twice a second), on a fresh daemon."""
    d = start_benchd(base, state_dir=base / f"s{time.monotonic_ns()}")
    try:
        cand = {"id": "cheap", "runtime": "llama-server", "model": FAKE_MODEL, "binary": str(fake),
                "ctx_size": 4096, "env": {"FAKE_MODE": "ok"}}
        doc = sweep_doc("/x", contexts=list(range(16, 26)), gen_tokens=1, probes=probes, binary=None,
                        candidates=[cand])
        c = d.client()
        t0 = time.monotonic()
        job = c.submit(doc)["id"]
        reader, streamed = None, []
        if follow:
            def drain() -> None:
                f = Follower(d.socket, job)
                try:
                    while (ev := f.next(timeout=1800)) is not None:
                        streamed.append(ev["seq"])
                        if ev["type"] in TERMINAL:
                            return
                finally:
                    f.close()
            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
        while c.job(job)["state"] not in ("succeeded", "failed", "cancelled"):
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        if reader is not None:
            reader.join(timeout=30)
            assert streamed == list(range(1, len(streamed) + 1)) and streamed, "the follower missed events"
        return elapsed / (10 * probes) * 1000
    finally:
        d.proc.kill()
        d.proc.wait(timeout=10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probes", type=int, default=200, help="probes per context (10 contexts)")
    p.add_argument("--pairs", type=int, default=2)
    a = p.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bd-", dir="/tmp") as tmp:
        base = Path(tmp)
        fake = write_fake_server(base)
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(a.pairs):
            for follow in (False, True):
                runs[follow].append(run_once(base, fake, a.probes, follow))
    m = C.machine()
    alone, followed = statistics.median(runs[False]), statistics.median(runs[True])
    print(f"follower_cost  {m['date_utc']} UTC  load {load0[0]:.2f} -> {m['loadavg_1m']:.2f}  "
          f"{10 * a.probes} probes a run, fake server")
    print(f"  ms per probe, no follower:  {alone:.1f} (runs: {', '.join(f'{x:.1f}' for x in runs[False])})")
    print(f"  ms per probe, one follower: {followed:.1f} (runs: {', '.join(f'{x:.1f}' for x in runs[True])})")
    print(f"  with ÷ without: {followed / alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
