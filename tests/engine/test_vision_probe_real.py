"""Image probes on the real servers (mlx_vlm.server and llama-server --mmproj, the tiny idefics3 VLM):
the image's extra TTFT is the pair's difference, image tokens grow with the resolution, the
rows' figures name their sources, no probe is served from a cache, and a truncated PNG fails the pair
with the server's own error while the server keeps serving."""

from __future__ import annotations

from typing import Any

import pytest

from benchctl.tinymodels import vision as tiny_vision
from benchd.engine import vision
from benchd.schemas import Candidate
from benchd.servers.runtimes import get_adapter
from benchd.servers.runtimes.base import ChatSettings

pytestmark = [pytest.mark.slow]

RESOLUTIONS = [(tiny_vision.TILE, tiny_vision.TILE), (2 * tiny_vision.TILE, 2 * tiny_vision.TILE),
               (4 * tiny_vision.TILE, 4 * tiny_vision.TILE)]
PROMPT = "Tell me what the picture shows, in a few words, and nothing else. " * 4


async def _pairs(url: str, cand: Candidate) -> list[vision.ImageProbe]:
    adapter = get_adapter(cand.runtime)
    # Warm-up, as the sweep does after a start: a cold server's first requests are slower either way.
    await vision.measure(adapter, url, cand, prompt="warm " + PROMPT, settings=ChatSettings(4), timeout_s=300,
                         generated=vision.make_images(0, cand.id, RESOLUTIONS[0], 1, "warm"))
    out = []
    for probe_no, res in enumerate(RESOLUTIONS):
        generated = vision.make_images(0, cand.id, res, 1, f"p{probe_no}")
        out.append(await vision.measure(adapter, url, cand, prompt=f"{probe_no} {PROMPT}", generated=generated,
                                        settings=ChatSettings(4), timeout_s=300))
    return out


def _check(pairs: list[vision.ImageProbe], token_source: str) -> None:
    assert all(p.status == "ok" for p in pairs), [p.error for p in pairs]
    tokens = [p.fields["image_tokens"] for p in pairs]
    assert 0 < tokens[0] < tokens[1] < tokens[2]
    # The image's cost is the difference of the pair's two TTFTs, both measured. Its sign is a speed (under
    # load one pair can invert: 60 vs 101 ms with a second CI run beside), so what the test holds the server
    # to is the work: the image tokens the request added, above (> 0 and growing with the resolution).
    for p in pairs:
        assert p.fields["image_extra_ttft_ms"] == round(p.fields["image_ttft_ms"] - p.fields["text_ttft_ms"], 3)
    for p in pairs:
        assert token_source in p.sources["image_tokens"]
        assert {"image_ttft_ms", "text_ttft_ms", "image_extra_ttft_ms", "image_sha256"} <= set(p.sources)
        assert p.fields.get("image_encode_ms") is None and "image_encode_ms" in p.null_reasons
        assert p.norm is not None and p.norm.cached_tokens == 0  # never served from a cache
    hashes = [h for p in pairs for h in p.fields["image_sha256"]]
    assert len(set(hashes)) == len(hashes)


async def _broken(url: str, cand: Candidate) -> None:
    adapter = get_adapter(cand.runtime)
    broken = vision.make_images(0, cand.id, (256, 256), 1, "broken", broken=True)
    pair = await vision.measure(adapter, url, cand, prompt=PROMPT, generated=broken, settings=ChatSettings(4),
                                timeout_s=300)
    assert pair.status == "failed" and pair.error is not None
    assert pair.error.startswith(("HTTP 4", "HTTP 5")) and "image" in pair.error.lower()  # the server's own words
    assert pair.fields.get("image_tokens") is None and "image request failed" in pair.null_reasons["image_tokens"]
    after = await vision.measure(adapter, url, cand, prompt="after " + PROMPT, settings=ChatSettings(4),
                                 timeout_s=300, generated=vision.make_images(0, cand.id, (128, 128), 1, "after"))
    assert after.status == "ok"  # the server goes on


async def test_mlx_vlm_image_probe(astart_mlx_server: Any, vision_models: Any) -> None:
    cand = Candidate(id="vlm", runtime="mlx_vlm.server", model=str(vision_models.mlx_vlm_dir), vision=True)
    async with astart_mlx_server("mlx_vlm.server", cand.model, ["--vision-cache-size", "1"]) as url:
        _check(await _pairs(url, cand), vision.USAGE_COUNT_SOURCE)
        await _broken(url, cand)


async def test_llama_server_mmproj_image_probe(astart_llama_server: Any, vision_models: Any) -> None:
    cand = Candidate(id="llv", runtime="llama-server", model=str(vision_models.text_gguf),
                     mmproj=str(vision_models.mmproj), vision=True)
    async with astart_llama_server(cand.model, ["--mmproj", cand.mmproj, "-np", "1"], ctx=8192) as url:
        _check(await _pairs(url, cand), "input_tokens")
        await _broken(url, cand)
