"""Runtime provisioning: build llama-server and make the MLX venv. Raises `BenchdError` naming the problem
and the fix. Reasons and facts: docs/runtimes.md#provisioning."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from benchd.atomic import atomic_write, file_chunks
from benchd.errors import BenchdError
from benchd.lifeline import die_with_daemon

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: sha256 of `llama_cpp_python-0.3.36.tar.gz` (PyPI's sdist), checked after every download and for `BENCHD_LLAMA_SDIST`.
LLAMA_SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: The index the sdist is fetched from (PEP 691 JSON); `BENCHD_PYPI_SIMPLE` names another.
PYPI_SIMPLE = "https://pypi.org/simple"
MLX_VERSION = "0.32.4"
MLX_LM_VERSION = "0.32.2"
MLX_VLM_VERSION = "0.7.10"
#: Built from one source tree (`llama-perplexity`, `llama-tokenize`: benchd.engine.kld).
LLAMA_TARGETS = ("llama-server", "llama-bench", "llama-perplexity", "llama-tokenize")
RUNTIMES = ("llama-server", "mlx")
MARKER = "installed.json"

#: The options that build on Linux x86-64: no web-asset download, AVX2 ISA with GGML_NATIVE=OFF.
LLAMA_CMAKE_BASE = [
    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DBUILD_SHARED_LIBS=OFF",
]
LLAMA_CMAKE_X86_AVX2 = [
    "-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON",
]

Log = Callable[[str], None]


def mlx_requirements() -> list[str]:
    """Pinned MLX packages: the CPU backend wheel on Linux, plain `mlx` (Metal) on macOS."""
    mlx = f"mlx=={MLX_VERSION}" if sys.platform == "darwin" else f"mlx[cpu]=={MLX_VERSION}"
    return [mlx, f"mlx-lm=={MLX_LM_VERSION}", f"mlx-vlm=={MLX_VLM_VERSION}"]


def llama_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / "runtimes" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def mlx_lock() -> Path | None:
    """The hash lock of the MLX venv for this platform and Python (`benchd/data/mlx-lock-<os>-<arch>-py<X.Y>.txt`:
    every package pinned with its sha256), or None where none is shipped (then the three pins alone, unchecked)."""
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    path = Path(__file__).resolve().parents[1] / "data" / f"mlx-lock-{sys.platform}-{platform.machine()}-{py}.txt"
    return path if path.is_file() else None


def _mlx_lock_sha256() -> str | None:
    lock = mlx_lock()
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock else None


def _mlx_installed(marker: dict[str, object] | None, venv: Path) -> bool:
    """Installed: the marker names the same pins and lock, and the interpreter runs."""
    return bool(marker and marker.get("requirements") == mlx_requirements()
                and marker.get("lock_sha256") == _mlx_lock_sha256() and _executable(_venv_python(venv)))


def mlx_dir(cache_dir: Path) -> Path:
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return Path(cache_dir) / "runtimes" / f"mlx-{MLX_VERSION}_lm-{MLX_LM_VERSION}_vlm-{MLX_VLM_VERSION}_{py}"


def llama_cmake_options() -> list[str]:
    """Base options plus the x86 ISA set when this CPU has AVX2 (else a portable/native build)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        flags = ""
        with contextlib.suppress(OSError):
            flags = Path("/proc/cpuinfo").read_text()
        if sys.platform == "darwin" or " avx2" in flags:
            return LLAMA_CMAKE_BASE + LLAMA_CMAKE_X86_AVX2
        return [*LLAMA_CMAKE_BASE, "-DGGML_NATIVE=OFF"]
    return [*LLAMA_CMAKE_BASE, "-DGGML_NATIVE=ON"]  # arm64: NEON is baseline, native adds dotprod etc.


# ------------------------------------------------------------------------------------------- helpers


def _read_marker(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(root: Path, data: dict[str, object]) -> None:
    atomic_write(root / MARKER, json.dumps(data, indent=2) + "\n")


def _ensure_writable(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BenchdError(
            "cache_unwritable",
            f"cache dir {root} is not writable ({exc.strerror}): set $BENCHD_CACHE_DIR to a writable folder",
            "cache_dir",
        ) from exc


@contextlib.contextmanager
def _install_lock(root: Path, log: Log) -> Iterator[None]:
    """One installer per runtime folder at a time (blocking; a concurrent one finishes, we then reuse)."""
    with open(root / ".install.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another install is running in {root}; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], log_path: Path, what: str, cwd: Path | None = None) -> None:
    """Run a step, appending its output to `log_path`; a failure names the log."""
    with open(log_path, "a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd, check=False,
                              preexec_fn=die_with_daemon())
        fh.write(f"rc={proc.returncode}\n")
    if proc.returncode != 0:
        raise BenchdError("install_failed", f"{what} failed (exit {proc.returncode}): see {log_path}")


def _run_pip_locked(argv: list[str], log_path: Path) -> None:
    """`pip install --require-hashes`: a file whose sha256 is not the lock's is `hash_mismatch` (nothing is
    retried, nothing installed unchecked); any other failure is `install_failed`, as for `_run`."""
    start = log_path.stat().st_size if log_path.exists() else 0
    try:
        _run(argv, log_path, "installing the MLX packages from the hash lock")
    except BenchdError:
        with open(log_path, "rb") as fh:
            fh.seek(start)
            tail = fh.read().decode(errors="replace")
        if "DO NOT MATCH THE HASHES" in tail:
            raise BenchdError("hash_mismatch", f"a downloaded MLX package does not match the sha256 in {argv[-1]}: "
                                               f"nothing was installed unchecked; see {log_path}") from None
        raise


def _which_compiler() -> str | None:
    for cxx in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cxx and shutil.which(cxx):
            return cxx
    return None


def _check_build_tools() -> None:
    hint = "xcode-select --install && brew install cmake" if sys.platform == "darwin" else \
        "apt-get install build-essential cmake ninja-build (or your distribution's equivalent)"
    if shutil.which("cmake") is None:
        raise BenchdError("missing_tool", f"cmake not found on PATH, needed to build llama-server: {hint}")
    if _which_compiler() is None:
        raise BenchdError("missing_tool", f"no C++ compiler (c++, g++, clang++) on PATH: {hint}")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


# ---------------------------------------------------------------------------------------- llama.cpp


def check_sdist(sdist: Path, expected: str | None = None) -> None:
    """The sdist is the pinned one (sha256), else a BenchdError saying so: never a build from it."""
    expected = expected or LLAMA_SDIST_SHA256
    h = hashlib.sha256()
    with sdist.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != expected:
        raise BenchdError("hash_mismatch", f"{sdist} has sha256 {h.hexdigest()}, not the pinned {expected} of "
                          f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}: nothing was built from it; delete it "
                          "(or fix BENCHD_LLAMA_SDIST) and run `make setup` again")


def download_sdist(dest: Path, index: str | None = None) -> None:
    """Fetch the pinned sdist from `BENCHD_PYPI_SIMPLE`'s PEP 691 page into `dest` (no build backend runs);
    index hash and bytes must both be `LLAMA_SDIST_SHA256`, else `hash_mismatch` and nothing at `dest`."""
    index = (index or os.environ.get("BENCHD_PYPI_SIMPLE") or PYPI_SIMPLE).rstrip("/")
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    page = f"{index}/llama-cpp-python/"
    try:
        req = urllib.request.Request(page, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            files = json.loads(resp.read())["files"]
        entry = next((f for f in files if f.get("filename") == name), None)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BenchdError("install_failed", f"reading {page} failed ({e}): check the network "
                          "(or set BENCHD_PYPI_SIMPLE, or BENCHD_LLAMA_SDIST to a downloaded sdist)") from None
    if entry is None:
        raise BenchdError("install_failed", f"{page} lists no {name}")
    listed = (entry.get("hashes") or {}).get("sha256")
    if listed != LLAMA_SDIST_SHA256:
        raise BenchdError("hash_mismatch", f"{page} lists {name} with sha256 {listed}, not the pinned "
                          f"{LLAMA_SDIST_SHA256}: nothing was downloaded")
    url = urllib.parse.urljoin(page, entry["url"])

    def checked() -> Iterator[bytes]:  # the download, streamed; a wrong hash at its end keeps nothing
        h = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=60) as resp:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                yield chunk
        if h.hexdigest() != LLAMA_SDIST_SHA256:
            raise BenchdError("hash_mismatch", f"{url} served sha256 {h.hexdigest()}, not the pinned "
                              f"{LLAMA_SDIST_SHA256} of {name}: nothing was kept or built")

    try:
        atomic_write(dest, checked())
    except OSError as e:
        raise BenchdError("install_failed", f"downloading {url} failed ({e}): run `make setup` again") from None


def _llama_source(root: Path, log: Log) -> Path:
    """The vendored llama.cpp tree of the pinned sdist, downloading and extracting it if needed."""
    stem = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    src = root / "src" / stem / "vendor" / "llama.cpp"
    if (src / "CMakeLists.txt").is_file():
        return src
    sdist = Path(os.environ.get("BENCHD_LLAMA_SDIST", "")) if os.environ.get("BENCHD_LLAMA_SDIST") else None
    if sdist is None or not sdist.is_file():
        dl = root / "dl"
        dl.mkdir(exist_ok=True)
        sdist = dl / f"{stem}.tar.gz"
        if not sdist.is_file():
            log(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist (~77 MB)")
            download_sdist(sdist)
    check_sdist(sdist)
    log(f"extracting {sdist.name}")
    tmp = root / "src.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
    shutil.rmtree(root / "src", ignore_errors=True)
    os.replace(tmp, root / "src")
    if not (src / "CMakeLists.txt").is_file():
        raise BenchdError("install_failed", f"{sdist} has no vendor/llama.cpp tree: delete it and retry")
    return src


def install_llama(cache_dir: Path, log: Log) -> Path:
    """Build every `LLAMA_TARGETS` binary into `<cache>/runtimes/llama.cpp-<v>/bin`; returns that dir.
    Idempotent; an existing `build/` tree is reused, so a half-finished build resumes."""
    root = llama_dir(Path(cache_dir))
    bin_dir = root / "bin"
    marker = _read_marker(root)
    if marker and marker.get("version") == LLAMA_CPP_PYTHON_VERSION and all(
        _executable(bin_dir / t) for t in LLAMA_TARGETS
    ):
        log(f"llama-server {LLAMA_CPP_PYTHON_VERSION} already installed in {bin_dir}")
        return bin_dir
    _ensure_writable(root)
    _check_build_tools()
    with _install_lock(root, log):
        marker = _read_marker(root)  # a concurrent installer may have finished meanwhile
        if marker and all(_executable(bin_dir / t) for t in LLAMA_TARGETS):
            return bin_dir
        started = time.monotonic()
        src = _llama_source(root, log)
        build = root / "build"
        options = llama_cmake_options()
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        log(f"configuring llama.cpp ({'Ninja' if generator else 'default generator'}); log: {root / 'cmake.log'}")
        _run(["cmake", "-S", str(src), "-B", str(build), *generator, *options],
             root / "cmake.log", "configuring llama.cpp with cmake")
        jobs = str(os.cpu_count() or 2)
        missing = [t for t in LLAMA_TARGETS if not _executable(bin_dir / t)]
        what = ("~6 min on 2 cores" if len(missing) == len(LLAMA_TARGETS) or not (build / "CMakeCache.txt").is_file()
                else f"only {', '.join(missing)} compiles: the rest of the tree is built")
        log(f"building {', '.join(LLAMA_TARGETS)} with {jobs} jobs ({what}); log: {root / 'build.log'}")
        _run(["cmake", "--build", str(build), "--config", "Release", "-j", jobs,
              "--target", *LLAMA_TARGETS], root / "build.log", "building llama-server")
        bin_dir.mkdir(exist_ok=True)
        for target in LLAMA_TARGETS:
            built = build / "bin" / target
            if not _executable(built):
                raise BenchdError("install_failed", f"the build produced no {built}: see {root / 'build.log'}")
            atomic_write(bin_dir / target, file_chunks(built), mode=built.stat().st_mode & 0o7777)
        _write_marker(root, {
            "runtime": "llama-server",
            "version": LLAMA_CPP_PYTHON_VERSION,
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - started, 1),
            "source": str(src),
            "build_dir": str(build),
            "binaries": {t: str(bin_dir / t) for t in LLAMA_TARGETS},
            "cmake_options": options,
        })
        log(f"llama-server {LLAMA_CPP_PYTHON_VERSION} installed in {bin_dir}")
        return bin_dir


# ---------------------------------------------------------------------------------------------- MLX


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def install_mlx(cache_dir: Path, log: Log) -> Path:
    """Create the pinned MLX venv in place at `<cache>/runtimes/mlx-..._py<X.Y>/venv`; returns the venv dir.
    It counts as installed once its marker is written after an import check."""
    root = mlx_dir(Path(cache_dir))
    venv = root / "venv"
    marker = _read_marker(root)
    if _mlx_installed(marker, venv):
        log(f"MLX runtimes already installed in {venv}")
        return venv
    _ensure_writable(root)
    with _install_lock(root, log):
        marker = _read_marker(root)
        if _mlx_installed(marker, venv):
            return venv
        started = time.monotonic()
        log_path = root / "install.log"
        shutil.rmtree(venv, ignore_errors=True)
        log(f"creating {venv}")
        _run([sys.executable, "-m", "venv", str(venv)], log_path, "creating the MLX venv")
        lock = mlx_lock()
        pip = [str(_venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
        if lock is not None:
            log(f"installing the MLX venv from {lock.name}, every package checked against its sha256 "
                f"(~1-2 min, ~1 GB); log: {log_path}")
            _run_pip_locked([*pip, "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(lock)],
                            log_path)
        else:
            log(f"no hash lock for {sys.platform}-{platform.machine()}: installing {' '.join(mlx_requirements())} "
                f"by version alone, their dependencies unpinned and unchecked (~1-2 min, ~1 GB); log: {log_path}")
            _run([*pip, *mlx_requirements()], log_path, "installing the MLX packages")
        _run([str(_venv_python(venv)), "-c", "import mlx.core, mlx_lm, mlx_vlm"], log_path,
             "importing mlx, mlx_lm and mlx_vlm in the new venv")
        _write_marker(root, {
            "runtime": "mlx",
            "version": MLX_VERSION,
            "requirements": mlx_requirements(),
            "lock_sha256": _mlx_lock_sha256(),
            "python": sys.version.split()[0],
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - started, 1),
            "venv": str(venv),
        })
        log(f"MLX runtimes installed in {venv}")
        return venv


def install(runtime: str, cache_dir: Path, log: Log) -> list[Path]:
    """`benchctl runtimes install RUNTIME`: 'llama-server', 'mlx' or 'all'."""
    if runtime not in (*RUNTIMES, "all"):
        raise BenchdError("unknown_runtime", f"unknown runtime {runtime!r}: use llama-server, mlx or all", "runtime")
    out = []
    if runtime in ("llama-server", "all"):
        out.append(install_llama(cache_dir, log))
    if runtime in ("mlx", "all"):
        out.append(install_mlx(cache_dir, log))
    return out
