"""The probe's HTTP client: aiohttp (what benchd ships) vs a minimal HTTP/1.1 streaming reader on bare
asyncio streams vs aiohttp reading every `--pace-ms` after the first chunk, same parser
(`benchd.engine.probe._Stream`), same server, interleaved with `curl -N` (the reference: a C client) in
rotated order each round. `aiohttp-pinned`: benchd's client with this process pinned to the last
CPU (`sched_setaffinity`) while the server's threads stay free, to see whether keeping the client off
the server's compute core helps the server.

    .venv/bin/python benchmarks/probe_client_ab.py [--rounds 4] [--probes 20] [--gen 256] [--json]
    .venv/bin/python benchmarks/probe_client_ab.py --decode [--rounds 12] [--size medium] [--json]

`--decode` (issue 19: what benchd does to the server it measures): probe by probe, benchd's probe path
(prompt sized before the request, then the peak-only memory sampler around `probe.run_chat`, as the
engine runs a recorded probe) alternates with the same request streamed by `curl -N` (a C client doing
nothing per chunk), each probe's server decode rate read from its own final chunk's `timings`
(`predicted_per_second`). Two servers with the same argv: `pinned` (server on core 0; the client —
this process's event loop thread, or curl — on core 1) and `unpinned` (nothing pinned). Each round
runs the four (mode, client) probes in a rotated order; the ratio per round is benchd's ÷ curl's
decode rate in the same mode.

Measures this process's CPU (`time.process_time`) over each batch of probes only (no interpreter start,
no imports), per 1,000 streamed tokens, and the client/server gen-rate ratio of each variant. Issue 9
allows the bare reader "if aiohttp's client cannot get there"; this script is the evidence for the
choice (see RESULTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from benchd.engine import probe
from benchd.engine.prompts import PromptBuilder
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings

ALL_CPUS = set(os.sched_getaffinity(0))


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


async def paced_run(url: str, body: bytes, headers: Mapping[str, str], *, timeout_s: float,
                    pace_s: float) -> probe.ProbeResult:
    """benchd's aiohttp probe, but after the first content chunk it sleeps `pace_s` between reads, so
    one wake-up collects several chunks (fewer context switches on the cores the server shares). The
    read-ends window (`ProbeResult.gen_tps_client`) stays exact to about one token interval."""
    import aiohttp

    started = time.perf_counter()
    r = probe.ProbeResult(status="failed", error=None, http_status=None, started=started, ended=started)
    st = probe._Stream(r)
    async with (
        asyncio.timeout(timeout_s),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.post(url, data=body, headers=dict(headers)) as resp,
    ):
        r.http_status = resp.status
        async for data in resp.content.iter_any():
            err = st.feed(data, time.perf_counter())
            if err:
                r.error = err
                break
            if r.first_content is not None:
                await asyncio.sleep(pace_s)
    r.ended = time.perf_counter()
    if r.done and r.final is not None and r.error is None:
        r.status = "ok"
    return r


async def curl_run(url: str, body: bytes) -> None:
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sSN", "-o", "/dev/null", "-H", "Content-Type: application/json", "--data-binary", "@-", url,
        stdin=asyncio.subprocess.PIPE)
    await proc.communicate(body)


async def batch(impl: str, base: str, model: str, a: argparse.Namespace, builder: PromptBuilder, k: int,
                metrics: Callable[[], dict[str, float]]) -> dict[str, Any]:
    adapter = get_adapter("llama-server")

    async def count(text: str) -> int:
        n = await adapter.requests.count_tokens(base, text)
        assert n is not None
        return n

    prompts = [await builder.build(a.context, f"ab/ab/{a.context}/{k}-{i}", count, key="ab") for i in range(a.probes)]
    before = await asyncio.to_thread(metrics)
    if impl == "aiohttp-pinned":  # the client on the last core only; the server's threads stay free
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    cpu0 = time.process_time()
    ratios, tokens = [], 0
    for p in prompts:
        body = adapter.requests.encode_body(adapter.requests.probe_body(
            Candidate(id="ab", runtime="llama-server", model=model), prompt=p.text, settings=ChatSettings(a.gen)))
        url = base + adapter.requests.request_path()
        if impl == "curl":
            await curl_run(url, body)
            continue
        if impl in ("aiohttp", "aiohttp-pinned"):
            r = await probe.run(url, body, adapter.requests.request_headers(), timeout_s=120)
        elif impl == "aiohttp-paced":
            r = await paced_run(url, body, adapter.requests.request_headers(), timeout_s=120, pace_s=a.pace_ms / 1000)
        else:
            r = await raw_run(url, body, adapter.requests.request_headers(), timeout_s=120)
        if not r.ok:
            raise RuntimeError(f"{impl}: {r.error}")
        n = adapter.reader.normalize(r, spec_configured=False)
        tokens += n.gen_tokens or 0
        if n.gen_tps and n.gen_tps_client:
            ratios.append(n.gen_tps_client / n.gen_tps)
    cpu = time.process_time() - cpu0
    os.sched_setaffinity(0, ALL_CPUS)
    server_tps, n_pred = C.decode_rate(before, await asyncio.to_thread(metrics))
    tokens = tokens or int(n_pred)
    return {"cpu_per_1k": cpu / tokens * 1000 if impl != "curl" else None,
            "ratio_median": statistics.median(ratios) if ratios else None, "server_tps": server_tps}


async def curl_decode(url: str, body: bytes, cpus: set[int] | None) -> float:
    """One request streamed by curl into a file; the server's decode rate from the final timings."""
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="ab-curl-", suffix=".sse") as out:
        proc = await asyncio.create_subprocess_exec(
            "curl", "-sSN", "-o", out.name, "-H", "Content-Type: application/json", "--data-binary", "@-", url,
            stdin=asyncio.subprocess.PIPE, preexec_fn=C.on_cpus(cpus))
        await proc.communicate(body)
        text = await asyncio.to_thread(Path(out.name).read_text)  # a file, not a pipe: no reader wakes per chunk
    lines = [ln for ln in text.splitlines() if ln.startswith("data: {") and '"timings"' in ln]
    return float(json.loads(lines[-1][6:])["timings"]["predicted_per_second"])


async def benchd_decode(adapter: Any, base: str, body: bytes, server_pid: int, cpus: set[int] | None) -> float:
    """One recorded probe's request path in the engine (sampler peak-only around `probe.run`)."""
    from benchd.sensors.memory.sampler import MemorySampler

    if cpus:
        os.sched_setaffinity(0, cpus)  # this (event loop) thread only: what pin_client does
    try:
        sampler = MemorySampler(server_pid, series=False)
        sampler.reset_peak()
        await sampler.start()
        r = await probe.run(base + adapter.requests.request_path(), body, adapter.requests.request_headers(), timeout_s=120)
        await sampler.stop()
    finally:
        os.sched_setaffinity(0, ALL_CPUS)
    n = adapter.reader.normalize(r, spec_configured=False)
    if not r.ok or not n.gen_tps:
        raise RuntimeError(f"benchd probe: {r.error}")
    return float(n.gen_tps)


def decode_ab(a: argparse.Namespace) -> int:
    """`--decode`: the server's own decode rate under benchd's probe path vs under curl, per round."""
    import uvloop

    model = str(C.tiny(a.size).target)
    adapter = get_adapter("llama-server")
    server_cpus, client_cpus = {min(ALL_CPUS)}, {max(ALL_CPUS)}
    cells = [(m, c) for m in ("pinned", "unpinned") for c in ("benchd", "curl")]
    res: dict[str, list[float]] = {f"{m}/{c}": [] for m, c in cells}
    load0 = os.getloadavg()[0]
    with (C.llama_server(model, a.context + a.gen + 64, a.threads, cpus=server_cpus) as pinned,
          C.llama_server(model, a.context + a.gen + 64, a.threads) as unpinned):
        servers = {"pinned": pinned, "unpinned": unpinned}

        async def go() -> None:
            builder = PromptBuilder()
            for rnd in range(-1, a.rounds):  # round -1: one warm-up probe per cell, not recorded
                for mode, client in cells[rnd % 4:] + cells[: rnd % 4]:
                    srv = servers[mode]

                    async def count(text: str, base: str = srv.base) -> int:
                        n = await adapter.requests.count_tokens(base, text)
                        assert n is not None
                        return n

                    prompt = await builder.build(a.context, f"decode/{mode}/{client}/{rnd}", count, key=mode)
                    body = adapter.requests.encode_body(adapter.requests.probe_body(
                        Candidate(id=mode, runtime="llama-server", model=model), prompt=prompt.text,
                        settings=ChatSettings(a.gen)))
                    cpus = client_cpus if mode == "pinned" else None
                    if client == "curl":
                        rate = await curl_decode(srv.base + adapter.requests.request_path(), body, cpus)
                    else:
                        rate = await benchd_decode(adapter, srv.base, body, srv.proc.pid, cpus)
                    if rnd >= 0:
                        res[f"{mode}/{client}"].append(rate)

        uvloop.run(go())
    summary: dict[str, Any] = {}
    for mode in ("pinned", "unpinned"):
        ratios = [b / c for b, c in zip(res[f"{mode}/benchd"], res[f"{mode}/curl"], strict=True)]
        summary[mode] = {"benchd_tps": C.med(res[f"{mode}/benchd"]), "curl_tps": C.med(res[f"{mode}/curl"]),
                         "ratio_median": C.med(ratios), "ratio_spread": C.spread(ratios),
                         "ratio_iqr": (statistics.quantiles(ratios, n=4)[0], statistics.quantiles(ratios, n=4)[2])
                         if len(ratios) >= 4 else None, "rounds": len(ratios)}
    doc = {"machine": C.machine(), "loadavg_1m": [load0, os.getloadavg()[0]], "model": a.size, "threads": a.threads,
           "gen": a.gen, "context": a.context, "summary": summary, "raw": res}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0
    m = doc["machine"]
    print(f"probe_client_ab --decode  {m['date_utc']} UTC  load {load0:.2f} -> {doc['loadavg_1m'][1]:.2f}  "
          f"{a.rounds} rounds, tiny {a.size}, -t {a.threads}, prompt ~{a.context}, {a.gen} generated")
    for mode, v in summary.items():
        sp, iq = v["ratio_spread"] or (0.0, 0.0), v["ratio_iqr"] or (0.0, 0.0)
        print(f"  {mode:9s} server decode under benchd {C.fmt(v['benchd_tps'], 1)} tok/s, under curl {C.fmt(v['curl_tps'], 1)} "
              f"tok/s; RATIO benchd/curl median {C.fmt(v['ratio_median'])} (IQR {iq[0]:.3f}..{iq[1]:.3f}, "
              f"min..max {sp[0]:.3f}..{sp[1]:.3f}, {v['rounds']} rounds; goal >= 0.99)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--decode", action="store_true", help="server decode under benchd vs curl, probe by probe")
    p.add_argument("--size", default="medium", help="--decode: tiny model size")
    p.add_argument("--threads", type=int, default=1, help="--decode: the server's -t")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--probes", type=int, default=20)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--gen", type=int, default=256)
    p.add_argument("--pace-ms", type=float, default=10.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.decode:
        return decode_ab(a)
    import uvloop

    model = str(C.tiny("small").target)
    impls = ["curl", "aiohttp", "aiohttp-paced", "raw-asyncio", "aiohttp-pinned"]
    res: dict[str, list[dict[str, Any]]] = {k: [] for k in impls}
    with C.llama_server(model, a.context + a.gen + 64, 1) as srv:

        async def go() -> None:
            builder = PromptBuilder()
            await batch("aiohttp", srv.base, model, argparse.Namespace(**{**vars(a), "probes": 2}), builder, -1, srv.metrics)
            for rnd in range(a.rounds):
                order = impls[rnd % len(impls):] + impls[: rnd % len(impls)]
                for impl in order:
                    res[impl].append(await batch(impl, srv.base, model, a, builder, rnd, srv.metrics))

        uvloop.run(go())
    curl_by_round = [x["server_tps"] for x in res["curl"]]
    summary: dict[str, Any] = {k: {"cpu_s_per_1k_tokens": C.med([x["cpu_per_1k"] for x in v if x["cpu_per_1k"]]),
                   "cpu_spread": C.spread([x["cpu_per_1k"] for x in v if x["cpu_per_1k"]]),
                   "client_over_server": C.med([x["ratio_median"] for x in v if x["ratio_median"]]),
                   "server_vs_curl": C.med([x["server_tps"] / c for x, c in zip(v, curl_by_round, strict=True)
                                            if x["server_tps"] and c])} for k, v in res.items()}
    ratio = (summary["raw-asyncio"]["cpu_s_per_1k_tokens"] or 0) / (summary["aiohttp"]["cpu_s_per_1k_tokens"] or 1)
    doc: dict[str, Any] = {"machine": C.machine(), "summary": summary, "raw_over_aiohttp_cpu": ratio, "raw": res}
    if a.json:
        print(json.dumps(doc, indent=2))
        return 0
    m = doc["machine"]
    print(f"probe_client_ab  {m['date_utc']} UTC  load {m['loadavg_1m']:.2f}  {a.rounds} rounds x {a.probes} probes x {a.gen} tokens")
    for k, v in summary.items():
        cs = v["cpu_spread"] or (0.0, 0.0)
        print(f"  {k:14s} loop CPU {C.fmt(v['cpu_s_per_1k_tokens'], 4)} s/1k tok ({cs[0]:.4f}..{cs[1]:.4f})  "
              f"client/server gen rate {C.fmt(v['client_over_server'], 4)}  server decode / curl's {C.fmt(v['server_vs_curl'])}")
    print(f"RATIO raw-asyncio / aiohttp probe-loop CPU = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
