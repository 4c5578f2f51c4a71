"""Part 1 of issue 8: kill -9 `benchd` at seeded random points of a REAL sweep, restart it, and check that
nothing was lost, nothing doubled, the event sequence has no hole, and no server outlives its daemon.

How a kill is aimed: a thread follows the job's event stream on a raw socket; when the hook event of
the chosen phase arrives (`server_starting`, `probe_started`, `probe_finished`, `cooldown_started`)
the test waits a seeded random delay and sends SIGKILL. Where the kill really landed is then read
from the store (the last event committed before the kill), because a probe may finish before the
delay runs out:
    server start = last event `server_starting`;  streaming = last event `probe_started`;
    cooldown = last event `cooldown_started` (not right after a row);
    row commit = the row and its `probe_finished` were the last thing committed, or the next event
    (`cooldown_started` / `server_stopped`) followed it within ROW_COMMIT_WINDOW_S of the kill
    — a kill *inside* SQLite's commit cannot be aimed from outside the process; what is tested is
    that a kill as close to the commit as the stream allows loses and doubles nothing.
The loop runs until at least MIN_KILLS kills landed and at least MIN_PER_PHASE in every phase.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import time
from collections import Counter
from datetime import datetime
from typing import Any

import msgspec
import pytest
from faultlib import (
    Follower,
    figure,
    orphans,
    read_events,
    read_rows,
    sweep_doc,
    tagged_processes,
    wait_until,
)

pytestmark = [pytest.mark.slow]

MIN_KILLS = 20
MIN_PER_PHASE = 4
MAX_KILLS = 60
ROW_COMMIT_WINDOW_S = 0.05
COOLDOWN_S = 0.5
HOOKS = {"server_start": "server_starting", "streaming": "probe_started", "row_commit": "probe_finished",
         "cooldown": "cooldown_started"}


def delay_for(phase: str, rng: random.Random) -> float:
    return {
        "server_start": rng.uniform(0.0, 0.25),
        "streaming": rng.uniform(0.0, 0.1),
        "row_commit": rng.uniform(0.0, 0.003),
        "cooldown": rng.uniform(0.0, COOLDOWN_S * 0.7),
    }[phase]


def landed_phase(evs: list[dict[str, Any]], kill_wall: float) -> str:
    last = evs[-1]
    kind = last["type"]
    if kind == "server_starting":
        return "server_start"
    if kind == "probe_started":
        return "streaming"
    if kind == "probe_finished":
        return "row_commit"
    # Bookkeeping events that follow a row's commit at once (the cell's end, the next round, the cooldown):
    # a kill within the window after the commit still lands on the commit.
    trailing = ("cooldown_started", "server_stopped", "cell_finished", "round_started", "context_finished")
    i = len(evs) - 1
    while i > 0 and evs[i]["type"] in trailing:
        i -= 1
    if i < len(evs) - 1 and evs[i]["type"] == "probe_finished":
        committed = datetime.fromisoformat(evs[i]["time"]).timestamp()
        if kill_wall - committed <= ROW_COMMIT_WINDOW_S:
            return "row_commit"
    if kind == "cooldown_started":
        return "cooldown"
    return f"other:{kind}"


def plan(rng: random.Random) -> list[str]:
    order = [p for p in HOOKS for _ in range(MIN_KILLS // len(HOOKS) + 1)]
    rng.shuffle(order)
    return order


def row_key(r: Any) -> tuple[Any, ...]:
    return (r.candidate, r.context, r.kind, r.probe)


def test_kill9_at_random_points_loses_nothing(run_daemon, tiny_models, llama_server_bin, fault_seed) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(fault_seed)
    tag = f"crash-{fault_seed}-{os.getpid()}"
    d = run_daemon()

    def new_job() -> str:
        doc = sweep_doc(tiny_models.target, contexts=[32, 64, 96, 128], gen_tokens=400, probes=5,
                        binary=llama_server_bin, cooldown_s=COOLDOWN_S, tag=tag, name="crash")
        return str(d.client().submit(doc)["id"])

    jobs = [new_job()]
    landed: Counter[str] = Counter()
    kills: list[dict[str, Any]] = []
    committed_before: dict[tuple[str, tuple[Any, ...]], bytes] = {}
    orphans_left = 0
    intended = plan(rng)
    t_start = time.monotonic()

    def quota_met() -> bool:
        return len(kills) >= MIN_KILLS and all(landed[p] >= MIN_PER_PHASE for p in HOOKS)

    while not quota_met():
        assert len(kills) < MAX_KILLS, f"kill quota not met after {MAX_KILLS} kills: {dict(landed)}"
        if intended:
            phase = intended.pop()
        else:  # top up the phase that is furthest behind
            phase = min(HOOKS, key=lambda p: landed[p])
        job = jobs[-1]
        last = read_events(d.state_dir, job)[-1]
        if last["type"] in ("job_finished", "job_failed", "job_cancelled"):  # it ended as the daemon died
            assert last["type"] == "job_finished", last
            jobs.append(new_job())
            intended.append(phase)
            continue
        since = last["seq"]
        follower = Follower(d.socket, job, since=since)
        try:
            while True:
                ev = follower.next(timeout=120)
                assert ev is not None, ("the event stream ended while the daemon should be alive",
                                        d.proc.poll(), d.output()[-3000:])
                if ev["type"] in ("job_finished", "job_failed", "job_cancelled"):
                    assert ev["type"] == "job_finished", ev
                    jobs.append(new_job())
                    break
                if ev["type"] == HOOKS[phase]:
                    time.sleep(delay_for(phase, rng))
                    kill_wall = time.time()
                    d.proc.send_signal(signal.SIGKILL)
                    d.proc.wait(timeout=10)
                    break
        finally:
            follower.close()
        if d.proc.poll() is None:
            continue  # the job finished: a new one was submitted, aim again
        evs = read_events(d.state_dir, job)
        where = landed_phase(evs, kill_wall)
        landed[where] += 1
        kills.append({"intended": phase, "landed": where, "last_event": evs[-1]["type"], "seq": evs[-1]["seq"]})
        for r in read_rows(d.state_dir, job):
            committed_before.setdefault((job, row_key(r)), msgspec.json.encode(r))
        # restart on the same state dir; the new daemon must reap what the dead one left
        d = run_daemon()
        left = orphans(tag, d.pid)
        orphans_left += len(left)
        assert not left, ("servers of the killed daemon survived the restart", [(p.pid, p.ppid()) for p in left],
                          kills[-1], sorted(x.name for x in (d.state_dir / "servers").glob("*")), d.output()[-2500:])

    # let the last job run to its end on the final daemon
    def ended(job: str) -> bool:
        return read_events(d.state_dir, job)[-1]["type"] in ("job_finished", "job_failed", "job_cancelled")

    for job in jobs:
        wait_until(functools.partial(ended, job), timeout=300, interval=0.2, what=f"job {job} to end")
    lost = duplicates = 0
    for job in jobs:
        evs = read_events(d.state_dir, job)
        assert evs[-1]["type"] == "job_finished", evs[-1]
        seqs = [e["seq"] for e in evs]
        assert seqs == list(range(1, len(seqs) + 1)), "event seq has gaps or duplicates"
        rows = read_rows(d.state_dir, job)
        got = d.client().job(job)
        assert got["state"] == "succeeded"
        total = got["progress"]["total"]
        keys = Counter(row_key(r) for r in rows)
        assert len(keys) == total and set(keys.values()) == {1}
        assert all(r.status == "ok" for r in rows), [r.error for r in rows if r.status != "ok"]
        finished = Counter(row_key(msgspec.convert(e["payload"]["row"], type=type(rows[0])))
                           for e in evs if e["type"] == "probe_finished"
                           and e["payload"]["row"]["status"] != "aborted")
        duplicates += sum(n - 1 for n in finished.values() if n > 1)
        assert set(finished) == set(keys)
        now = {row_key(r): msgspec.json.encode(r) for r in rows}
        for (j, key), blob in committed_before.items():
            if j == job and now.get(key) != blob:
                lost += 1
    assert lost == 0 and duplicates == 0
    wait_until(lambda: not tagged_processes(tag), timeout=15, what="the last job's servers to stop")
    stale = sorted(p.name for p in (d.state_dir / "servers").glob("*.json"))
    assert not stale, f"server records left in <state>/servers/: {stale}"
    elapsed = time.monotonic() - t_start
    print(f"\n[faults] kill -9: {len(kills)} kills over {len(jobs)} job(s) in {elapsed:.0f} s; landed {dict(landed)}")
    for k in kills:
        print(f"  intended {k['intended']:<12} landed {k['landed']:<22} (last event #{k['seq']} {k['last_event']})")
    figure("kills_survived", len(kills))
    figure("kills_by_phase", dict(landed))
    figure("rows_committed_before_kills", len(committed_before))
    figure("rows_lost", lost)
    figure("duplicate_rows", duplicates)
    figure("orphan_servers_after_restart", orphans_left)


def test_kill9_between_the_last_event_and_the_runbook(run_daemon, tiny_models, llama_server_bin) -> None:  # type: ignore[no-untyped-def]
    """The runbook is written after `job_finished`; a kill -9 in between must not leave a finished job
    without its runbook for ever: the next daemon writes the missing one."""
    d = run_daemon()
    doc = sweep_doc(tiny_models.target, contexts=[32], gen_tokens=8, probes=2, binary=llama_server_bin, name="rb")
    job = d.client().submit(doc)["id"]
    f = Follower(d.socket, job)
    try:
        while (ev := f.next(timeout=120)) is not None:
            if ev["type"] == "job_finished":
                d.proc.send_signal(signal.SIGKILL)
                break
    finally:
        f.close()
    d.proc.wait(timeout=10)
    d2 = run_daemon()
    got = wait_until(lambda: (j := d2.client().job(job))["runbook_id"] and j, timeout=60, what="the runbook")
    assert got["state"] == "succeeded"
    assert (d2.state_dir / "runbooks" / f"{got['runbook_id']}.json").exists()
    assert d2.client().request("GET", f"/v1/runbooks/{got['runbook_id']}")["job"]["id"] == job
    figure("kills_survived", 1)


def test_a_server_spawned_but_not_yet_recorded_is_reaped(run_daemon, short_base, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression (seed 77 of the kill loop): a kill -9 between the spawn and the pid record left a
    server nobody knew about. The supervisor now writes `pending-<token>.json` BEFORE the spawn and puts
    the token in the server's environment; the next daemon finds the process by it and kills its group.
    Here the dead daemon's state is built by hand (a pending record and a live process carrying the
    token, with a child in its group), then a real benchd starts on it."""
    import json
    import subprocess

    from benchd.servers.records import PENDING_PREFIX, SERVER_TOKEN_ENV

    state = short_base / "s"
    servers = state / "servers"
    servers.mkdir(parents=True, mode=0o700)
    token = "feedc0de12345678"
    proc = subprocess.Popen(["sh", "-c", "sleep 600 & exec sleep 601"], start_new_session=True,
                            env={**os.environ, SERVER_TOKEN_ENV: token})
    try:
        def both() -> list[Any] | None:
            group = [p for p in __import__("psutil").process_iter() if _pgid(p.pid) == proc.pid]
            return group if len(group) == 2 else None

        group = wait_until(both, timeout=30, what="the server's two processes started")
        (servers / f"{PENDING_PREFIX}{token}.json").write_text(json.dumps(
            {"token": token, "argv": ["llama-server"], "job": "j", "candidate": "c"}))
        d = run_daemon()
        wait_until(lambda: all(not _alive(p) for p in group), timeout=15, what="the unrecorded server's group gone")
        assert not list(servers.glob("*.json"))
        assert "left by a previous daemon" in d.output()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def test_the_pending_record_exists_before_the_spawn(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from benchd.config import Config
    from benchd.schemas import Candidate
    from benchd.servers import supervisor as sup_mod
    from benchd.servers.records import PENDING_PREFIX, SERVER_TOKEN_ENV

    cfg = Config.resolve(state_dir=tmp_path / "s", cache_dir=tmp_path / "c")
    seen: dict[str, Any] = {}

    async def fake_spawn(*argv: str, env: dict[str, str], **kw: Any) -> Any:
        seen["token"] = env[SERVER_TOKEN_ENV]
        seen["pending"] = sorted(p.name for p in cfg.servers_dir.glob("*.json"))
        raise OSError(8, "Exec format error")  # then the spawn fails: the pending record must go

    monkeypatch.setattr(asyncio, "create_subprocess_exec", fake_spawn)
    binary = tmp_path / "srv"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    cand = Candidate(id="c", runtime="llama-server", model="/m.gguf", binary=str(binary))
    with pytest.raises(sup_mod.ServerStartError):
        asyncio.run(sup_mod.Supervisor(cfg).start("job", cand, 256, startup_timeout_s=5))
    assert seen["pending"] == [f"{PENDING_PREFIX}{seen['token']}.json"]
    assert not list(cfg.servers_dir.glob("*.json"))


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _alive(p: Any) -> bool:
    import psutil

    try:
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False
