"""The peer uid of a Unix socket connection, from the kernel; on the floor for the daemon's gate and
`benchctl doctor --platform-report`. Reasons and facts: docs/architecture.md#peer-credentials."""

from __future__ import annotations

import socket
import struct
import sys
from typing import Protocol

# <sys/un.h> on Darwin: SOL_LOCAL = 0, LOCAL_PEERCRED = 0x001; <sys/ucred.h>: XUCRED_VERSION = 0, NGROUPS = 16.
SOL_LOCAL = 0
LOCAL_PEERCRED = 0x001
XUCRED_VERSION = 0
XUCRED_NGROUPS = 16
XUCRED_FORMAT = "=IIh2x16I"  # native byte order, explicit padding: matches the C layout on arm64/x86-64
XUCRED_SIZE = struct.calcsize(XUCRED_FORMAT)  # 76

UCRED_FORMAT = "=iII"  # pid_t (signed), uid_t, gid_t
UCRED_SIZE = struct.calcsize(UCRED_FORMAT)  # 12


class PeerCredError(OSError):
    """The kernel would not say who the peer is: the connection must be refused, not trusted."""


def parse_ucred(raw: bytes) -> tuple[int, int, int]:
    """Linux `struct ucred` → (pid, uid, gid)."""
    if len(raw) < UCRED_SIZE:
        raise PeerCredError(f"short ucred ({len(raw)} bytes)")
    pid, uid, gid = struct.unpack_from(UCRED_FORMAT, raw)
    return int(pid), int(uid), int(gid)


def parse_xucred(raw: bytes) -> int:
    """macOS `struct xucred` → the peer's uid (effective uid, as getpeereid reports it)."""
    if len(raw) < 8:
        raise PeerCredError(f"short xucred ({len(raw)} bytes)")
    version, uid = struct.unpack_from("=II", raw)
    if version != XUCRED_VERSION:
        raise PeerCredError(f"unknown xucred version {version}")
    return int(uid)


class PeerSocket(Protocol):
    """What the peer lookup reads: a socket's options (a socket, or uvloop's PseudoSocket)."""

    def getsockopt(self, level: int, optname: int, buflen: int, /) -> bytes: ...


def _linux_peer_uid(sock: PeerSocket) -> int:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED_SIZE)
    return parse_ucred(raw)[1]


def _darwin_peer_uid(sock: PeerSocket) -> int:
    raw = sock.getsockopt(SOL_LOCAL, LOCAL_PEERCRED, XUCRED_SIZE)
    return parse_xucred(raw)


def peer_uid(sock: PeerSocket | None) -> int:
    """The uid of the process connected to `sock` (a socket or uvloop's PseudoSocket).

    Raises PeerCredError when it cannot be determined (the caller refuses the connection then)."""
    if sock is None:
        raise PeerCredError("no socket on this transport")
    try:
        if sys.platform.startswith("linux"):
            return _linux_peer_uid(sock)
        if sys.platform == "darwin":
            return _darwin_peer_uid(sock)
    except OSError as exc:
        raise PeerCredError(f"peer credentials unavailable: {exc}") from exc
    raise PeerCredError(f"peer credentials not implemented on {sys.platform}")
