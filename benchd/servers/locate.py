"""Which runtime binary a candidate runs, and what `benchctl runtimes list` / `benchctl doctor` show.
Reasons and facts: docs/runtimes.md#finding-the-runtimes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchd.errors import BenchdError
from benchd.lifeline import die_with_daemon
from benchd.servers.provision import (
    LLAMA_TARGETS,
    MLX_LM_VERSION,
    MLX_VLM_VERSION,
    _executable,
    _read_marker,
    _venv_python,
    llama_dir,
    mlx_dir,
)

# ----------------------------------------------------------------------------------------- resolution


def _env_name(name: str) -> str:
    return "BENCHD_" + name.upper().replace("-", "_").replace(".", "_")


def resolve_llama_binary(binary: str | None, cache_dir: Path, name: str = "llama-server") -> tuple[Path, str]:
    """(absolute path, how: candidate|env|path|cache) of the `name` binary: the candidate's `binary`, else
    `$BENCHD_LLAMA_SERVER` (`$BENCHD_LLAMA_BENCH`), else PATH, else the cached pinned build."""
    def check(raw: str, how: str, field: str | None) -> tuple[Path, str]:
        found = shutil.which(raw) if os.sep not in raw else raw
        path = Path(found or raw).expanduser()
        if not _executable(path):
            src = "the candidate's binary" if how == "candidate" else f"${_env_name(name)}"
            raise BenchdError("binary_not_found", f"{src} {raw!r} is not an executable file", field)
        return path.absolute(), how

    if binary:
        return check(binary, "candidate", "binary")
    env = os.environ.get(_env_name(name))
    if env:
        return check(env, "env", None)
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path).absolute(), "path"
    cached = llama_dir(Path(cache_dir)) / "bin" / name
    if _executable(cached):
        return cached, "cache"
    raise BenchdError(
        "runtime_missing",
        f"no {name} found (candidate binary, ${_env_name(name)}, PATH, cache): "
        "run `benchctl runtimes install llama-server`",
    )


_MLX_MODULES = {"mlx_lm": "mlx_lm", "mlx_lm.server": "mlx_lm", "mlx-lm": "mlx_lm",
                "mlx_vlm": "mlx_vlm", "mlx_vlm.server": "mlx_vlm", "mlx-vlm": "mlx_vlm"}


def _mlx_argv(python: Path, module: str) -> list[str]:
    """`mlx_lm.server` has a console script (the `-m` form is deprecated); mlx_vlm is run with `-m`."""
    script = python.parent / f"{module}.server"
    if module == "mlx_lm" and _executable(script):
        return [str(script)]
    return [str(python), "-m", f"{module}.server"]


def _can_import(python: str, module: str) -> bool:
    try:
        proc = subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=60, check=False,
                              preexec_fn=die_with_daemon())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _on_path(name: str) -> Path:
    return Path(shutil.which(name) or name).expanduser().absolute()


def _candidate_mlx(binary: str, module: str) -> list[str]:
    """The argv prefix from the candidate's `binary`: a server script, or a Python that has `module`."""
    path = _on_path(binary)
    if not _executable(path):
        raise BenchdError("binary_not_found", f"the candidate's binary {binary!r} is not an executable file",
                          "binary")
    if path.name.startswith(f"{module}.server"):
        return [str(path)]
    return [str(path), "-m", f"{module}.server"]


def resolve_mlx_command(runtime: str, binary: str | None, cache_dir: Path) -> tuple[list[str], str]:
    """(argv prefix starting `mlx_lm.server` / `mlx_vlm.server`, how found): the candidate's `binary`, else
    `$BENCHD_MLX_PYTHON`, else this interpreter if it imports the package, else the cache venv."""
    module = _MLX_MODULES.get(runtime)
    if module is None:
        raise BenchdError("unknown_runtime", f"unknown MLX runtime {runtime!r}: use mlx_lm.server or mlx_vlm.server",
                          "runtime")
    if binary:
        return _candidate_mlx(binary, module), "candidate"
    env = os.environ.get("BENCHD_MLX_PYTHON")
    if env:
        path = _on_path(env)
        if not _executable(path):
            raise BenchdError("binary_not_found", f"$BENCHD_MLX_PYTHON {env!r} is not an executable file")
        return _mlx_argv(path, module), "env"
    if _can_import(sys.executable, module):
        return _mlx_argv(Path(sys.executable), module), "path"
    python = _venv_python(mlx_dir(Path(cache_dir)) / "venv")
    if _executable(python) and _read_marker(mlx_dir(Path(cache_dir))):
        return _mlx_argv(python, module), "cache"
    raise BenchdError(
        "runtime_missing",
        f"no {module}.server found (candidate binary, $BENCHD_MLX_PYTHON, this Python, cache): "
        "run `benchctl runtimes install mlx`",
    )


# ------------------------------------------------------------------------------------------- listing


def llama_version(path: Path) -> str | None:
    """`llama-server --version` says e.g. `version: 0.5.0-dev (build 1, commit 0c1e570)` -> `b1-0c1e570`."""
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=20, check=False,
                              preexec_fn=die_with_daemon())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_llama_version(proc.stdout + proc.stderr)


def parse_llama_version(text: str) -> str | None:
    """`version: 0.5.0-dev (build 1, commit 0c1e570)` anywhere in `text` -> `b1-0c1e570`, else None."""
    for line in text.splitlines():
        if line.startswith("version:") and "build" in line and "commit" in line:
            inner = line.split("(", 1)[1].rstrip(")")
            build = inner.split(",")[0].split()[-1]
            commit = inner.split("commit")[-1].strip()
            return f"b{build}-{commit}"
    return None


def _argv_python(argv: list[str]) -> str:
    """The interpreter behind an MLX argv prefix (`python -m ...`, or a venv script next to its python)."""
    return argv[0] if "-m" in argv else str(Path(argv[0]).parent / "python")


def _dist_version(python: str, dist: str) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                              preexec_fn=die_with_daemon())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def list_runtimes(cache_dir: Path) -> list[dict[str, object]]:
    """One entry per runtime: name, version, path, how it is found (or null + reason), installed?."""
    out: list[dict[str, object]] = []
    for name in LLAMA_TARGETS:
        entry: dict[str, object] = {"name": name, "installed": False, "version": None, "path": None, "how": None}
        try:
            path, how = resolve_llama_binary(None, cache_dir, name)
            entry.update(path=str(path), how=how, installed=True, version=llama_version(path))
        except BenchdError as exc:
            entry["reason"] = exc.message
        out.append(entry)
    marker = _read_marker(mlx_dir(Path(cache_dir)))
    for runtime in ("mlx_lm.server", "mlx_vlm.server"):
        entry = {"name": runtime, "installed": False, "version": None, "path": None, "how": None}
        try:
            argv, how = resolve_mlx_command(runtime, None, cache_dir)
            dist = {"mlx_lm.server": "mlx-lm", "mlx_vlm.server": "mlx-vlm"}[runtime]
            if how == "cache" and marker:
                version: str | None = {"mlx-lm": MLX_LM_VERSION, "mlx-vlm": MLX_VLM_VERSION}[dist]
            else:
                version = _dist_version(_argv_python(argv), dist)
            entry.update(path=" ".join(argv), how=how, installed=True, version=version)
        except BenchdError as exc:
            entry["reason"] = exc.message
        out.append(entry)
    return out
