"""The probe's HTTP client: aiohttp (what benchd ships) vs a minimal HTTP/1.1 streaming reader on bare
asyncio streams, same parser (`benchd.probe._Stream`), same server, interleaved A B A B.

    .venv/bin/python benchmarks/probe_client_ab.py [--rounds 4] [--probes 20] [--gen 256] [--json]

Measures this process's CPU (`time.process_time`) over each batch of probes only (no interpreter start,
no imports), per 1,000 streamed tokens, and the client/server gen-rate ratio of each variant. Issue 9
allows the bare reader "if aiohttp's client cannot get there"; this script is the evidence for the
choice (see RESULTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from benchd import probe
from benchd.prompts import PromptBuilder
from benchd.runtimes import get_adapter
from benchd.schemas import Sampling


async def raw_run(url: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float) -> probe.ProbeResult:
    """POST and stream with asyncio.open_connection: status line, headers, then chunked or until EOF."""
    started = time.perf_counter()
    r = probe.ProbeResult(status="failed", error=None, http_status=None, started=started, ended=started)
    st = probe._Stream(r)
    u = urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port)
    try:
        async with asyncio.timeout(timeout_s):
            head = (f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nConnection: close\r\n"
                    f"Content-Length: {len(body)}\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            writer.write(head + body)
            status_line = await reader.readline()
            r.http_status = int(status_line.split()[1])
            chunked = False
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                    chunked = True
            if r.http_status != 200:
                r.error = f"HTTP {r.http_status}"
                return r
            if chunked:
                # De-chunk whatever arrived; everything in one read gets that read's timestamp.
                buf = b""
                while True:
                    data = await reader.read(65536)
                    now = time.perf_counter()
                    if not data:
                        break
                    buf += data
                    out = []
                    while True:
                        nl = buf.find(b"\r\n")
                        if nl < 0:
                            break
                        size = int(buf[:nl].split(b";")[0], 16)
                        if len(buf) < nl + 2 + size + 2:
                            break
                        out.append(buf[nl + 2: nl + 2 + size])
                        buf = buf[nl + 2 + size + 2:]
                        if size == 0:
                            break
                    if out:
                        err = st.feed(b"".join(out), now)
                        if err:
                            r.error = err
                            return r
            else:
                while data := await reader.read(65536):
                    err = st.feed(data, time.perf_counter())
                    if err:
                        r.error = err
                        return r
    finally:
        writer.close()
        r.ended = time.perf_counter()
    if r.done and r.final is not None:
        r.status = "ok"
    return r


async def batch(impl: str, base: str, model: str, a: argparse.Namespace, builder: PromptBuilder, k: int) -> dict[str, Any]:
    adapter = get_adapter("llama-server")

    async def count(text: str) -> int:
        n = await adapter.count_tokens(base, text)
        assert n is not None
        return n

    prompts = [await builder.build(a.context, f"ab/ab/{a.context}/{k}-{i}", count, key="ab") for i in range(a.probes)]
    cpu0 = time.process_time()
    ratios, tokens = [], 0
    for p in prompts:
        body = adapter.encode_body(adapter.request_body(model=model, prompt=p.text, max_tokens=a.gen, sampling=Sampling()))
        url = base + adapter.request_path()
        if impl == "aiohttp":
            r = await probe.run(url, body, adapter.request_headers(), timeout_s=120)
        else:
            r = await raw_run(url, body, adapter.request_headers(), timeout_s=120)
        if not r.ok:
            raise RuntimeError(f"{impl}: {r.error}")
        n = adapter.normalize(r, spec_configured=False)
        tokens += n.gen_tokens or 0
        if n.gen_tps and n.gen_tps_client:
            ratios.append(n.gen_tps_client / n.gen_tps)
    cpu = time.process_time() - cpu0
    return {"cpu_per_1k": cpu / tokens * 1000, "ratio_median": statistics.median(ratios) if ratios else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--probes", type=int, default=20)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--gen", type=int, default=256)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    import uvloop

    model = str(C.tiny("small").target)
    res: dict[str, list[dict[str, Any]]] = {"aiohttp": [], "raw-asyncio": []}
    with C.llama_server(model, a.context + a.gen + 64, 1) as srv:

        async def go() -> None:
            builder = PromptBuilder()
            await batch("aiohttp", srv.base, model, argparse.Namespace(**{**vars(a), "probes": 2}), builder, -1)
            for rnd in range(a.rounds):
                for impl in (["aiohttp", "raw-asyncio"] if rnd % 2 == 0 else ["raw-asyncio", "aiohttp"]):
                    res[impl].append(await batch(impl, srv.base, model, a, builder, rnd))

        uvloop.run(go())
    summary: dict[str, Any] = {k: {"cpu_s_per_1k_tokens": C.med([x["cpu_per_1k"] for x in v]),
                   "cpu_spread": C.spread([x["cpu_per_1k"] for x in v]),
                   "client_over_server": C.med([x["ratio_median"] for x in v if x["ratio_median"]])} for k, v in res.items()}
    ratio = (summary["raw-asyncio"]["cpu_s_per_1k_tokens"] or 0) / (summary["aiohttp"]["cpu_s_per_1k_tokens"] or 1)
    doc: dict[str, Any] = {"machine": C.machine(), "summary": summary, "raw_over_aiohttp_cpu": ratio, "raw": res}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0
    m = doc["machine"]
    print(f"probe_client_ab  {m['date_utc']} UTC  load {m['loadavg_1m']:.2f}  {a.rounds} rounds x {a.probes} probes x {a.gen} tokens")
    for k, v in summary.items():
        cs = v["cpu_spread"]
        print(f"  {k:12s} loop CPU {C.fmt(v['cpu_s_per_1k_tokens'], 4)} s/1k tok ({cs[0]:.4f}..{cs[1]:.4f})  "
              f"client/server gen rate {C.fmt(v['client_over_server'], 4)}")
    print(f"RATIO raw-asyncio / aiohttp probe-loop CPU = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
