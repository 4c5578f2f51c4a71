"""Part 4 of issue 8: bad input. Shell injection through a candidate's args, against the REAL daemon running
the pinned llama-server on the tiny model: each argument reaches the server verbatim and no shell runs it."""

from __future__ import annotations

import copy
import shlex
import uuid
from pathlib import Path

import pytest
from faultlib import figure, read_rows, wait_until

from tests.faults.test_fault_fuzz import VALID_SWEEP

pytestmark = [pytest.mark.slow]


def test_shell_injection_in_candidate_args_runs_nothing(run_daemon, tiny_models, llama_server_bin) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    marker = Path(f"/tmp/benchd-pwned-{uuid.uuid4().hex}")
    attacks = [f"; touch {marker}-1", f"$(touch {marker}-2)", f"`touch {marker}-3`", f"&& touch {marker}-4",
               f"| touch {marker}-5", f"\ntouch {marker}-6"]
    doc = copy.deepcopy(VALID_SWEEP)
    doc["candidates"] = [{"id": "inject", "runtime": "llama-server", "model": str(tiny_models.target),
                          "binary": str(llama_server_bin), "args": attacks, "startup_timeout_s": 30}]
    job = d.client().submit(doc)["id"]  # syntactically a valid sweep: accepted, then run
    wait_until(lambda: d.client().job(job)["state"] in ("succeeded", "failed"), timeout=90, what="job end")
    rows = read_rows(d.state_dir, job)
    assert rows and all(r.status == "failed" for r in rows)
    assert not list(Path("/tmp").glob(marker.name + "*")), "an argument was run by a shell"
    log = (d.state_dir / "logs" / job / "inject.log").read_text(errors="replace")
    # the arguments reached llama-server verbatim, as argv entries (it refused them as unknown options)
    header = log[log.index("=== benchd"):]
    assert all(shlex.quote(a) in header for a in attacks), header[:2000]  # each one argv entry, verbatim
    assert "error" in log.lower() or "invalid" in log.lower(), log[-2000:]
    figure("shell_injection_attempts", len(attacks))
