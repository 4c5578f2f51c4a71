"""Process groups, ports and log tails: the OS-level helpers the supervisor and the orphan reaper share.
Reasons and facts: docs/runtimes.md#process-groups."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from pathlib import Path

import psutil

from benchd.config import HOST, is_loopback_host

LOG_TAIL_BYTES = 4000


def exit_status(returncode: int) -> str:
    """`exit N` or `signal N` (asyncio reports death by signal as -N)."""
    return f"signal {-returncode}" if returncode < 0 else f"exit {returncode}"


def read_log_tail(path: Path, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last `max_bytes` of a server log (reaching into `.log.1` right after a rotation)."""
    chunks: list[bytes] = []
    need = max_bytes
    for p in (path, path.with_name(path.name + ".1")):
        try:
            with p.open("rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - need))
                data = f.read()
        except OSError:
            continue
        chunks.insert(0, data)
        need -= len(data)
        if need <= 0:
            break
    return b"".join(chunks)[-max_bytes:].decode("utf-8", "replace")


def free_port() -> int:
    """A port nobody listens on right now (bind port 0 on 127.0.0.1; the kernel picks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def listens_on(pid: int, port: int) -> bool:
    """Whether `pid` or one of its descendants listens on `port` (who answers health is ours)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for p in procs:
        try:
            conns = p.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False


def port_listeners(port: int) -> tuple[set[int], bool]:
    """(pids listening on TCP `port`, whether a listener's process could not be seen): psutil's
    system-wide table where this user may read it (Linux; another user's socket has no pid there),
    else the sockets of each process this user may inspect (macOS needs root for the table)."""
    try:
        conns = [c for c in psutil.net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
        return {c.pid for c in conns if c.pid}, any(not c.pid for c in conns)
    except psutil.AccessDenied:
        pass
    found: set[int] = set()
    for p in psutil.process_iter():
        try:
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in p.net_connections(kind="tcp")):
                found.add(p.pid)
        except psutil.Error:
            continue
    return found, False


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket `pid` or one of its descendants listens on (IPv4 and IPv6)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    found: list[tuple[str, int]] = []
    for p in procs:
        try:
            conns = p.net_connections(kind="tcp")
        except psutil.Error:
            continue
        found += [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr]
    return found


def non_loopback(addresses: list[tuple[str, int]]) -> list[str]:
    """The non-loopback listening addresses as `ip:port` (an IPv4-mapped `::ffff:127.x` is loopback)."""
    return sorted({f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip, port in addresses
                   if not is_loopback_host(ip)})


def alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


async def wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Poll (no thread, no busy wait) until every process is gone or a zombie; returns survivors."""
    deadline = time.monotonic() + timeout_s
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def group_members(pgid: int, since: float) -> list[psutil.Process]:
    """Live processes in process group `pgid` created at or after `since` (psutil create_time)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.create_time() >= since - 0.01 and alive(p):
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def killpg(pgid: int, sig: int) -> None:
    """Signal a whole process group; a group already gone (or no longer ours) is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
