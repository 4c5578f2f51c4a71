"""False-regression rate of the lock's recheck on this machine: unchanged build, repeated rechecks.

    .venv/bin/python benchmarks/recheck_false_regressions.py [--rechecks 10] [--size small]
        [--context 512] [--gen-tokens 32] [--probes 6] [--json]

A real `benchd` runs one evidence sweep of the tiny GGUF on the provisioned llama-server (`-t 1 -tb 1`,
fixed cooldown 0, 1 warm-up), `benchctl lock` locks it, then `POST /v1/recheck {"now": true}` queues
`--rechecks` rechecks one after the other; nothing about the runtime or the model changes, so every
regression the verdict calls is a false one. The daemon judges each at its default threshold (5 %), and
a first-run regression makes it queue a confirmation recheck at once (`[recheck] confirm`, default on):
only a regression found again would be notified. The script re-judges the same runbooks offline
(`lock.recheck.verdicts`) at 10, 20 and 50 % too, to show what threshold this machine's noise needs.
Printed: per threshold, how many first runs were called a regression, how many of those the
confirmation repeated (= false notifications), which metrics; per metric, how many first-run verdicts
were `slower`/`larger` (significant and beyond the threshold), `faster`/`smaller`, `same`; the 1-min
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

THRESHOLDS = (5.0, 10.0, 20.0, 50.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchd.config import Config
    from benchd.lock.recheck import verdicts
    from benchd.results.runbook import load_runbook

    model = str(C.tiny(args.size).target)
    binary = str(C.llama_bin())
    base = Path(tempfile.mkdtemp(prefix="benchd-recheck-"))
    state = base / "state"
    state.mkdir(mode=0o700)
    (state / "config.toml").write_text('[recheck]\nwhen = []\nat = ""\nnotify_command = ["/bin/true"]\n')
    load_before = C.machine()["loadavg_1m"]
    prev = None
    with C.benchd_daemon(state) as d:
        c = d.client()
        sweep = {"name": "evidence", "contexts": [args.context], "gen_tokens": args.gen_tokens, "probes": args.probes,
                 "warmup": 1, "sustained": {"tokens": 0}, "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
                 "candidates": [{"id": "tiny", "runtime": "llama-server", "model": model, "binary": binary,
                                 "args": ["-t", "1", "-tb", "1"]}]}
        job = c.submit(sweep)["id"]
        d.wait_job(job)
        while not c.job(job)["runbook_id"]:
            time.sleep(0.2)
        subprocess.run([str(C.BIN / "benchctl"), "lock", "--candidate", "tiny", "--state-dir", str(state)],
                       check=True, capture_output=True, env=d.env)
        for i in range(args.rechecks):
            queued = c.request("POST", "/v1/recheck", {"now": True})["pending"]["job"]
            d.wait_job(queued)
            while (st := c.request("GET", "/v1/recheck"))["pending"] or not st["last"] or st["last"]["job"] == prev:
                time.sleep(0.2)  # the verdict, and a confirmation recheck when the first run regressed
            prev = st["last"]["job"]
            print(f"recheck {i + 1}/{args.rechecks}: {st['last'].get('notified') or 'not notified'} "
                  f"{json.dumps(st['last'].get('verdicts'))}", file=sys.stderr, flush=True)
        entries = tomllib.loads((state / "locked.toml").read_text())["rechecks"]
    firsts = [e for e in entries if not e.get("confirms")]
    seconds = {e["confirms"]: e for e in entries if e.get("confirms")}
    config = Config.resolve(state_dir=state)
    evidence = load_runbook(firsts[0]["lock_runbook"], config)

    def judge(e: dict[str, Any], t: float) -> tuple[dict[str, dict[str, str]], list[str]]:
        got, regs, _ = verdicts(evidence, load_runbook(e["runbook"], config), "tiny", t)
        return got, regs

    per_threshold: dict[str, Any] = {}
    for t in THRESHOLDS:
        regressed = confirmed = 0
        words: Counter[str] = Counter()
        metrics_hit: Counter[str] = Counter()
        for e in firsts:
            got, regs = judge(e, t)
            regressed += bool(regs)
            if regs and e["job"] in seconds:
                confirmed += bool(judge(seconds[e["job"]], t)[1])
            metrics_hit.update(r.split(" at ")[0] for r in regs)
            words.update(f"{m} {v.split(' ')[0]}" for per in got.values() for m, v in per.items())
        per_threshold[f"{t:g} %"] = {"regressed": regressed, "confirmed": confirmed, "rechecks": len(firsts),
                                     "rate": round(regressed / len(firsts), 3),
                                     "confirmed_rate": round(confirmed / len(firsts), 3),
                                     "metrics": dict(metrics_hit), "verdict_words": dict(sorted(words.items()))}
    notified = sum(1 for e in entries if e.get("regressed") and e.get("confirms"))
    return {"machine": C.machine(), "load_before": load_before, "settings": vars(args),
            "daemon_first_run_rate_at_5_pct": round(sum(bool(e.get("regressed")) for e in firsts) / len(firsts), 3),
            "daemon_notified_rate_at_5_pct": round(notified / len(firsts), 3), "per_threshold": per_threshold,
            "state_dir": str(state)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rechecks", type=int, default=10)
    ap.add_argument("--size", default="small", choices=["small", "medium"])
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--probes", type=int, default=6)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    m = out["machine"]
    print(f"{m['date_utc']} UTC, load {out['load_before']:.2f} -> {m['loadavg_1m']:.2f}, "
          f"{args.rechecks} rechecks of an unchanged lock ({args.size} GGUF, context {args.context}, "
          f"{args.gen_tokens} tokens, {args.probes} probes)")
    print(f"daemon at 5 %: first-run false-regression rate {out['daemon_first_run_rate_at_5_pct']:.2f}, "
          f"false notifications (confirmed by the second run) {out['daemon_notified_rate_at_5_pct']:.2f}")
    for t, r in out["per_threshold"].items():
        print(f"  threshold {t:>5}: {r['regressed']}/{r['rechecks']} first runs called a regression (rate {r['rate']:.2f}), "
              f"{r['confirmed']} confirmed; metrics {r['metrics'] or '-'}")
        print(f"                   verdicts: {r['verdict_words']}")


if __name__ == "__main__":
    main()
