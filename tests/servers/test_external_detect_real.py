"""Detection of a server given by `url` (`runtime = "openai"`) against the real pinned servers: llama-server,
and (slow) mlx_lm.server and mlx_vlm.server."""

from __future__ import annotations

import pytest

from benchd.servers.runtimes.openai import detect
from tests.servers.test_external_detect import cand


async def test_llama_server(llama_url: str) -> None:
    found = await detect(cand(url=llama_url))
    assert found.kind == "llama-server" and (found.version or "").startswith("llama.cpp")
    assert found.slot_ctx and found.total_slots and found.sources["total_slots"] == "GET /props total_slots"
    assert found.chat_format or "GET /slots" in found.null_reasons["chat_format"]


@pytest.mark.slow
async def test_mlx_servers(mlx_lm_url: str, mlx_vlm_url: str) -> None:
    lm = await detect(cand(url=mlx_lm_url))
    assert lm.kind == "mlx_lm.server" and lm.version is None and lm.null_reasons["version"]
    vlm = await detect(cand(url=mlx_vlm_url))
    assert vlm.kind == "mlx_vlm.server" and vlm.model_ids and vlm.sources["kind"].startswith("GET /health")
