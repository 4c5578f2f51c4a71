"""kill -9 of a REAL benchd in the middle of a round, for every order with two candidates: the next
daemon resumes the job with no row lost or doubled, a gap-free event sequence, and the design intact —
interleaved: every round visits each candidate exactly once, in the round's seeded order; blocked:
each round holds each candidate's block; sequential: the rows as before."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

import msgspec
import pytest
from faultlib import FAULT_TAG_ENV, Follower, read_events, read_rows, sweep_doc, tagged_processes, wait_until

from benchd.engine.plan import job_seed, round_order

pytestmark = [pytest.mark.slow]

PROBES = 4


def _doc(model: Any, binary: Any, tag: str, order: str) -> dict[str, Any]:
    cands = [{"id": cid, "runtime": "llama-server", "model": str(model), "binary": str(binary),
              "env": {FAULT_TAG_ENV: tag}} for cid in ("a", "b")]
    doc = sweep_doc(model, contexts=[64], gen_tokens=200, probes=PROBES, binary=binary, tag=tag,
                    name=f"order-{order}", candidates=cands, probe_timeout_s=120)
    doc.update(order=order, rounds=2)
    if order == "interleaved":
        doc.update(starts="once")  # the resident design's resume (a start per round: test_verdicts_real)
    return doc


@pytest.mark.parametrize("order", ["interleaved", "blocked", "sequential"])
def test_kill9_mid_round_resumes_without_lost_or_doubled_rows(run_daemon, tiny_models, llama_server_bin,  # type: ignore[no-untyped-def]
                                                              order: str) -> None:
    tag = f"order-{order}-{os.getpid()}"
    d = run_daemon()
    job = str(d.client().submit(_doc(tiny_models.target, llama_server_bin, tag, order))["id"])
    f = Follower(d.socket, job)
    started = 0
    try:
        while True:  # the third probe to start: round 1 (interleaved), the second block (blocked)
            ev = f.next(timeout=180)
            assert ev is not None and ev["type"] not in ("job_finished", "job_failed"), ev
            if ev["type"] == "probe_started" and ev["payload"].get("kind") == "probe":
                started += 1
                if started == 3:
                    time.sleep(0.2)  # mid-stream (200 tokens)
                    break
    finally:
        f.close()
    before = {(r.candidate, r.context, r.kind, r.probe): msgspec.json.encode(r)
              for r in read_rows(d.state_dir, job) if r.status != "aborted"}
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(timeout=10)
    d2 = run_daemon()
    wait_until(lambda: read_events(d2.state_dir, job)[-1]["type"] in ("job_finished", "job_failed", "job_cancelled"),
               timeout=400, interval=0.2, what="the resumed job to end")
    evs = read_events(d2.state_dir, job)
    assert evs[-1]["type"] == "job_finished", evs[-1]
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    rows = [r for r in read_rows(d2.state_dir, job) if r.kind == "probe"]
    keys = Counter((r.candidate, r.context, r.kind, r.probe) for r in rows)
    assert set(keys.values()) == {1} and len(keys) == 2 * PROBES, keys  # nothing doubled, nothing missing
    assert all(r.status == "ok" for r in rows), [r.error for r in rows if r.status != "ok"]
    now = {(r.candidate, r.context, r.kind, r.probe): msgspec.json.encode(r) for r in read_rows(d2.state_dir, job)}
    assert all(now.get(k) == blob for k, blob in before.items()), "a row committed before the kill changed"
    design = [e["payload"] for e in evs if e["type"] == "design_chosen"]
    assert len(design) == 1 and design[0]["order"] == order  # decided once, kept on resume
    if order == "interleaved":
        seed = job_seed(job)
        for rnd in range(PROBES):
            mine = sorted((r for r in rows if r.round == rnd), key=lambda r: r.visit or 0)
            assert [r.candidate for r in mine] == round_order(["a", "b"], seed=seed, context=64, round_=rnd), rnd
    elif order == "blocked":
        per_round = Counter((r.round, r.candidate) for r in rows)
        assert per_round == {(rnd, c): PROBES // 2 for rnd in range(2) for c in "ab"}, per_round
    else:
        assert all(r.round is None and "sequential" in r.null_reasons["round"] for r in rows)
    wait_until(lambda: not tagged_processes(tag), timeout=15, what="the servers to stop")
