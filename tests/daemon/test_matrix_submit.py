"""`POST /v1/jobs` expands a candidate matrix (issue 38): the job stores the expanded candidates (with their
`from_matrix` record and the left-out combinations as deferred lines), and a refused matrix is a 400 naming
its `$.sweep.candidates[i].matrix...` field, with nothing queued."""

from __future__ import annotations

import json
from typing import Any

from testlib import raw_request


def matrix_sweep(**matrix: list[Any]) -> dict[str, Any]:
    return {"name": "m", "contexts": [128], "gen_tokens": 4, "probes": 1, "warmup": 0, "sustained": {"tokens": 0},
            "candidates": [{"id": "a", "runtime": "llama-server", "model": "/nonexistent/m.gguf", "args": ["-t", "1"],
                            "matrix": matrix}]}


def test_submit_stores_the_expansion(shared_daemon) -> None:  # type: ignore[no-untyped-def]
    c = shared_daemon.client()
    job = c.submit(matrix_sweep(**{"-fa": ["on", "off"], "-ctv": ["f16", "q4_0"]}), not_before="2099-01-01T00:00:00Z")
    try:
        stored = c.job(job["id"])["sweep"]
        cands = stored["candidates"]
        assert [x["id"] for x in cands] == ["a.fa-on.ctv-f16", "a.fa-on.ctv-q4_0", "a.fa-off.ctv-f16"]
        assert cands[1]["args"] == ["-t", "1", "-fa", "on", "-ctv", "q4_0"]
        assert cands[1]["from_matrix"] == {"base": "a", "values": {"-fa": "on", "-ctv": "q4_0"},
                                           "args": ["-fa", "on", "-ctv", "q4_0"]}
        assert all(not x["matrix"] for x in cands)
        assert [d["axis"] for d in stored["deferred"]] == ["candidate a.fa-off.ctv-q4_0"]
        assert job["progress"]["total"] == 3  # one probe each of the three candidates that run
    finally:
        c.cancel(job["id"])


def test_a_refused_matrix_is_a_400_naming_the_field(shared_daemon) -> None:  # type: ignore[no-untyped-def]
    d = shared_daemon
    before = len(d.client().jobs()["jobs"])
    for matrix, code, field in [({"--port": ["1"]}, "reserved_arg", "$.sweep.candidates[0].matrix.--port"),
                                ({"-fa": ["on", "sometimes"]}, "matrix_value", "$.sweep.candidates[0].matrix.-fa[1]"),
                                ({"-ub": [str(n) for n in range(1, 14)], "-b": ["1", "2", "3", "4", "5"]},
                                 "too_many_candidates", "$.sweep.candidates[0].matrix")]:
        status, _, body = raw_request(d.socket, "POST", "/v1/jobs", json.dumps({"sweep": matrix_sweep(**matrix)}).encode(),
                                      {"Content-Type": "application/json"})
        err = json.loads(body)["error"]
        assert (status, err["code"], err["field"]) == (400, code, field), err
        if code == "too_many_candidates":
            assert "expands to 65 candidates" in err["message"]
    assert len(d.client().jobs()["jobs"]) == before
