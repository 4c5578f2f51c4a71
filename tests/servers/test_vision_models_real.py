"""The tiny idefics3 VLM on the real servers: mlx_vlm.server runs the real image processor and
llama-server the real mtmd projector; image tokens follow the resolution, a broken image is refused."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from benchctl.tinymodels import vision
from benchd.engine import images

pytestmark = [pytest.mark.slow]

RESOLUTIONS = [(vision.TILE, vision.TILE), (2 * vision.TILE, 2 * vision.TILE), (4 * vision.TILE, 4 * vision.TILE)]
PROMPT = "Describe this image."


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode("utf-8", "replace")}


def _messages(image: images.GeneratedImage | None) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": PROMPT}]
    if image is not None:
        parts.insert(0, {"type": "image_url", "image_url": {"url": image.data_url()}})
    return [{"role": "user", "content": parts}]


def _prompt_tokens(url: str, model: str, image: images.GeneratedImage | None) -> int:
    status, doc = _post(url + "/v1/chat/completions",
                        {"model": model, "messages": _messages(image), "max_tokens": 2, "cache_prompt": False})
    assert status == 200, doc
    assert doc["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    return int(doc["usage"]["prompt_tokens"])


def test_files_and_manifest(vision_models: Any) -> None:
    root: Path = vision_models.root
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["kind"] == "vision" and manifest["tokens_per_tile"] == vision.TOKENS_PER_TILE
    pre = json.loads((vision_models.mlx_vlm_dir / "preprocessor_config.json").read_text())
    assert pre["do_resize"] is False and pre["do_image_splitting"] is True
    assert pre["max_image_size"]["longest_edge"] == vision.TILE
    config = json.loads((vision_models.mlx_vlm_dir / "config.json").read_text())
    assert config["model_type"] == "idefics3" and config["image_token_id"] == vision_models.image_token_id


def test_mlx_vlm_image_tokens_grow_with_resolution(start_mlx_server: Any, vision_models: Any) -> None:
    model = str(vision_models.mlx_vlm_dir)
    with start_mlx_server("mlx_vlm.server", model, ["--vision-cache-size", "1"]) as url:
        text = _prompt_tokens(url, model, None)
        counts = [_prompt_tokens(url, model, images.photo_like(w, h, seed=i)) for i, (w, h) in enumerate(RESOLUTIONS)]
        assert text < counts[0] < counts[1] < counts[2]
        # One tile is not split (one image of TOKENS_PER_TILE); 2x2 and 4x4 tiles add a global image.
        assert counts[1] - text > 5 * vision.TOKENS_PER_TILE
        assert counts[2] - text > 17 * vision.TOKENS_PER_TILE
        broken = images.truncated(images.photo_like(256, 256, seed=99))
        status, doc = _post(url + "/v1/chat/completions",
                            {"model": model, "messages": _messages(broken), "max_tokens": 2})
        assert status >= 400 and "truncated" in doc["error"]


def test_llama_server_mmproj_image_tokens_grow_with_resolution(start_llama_server: Any, vision_models: Any) -> None:
    with start_llama_server(vision_models.text_gguf, ["--mmproj", str(vision_models.mmproj), "-np", "1"],
                            ctx=8192) as url:
        with urllib.request.urlopen(url + "/props", timeout=10) as resp:
            assert json.load(resp)["modalities"]["vision"] is True
        text = _prompt_tokens(url, "x", None)
        counts = [_prompt_tokens(url, "x", images.photo_like(w, h, seed=10 + i)) for i, (w, h) in enumerate(RESOLUTIONS)]
        assert text < counts[0] < counts[1] < counts[2]
        assert counts[2] - text > 17 * vision.TOKENS_PER_TILE
        # The counting endpoint agrees with what the completion reported.
        image = images.photo_like(*RESOLUTIONS[1], seed=42)
        status, doc = _post(url + "/v1/chat/completions/input_tokens", {"messages": _messages(image)})
        assert status == 200 and doc["input_tokens"] == _prompt_tokens(url, "x", image)
        broken = images.truncated(images.photo_like(256, 256, seed=99))
        status, doc = _post(url + "/v1/chat/completions", {"messages": _messages(broken), "max_tokens": 2})
        assert status == 400 and "image" in doc["error"]
