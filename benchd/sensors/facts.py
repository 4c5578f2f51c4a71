"""Facts about the machine, benchd and the model files, one `collect_*` per area: each read from the OS or
a file, else None with `null_reasons[field]` saying why."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypedDict

import psutil

import benchd
from benchd.atomic import atomic_write
from benchd.files import kind_of, open_regular
from benchd.schemas import (
    BenchdInfo,
    MachineInfo,
    ModelInfo,
)
from benchd.sensors.power.status import PowerStatus

# ------------------------------------------------------------------------------------------ structs


SHA256_FILE_METHOD = "sha256 of the file's bytes"
SHA256_DIR_METHOD = (
    "sha256 over the directory's regular files in sorted relative-path order, each fed as "
    "'<relative path>\\n<size>\\n' followed by its bytes (symlinks followed)"
)

# --------------------------------------------------------------------------------------- machine


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace").strip("\x00\n ")
    except OSError:
        return None


def sysctl(name: str) -> str | None:
    """macOS only: `sysctl -n name`, None if it fails."""
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _linux_cpu_model() -> str | None:
    text = _read("/proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Hardware", "cpu model") and value.strip():
            return value.strip()
    return None


def _linux_os_release() -> tuple[str | None, str | None]:
    text = _read("/etc/os-release") or ""
    fields = dict(
        (k, v.strip().strip('"')) for k, _, v in (line.partition("=") for line in text.splitlines()) if k
    )
    return fields.get("NAME"), fields.get("VERSION_ID") or fields.get("VERSION")


def _linux_hardware_model() -> tuple[str | None, str | None]:
    for path in ("/proc/device-tree/model", "/sys/devices/virtual/dmi/id/product_name"):
        value = _read(path)
        if value:
            vendor = _read("/sys/devices/virtual/dmi/id/sys_vendor") if "dmi" in path else None
            return (f"{vendor} {value}" if vendor and vendor not in value else value), path
    return None, None


def _darwin_machine(info: MachineInfo) -> None:
    info.os, info.os_version = "macOS", platform.mac_ver()[0] or None
    info.hardware_model = sysctl("hw.model")
    info.chip = info.cpu_model = sysctl("machdep.cpu.brand_string")
    info.sources.update(hardware_model="sysctl hw.model", chip="sysctl machdep.cpu.brand_string",
                        cpu_model="sysctl machdep.cpu.brand_string", os_version="platform.mac_ver")


def _linux_machine(info: MachineInfo) -> None:
    src, nulls = info.sources, info.null_reasons
    info.os, info.os_version = _linux_os_release()
    src.update(os="/etc/os-release", os_version="/etc/os-release")
    info.hardware_model, where = _linux_hardware_model()
    if where:
        src["hardware_model"] = where
    else:
        nulls["hardware_model"] = "neither /proc/device-tree/model nor DMI product_name is readable"
    info.cpu_model = _linux_cpu_model()
    src["cpu_model"] = "/proc/cpuinfo"
    nulls["chip"] = "no separate chip name on Linux (see cpu_model)"


def collect_machine() -> MachineInfo:
    """Hardware model/chip, CPU model, cores, memory, OS, kernel, power source."""
    info = MachineInfo()
    nulls = info.null_reasons
    src = info.sources
    uname = platform.uname()
    info.kernel = f"{uname.system} {uname.release} {uname.version}".strip()
    info.arch = uname.machine or None
    info.cores_logical = psutil.cpu_count(logical=True)
    info.cores_physical = psutil.cpu_count(logical=False)
    info.memory_bytes = int(psutil.virtual_memory().total)
    src.update(cores_logical="psutil.cpu_count", cores_physical="psutil.cpu_count", memory_bytes="psutil.virtual_memory")
    if sys.platform == "darwin":
        _darwin_machine(info)
    elif sys.platform.startswith("linux"):
        _linux_machine(info)
    else:
        info.os, info.os_version = uname.system, uname.release
        info.cpu_model = platform.processor() or None
    power = collect_power()
    info.power_source = power.get("power_source")
    info.battery_percent = power.get("battery_percent")
    src.update({k: v for k, v in power.get("sources", {}).items()})
    nulls.update(power.get("null_reasons", {}))
    for field in ("hardware_model", "chip", "cpu_model", "cores_logical", "cores_physical", "memory_bytes",
                  "os", "os_version", "kernel", "arch", "power_source", "battery_percent"):
        if getattr(info, field) is None and field not in nulls:
            nulls[field] = f"not reported by this OS ({sys.platform})"
    return info


# ----------------------------------------------------------------------------------------- power


class PowerFields(TypedDict):
    """The machine's power fields, with their sources and the reasons of the null ones."""

    power_source: str | None
    battery_percent: float | None
    null_reasons: dict[str, str]
    sources: dict[str, str]


def power_fields(status: PowerStatus) -> PowerFields:
    """`PowerStatus` → the machine fields (power_source, battery_percent) with sources and null reasons."""
    out = PowerFields(power_source=None, battery_percent=status.percent, null_reasons={}, sources={})
    if status.source == "unknown":
        out["null_reasons"]["power_source"] = status.reason or "the OS does not say"
    else:
        out["power_source"] = status.source
        out["sources"]["power_source"] = status.method or "benchd.sensors.power.status"
    if status.percent is None:
        out["null_reasons"]["battery_percent"] = "no battery reported"
    else:
        out["sources"]["battery_percent"] = status.method or "benchd.sensors.power.status"
    return out


def collect_power() -> PowerFields:
    from benchd.sensors.power.status import power_status

    return power_fields(power_status())


# ---------------------------------------------------------------------------------------- benchd


def collect_benchd() -> BenchdInfo:
    return BenchdInfo(version=benchd.__version__, python=platform.python_version(), executable=sys.executable)


# ----------------------------------------------------------------------------------------- models


class _Hash(Protocol):
    """A hashlib hash: fed bytes, read as hex."""

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


def _file_sha256(path: Path, h: _Hash | None = None) -> _Hash:
    h = h or hashlib.sha256()
    with open_regular(str(path)) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h


def _cache_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _dir_listing(p: Path) -> tuple[list[tuple[Path, str, int, int]], str]:
    """A model directory's regular files in hashing order, and its cache key (no file is read)."""
    files = sorted((f for f in p.rglob("*") if f.is_file()), key=lambda f: f.relative_to(p).as_posix())
    listing = []
    sig = hashlib.sha256()
    for f in files:
        st = f.stat()
        rel = f.relative_to(p).as_posix()
        listing.append((f, rel, st.st_size, st.st_mtime_ns))
        sig.update(f"{rel}\n{st.st_size}\n{st.st_mtime_ns}\n".encode())
    return listing, f"{p.resolve()}|dir|{sig.hexdigest()}"


def _cached_digest(key: str, compute: Callable[[], str], cache_file: Path | None) -> str:
    """`compute()` unless `cache_file` (JSON: key -> sha256) already holds `key`; stores new digests."""
    cache: dict[str, str] = {}
    if cache_file is not None:
        try:
            cache = json.loads(cache_file.read_text())
        except (OSError, ValueError):
            cache = {}
    digest = cache.get(key)
    if digest is not None:
        return digest
    digest = str(compute())
    if cache_file is not None:
        cache[key] = digest
        try:
            atomic_write(cache_file, json.dumps(cache, indent=0, sort_keys=True))
        except OSError:
            pass  # the cache is an optimisation; the digest itself is returned either way
    return digest


def hash_file(path: Path, cache_file: Path | None = None) -> str:
    """sha256 of a file's bytes (e.g. a runtime binary), cached by resolved path, size and mtime."""
    return _cached_digest(_cache_key(path), lambda: _file_sha256(path).hexdigest(), cache_file)


def hash_model(path: str | Path, cache_file: Path | None = None) -> ModelInfo:
    """Size and sha256 of a model file or MLX model directory, cached in `cache_file` keyed by path, size and
    mtime of every file (a changed file is hashed again)."""
    p = Path(path).expanduser()
    if not p.exists():
        return ModelInfo(path=str(path), kind="missing",
                         null_reasons={"bytes": "model path does not exist", "sha256": "model path does not exist"})
    if p.is_dir():
        listing, key = _dir_listing(p)

        def digest_dir() -> str:
            h = hashlib.sha256()
            for f, rel, size, _mtime in listing:
                h.update(f"{rel}\n{size}\n".encode())
                _file_sha256(f, h)
            return h.hexdigest()

        return ModelInfo(path=str(path), kind="dir", bytes=sum(x[2] for x in listing),
                         sha256=_cached_digest(key, digest_dir, cache_file), sha256_method=SHA256_DIR_METHOD,
                         files=len(listing))
    kind = kind_of(str(p))
    if kind != "file":  # a FIFO or a device is never read (it would block, or never end)
        why = f"model path is a {kind or 'path that cannot be read'}, not a regular file or directory"
        return ModelInfo(path=str(path), kind="missing", null_reasons={"bytes": why, "sha256": why})
    return ModelInfo(path=str(path), kind="file", bytes=p.stat().st_size, sha256=hash_file(p, cache_file),
                     sha256_method=SHA256_FILE_METHOD, files=1)
