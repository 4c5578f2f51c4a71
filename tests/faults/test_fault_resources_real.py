"""Part 3 of issue 8: a full disk under the state dir, through a REAL benchd process running the pinned
llama-server on the tiny model. The disk is a real tmpfs of a few MB mounted on the state dir (needs root;
CI runs as root) and filled by the test."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
from faultlib import figure, read_events, read_rows, sweep_doc, tagged_processes, wait_until

from tests.faults.test_fault_resources import TERMINAL

pytestmark = [pytest.mark.slow]


@pytest.fixture
def small_tmpfs(short_base: Path):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt = short_base / "s"
    mnt.mkdir(mode=0o700)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write zeros until the file system says ENOSPC; returns the filler file."""
    path = folder / "filler"
    block = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:  # unbuffered: nothing left to flush (and fail) at close
        try:
            while True:
                f.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return path


@pytest.mark.root
def test_full_disk_is_reported_rows_kept_and_the_job_recovers(
        small_tmpfs: Path, run_daemon, tiny_models, llama_server_bin) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    assert d.state_dir == small_tmpfs
    tag = f"fulldisk-{os.getpid()}"
    doc = sweep_doc(tiny_models.target, contexts=[32, 48], gen_tokens=16, probes=8, binary=llama_server_bin,
                    tag=tag, cooldown_s=0.2)
    c = d.client()
    job = c.submit(doc)["id"]
    total = c.job(job)["progress"]["total"]
    wait_until(lambda: len(read_rows(d.state_dir, job)) >= 3, timeout=120, what="3 rows committed")
    filler = fill(small_tmpfs)
    before = {(r.candidate, r.context, r.kind, r.probe): r for r in read_rows(d.state_dir, job)}
    health = wait_until(lambda: (h := c.health())["store_error"] and h, timeout=60,
                        what="/v1/health to report the store error")
    assert "full" in health["store_error"].lower(), health
    got = c.job(job)
    assert got["error"] and "full" in got["error"].lower(), got  # the job says why it stopped moving
    assert got["state"] in ("running", "interrupted"), got
    print(f"\n[faults] full disk: health store_error={health['store_error']!r}; job {got['state']}: {got['error']!r}")
    # every row committed before the disk filled is still there
    now = {(r.candidate, r.context, r.kind, r.probe): r for r in read_rows(d.state_dir, job)}
    assert all(now.get(k) == v for k, v in before.items())
    # space returns: the daemon clears the error and the job runs to its end
    filler.unlink()
    wait_until(lambda: read_events(d.state_dir, job)[-1]["type"] in TERMINAL, timeout=240, interval=0.2,
               what="the job to end after space returned")
    evs = read_events(d.state_dir, job)
    assert evs[-1]["type"] == "job_finished"
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    rows = read_rows(d.state_dir, job)
    assert len(rows) == total and all(r.status == "ok" for r in rows), [r.error for r in rows]
    final = {(r.candidate, r.context, r.kind, r.probe): r for r in rows}
    assert all(final[k] == v for k, v in before.items())
    assert c.health()["store_error"] is None
    assert c.job(job)["state"] == "succeeded"
    wait_until(lambda: not tagged_processes(tag), timeout=10, what="servers gone")
    # a daemon (re)started on a full disk: one clear line and exit 1, no traceback (its supervisor
    # retries); once space returns it starts and every job is still there
    d.signal(signal.SIGTERM)
    assert d.wait(timeout=15) == 0
    filler = fill(small_tmpfs)
    d2 = run_daemon(wait=False)
    assert d2.wait(timeout=30) == 1
    out = d2.output()
    assert "cannot start on" in out and "Traceback" not in out, out[-2000:]
    filler.unlink()
    d3 = run_daemon()
    assert d3.client().job(job)["state"] == "succeeded"
    assert len(read_rows(d3.state_dir, job)) == total
    figure("full_disk_rows_kept", len(before))
