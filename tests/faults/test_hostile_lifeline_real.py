"""A SIGKILLed daemon's servers do not outlive it until its next start (issue 36): on Linux each server
is spawned with PR_SET_PDEATHSIG (benchd.lifeline), so the tiny llama-server a job is running
dies as soon as the daemon does, with no new daemon started to reap it."""

from __future__ import annotations

import signal
import sys

import psutil
import pytest
from faultlib import Follower, sweep_doc, wait_until

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")]


def test_a_running_server_dies_with_a_sigkilled_daemon(run_daemon, tiny_models, llama_server_bin) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    doc = sweep_doc(tiny_models.target, contexts=[32], gen_tokens=8, probes=50, binary=llama_server_bin, name="life")
    job = d.client().submit(doc)["id"]
    f = Follower(d.socket, job)
    try:
        while (ev := f.next(timeout=120)) is not None and ev["type"] != "server_ready":
            pass
    finally:
        f.close()
    assert ev is not None, "the job ended before its server was ready"
    server = psutil.Process(ev["payload"]["pid"])
    assert server.is_running() and server.ppid() == d.proc.pid
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    wait_until(lambda: not server.is_running() or server.status() == psutil.STATUS_ZOMBIE, timeout=30,
               what="the server's death after the daemon's")
