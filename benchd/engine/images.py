"""Deterministic photo-like PNG images for image probes, standard library only (docs/measuring.md#probe-images)."""

from __future__ import annotations

import base64
import hashlib
import random
import struct
import zlib
from dataclasses import dataclass

_BASE_MAX = 191
_NOISE_SHIFT = 2  # noise bytes 0..63
_SHAPES = 6


@dataclass(frozen=True)
class GeneratedImage:
    width: int
    height: int
    seed: int
    png: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.png).hexdigest()

    def data_url(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(width: int, height: int, rgb: bytes) -> bytes:
    """An 8-bit RGB PNG (filter 0 on every row) of `rgb` (width * height * 3 bytes, row-major)."""
    stride = width * 3
    raw = b"".join(b"\x00" + rgb[y * stride:(y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")


def _colour(rng: random.Random) -> tuple[int, int, int]:
    return rng.randrange(_BASE_MAX + 1), rng.randrange(_BASE_MAX + 1), rng.randrange(_BASE_MAX + 1)


def photo_like(width: int, height: int, seed: int) -> GeneratedImage:
    """A `width` x `height` PNG: gradient + rectangles + discs + noise, all from `seed`."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    rng = random.Random(seed)
    left, right = _colour(rng), _colour(rng)
    grad_row = _gradient_row(width, left, right)
    shapes = [_shape(rng, width, height) for _ in range(_SHAPES)]
    rows = []
    for y in range(height):
        shade = 0.6 + 0.4 * y / max(1, height - 1)
        row = bytearray(grad_row.translate(bytes(min(_BASE_MAX, int(v * shade)) for v in range(256))))
        for shape in shapes:
            _paint(row, y, width, shape)
        rows.append(bytes(row))
    base = b"".join(rows)
    noise = rng.randbytes(len(base)).translate(bytes(v >> _NOISE_SHIFT for v in range(256)))
    pixels = (int.from_bytes(base, "big") + int.from_bytes(noise, "big")).to_bytes(len(base), "big")
    return GeneratedImage(width=width, height=height, seed=seed, png=encode_png(width, height, pixels))


_Shape = tuple[str, int, int, int, int, bytes]


def _gradient_row(width: int, left: tuple[int, int, int], right: tuple[int, int, int]) -> bytes:
    """One RGB row from the left colour to the right one (each image row scales it by a shade)."""
    grad = bytearray(width * 3)
    for x in range(width):
        t = x / max(1, width - 1)
        for c in range(3):
            grad[x * 3 + c] = round(left[c] + (right[c] - left[c]) * t)
    return bytes(grad)


def _shape(rng: random.Random, width: int, height: int) -> _Shape:
    kind = rng.choice(("rect", "disc"))
    cx, cy = rng.randrange(width), rng.randrange(height)
    rx = max(1, rng.randrange(max(2, width // 3)))
    ry = max(1, rng.randrange(max(2, height // 3))) if kind == "rect" else rx
    return kind, cx, cy, rx, ry, bytes(_colour(rng))


def _paint(row: bytearray, y: int, width: int, shape: _Shape) -> None:
    """Paint the part of `shape` on image row `y`."""
    kind, cx, cy, rx, ry, col = shape
    dy = y - cy
    if abs(dy) > ry:
        return
    half = rx if kind == "rect" else int((rx * rx - dy * dy) ** 0.5)
    x0, x1 = max(0, cx - half), min(width, cx + half + 1)
    if x1 > x0:
        row[x0 * 3:x1 * 3] = col * (x1 - x0)


def probe_seed(base_seed: int, *parts: object) -> int:
    """A 63-bit seed unique to one probe's image, hashed from the sweep's seed and what names the probe."""
    text = "\x1f".join(str(p) for p in (base_seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def truncated(image: GeneratedImage) -> GeneratedImage:
    """The same image with its PNG cut in half: a broken image a server must refuse."""
    return GeneratedImage(width=image.width, height=image.height, seed=image.seed, png=image.png[: len(image.png) // 2])
