"""One benchd per state dir: the state dir's modes, the flock guard (released by the kernel, its file never
deleted), the socket file. Reasons and facts: docs/architecture.md#one-daemon-per-state-dir."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import stat
from pathlib import Path

from benchd.config import MAX_SOCKET_PATH_BYTES, Config
from benchd.errors import BenchdError

log = logging.getLogger("benchd.daemon.instance")


class AlreadyRunning(Exception):
    """Another benchd holds this state dir (benchd exits 3)."""

    def __init__(self, state_dir: Path, pid: str) -> None:
        who = f" (pid {pid})" if pid else ""
        super().__init__(f"another benchd{who} is running on {state_dir}")
        self.pid = pid


def ensure_private_dir(path: Path) -> list[str]:
    """Create `path` 0700 if missing, else tighten loosened modes; returns what was fixed. Raises BenchdError
    for a non-directory, a symlink, or another user's directory."""
    fixed: list[str] = []
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # not a directory: reported below
    except OSError as exc:
        raise BenchdError("bad_state_dir", f"cannot create {path}: {exc.strerror}", "state_dir") from exc
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise BenchdError("bad_state_dir", f"{path} is not a directory", "state_dir")
    if st.st_uid != os.getuid():
        raise BenchdError(
            "bad_state_dir", f"{path} is owned by uid {st.st_uid}, not by this user ({os.getuid()})", "state_dir"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        os.chmod(path, 0o700)
        fixed.append(f"{path}: mode {mode:04o} -> 0700")
    return fixed


def check_socket_path(sock_path: Path) -> None:
    if len(os.fsencode(sock_path)) > MAX_SOCKET_PATH_BYTES:
        raise BenchdError(
            "bad_socket",
            f"socket path is {len(os.fsencode(sock_path))} bytes, over the {MAX_SOCKET_PATH_BYTES}-byte"
            f" limit of Unix sockets: {sock_path} (use --socket with a shorter path)",
            "socket",
        )


class InstanceGuard:
    """The flock that makes a state dir single-daemon. `acquire()` before `bind_socket()`."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        path = self.config.instance_lock_path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise AlreadyRunning(self.config.state_dir, pid) from exc
            raise
        try:  # the pid is a note for humans and for AlreadyRunning's message: a full disk must not stop us
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            log.warning("cannot write the pid to %s: %s", path, exc.strerror or exc)
        os.fchmod(fd, 0o600)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def remove_stale_socket(sock_path: Path) -> bool:
    """Remove a socket file a dead daemon left. Only call this while holding the InstanceGuard.
    Refuses to delete anything that is not a socket (a mistyped --socket must not eat a file)."""
    try:
        st = os.lstat(sock_path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise BenchdError("bad_socket", f"{sock_path} exists and is not a socket; refusing to replace it", "socket")
    if _answers(sock_path):
        # Our flock is held, so this is a daemon of ANOTHER state dir sharing the socket path (--socket).
        raise AlreadyRunning(sock_path, "")
    sock_path.unlink()
    log.info("removed stale socket %s", sock_path)
    return True


def _answers(sock_path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fsencode(sock_path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def bind_socket(sock_path: Path, backlog: int = 128) -> socket.socket:
    """Bind a listening Unix socket with mode 0600 set before it accepts anything."""
    check_socket_path(sock_path)
    if sock_path.parent != Path("/"):
        sock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    remove_stale_socket(sock_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(os.fsencode(sock_path))
        finally:
            os.umask(old)
        os.chmod(sock_path, 0o600)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def unlink_socket(sock_path: Path) -> None:
    try:
        if stat.S_ISSOCK(os.lstat(sock_path).st_mode):
            sock_path.unlink()
    except FileNotFoundError:
        pass
