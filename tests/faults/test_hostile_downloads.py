"""What is downloaded and built is the pinned file (issue 36): the llama-cpp-python sdist is checked
against its sha256 after every download and when given by `BENCHD_LLAMA_SDIST`; a mismatch is a clear
error and nothing is extracted or built from it (never a silent rebuild). The eval wheels' pinned
hashes are checked by `benchd.engine.suites` (tests/engine)."""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from benchd.errors import BenchdError
from benchd.servers import provision


def test_the_cached_sdist_is_the_pinned_one(cache_dir: Path) -> None:
    sdist = provision.llama_dir(cache_dir) / "dl" / f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.is_file():
        pytest.skip(f"no cached sdist at {sdist} (a machine set up from BENCHD_LLAMA_SDIST)")
    provision.check_sdist(sdist)  # raises on a mismatch


def test_a_tampered_sdist_is_refused_and_nothing_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    inner = tmp_path / "CMakeLists.txt"
    inner.write_text("project(hostile)\n")
    with tarfile.open(fake, "w:gz") as tar:
        tar.add(inner, arcname=f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/CMakeLists.txt")
    monkeypatch.setenv("BENCHD_LLAMA_SDIST", str(fake))
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(BenchdError) as info:
        provision._llama_source(root, lambda msg: None)
    assert info.value.code == "hash_mismatch" and provision.LLAMA_SDIST_SHA256 in info.value.message
    assert not (root / "src").exists(), "a tampered sdist was extracted"


class _Index:
    """A loopback PEP 691 index serving one sdist: a test double for PyPI, which a test may not reach (no
    network in CI); `listed` is the sha256 the index claims, `body` the bytes it serves for the file."""

    def __init__(self, body: bytes, listed: str) -> None:
        name = f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
        page = json.dumps({"meta": {"api-version": "1.1"}, "files": [
            {"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": listed}}]}).encode()
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                data = page if self.path == "/simple/llama-cpp-python/" else body if self.path.endswith(name) else None
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sdist_bytes(tmp_path: Path) -> bytes:
    inner = tmp_path / "CMakeLists.txt"
    inner.write_text("project(tiny)\n")
    out = tmp_path / "made.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(inner, arcname=f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/CMakeLists.txt")
    return out.read_bytes()


def _no_subprocess(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"a process ran while fetching the sdist: {args}")


def test_the_sdist_is_fetched_by_name_with_no_build_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sdist comes from the index's JSON page by file name, checked against the pin; no pip (and so no
    unpinned build backend reading its metadata) and no other process runs, and the tree is extracted."""
    body = _sdist_bytes(tmp_path)
    digest = hashlib.sha256(body).hexdigest()
    index = _Index(body, digest)
    try:
        monkeypatch.setattr(provision, "LLAMA_SDIST_SHA256", digest)
        monkeypatch.setenv("BENCHD_PYPI_SIMPLE", index.url)
        monkeypatch.delenv("BENCHD_LLAMA_SDIST", raising=False)
        monkeypatch.setattr(provision, "_run", _no_subprocess)
        monkeypatch.setattr(subprocess, "Popen", _no_subprocess)
        root = tmp_path / "root"
        root.mkdir()
        src = provision._llama_source(root, lambda msg: None)
    finally:
        index.close()
    assert (src / "CMakeLists.txt").read_text() == "project(tiny)\n"
    assert index.requests[0] == "/simple/llama-cpp-python/" and len(index.requests) == 2, index.requests
    assert [p.name for p in (root / "dl").iterdir()] == [f"llama_cpp_python-{provision.LLAMA_CPP_PYTHON_VERSION}.tar.gz"]


@pytest.mark.parametrize("lie", ["index", "body"])
def test_an_index_or_file_that_is_not_the_pin_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          lie: str) -> None:
    """An index listing another sha256 (nothing downloaded) or serving other bytes (nothing kept): both
    `hash_mismatch` naming the pin, and no tree extracted."""
    body = _sdist_bytes(tmp_path)
    digest = hashlib.sha256(body).hexdigest()
    index = _Index(body + (b"x" if lie == "body" else b""), digest if lie == "body" else "0" * 64)
    try:
        monkeypatch.setattr(provision, "LLAMA_SDIST_SHA256", digest)
        monkeypatch.setenv("BENCHD_PYPI_SIMPLE", index.url)
        monkeypatch.delenv("BENCHD_LLAMA_SDIST", raising=False)
        root = tmp_path / "root"
        root.mkdir()
        with pytest.raises(BenchdError) as info:
            provision._llama_source(root, lambda msg: None)
    finally:
        index.close()
    assert info.value.code == "hash_mismatch" and digest in info.value.message, info.value
    assert not (root / "src").exists() and not list((root / "dl").iterdir())
    assert len(index.requests) == (1 if lie == "index" else 2), index.requests
