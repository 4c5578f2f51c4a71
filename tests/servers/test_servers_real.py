"""Each adapter against its real server on the tiny models: request, raw answer, normalized metrics."""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest

from benchd.config import Config
from benchd.engine import probe
from benchd.probe_result import counter_diff
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings
from benchd.servers.runtimes.llama_server import acceptance_from_metrics
from benchd.servers.supervisor import Supervisor

PROMPT = "import os\n\ndef walk(top):\n    for root, dirs, files in os.walk(top):\n        yield root\n" * 12


@pytest.fixture
async def sup(tmp_path: Path, cache_dir: Path) -> AsyncIterator[Supervisor]:
    s = Supervisor(Config.resolve(state_dir=tmp_path / "state", cache_dir=cache_dir), grace_s=3.0)
    yield s
    await s.stop_all()


@pytest.fixture
def binary(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """The runtime's binary from the session fixtures (they provision a fresh machine once)."""

    def get(runtime: str) -> str:
        if runtime == "llama-server":
            return str(request.getfixturevalue("llama_server_bin"))
        return str(request.getfixturevalue("mlx_argv")[runtime][0])

    return get


def candidate(runtime: str, model: Path, binary: Callable[[str], str], **kw: object) -> Candidate:
    fields = {"id": "tiny", "runtime": runtime, "model": str(model), "startup_timeout_s": 60,
              "binary": binary(runtime), **kw}
    return msgspec.convert(fields, Candidate)


async def run(server, c: Candidate, max_tokens: int, prefix: str = "") -> probe.ProbeResult:
    r = await probe.run_chat(get_adapter(c.runtime), server.base_url, c, prompt=prefix + PROMPT,
                             settings=ChatSettings(max_tokens), timeout_s=120)
    assert r.status == "ok", r.error
    return r


async def test_llama_server_tokenize_and_timings(sup: Supervisor, tiny_models, binary) -> None:
    c = candidate("llama-server", tiny_models.target, binary)
    adapter = get_adapter("llama-server")
    server = await sup.start("job-rt", c, adapter.launcher.server_ctx_size(c, 512, 32))
    n_tok = await adapter.requests.count_tokens(server.base_url, PROMPT)
    assert n_tok is not None and n_tok > 100
    n = adapter.reader.normalize(await run(server, c, 32), spec_configured=False)
    assert n.prompt_tokens is not None and n.prompt_tokens >= n_tok  # the chat template adds a few
    assert n.cached_tokens == 0 and n.gen_tokens == 32
    assert n.sources["prompt_tps"] == n.sources["gen_tps"] == "server:timings"
    assert n.draft_acceptance is None and n.null_reasons["draft_acceptance"] == "no spec configured"


@pytest.mark.parametrize(("draft", "lo", "hi"), [("draft_identical", 0.9, 1.0), ("draft_unrelated", 0.0, 0.1)])
async def test_llama_server_draft_acceptance_and_metrics_cross_check(
    sup: Supervisor, tiny_models, binary, draft: str, lo: float, hi: float
) -> None:
    c = candidate("llama-server", tiny_models.target, binary,
                  spec={"kind": "draft", "draft_model": str(getattr(tiny_models, draft)), "draft_max": 8})
    adapter = get_adapter("llama-server")
    assert adapter.checks.validate(c) == []
    server = await sup.start("job-rt", c, adapter.launcher.server_ctx_size(c, 512, 64))
    before = await probe.read_metrics(server.base_url)
    n = adapter.reader.normalize(await run(server, c, 64), spec_configured=True)
    after = await probe.read_metrics(server.base_url)
    assert n.draft_n and n.draft_acceptance is not None and lo <= n.draft_acceptance <= hi
    assert n.sources["draft_acceptance"].startswith("server:timings")
    assert before is not None and after is not None
    assert acceptance_from_metrics(counter_diff(before, after)) == pytest.approx(n.draft_acceptance)


async def test_mlx_lm_server(sup: Supervisor, tiny_models, binary) -> None:
    c = candidate("mlx_lm.server", tiny_models.mlx_dir, binary)
    adapter = get_adapter("mlx_lm.server")
    server = await sup.start("job-rt", c, None)
    assert server.version and server.version.startswith("mlx-lm ")
    assert await adapter.requests.count_tokens(server.base_url, PROMPT) is None
    r = await run(server, c, 128)
    assert r.timings is None  # mlx_lm sends none at all
    n = adapter.reader.normalize(r, spec_configured=False)
    assert n.prompt_tps is None and n.null_reasons["prompt_tps"] == "mlx_lm.server reports no prompt timing"
    assert n.gen_tps == n.gen_tps_client
    if r.arrivals < 2:  # a starved client (a hog on every core) read the whole stream at once: no window
        assert n.gen_tps is None and f"all tokens arrived in {r.arrivals} socket read" in n.null_reasons["gen_tps"]
    else:  # (the window's arithmetic on given reads: tests/engine/test_probe.py)
        assert n.gen_tps is not None and n.sources["gen_tps"].startswith("client:stream-window"), n.null_reasons
    assert n.gen_tokens == 128 and n.cached_tokens == 0 and n.prompt_tokens


async def test_mlx_vlm_server_client_and_server_rates_agree(sup: Supervisor, tiny_models, binary) -> None:
    c = candidate("mlx_vlm.server", tiny_models.mlx_vlm_dir, binary)
    adapter = get_adapter("mlx_vlm.server")
    server = await sup.start("job-rt", c, None)
    assert server.version and server.version.startswith("mlx-vlm ")
    ratios = []
    for i in range(3):
        n = adapter.reader.normalize(await run(server, c, 96, prefix=f"{i} "), spec_configured=False)
        assert n.sources["gen_tps"] == n.sources["prompt_tps"] == "server:timings"
        assert n.gen_tps and n.prompt_tps
        assert n.server_peak_memory_bytes and n.server_peak_memory_bytes > 100_000
        assert n.cached_tokens == 0, "mlx_vlm served the prompt from its prefix cache"
        if n.gen_tps_client is None:  # a starved client read the stream at once: benchd says so
            assert "socket read" in n.null_reasons["gen_tps_client"], n.null_reasons
        else:
            ratios.append(n.gen_tps_client / n.gen_tps)
    assert not ratios or abs(statistics.median(ratios) - 1) < 0.05, ratios
