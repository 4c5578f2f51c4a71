"""Seconds per public-suite task per runtime, side by side in one run, and the seconds a suite costs at the
default `eval_limit`s — the evals' share of a sweep a user pays for.

    .venv/bin/python benchmarks/eval_seconds.py [--tasks 8] [--runtimes llama-server,mlx_lm.server,mlx_vlm.server]
                                                [--size small] [--json]

Each runtime serves the same tiny random-weight model (`benchctl models tiny`; the MLX dirs for mlx_lm and
mlx_vlm) and is asked the same first `--tasks` tasks of each suite's default subset through benchd's own
code path (`suiterun.run_code_task`: non-streamed, HumanEval graded in the sandbox; `run_tool_task`:
streamed with tools, graded by the BFCL grader), one after another, after one warm-up task. Reported per
runtime and suite: median and mean seconds per task (wall clock around asking and grading), the seconds
at the default limit (mean x `EvalLimit()` tasks), and each runtime's mean over llama-server's (the
ratio). Random weights run to `max_tokens` on every task, so these are upper bounds of a real model's
time at the same speed. The 1-minute load average is printed beside the figures: run it on a quiet
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import cache_dir, free_port, http_json, llama_bin, machine, tiny

from benchd.engine import suiterun, suites
from benchd.schemas import Candidate, EvalLimit, Sweep
from benchd.servers import locate
from benchd.servers.runtimes import get_adapter

RUNTIMES = ("llama-server", "mlx_lm.server", "mlx_vlm.server")


@contextlib.contextmanager
def server(runtime: str, models: Any) -> Iterator[tuple[str, str, list[str]]]:
    """(base URL, model path, argv) of a ready server of `runtime` on the tiny model."""
    port = free_port()
    if runtime == "llama-server":
        model = str(models.target)
        argv = [str(llama_bin()), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "4096",
                "-np", "1", "-t", "1"]
        env = None
    else:
        model = str(models.mlx_dir if runtime == "mlx_lm.server" else models.mlx_vlm_dir)
        prefix, _how = locate.resolve_mlx_command(runtime, None, cache_dir())
        argv = [*prefix, "--model", model, "--host", "127.0.0.1", "--port", str(port)]
        hub = cache_dir() / "hf-hub"
        hub.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub), "TOKENIZERS_PARALLELISM": "false"}
    log = Path(tempfile.mkstemp(prefix=f"bench-{runtime}-", suffix=".log")[1])
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{runtime} exited {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(OSError, ValueError):
                if http_json(base + "/health", timeout=2).get("status") in ("ok", "healthy"):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{runtime} not ready in 300 s")
            time.sleep(0.2)
        yield base, model, argv
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.unlink(missing_ok=True)


async def time_tasks(runtime: str, base: str, model: str, tasks: dict[str, list[suites.Task]]) -> dict[str, list[float]]:
    adapter = get_adapter(runtime)
    cand = Candidate(id=runtime, runtime=runtime, model=model)  # type: ignore[arg-type]
    sweep = Sweep(name="eval-seconds", contexts=[256], gen_tokens=8, candidates=[cand])
    out: dict[str, list[float]] = {}
    for suite, chosen in tasks.items():
        run = suiterun.run_code_task if suite == "code" else suiterun.run_tool_task
        await run("bench", adapter, base, cand, chosen[0], sweep, 600.0)  # warm-up, not counted
        for task in chosen:
            t0 = time.monotonic()
            await run("bench", adapter, base, cand, task, sweep, 600.0)
            out.setdefault(suite, []).append(time.monotonic() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8, help="tasks timed per suite and runtime")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--size", default="small")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    limits = EvalLimit()
    tasks = {s: suites.subset(suites.load(s, cache_dir()), limits.of(s))[: args.tasks] for s in ("code", "tools")}
    models = tiny(args.size)
    load_before = os.getloadavg()[0]
    seconds: dict[str, dict[str, list[float]]] = {}
    for runtime in args.runtimes.split(","):
        with server(runtime, models) as (base, model, _argv):
            seconds[runtime] = asyncio.run(time_tasks(runtime, base, model, tasks))
    load_after = os.getloadavg()[0]
    report: dict[str, Any] = {"machine": machine(), "loadavg_1m": [load_before, load_after], "tasks": args.tasks,
                              "size": args.size, "default_limits": {"code": limits.code, "tools": limits.tools},
                              "runtimes": {}}
    base_rt = next(iter(seconds))
    for runtime, by_suite in seconds.items():
        rows = {}
        for suite, xs in by_suite.items():
            mean = statistics.fmean(xs)
            ref = statistics.fmean(seconds[base_rt][suite])
            rows[suite] = {"median_s": statistics.median(xs), "mean_s": mean,
                           "at_default_limit_s": mean * (limits.of(suite) or len(xs)), "ratio_to_first": mean / ref}
        report["runtimes"][runtime] = rows
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return
    print(f"load average (1 min) before/after: {load_before:.2f} / {load_after:.2f}; {args.tasks} tasks per suite, "
          f"tiny {args.size} model; ratio = runtime's mean / {base_rt}'s")
    print(f"{'runtime':16} {'suite':6} {'median s':>9} {'mean s':>8} {'s at limit':>11} {'ratio':>6}")
    for runtime, rows in report["runtimes"].items():
        for suite, r in rows.items():
            print(f"{runtime:16} {suite:6} {r['median_s']:9.2f} {r['mean_s']:8.2f} "
                  f"{r['at_default_limit_s']:11.1f} {r['ratio_to_first']:6.2f}")


if __name__ == "__main__":
    main()
