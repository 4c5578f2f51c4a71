"""benchd's probe path, in-process, against an existing llama-server (used by harness_overhead.py and
fidelity.py as a subprocess so its whole process tree's CPU is measured the same way as the peers').

What runs is what the engine runs per probe: `PromptBuilder.build` sized with the server's /tokenize
(the llama-server adapter's `count_tokens`), then `probe.run_chat` (the streamed request), then the
adapter's `normalize`. No daemon, no store, no memory sampler, no cooldown.

    python benchmarks/_probe_client.py --url http://127.0.0.1:PORT --model PATH --context 512 \
        --gen 256 --probes 20 [--warmup 1] [--runtime llama-server]

Prints one JSON object: per-probe rows (client stream-window tps, server predicted_per_second,
tokens, chunk arrivals) and `loop_cpu_s` (this process's CPU over the probe loop only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchd.engine import probe
from benchd.engine.prompts import PromptBuilder
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings


async def main_async(a: argparse.Namespace) -> dict[str, object]:
    adapter = get_adapter(a.runtime)
    cand = Candidate(id="bench", runtime=a.runtime, model=a.model)
    builder = PromptBuilder()
    has_tok = a.runtime == "llama-server" and not a.no_tokenizer

    async def count(text: str) -> int:
        n = await adapter.requests.count_tokens(a.url, text)
        assert n is not None
        return n

    rows = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(a.warmup + a.probes):
        prompt = await builder.build(a.context, f"bench/bench/{a.context}/{i}", count if has_tok else None, key="bench")
        r = await probe.run_chat(adapter, a.url, cand, prompt=prompt.text, settings=ChatSettings(a.gen), timeout_s=300)
        if not r.ok:
            raise SystemExit(f"probe failed: {r.error}")
        norm = adapter.reader.normalize(r, spec_configured=False)
        if norm.prompt_tokens is not None:
            builder.observe(prompt, norm.prompt_tokens)
        if i < a.warmup:
            continue
        t = r.timings or {}
        rows.append({
            "completion_tokens": (r.usage or {}).get("completion_tokens"),
            "prompt_tokens": (r.usage or {}).get("prompt_tokens"),
            "content_chunks": r.content_chunks,
            "arrivals": r.arrivals,
            "client_tps": r.gen_tps_client((r.usage or {}).get("completion_tokens")),
            "client_tps_chunks": r.gen_tps_client(),
            "server_tps": t.get("predicted_per_second"),
            "server_predicted_n": t.get("predicted_n"),
            "server_predicted_ms": t.get("predicted_ms"),
            "window_s": (r.last_content or 0) - (r.first_content or 0),
            "ttft_ms": r.ttft_ms,
            "norm_gen_tps_client": norm.gen_tps_client,
        })
    return {"rows": rows, "loop_cpu_s": time.process_time() - cpu0, "loop_wall_s": time.perf_counter() - wall0,
            "streamed_tokens": sum(int(x["completion_tokens"] or 0) for x in rows)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--runtime", default="llama-server")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--gen", type=int, default=256)
    p.add_argument("--probes", type=int, default=20)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--no-tokenizer", action="store_true")
    a = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(main_async(a))))


if __name__ == "__main__":
    main()
