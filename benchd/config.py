"""Paths and defaults, resolved once into a frozen Config: state dir (--state-dir, $BENCHD_STATE_DIR, the
platform default), socket, cache dir. Creates no directory (`instance.py` does)."""

from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import dataclass
from pathlib import Path

#: Every server benchd starts binds here, and every request benchd sends goes here: loopback only.
HOST = "127.0.0.1"


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback IP literal (127.0.0.0/8, ::1, IPv4-mapped ::ffff:127.x), without a DNS lookup."""
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


#: Server logs are capped at this size, then rotated once (`.log.1`).
LOG_CAP_BYTES = 8 * 1024 * 1024

#: sockaddr_un.sun_path is 108 bytes on Linux and 104 on macOS, including the NUL: benchd (which refuses
#: to bind a longer path) and benchctl (which says so instead of failing to connect) both use the smaller.
MAX_SOCKET_PATH_BYTES = 103


def default_state_dir() -> Path:
    env = os.environ.get("BENCHD_STATE_DIR")
    if env:
        return Path(env).expanduser().absolute()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "benchd"
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "benchd"


def default_cache_dir() -> Path:
    env = os.environ.get("BENCHD_CACHE_DIR")
    if env:
        return Path(env).expanduser().absolute()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "benchd"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "benchd"


def default_socket(state_dir: Path) -> Path:
    env = os.environ.get("BENCHD_SOCKET")
    return Path(env).expanduser().absolute() if env else state_dir / "benchd.sock"


@dataclass(frozen=True)
class Config:
    state_dir: Path
    socket: Path
    cache_dir: Path
    log_level: str = "info"

    @classmethod
    def resolve(
        cls,
        state_dir: str | Path | None = None,
        socket: str | Path | None = None,
        cache_dir: str | Path | None = None,
        log_level: str = "info",
    ) -> Config:
        state = Path(state_dir).expanduser().absolute() if state_dir else default_state_dir()
        sock = Path(socket).expanduser().absolute() if socket else default_socket(state)
        cache = Path(cache_dir).expanduser().absolute() if cache_dir else default_cache_dir()
        return cls(state_dir=state, socket=sock, cache_dir=cache, log_level=log_level)

    # Layout of the state dir (the shared contract).
    @property
    def db_path(self) -> Path:
        return self.state_dir / "benchd.sqlite3"

    @property
    def instance_lock_path(self) -> Path:
        return self.state_dir / "benchd.pid.lock"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def server_log_path(self, job: str, candidate: str) -> Path:
        return self.logs_dir / job / f"{candidate}.log"

    @property
    def daemon_log_path(self) -> Path:
        return self.logs_dir / "benchd.log"

    @property
    def servers_dir(self) -> Path:
        """One JSON record per server this state dir's daemon started (orphan cleanup)."""
        return self.state_dir / "servers"

    @property
    def runbooks_dir(self) -> Path:
        return self.state_dir / "runbooks"

    @property
    def locked_path(self) -> Path:
        return self.state_dir / "locked.toml"

    @property
    def hf_cache_dir(self) -> Path:
        """An existing, empty HF cache for the MLX servers (they answer 500 without one)."""
        return self.cache_dir / "hf-hub"
