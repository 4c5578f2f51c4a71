"""Part 6 of issue 8: SIGTERM to a REAL benchd during a cooldown, a server start and a probe (aimed with the
event stream): it exits 0 within 10 s, leaves no server behind, the job is `interrupted`, and the next
daemon resumes it to the end with every row exactly once and a gap-free event sequence."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

import pytest
from faultlib import Follower, figure, read_events, read_rows, sweep_doc, tagged_processes, wait_until

pytestmark = [pytest.mark.slow]

CASES: dict[str, tuple[str, float, dict[str, Any]]] = {  # phase: (hook event, delay after it, sweep shape)
    "cooldown": ("cooldown_started", 0.5, {"gen_tokens": 16, "cooldown_s": 3.0}),
    "server_start": ("server_starting", 0.0, {"gen_tokens": 16, "cooldown_s": 0.0}),
    "probe": ("probe_started", 0.4, {"gen_tokens": 3000, "cooldown_s": 0.0}),
}


@pytest.mark.parametrize("phase", list(CASES))
def test_sigterm_exits_fast_leaves_nothing_and_resumes(run_daemon, tiny_models, llama_server_bin, phase: str) -> None:  # type: ignore[no-untyped-def]
    hook, delay, shape = CASES[phase]
    tag = f"term-{phase}-{os.getpid()}"
    d = run_daemon()
    doc = sweep_doc(tiny_models.target, contexts=[64], probes=2, binary=llama_server_bin, tag=tag,
                    probe_timeout_s=600, name=f"term-{phase}", **shape)  # a hang guard: see the resume below
    job = d.client().submit(doc)["id"]
    f = Follower(d.socket, job)
    try:
        while True:
            ev = f.next(timeout=120)
            assert ev is not None and ev["type"] not in ("job_finished", "job_failed"), ev
            if ev["type"] == hook:
                time.sleep(delay)
                break
    finally:
        f.close()
    last_before = read_events(d.state_dir, job)[-1]["type"]
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    code = d.wait(timeout=15)
    took = time.monotonic() - t0
    assert code == 0, d.output()[-3000:]
    assert took < 10.0, f"benchd took {took:.1f} s to exit"
    assert not tagged_processes(tag), "a server outlived the daemon's SIGTERM"
    evs = read_events(d.state_dir, job)
    assert evs[-1]["type"] == "job_interrupted", [e["type"] for e in evs[-5:]]
    # the next daemon resumes it first and runs it to the end
    d2 = run_daemon()
    wait_until(lambda: read_events(d2.state_dir, job)[-1]["type"] in ("job_finished", "job_failed", "job_cancelled"),
               timeout=900, interval=0.2, what="the resumed job to end")  # a hang guard: 3,000-token probes
    # stream ~25 tok/s under `make test-stress` (at 180 s / a 120 s probe timeout they ran out there)
    evs = read_events(d2.state_dir, job)
    types = [e["type"] for e in evs]
    assert types[-1] == "job_finished" and "job_resumed" in types[types.index("job_interrupted"):]
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    rows = read_rows(d2.state_dir, job)
    keys = Counter((r.candidate, r.context, r.kind, r.probe) for r in rows)
    assert len(keys) == 2 and set(keys.values()) == {1}
    assert all(r.status == "ok" for r in rows), [r.error for r in rows]
    finished: Counter[Any] = Counter(
        (e["payload"]["row"]["context"], e["payload"]["row"]["probe"]) for e in evs
        if e["type"] == "probe_finished" and e["payload"]["row"]["status"] != "aborted")
    assert set(finished.values()) == {1}
    wait_until(lambda: not tagged_processes(tag), timeout=10, what="servers gone after the resumed job")
    print(f"\n[faults] SIGTERM during {phase} (last event {last_before}): exit 0 in {took:.2f} s, "
          "no server left, job interrupted, resumed and finished")
    figure("sigterm_cases", 1)
    figure("sigterm_exit_max_s", round(took, 2), keep_max=True)
