"""What a candidate's files say about its vision model: whether there is one, and the largest image side.
Reasons and facts: docs/runtimes.md#vision-model-files."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import IO, TypeAlias

from benchd.files import open_regular, read_regular
from benchd.schemas import MAX_IMAGE_SIDE
from benchd.schemas.json import JSONObject


@dataclass(frozen=True)
class VisionFacts:
    """`ok`: the candidate has a vision model; `reason` says why not when it has none.
    `max_side`: the largest image side it takes; `max_source`: where that limit comes from."""

    ok: bool
    reason: str
    max_side: int = MAX_IMAGE_SIDE
    max_source: str = f"benchd's limit ({MAX_IMAGE_SIDE} px, transformers' idefics3 MAX_IMAGE_SIZE)"


# ------------------------------------------------------------------------------------------- GGUF

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_KV = 100_000

#: One GGUF metadata value: a scalar (unsigned/signed int, float, bool), a string, or an array of them.
GGUFValue: TypeAlias = "int | float | bool | str | list[GGUFValue]"


def _read(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError("truncated GGUF header")
    return data


def _string(f: IO[bytes]) -> str:
    (n,) = struct.unpack("<Q", _read(f, 8))
    if n > 1 << 24:
        raise ValueError("GGUF string too long")
    return _read(f, n).decode("utf-8", "replace")


def _value(f: IO[bytes], kind: int) -> GGUFValue:
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        scalar: int | float | bool = struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
        return scalar
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        (item_kind,) = struct.unpack("<I", _read(f, 4))
        (n,) = struct.unpack("<Q", _read(f, 8))
        if n > 1 << 24:
            raise ValueError("GGUF array too long")
        return [_value(f, item_kind) for _ in range(n)]
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_metadata(path: str) -> dict[str, GGUFValue]:
    """The key/values of a GGUF file's header (raises OSError or ValueError on a file that is not one)."""
    with open_regular(path) as f:  # a FIFO or a device is refused, never waited on
        if _read(f, 4) != b"GGUF":
            raise ValueError("not a GGUF file (bad magic)")
        (version,) = struct.unpack("<I", _read(f, 4))
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        _n_tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
        if n_kv > _MAX_KV:
            raise ValueError("GGUF header has too many keys")
        out: dict[str, GGUFValue] = {}
        for _ in range(n_kv):
            key = _string(f)
            (kind,) = struct.unpack("<I", _read(f, 4))
            out[key] = _value(f, kind)
        return out


def mmproj_facts(path: str) -> VisionFacts:
    """A llama-server projector: a clip GGUF with a vision encoder."""
    try:
        meta = gguf_metadata(path)
    except (OSError, ValueError) as exc:
        return VisionFacts(False, f"mmproj {path} cannot be read as a GGUF projector: {exc}")
    if meta.get("general.architecture") != "clip" or not meta.get("clip.has_vision_encoder"):
        return VisionFacts(False, f"mmproj {path} is not a vision projector (general.architecture "
                                  f"{meta.get('general.architecture')!r}, clip.has_vision_encoder "
                                  f"{meta.get('clip.has_vision_encoder')!r})")
    edge = meta.get("clip.vision.preproc_image_size")
    if isinstance(edge, int) and 0 < edge < MAX_IMAGE_SIDE:
        return VisionFacts(True, "", edge, f"mmproj clip.vision.preproc_image_size ({edge})")
    return VisionFacts(True, "")


# ------------------------------------------------------------------------------------------- MLX dir


def _json(path: str) -> JSONObject | None:
    try:
        doc = json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def mlx_dir_facts(model_dir: str) -> VisionFacts:
    """An mlx_vlm model dir with a vision tower and an image processor."""
    config = _json(os.path.join(model_dir, "config.json"))
    if config is None:
        return VisionFacts(False, f"{model_dir} has no readable config.json")
    if not isinstance(config.get("vision_config"), dict):
        return VisionFacts(False, f"{model_dir}/config.json has no vision_config (a text-only model)")
    pre = _json(os.path.join(model_dir, "preprocessor_config.json"))
    if pre is None:
        return VisionFacts(False, f"{model_dir} has no readable preprocessor_config.json (no image processor)")
    size = pre.get("size")
    edge = size.get("longest_edge") if isinstance(size, dict) else None
    if isinstance(edge, int) and 0 < edge < MAX_IMAGE_SIDE:
        return VisionFacts(True, "", edge, f"preprocessor_config.json size.longest_edge ({edge})")
    return VisionFacts(True, "")
