"""Image probes: what an image costs a vision candidate, as a pair of requests (docs/measuring.md#image-probes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchd.engine import images as images_mod
from benchd.engine import probe
from benchd.probe_result import ProbeResult
from benchd.schemas import VISION_PROBE_STRIDE, RowStatus

if TYPE_CHECKING:
    from benchd.schemas import Candidate, Sweep
    from benchd.servers.runtimes.base import ChatSettings, Normalized, RuntimeAdapter

ENCODE_NULL_REASON = ("neither mlx_vlm.server nor llama-server reports the image encode apart from prompt "
                      "processing; image_extra_ttft_ms holds encode + the image tokens' prefill")
USAGE_COUNT_SOURCE = "server:usage.prompt_tokens (image request minus the same text-only request)"


@dataclass
class ImageProbe:
    """One measured pair: its outcome, and the `fields`, `sources`, `null_reasons` of its row."""

    status: RowStatus
    error: str | None
    text: ProbeResult
    image: ProbeResult | None
    norm: Normalized | None
    generated: list[images_mod.GeneratedImage]
    fields: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    null_reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VisionCell:
    """One resolution of a vision candidate, its rows' context and `probe` numbers."""

    context: int
    index: int
    resolution: tuple[int, int]

    def probe_number(self, probe_no: int) -> int:
        return self.index * VISION_PROBE_STRIDE + probe_no

    def key(self, probe_no: int) -> str:
        """The probe's part of its images' seed (and of its prompt's tag)."""
        w, h = self.resolution
        return f"vision/{w}x{h}/{probe_no}"


def vision_cells(sweep: Sweep, cand: Candidate) -> list[VisionCell]:
    """The image-probe cells of a candidate (none unless it says `vision = true`)."""
    if not cand.vision:
        return []
    context = sweep.vision.context if sweep.vision.context is not None else min(sweep.contexts)
    return [VisionCell(context, i, tuple(r)) for i, r in enumerate(sweep.vision.resolutions)]  # type: ignore[arg-type]


def resolution_of(probe: int, sweep: Sweep) -> tuple[int, int] | None:
    """A vision row's resolution from its `probe` number (None when the sweep has no such index)."""
    index = probe // VISION_PROBE_STRIDE
    res = sweep.vision.resolutions
    return tuple(res[index]) if index < len(res) else None  # type: ignore[return-value]


def make_images(seed: int, cand_id: str, resolution: tuple[int, int], count: int, key: str,
                broken: bool = False) -> list[images_mod.GeneratedImage]:
    """The probe's images: unique to (seed, candidate, resolution, key, index); `broken` truncates each."""
    w, h = resolution
    out = [images_mod.photo_like(w, h, images_mod.probe_seed(seed, cand_id, w, h, key, i)) for i in range(count)]
    return [images_mod.truncated(im) for im in out] if broken else out


async def measure(
    adapter: RuntimeAdapter,
    base_url: str,
    cand: Candidate,
    *,
    prompt: str,
    generated: list[images_mod.GeneratedImage],
    settings: ChatSettings,
    timeout_s: float,
    marks: Callable[[str], None] | None = None,
) -> ImageProbe:
    """Run the text-only request, then the same prompt with `generated` images (`marks`: the image request's)."""
    text_body = adapter.requests.probe_body(cand, prompt=prompt, settings=settings)

    def image_request() -> tuple[dict[str, Any], bytes]:  # base64 + JSON of megabytes of PNG: off the loop
        body = dict(text_body, messages=adapter.images.image_messages(prompt, [im.data_url() for im in generated]))
        return body, adapter.requests.encode_body(body)

    image_body, image_bytes = await asyncio.to_thread(image_request)
    url, headers = base_url + adapter.requests.request_path(), adapter.requests.request_headers(cand)
    spec = cand.spec is not None
    text = await probe.run(url, adapter.requests.encode_body(text_body), headers, timeout_s=timeout_s)
    w, h = generated[0].width, generated[0].height
    base: dict[str, Any] = {"image_width": w, "image_height": h, "images": len(generated),
                            "image_sha256": [im.sha256 for im in generated]}
    sources = {"image_sha256": "benchd:sha256 of each generated PNG (unique per probe)",
               "images": "benchd: photo-like PNGs (gradient, shapes, noise), seeded per probe"}
    reasons = {"image_encode_ms": ENCODE_NULL_REASON}
    if not text.ok:
        reasons.update({k: f"the text-only request failed: {text.error}"[:300]
                        for k in ("image_tokens", "image_ttft_ms", "text_ttft_ms", "image_extra_ttft_ms")})
        return ImageProbe("failed", f"the text-only request failed: {text.error}", text, None, None, generated,
                          base, sources, reasons)
    text_norm = adapter.reader.normalize(text, spec_configured=spec)
    image = await probe.run(url, image_bytes, headers, timeout_s=timeout_s, marks=marks)
    norm = adapter.reader.normalize(image, spec_configured=spec)
    fields = dict(base, text_ttft_ms=text_norm.ttft_ms)
    sources["text_ttft_ms"] = "client: first streamed token of the same prompt without images, just before"
    if not image.ok:
        why = f"the image request failed: {image.error}"[:300]
        reasons.update({k: why for k in ("image_tokens", "image_ttft_ms", "image_extra_ttft_ms")})
        outcome: RowStatus = "timeout" if image.status == "timeout" else "failed"
        return ImageProbe(outcome, image.error, text, image, norm, generated, fields, sources, reasons)
    fields["image_ttft_ms"] = norm.ttft_ms
    sources["image_ttft_ms"] = "client: first streamed token of the request with the images"
    _extra_ttft(text_norm, norm, fields, sources, reasons)
    counted = await _counted_image_tokens(adapter, base_url, image_body, text_body, sources)
    if counted is None:
        counted = _usage_image_tokens(text_norm, norm, sources)
    if counted is None:
        reasons["image_tokens"] = "the server reported no prompt tokens for the pair"
    fields["image_tokens"] = counted
    error = _cached_error(text_norm, norm)
    return ImageProbe("ok" if error is None else "failed", error, text, image, norm, generated, fields, sources,
                      reasons)


async def _counted_image_tokens(adapter: RuntimeAdapter, base_url: str, image_body: dict[str, Any],
                                text_body: dict[str, Any], sources: dict[str, str]) -> int | None:
    """The image's tokens from the server's own count of both requests (None where it has none)."""
    if not adapter.request_count_source:
        return None
    with_images = await adapter.requests.count_request_tokens(base_url, image_body)
    without = await adapter.requests.count_request_tokens(base_url, text_body)
    if with_images is None or without is None:
        return None
    sources["image_tokens"] = f"{adapter.request_count_source} (image request minus text-only request)"
    return with_images - without


def _extra_ttft(text_norm: Normalized, norm: Normalized, fields: dict[str, Any], sources: dict[str, str],
                reasons: dict[str, str]) -> None:
    if norm.ttft_ms is not None and text_norm.ttft_ms is not None:
        fields["image_extra_ttft_ms"] = round(norm.ttft_ms - text_norm.ttft_ms, 3)
        sources["image_extra_ttft_ms"] = "image_ttft_ms minus text_ttft_ms"
    else:
        reasons["image_extra_ttft_ms"] = "a TTFT of the pair is missing"


def _usage_image_tokens(text_norm: Normalized, norm: Normalized, sources: dict[str, str]) -> int | None:
    """The image's tokens from the two requests' usage (None when either lacks prompt tokens)."""
    if norm.prompt_tokens is None or text_norm.prompt_tokens is None:
        return None
    sources["image_tokens"] = USAGE_COUNT_SOURCE
    return norm.prompt_tokens - text_norm.prompt_tokens


def _cached_error(text_norm: Normalized, norm: Normalized) -> str | None:
    """Why a pair served from the prompt cache fails (the last request's cache wins), or None."""
    error = None
    for which, n in (("text-only", text_norm.cached_tokens), ("image", norm.cached_tokens)):
        if n not in (None, 0):
            error = f"the {which} request was served {n} cached tokens: the figures would be fake"
    return error
