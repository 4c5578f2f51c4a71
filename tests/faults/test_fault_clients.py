"""Part 5 of issue 8: hostile or clumsy clients against a REAL benchd process.

- 50 clients at once, each submitting a job, tailing its event stream and cancelling it;
- clients that open a follow stream and never read, while a sweep produces thousands of events: the
  daemon stays responsive (health latency measured) and its memory bounded (RSS sampled), and it drops
  them after its write timeout;
- a client on another uid (refused by the peer check, with the file modes loosened so they cannot be
  what stops it);
- loosened state dir / logs / store modes fixed at the next start, a state dir that is a symlink or
  owned by another user refused.
Jobs that need a server use the FAKE server of `faultlib.FAKE_SERVER` (cheap cells; what is under test
is the daemon's handling of its clients).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from faultlib import (
    FAKE_MODEL,
    Follower,
    figure,
    read_events,
    rss_bytes,
    sweep_doc,
    wait_until,
    write_fake_server,
)

from benchctl.client import ApiError, Client

pytestmark = [pytest.mark.slow]

TERMINAL = ("job_finished", "job_failed", "job_cancelled")


def fake_sweep(fake: Path, probes: int, name: str, cooldown_s: float = 0.0, contexts: int = 1) -> dict[str, Any]:
    cand = {"id": "fake", "runtime": "llama-server", "model": FAKE_MODEL, "binary": str(fake),
            "ctx_size": 4096, "env": {"FAKE_MODE": "ok"}}
    return sweep_doc("/x", contexts=list(range(16, 16 + contexts)), gen_tokens=1, probes=probes, binary=None, candidates=[cand],
                     cooldown_s=cooldown_s, name=name)


def test_fifty_clients_submit_tail_and_cancel_at_once(run_daemon, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    fake = write_fake_server(tmp_path)
    n = 50
    results: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    start = threading.Barrier(n)

    def client(i: int) -> None:
        try:
            c = Client(d.socket, timeout=60)
            start.wait(timeout=60)
            # half the jobs can run now (queued behind each other), half wait for 2099
            later = "2099-01-01T00:00:00Z" if i % 2 else None
            job = c.submit(fake_sweep(fake, probes=20, name=f"c{i}", cooldown_s=0.1), not_before=later)["id"]
            seen: list[dict[str, Any]] = []

            def tail() -> None:
                f = Follower(d.socket, job)
                try:
                    while (ev := f.next(timeout=30)) is not None:
                        seen.append(ev)
                        if ev["type"] in TERMINAL:
                            return
                finally:
                    f.close()

            t = threading.Thread(target=tail)
            t.start()
            time.sleep(0.05 * (i % 7))
            try:
                state = c.cancel(job)["state"]
            except ApiError as exc:  # the job finished first: 409 is the right answer
                assert exc.status == 409 and exc.code == "not_cancellable", exc
                state = c.job(job)["state"]
            t.join(timeout=120)
            results[i] = {"job": job, "state": state, "events": seen}
        except Exception as exc:  # collected, asserted below
            errors.append(f"client {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    latencies = []
    while any(t.is_alive() for t in threads):
        h0 = time.monotonic()
        d.client().health()
        latencies.append(time.monotonic() - h0)
        time.sleep(0.1)
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    assert not errors, errors
    assert len(results) == n
    states: dict[str, int] = {}
    for r in results.values():
        states[r["state"]] = states.get(r["state"], 0) + 1
        assert r["state"] in ("cancelled", "succeeded"), r["state"]
        types = [e["type"] for e in r["events"]]
        stored_types = [e["type"] for e in read_events(d.state_dir, r["job"])]
        assert types and types[0] == "job_queued" and types[-1] in TERMINAL, (types, stored_types, r["job"])
        assert types[-1] == ("job_cancelled" if r["state"] == "cancelled" else "job_finished")
        stored = read_events(d.state_dir, r["job"])
        assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
        assert [e["seq"] for e in r["events"]] == [e["seq"] for e in stored]  # the tail saw every event
    health = d.client().health()
    assert health["pid"] == d.pid and health["running_job"] is None and health["queue_depth"] == 0
    assert "Traceback" not in d.output()
    print(f"\n[faults] 50 clients: done in {elapsed:.1f} s; end states {states}; health answered {len(latencies)} "
          f"times meanwhile, slowest {max(latencies) * 1000:.0f} ms")
    figure("concurrent_clients", n, add=False)
    figure("concurrent_clients_health_max_ms", round(max(latencies) * 1000), add=False)


def stuck_follower(sock: Path, job: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(str(sock))
    s.sendall(f"GET /v1/jobs/{job}/events?since=0&follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


def test_clients_that_never_read_block_nothing_and_are_dropped(run_daemon, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    fake = write_fake_server(tmp_path)
    c = d.client()
    job = c.submit(fake_sweep(fake, probes=1000, name="flood", contexts=8))["id"]  # up to 32,000 events with rows (~2 KB each)
    wait_until(lambda: len(read_events(d.state_dir, job)) > 400, timeout=120, what="events piling up")
    stuck = [stuck_follower(d.socket, job) for _ in range(5)]
    try:
        rss0 = rss_bytes(d.pid)
        samples, latencies = [], []
        t0 = time.monotonic()
        n0 = len(read_events(d.state_dir, job))
        while time.monotonic() - t0 < 12:
            h0 = time.monotonic()
            c.health()
            latencies.append(time.monotonic() - h0)
            samples.append(rss_bytes(d.pid))
            time.sleep(0.2)
        n1 = len(read_events(d.state_dir, job))
        assert n1 > n0 + 50, "the sweep stalled while clients did not read"
        assert max(latencies) < 5.0, f"health took {max(latencies):.2f} s with stuck followers"
        grew = max(samples) - rss0
        assert grew < 50 * 2**20, f"daemon RSS grew {grew / 2**20:.1f} MiB with 5 stuck followers"
        # the daemon drops them after its write timeout (api.WRITE_TIMEOUT_S = 30 s)
        wait_until(lambda: d.output().count("dropped: TimeoutError") >= 5, timeout=60, interval=0.5,
                   what="stuck followers dropped")
        print(f"\n[faults] 5 never-reading followers: {n1 - n0} events committed meanwhile, health max "
              f"{max(latencies) * 1000:.0f} ms, daemon RSS {rss0 / 2**20:.1f} -> max {max(samples) / 2**20:.1f} MiB; "
              f"all 5 dropped after the write timeout")
        figure("stuck_followers_health_max_ms", round(max(latencies) * 1000), add=False)
        figure("stuck_followers_rss_growth_mib", round(grew / 2**20, 1), add=False)
    finally:
        for s in stuck:
            s.close()
        with contextlib.suppress(ApiError):
            c.cancel(job)


_OTHER_UID_CLIENT = r"""
import os, socket, sys
os.setgid(65534); os.setgroups([]); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
body = b'{"sweep": {}}'
try:
    s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
except BrokenPipeError:
    pass
data = b""
while True:
    try:
        got = s.recv(65536)
    except ConnectionResetError:
        break
    if not got:
        break
    data += got
sys.stdout.write(data.decode(errors="replace"))
"""


@pytest.mark.root
def test_another_uid_is_refused(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    counts = d.client().jobs()
    for p in (d.base, d.state_dir):
        os.chmod(p, 0o755)
    os.chmod(d.socket, 0o777)  # the file modes let it in; the peer check must not
    out = subprocess.run([sys.executable, "-c", _OTHER_UID_CLIENT, str(d.socket)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("HTTP/1.1 403") and '"forbidden"' in out.stdout, out.stdout
    assert d.client().jobs() == counts
    assert d.client().health()["pid"] == d.pid
    figure("other_uid_refused", 1)


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_loosened_modes_are_fixed_at_start_and_foreign_state_dirs_refused(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=15) == 0
    state = d.state_dir
    os.chmod(state, 0o777)
    os.chmod(state / "logs", 0o777)
    os.chmod(state / "benchd.sqlite3", 0o666)
    d2 = run_daemon()
    assert mode(state) == 0o700 and mode(state / "logs") == 0o700
    assert mode(state / "benchd.sqlite3") == 0o600
    assert mode(d2.socket) == 0o600
    assert "fixed loose permissions" in d2.output()
    d2.signal(signal.SIGTERM)
    assert d2.wait(timeout=15) == 0
    # a symlinked state dir is refused (fixing it would mean trusting where it points)
    link = short_base / "l"
    link.symlink_to(state)
    out = subprocess.run([sys.executable, "-m", "benchd", "--state-dir", str(link)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2 and "not a directory" in out.stderr, out.stderr
    if os.geteuid() == 0:  # a state dir owned by someone else is refused, not "fixed"
        os.chown(state, 65534, 65534)
        out = subprocess.run([sys.executable, "-m", "benchd", "--state-dir", str(state)], capture_output=True,
                             text=True, timeout=30)
        os.chown(state, 0, 0)
        assert out.returncode == 2 and "owned by uid 65534" in out.stderr, out.stderr
    figure("permission_checks", 1)
