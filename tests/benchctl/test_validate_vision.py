"""`benchctl validate` on image probes: `vision = true` needs a vision model, `mmproj` must exist and
belongs to llama-server, resolutions stay within the model's maximum, `images` >= 1 (exit 2 each, naming
the field); a good vision sweep is shown with its image probes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from testlib import benchctl_inproc


def _sweep(tmp_path: Path, vision: str, candidates: str) -> Path:
    f = tmp_path / "vision.toml"
    f.write_text(f'name = "v"\ncontexts = [256]\ngen_tokens = 8\n{vision}\n{candidates}')
    return f


def _validate(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return benchctl_inproc("validate", str(path), *args)


def _cand(cid: str, runtime: str, model: Path | str, extra: str = "") -> str:
    return f'[[candidates]]\nid = "{cid}"\nruntime = "{runtime}"\nmodel = "{model}"\n{extra}\n'


def test_good_vision_sweep_is_shown(tmp_path: Path, vision_models: Any, tiny_models: Any) -> None:
    f = _sweep(tmp_path, "[vision]\nimages = 2\nresolutions = [[256, 256], [512, 384]]\n",
               _cand("vlm", "mlx_vlm.server", vision_models.mlx_vlm_dir, "vision = true")
               + _cand("llv", "llama-server", vision_models.text_gguf, f'vision = true\nmmproj = "{vision_models.mmproj}"')
               + _cand("text", "llama-server", tiny_models.target))
    out = _validate(f)
    assert out.returncode == 0, out.stderr
    assert "image probes for vlm, llv: 2 images of 256x256, 512x384" in out.stdout
    doc = json.loads(_validate(f, "--json").stdout)
    assert doc["settings"]["vision"] == {"candidates": ["vlm", "llv"], "images": 2,
                                         "resolutions": [[256, 256], [512, 384]], "context": 256}


@pytest.mark.parametrize(("vision", "extra", "runtime", "needle"), [
    ("", "vision = true", "mlx_lm.server", "has no vision model: mlx_lm.server takes no images"),
    ("", "vision = true", "llama-server", "llama-server needs `mmproj`"),
    ("", 'mmproj = "{missing}"', "llama-server", "does not exist"),
    ("", 'mmproj = "{mmproj}"', "mlx_vlm.server", "`mmproj` is a llama-server projector"),
    ("[vision]\nimages = 0\n", "", "llama-server", "vision.images"),
    ("[vision]\nresolutions = [[0, 512]]\n", "", "llama-server", "vision.resolutions[0][0]"),
    ("[vision]\nresolutions = [[5000, 512]]\n", "", "llama-server", "vision.resolutions[0][0]"),
])
def test_bad_vision_input_exits_2(tmp_path: Path, tiny_models: Any, vision_models: Any, vision: str, extra: str,
                                  runtime: str, needle: str) -> None:
    model = tiny_models.mlx_dir if runtime.startswith("mlx") else tiny_models.target
    extra = extra.format(missing=tmp_path / "gone-mmproj.gguf", mmproj=vision_models.mmproj)
    out = _validate(_sweep(tmp_path, vision, _cand("c", runtime, model, extra)))
    assert out.returncode == 2
    assert needle in out.stderr + out.stdout


def test_resolution_over_the_models_maximum_exits_2(tmp_path: Path, vision_models: Any) -> None:
    """The tiny VLM's processor says size.longest_edge 1024: 2048 px is refused, naming the limit."""
    f = _sweep(tmp_path, "[vision]\nresolutions = [[512, 512], [2048, 1024]]\n",
               _cand("vlm", "mlx_vlm.server", vision_models.mlx_vlm_dir, "vision = true"))
    out = _validate(f)
    assert out.returncode == 2
    assert "vision.resolutions[1] 2048x1024 is larger than candidate 'vlm' takes: at most 1024 px" in out.stderr
