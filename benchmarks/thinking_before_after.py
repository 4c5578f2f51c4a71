"""Thinking model before/after issue 13: TTFT and gen tok/s on the scripted thinking model, per runtime,
as benchd's probe path reported them with the old code and with the new, side by side on one server.

    .venv/bin/python benchmarks/thinking_before_after.py --before /tmp/benchd-before [--probes 7] [--gen 128] [--json]

`--before` is a source tree of benchd before the change (e.g. `git archive 9388e6b | tar -x -C DIR`).
Each runtime's server is started once by benchd's Supervisor (llama-server `-t 1`; mlx_vlm.server with
`--enable-thinking`, because its thinking is off by default and the old code could not ask for it), and
for each probe round a child process of the OLD tree and one of the NEW tree each run one streamed probe
through `probe.run_chat` + `adapter.reader.normalize` (the row's figures), alternating, so both see the same
server and machine state. The model's greedy output is `<think>`, 24 reasoning tokens, `</think>`, 8
answer tokens, EOS (35 tokens); with EOS suppressed the answer repeats up to `--gen`.

Reported per runtime (medians over the probes): TTFT, gen tok/s (the row's `gen_tps`), the client window
(`gen_tps_client`), tokens generated, and a reference rate: the server's own `predicted_per_second`
(llama-server, mlx_vlm.server), or for mlx_lm.server, which reports no timing, (tokens inside the window
- 1) / window recomputed from the new probe's chunk times (the definition the issue's test uses).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import asyncio, inspect, json, sys
from benchd.engine import probe
from benchd.schemas import Candidate, Sampling
from benchd.servers.runtimes import get_adapter

url, runtime, model, gen, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
cand = Candidate(id="ba", runtime=runtime, model=model)
adapter = get_adapter(runtime)
params = inspect.signature(probe.run_chat).parameters
if "settings" in params:  # a tree with ChatSettings
    from benchd.servers.runtimes.base import ChatSettings
    kwargs = {"settings": ChatSettings(gen)}
else:
    kwargs = {"max_tokens": gen, "sampling": Sampling()}
    if "thinking" in params:
        kwargs.update(thinking="default", run_to_length=True)


async def one(i):
    prompt = f"[{tag}-{i}] " + "Explain, step by step, why the sky is blue and sunsets are red. " * 8
    r = await probe.run_chat(adapter, url, cand, prompt=prompt, timeout_s=120, **kwargs)
    n = adapter.reader.normalize(r, spec_configured=False)
    timings = r.timings or {}
    return {"ok": r.ok, "error": r.error, "ttft_ms": n.ttft_ms, "gen_tps": n.gen_tps,
            "gen_tps_client": n.gen_tps_client, "gen_tokens": n.gen_tokens,
            "server_tps": timings.get("predicted_per_second"), "chunks": r.content_chunks}


async def main():
    await one("warm")  # a warm client: imports, first connection
    return [await one(i) for i in range(count)]
print(json.dumps(asyncio.run(main())))
'''


def child(tree: Path, url: str, runtime: str, model: str, gen: int, tag: str, count: int) -> list[dict[str, Any]]:
    """`count` probes (after one unrecorded warm-up) by the benchd code in `tree`, in one process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", CHILD, url, runtime, model, str(gen), tag, str(count)],
                          capture_output=True, text=True, env=env, cwd=tree, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"probe child failed ({tree}): {done.stderr[-2000:]}")
    out: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def med(xs: list[Any]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float))]
    return statistics.median(vals) if vals else None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from benchctl.tinymodels.scripted import ensure_scripted
    from benchd.config import Config, default_cache_dir
    from benchd.schemas import Candidate
    from benchd.servers.runtimes import get_adapter
    from benchd.servers.supervisor import Supervisor

    models = ensure_scripted(default_cache_dir())
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ba-") as tmp:
        sup = Supervisor(Config.resolve(state_dir=Path(tmp)), grace_s=1.5)
        for runtime in args.runtimes.split(","):
            model = str(models.target if runtime == "llama-server" else models.mlx_dir)
            cargs = {"llama-server": ["-t", "1"], "mlx_vlm.server": ["--enable-thinking"]}.get(runtime, [])
            cand = Candidate(id="ba", runtime=runtime, model=model, args=cargs)
            server = await sup.start("ba", cand, get_adapter(runtime).launcher.server_ctx_size(cand, 512, args.gen))
            try:
                sides: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
                for i in range(args.rounds):  # alternate the two trees, a few probes each
                    for side, tree in (("before", args.before), ("after", ROOT)):
                        sides[side] += await asyncio.to_thread(child, tree, server.base_url, runtime, model,
                                                               args.gen, f"{side}{i}", args.probes)
            finally:
                await sup.stop(server)
            out[runtime] = {}
            for side, probes in sides.items():
                ref = [p["server_tps"] for p in probes]
                if runtime == "mlx_lm.server":  # no server timing: (tokens inside - 1) / window, new accounting
                    ref = [p["gen_tps_client"] for p in sides["after"]]
                out[runtime][side] = {k: med([p[k] for p in probes]) for k in
                                      ("ttft_ms", "gen_tps", "gen_tps_client", "gen_tokens", "chunks")}
                out[runtime][side]["reference_tps"] = med(ref)
                out[runtime][side]["ok"] = sum(bool(p["ok"]) for p in probes)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="benchd source tree before the change")
    ap.add_argument("--probes", type=int, default=3, help="probes per child process (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of the old and the new tree")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runtimes", default="llama-server,mlx_lm.server,mlx_vlm.server")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = asyncio.run(run(args))
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"scripted thinking model (K=24 reasoning, 8 answer tokens, EOS), gen {args.gen}, medians of {args.probes * args.rounds}")
    print(f"{'runtime':<16}{'side':<8}{'TTFT ms':>9}{'gen tok/s':>11}{'client':>9}{'tokens':>8}{'chunks':>8}"
          f"{'ref tok/s':>11}{'gen/ref':>9}")
    for runtime, sides in res.items():
        for side, m in sides.items():
            ratio = m["gen_tps"] / m["reference_tps"] if m["gen_tps"] and m["reference_tps"] else None

            def f(v: float | None, nd: int = 1) -> str:
                return "null" if v is None else f"{v:.{nd}f}"
            print(f"{runtime:<16}{side:<8}{f(m['ttft_ms'], 2):>9}{f(m['gen_tps']):>11}{f(m['gen_tps_client']):>9}"
                  f"{f(m['gen_tokens'], 0):>8}{f(m['chunks'], 0):>8}{f(m['reference_tps']):>11}{f(ratio, 3):>9}")


if __name__ == "__main__":
    main()
