"""Memory sampler on a real llama-server (tiny model) during a real completion (Linux /proc)."""

from __future__ import annotations

import asyncio

from benchd.sensors.memory import sampler as memory
from tests.sensors.test_memory import linux_only
from tests.testlib import until


@linux_only
async def test_real_llama_server_probe(server_factory, tiny_models, free_port) -> None:
    """The sampler on a real llama-server during a real completion: kernel peak, exact, split adds up."""
    import json
    import urllib.request

    port = free_port()
    server = server_factory.spawn("llama-server-mem", server_factory.llama_argv(tiny_models.target, port, ["-t", "1"], 2048))
    base = f"http://127.0.0.1:{port}"
    try:
        await server_factory.ready(server, base)
        s = memory.MemorySampler(server.proc.pid, rate_hz=20)
        body = json.dumps({"prompt": "hello " * 200, "n_predict": 64, "temperature": 0}).encode()
        req = urllib.request.Request(base + "/completion", data=body, headers={"Content-Type": "application/json"})
        s.reset_peak()
        await s.start()
        await asyncio.to_thread(lambda: urllib.request.urlopen(req, timeout=60).read())
        await until(lambda: len(s._series) >= 3, "three periodic samples")  # whatever the probe's speed
        r = await s.stop()
    finally:
        server.stop()
    assert r.source == "kernel:VmHWM" and r.exact and r.processes == 1, r.source_note
    assert r.peak_bytes is not None and r.sampled_peak_bytes is not None
    assert r.peak_bytes >= r.sampled_peak_bytes > tiny_models.target.stat().st_size
    assert r.rss_anon_bytes is not None and r.rss_file_bytes is not None
    assert r.rss_anon_bytes + r.rss_file_bytes == r.sampled_peak_bytes  # VmRSS = RssAnon + RssFile + RssShmem
    assert r.rate_hz_achieved is not None and len(r.series) >= 3
