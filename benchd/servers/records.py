"""Server records in `<state>/servers/` and the reaping of servers a dead daemon left running.
Reasons and facts: docs/runtimes.md#server-records."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Container
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import psutil

from benchd.atomic import atomic_write
from benchd.servers.procgroup import alive, group_members, killpg, wait_gone

if TYPE_CHECKING:
    from benchd.servers.server import Server

SERVER_TOKEN_ENV = "BENCHD_SERVER_TOKEN"
PENDING_PREFIX = "pending-"


def write_record(servers_dir: Path, server: Server) -> None:
    """`<pid>.json` for a spawned server (atomically: a reaper never reads half a record)."""
    servers_dir.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": server.pid,
        "pgid": server.pgid,
        "start_time": server.create_time,
        "argv": server.argv,
        "job": server.job,
        "candidate": server.candidate.id,
        "port": server.port,
        "log_path": str(server.log_path),
    }
    atomic_write(server.record_path, msgspec.json.encode(record))


def write_pending(servers_dir: Path, token: str, argv: list[str], job: str, candidate: str) -> Path:
    """`pending-<token>.json`, written before the spawn of the server that carries `token`."""
    servers_dir.mkdir(parents=True, exist_ok=True)
    path = servers_dir / f"{PENDING_PREFIX}{token}.json"
    atomic_write(path, msgspec.json.encode({"token": token, "argv": argv, "job": job, "candidate": candidate}))
    return path


def read_pending(path: Path) -> dict[str, Any] | None:
    """A pending record, or None (and the file removed) when it cannot be read."""
    try:
        rec = msgspec.json.decode(path.read_bytes())
        str(rec["token"])
        return rec  # type: ignore[no-any-return]
    except (OSError, msgspec.DecodeError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return None


async def reap_pending(path: Path, own_tokens: Container[str], grace_s: float) -> dict[str, Any] | None:
    """A server whose spawn a dead daemon recorded only as pending: find it by its token, kill its group.

    None for a record of a spawn this daemon has in progress (its token is in `own_tokens`)."""
    rec = read_pending(path)
    if rec is None:
        return {"path": str(path), "action": "unreadable"}
    token = str(rec["token"])
    if token in own_tokens:
        return None
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(SERVER_TOKEN_ENV) == token:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    members: list[psutil.Process] = []
    for p in found:
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            pgid = os.getpgid(p.pid)
            members += group_members(pgid, p.create_time())
            killpg(pgid, signal.SIGTERM)
    survivors = await wait_gone(found + members, grace_s)
    for p in survivors:
        with contextlib.suppress(psutil.Error):
            p.kill()
    await wait_gone(survivors, 5.0)
    path.unlink(missing_ok=True)  # noqa: ASYNC240 (a tiny file, and reaping runs before the API serves)
    return {**rec, "pid": found[0].pid if found else None, "action": "killed" if found else "gone"}


async def _reap_group(pid: int, pgid: int, start: float, grace_s: float) -> str:
    """Kills the recorded group if its leader still runs: "killed", "gone" or "pid-reused"."""
    try:
        proc = psutil.Process(pid)
        same = abs(proc.create_time() - start) < 0.01 and os.getpgid(pid) == pgid
    except (psutil.Error, ProcessLookupError):
        return "gone"
    if not same:
        return "pid-reused"
    if not alive(proc):
        return "gone"
    members = group_members(pgid, start)
    killpg(pgid, signal.SIGTERM)
    survivors = await wait_gone(members, grace_s)
    for p in survivors:
        with contextlib.suppress(psutil.Error):
            p.kill()
    await wait_gone(survivors, 5.0)
    return "killed"


async def reap_orphans(
    servers_dir: Path, *, own_pids: Container[int], own_tokens: Container[str], grace_s: float
) -> list[dict[str, Any]]:
    """Kill servers a previous daemon left behind; one entry per record: its fields plus `action` ("killed",
    "gone", "pid-reused", "unreadable"). `own_pids` / `own_tokens` (live collections) are left alone."""
    # Blocking file calls on the loop are fine here: a few tiny files, and reaping runs before the API serves.
    out: list[dict[str, Any]] = []
    if not servers_dir.is_dir():  # noqa: ASYNC240
        return out
    for path in sorted(servers_dir.glob(PENDING_PREFIX + "*.json")):  # noqa: ASYNC240
        entry = await reap_pending(path, own_tokens, grace_s)
        if entry is not None:
            out.append(entry)
    for path in sorted(servers_dir.glob("*.json")):  # noqa: ASYNC240
        if path.name.startswith(PENDING_PREFIX):
            continue
        try:
            rec = msgspec.json.decode(path.read_bytes())
            pid, pgid, start = int(rec["pid"]), int(rec["pgid"]), float(rec["start_time"])
        except (OSError, msgspec.DecodeError, KeyError, TypeError, ValueError):
            out.append({"path": str(path), "action": "unreadable"})
            path.unlink(missing_ok=True)
            continue
        if pid in own_pids:
            continue
        action = await _reap_group(pid, pgid, start, grace_s)
        path.unlink(missing_ok=True)
        out.append({**rec, "action": action})
    return out
