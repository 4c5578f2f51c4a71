"""Part 3 of issue 8: a chatty server's log and the daemon's own memory over a 5,000-cell sweep — both
through a REAL benchd process (the full disk, with a real llama-server, is in test_fault_resources_real.py).

The chatty server and the 5,000-cell sweep use the FAKE server of `faultlib.FAKE_SERVER` as the
candidate's binary: a real llama-server cannot be made to log megabytes, and on this shared 2-core
machine a real tiny llama-server probe costs ~90 ms (5,000 cells ≈ 8 min, measured with the same sweep
shape) against ~17 ms with the fake. The memory figure is the DAEMON's RSS (psutil, sampled every
0.25 s), whose work per cell — engine, cooldown, prompt sizing through /tokenize, streamed probe, row +
event commit, event stream to a follower — is the real code either way.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from faultlib import (
    FAKE_MODEL,
    Follower,
    figure,
    read_events,
    read_rows,
    rss_bytes,
    sweep_doc,
    write_fake_server,
)

from benchd.config import LOG_CAP_BYTES

pytestmark = [pytest.mark.slow]

TERMINAL = ("job_finished", "job_failed", "job_cancelled")


# ------------------------------------------------------------------------------------------ chatty server


def test_chatty_server_log_is_capped_and_rotated(run_daemon, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    fake = write_fake_server(tmp_path)
    chatty_mb = 3 * LOG_CAP_BYTES / 1024 / 1024
    cand = {"id": "chatty", "runtime": "llama-server", "model": FAKE_MODEL, "binary": str(fake),
            "ctx_size": 4096, "env": {"FAKE_MODE": "chatty", "FAKE_CHATTY_MB": str(chatty_mb), "FAKE_CHATTY_MBPS": "8"}}
    # enough cells that the server lives while it writes its megabytes
    doc = sweep_doc("/x", contexts=[16], gen_tokens=1, probes=400, binary=None, candidates=[cand], cooldown_s=0.02)
    job = d.client().submit(doc)["id"]
    log = d.state_dir / "logs" / job / "chatty.log"
    rotated = log.with_name(log.name + ".1")
    sizes: list[tuple[int, int]] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            a = log.stat().st_size
        except OSError:
            a = 0
        try:
            b = rotated.stat().st_size
        except OSError:
            b = 0
        sizes.append((a, b))
        if read_events(d.state_dir, job)[-1]["type"] in TERMINAL:
            break
        time.sleep(0.05)
    text = log.read_text(errors="replace") + (rotated.read_text(errors="replace") if rotated.exists() else "")
    assert "chatty log line" in text
    max_log = max(a for a, _ in sizes)
    max_total = max(a + b for a, b in sizes)
    print(f"\n[faults] chatty server wrote {chatty_mb:.0f} MB at 8 MB/s; largest .log seen {max_log / 2**20:.2f} MiB, "
          f"largest .log + .log.1 {max_total / 2**20:.2f} MiB (cap {LOG_CAP_BYTES / 2**20:.0f} MiB, "
          f"{len(sizes)} samples)")
    assert rotated.exists(), "the log was never rotated"
    assert max_log <= LOG_CAP_BYTES, f"server log grew to {max_log} bytes, over the {LOG_CAP_BYTES}-byte cap"
    assert max_total <= 2 * LOG_CAP_BYTES
    figure("chatty_log_max_bytes", max_log, add=False)
    figure("log_cap_bytes", LOG_CAP_BYTES, add=False)


# ------------------------------------------------------------------------------------------ memory


@pytest.mark.timeout(2400)  # 5,000 probes take minutes; on a loaded 2-core machine, tens of them
def test_daemon_rss_over_a_5000_cell_sweep(run_daemon, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    fake = write_fake_server(tmp_path)
    cand = {"id": "cheap", "runtime": "llama-server", "model": FAKE_MODEL, "binary": str(fake),
            "ctx_size": 4096, "env": {"FAKE_MODE": "ok"}}
    doc = sweep_doc("/x", contexts=list(range(16, 26)), gen_tokens=1, probes=500, binary=None, candidates=[cand])
    c = d.client()
    rss0 = rss_bytes(d.pid)
    t0 = time.monotonic()
    job = c.submit(doc)["id"]
    assert c.job(job)["progress"]["total"] == 5000
    samples: list[int] = []
    n_events = [0]

    def follow() -> None:  # a client reading the whole event stream, as `benchctl tail` would
        f = Follower(d.socket, job)
        try:
            while (ev := f.next(timeout=1800)) is not None:
                n_events[0] += 1
                if ev["type"] in TERMINAL:
                    return
        finally:
            f.close()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    while reader.is_alive() and time.monotonic() - t0 < 1800:
        samples.append(rss_bytes(d.pid))
        c.job(job)  # the API path too
        time.sleep(0.25)
    reader.join(timeout=5)
    # the runbook (JSON, Markdown, charts) is written after the terminal event: part of the daemon's work
    t_end = time.monotonic()
    while time.monotonic() - t_end < 180:
        samples.append(rss_bytes(d.pid))
        job_now = c.job(job)
        if job_now["runbook_id"] or (job_now["error"] and "runbook" in job_now["error"]):
            break
        time.sleep(0.25)
    for _ in range(8):  # and a moment after it
        samples.append(rss_bytes(d.pid))
        time.sleep(0.25)
    runbook = c.job(job)["runbook_id"]
    elapsed = time.monotonic() - t0
    rows = read_rows(d.state_dir, job)
    peak = max(samples)
    print(f"\n[faults] 5,000-cell sweep (fake server, real daemon): {len(rows)} rows, {n_events[0]} events "
          f"streamed in {elapsed:.0f} s; daemon RSS {rss0 / 2**20:.1f} MiB at start, peak "
          f"{peak / 2**20:.1f} MiB, last {samples[-1] / 2**20:.1f} MiB ({len(samples)} samples, through the "
          f"runbook {runbook} written {time.monotonic() - t_end:.0f} s after the last event)")
    assert len(rows) == 5000 and all(r.status == "ok" for r in rows[:50])
    # The daemon holds what a cell's series reads of each row and the runbook's distinct values, never every
    # row's full record: its growth over 5,000 probes stays well below what 5,000 full rows take, so a bound
    # on the growth catches a return to holding them (benchmarks/RESULTS.md has the figures).
    assert peak - rss0 < 48 * 2**20, f"RSS grew {(peak - rss0) / 2**20:.1f} MiB over 5,000 probes"
    figure("rss_5000_cells_peak_mib", round(peak / 2**20, 1), add=False)
    figure("rss_5000_cells_start_mib", round(rss0 / 2**20, 1), add=False)
    figure("rss_5000_cells_growth_mib", round((peak - rss0) / 2**20, 1), add=False)
    figure("rss_5000_cells_events_streamed", n_events[0], add=False)
