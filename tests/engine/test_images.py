"""The image-probe images: deterministic from a seed, unique across seeds, valid PNGs of the asked size."""

from __future__ import annotations

import struct
import zlib

import pytest

from benchd.engine import images


def _decode(png: bytes) -> tuple[int, int, bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", png[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + data)
        if kind == b"IHDR":
            width, height = struct.unpack(">II", data[:8])
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    return width, height, zlib.decompress(idat)


def test_same_seed_same_bytes_other_seed_other_image() -> None:
    a, b, c = images.photo_like(96, 64, 7), images.photo_like(96, 64, 7), images.photo_like(96, 64, 8)
    assert a.png == b.png and a.sha256 == b.sha256
    assert c.sha256 != a.sha256


def test_png_is_valid_and_photo_like() -> None:
    img = images.photo_like(120, 80, 3)
    width, height, raw = _decode(img.png)
    assert (width, height) == (120, 80)
    assert len(raw) == height * (1 + width * 3)
    pixels = b"".join(raw[y * (1 + width * 3) + 1:(y + 1) * (1 + width * 3)] for y in range(height))
    assert len(set(pixels)) > 100  # noise and gradients: many distinct values, not a flat fill
    assert img.data_url().startswith("data:image/png;base64,")


def test_probe_seeds_differ_per_probe_and_truncation_breaks_the_file() -> None:
    seeds = {images.probe_seed(0, "cand", 512, 512, probe, i) for probe in range(20) for i in range(3)}
    assert len(seeds) == 60
    broken = images.truncated(images.photo_like(64, 64, 1))
    with pytest.raises(Exception):  # noqa: B017 - zlib or the length check, either way not a whole PNG
        _decode(broken.png)


def test_bad_size() -> None:
    with pytest.raises(ValueError, match="positive"):
        images.photo_like(0, 10, 1)
