"""Bad input over the real socket: every answer a clear 4xx JSON error, the daemon up and unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from testlib import raw_request

from benchd.schemas import sweep_schema

REPO = Path(__file__).resolve().parents[2]


def good_sweep(model: str = "/nonexistent/model.gguf") -> dict[str, Any]:
    return {"name": "t", "contexts": [128], "gen_tokens": 4, "probes": 1, "warmup": 0,
            "sustained": {"tokens": 0}, "cooldown": {"seconds": 0},
            "candidates": [{"id": "a", "runtime": "llama-server", "model": model}]}


def expect_error(resp: tuple[int, dict[str, str], bytes], status: int, code: str | None = None,
                 field: str | None = None) -> dict[str, Any]:
    got_status, headers, body = resp
    assert got_status == status, body
    assert headers.get("content-type", "").startswith("application/json"), headers
    err = json.loads(body)["error"]
    assert set(err) == {"code", "message", "field"}
    assert err["message"] and "Traceback" not in err["message"]
    if code is not None:
        assert err["code"] == code, err
    if field is not None:
        assert err["field"] == field, err
    return err  # type: ignore[no-any-return]


BAD_SUBMITS: list[tuple[str, bytes, int, str | None, str | None]] = [
    ("malformed json", b'{"sweep": ', 400, "malformed", None),
    ("not an object", b"[1, 2]", 400, "invalid", None),
    ("empty body", b"", 400, "malformed", None),
    ("missing sweep", b"{}", 400, "invalid", None),
    ("wrong type", json.dumps({"sweep": {**good_sweep(), "gen_tokens": "four"}}).encode(), 400, "invalid",
     "$.sweep.gen_tokens"),
    ("unknown field", json.dumps({"sweep": {**good_sweep(), "colour": "red"}}).encode(), 400, "invalid", None),
    ("unknown top field", json.dumps({"sweep": good_sweep(), "priority": 1}).encode(), 400, "invalid", None),
    ("negative", json.dumps({"sweep": {**good_sweep(), "probes": -1}}).encode(), 400, "invalid", "$.sweep.probes"),
    ("enormous", json.dumps({"sweep": {**good_sweep(), "gen_tokens": 10**30}}).encode(), 400, "invalid", None),
    ("bad candidate id", json.dumps({"sweep": {**good_sweep(), "candidates": [
        {"id": "../x", "runtime": "llama-server", "model": "/m"}]}}).encode(), 400, "invalid",
     "$.sweep.candidates[0].id"),
    ("relative model", json.dumps({"sweep": good_sweep("models/m.gguf")}).encode(), 400, "relative_path",
     "$.sweep.candidates[0].model"),
    ("bad when", json.dumps({"sweep": good_sweep(), "when": ["midnight"]}).encode(), 400, "invalid", "$.when[0]"),
    # A struct's own rule names its field: the field, not the struct that holds it.
    ("repeated contexts", json.dumps({"sweep": {**good_sweep(), "contexts": [128, 128]}}).encode(), 400, "invalid",
     "$.sweep.contexts"),
    ("cooldown bounds", json.dumps({"sweep": {**good_sweep(), "cooldown": {"seconds": 9, "max_seconds": 1}}}).encode(),
     400, "invalid", "$.sweep.cooldown.max_seconds"),
    ("naive not_before", json.dumps({"sweep": good_sweep(), "not_before": "2030-01-01T00:00:00"}).encode(), 400,
     "invalid", "$.not_before"),
    ("garbage not_before", json.dumps({"sweep": good_sweep(), "not_before": "tomorrow"}).encode(), 400,
     "invalid", "$.not_before"),
    ("invalid utf8", b'{"sweep": "\xff\xfe"}', 400, None, None),
    ("missing mmproj", json.dumps({"sweep": {**good_sweep(), "candidates": [
        {"id": "a", "runtime": "llama-server", "model": "/m", "mmproj": "/nonexistent/mmproj.gguf"}]}}).encode(),
     400, "missing_mmproj", "$.sweep.candidates[0].mmproj"),
    ("vision without a vision model", json.dumps({"sweep": {**good_sweep(), "candidates": [
        {"id": "a", "runtime": "llama-server", "model": "/m", "vision": True}]}}).encode(),
     400, "no_vision_model", "$.sweep.candidates[0].vision"),
    ("reserved flag on the second candidate", json.dumps({"sweep": {**good_sweep(), "candidates": [
        {"id": "a", "runtime": "llama-server", "model": "/m"},
        {"id": "b", "runtime": "llama-server", "model": "/m", "args": ["--temp", "0", "--port", "9"]}]}}).encode(),
     400, "reserved_arg", "$.sweep.candidates[1].args[2]"),
    ("unknown eval suite", json.dumps({"sweep": {**good_sweep(), "evals": ["maths"]}}).encode(), 400, "invalid",
     "$.sweep.evals[0]"),
    ("eval limit 0", json.dumps({"sweep": {**good_sweep(), "eval_limit": {"code": 0}}}).encode(), 400, "invalid",
     "$.sweep.eval_limit.code"),
    ("no images", json.dumps({"sweep": {**good_sweep(), "vision": {"images": 0}}}).encode(), 400, "invalid",
     "$.sweep.vision.images"),
]


@pytest.mark.parametrize("name,body,status,code,field", BAD_SUBMITS, ids=[b[0] for b in BAD_SUBMITS])
def test_bad_submit_is_a_clear_4xx(shared_daemon, name, body, status, code, field) -> None:  # type: ignore[no-untyped-def]
    d = shared_daemon
    expect_error(raw_request(d.socket, "POST", "/v1/jobs", body, {"Content-Type": "application/json"}),
                 status, code, field)
    health = d.client().health()
    assert health["pid"] == d.pid
    assert d.client().jobs()["jobs"] == []  # nothing was created by a rejected request


def test_bad_requests_and_daemon_stays_up(run_daemon, poll) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    s = d.socket
    # huge body: over the 1 MiB limit → 413 JSON, not a hang and not a 5xx
    expect_error(raw_request(s, "POST", "/v1/jobs", b"x" * (2 * 1024 * 1024)), 413, "too_large")
    # unknown / malformed job ids, path traversal
    expect_error(raw_request(s, "GET", "/v1/jobs/abcdefgh-1234"), 404, "not_found")
    expect_error(raw_request(s, "POST", "/v1/jobs/abcdefgh-1234/cancel"), 404, "not_found")
    expect_error(raw_request(s, "GET", "/v1/jobs/abcdefgh-1234/events"), 404, "not_found")
    for bad in ("ABC", "x", "..%2F..%2Fetc%2Fpasswd", "%00abcdefgh", "a" * 40, "%2Fetc%2Fpasswd"):
        st, _, body = raw_request(s, "GET", f"/v1/jobs/{bad}")
        assert 400 <= st < 500, (bad, st, body)
        assert json.loads(body)["error"]["code"] in ("invalid_id", "not_found")
    st, _, body = raw_request(s, "GET", "/v1/jobs/../../etc/passwd")
    assert 400 <= st < 500 and "error" in json.loads(body)
    # bad list parameters and cursors
    expect_error(raw_request(s, "GET", "/v1/jobs?state=bogus"), 400, "invalid_param", "state")
    expect_error(raw_request(s, "GET", "/v1/jobs?limit=0"), 400, "invalid_param", "limit")
    expect_error(raw_request(s, "GET", "/v1/jobs?limit=abc"), 400, "invalid_param", "limit")
    expect_error(raw_request(s, "GET", "/v1/jobs?cursor=../x"), 400, "invalid_cursor", "cursor")
    # routes and methods
    expect_error(raw_request(s, "GET", "/v1/nothing"), 404, "not_found")
    expect_error(raw_request(s, "DELETE", "/v1/jobs"), 405, "method_not_allowed")
    expect_error(raw_request(s, "GET", "/v1/runbooks/..%2F..%2Fx"), 400, "invalid_id")
    # event cursors on a real job
    job = d.client().submit(good_sweep(), not_before="2099-01-01T00:00:00Z")
    jid = job["id"]
    assert job["state"] == "queued"
    expect_error(raw_request(s, "GET", f"/v1/jobs/{jid}/events?since=-1"), 400, "invalid_param", "since")
    expect_error(raw_request(s, "GET", f"/v1/jobs/{jid}/events?since=abc"), 400, "invalid_param", "since")
    expect_error(raw_request(s, "GET", f"/v1/jobs/{jid}/events?since=99"), 400, "invalid_cursor", "since")
    expect_error(raw_request(s, "GET", f"/v1/jobs/{jid}/events?follow=maybe"), 400, "invalid_param", "follow")
    st, headers, body = raw_request(s, "GET", f"/v1/jobs/{jid}/events?since=0")
    assert st == 200 and headers["content-type"].startswith("application/x-ndjson")
    events = [json.loads(line) for line in body.splitlines()]
    assert [e["type"] for e in events] == ["job_queued"] and events[0]["seq"] == 1
    # the job waits for its time and says why; cancelling drops it; a second cancel is a 409
    got = poll(lambda: (j := d.client().job(jid))["state"] == "waiting" and j)
    assert got["state"] == "waiting" and "not before 2099" in got["waiting_reason"]
    assert d.client().cancel(jid)["state"] == "cancelled"
    expect_error(raw_request(s, "POST", f"/v1/jobs/{jid}/cancel"), 409, "not_cancellable")
    assert [e["type"] for e in (json.loads(x) for x in d.client().events(jid))] == ["job_queued", "job_cancelled"]
    assert d.client().health()["pid"] == d.pid
    assert "Traceback" not in d.output()


def test_schema_endpoint_matches_committed_schema(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    served = d.client().request("GET", "/v1/schema")
    committed = json.loads((REPO / "schemas" / "sweep.schema.json").read_text())
    assert served == committed == json.loads(json.dumps(sweep_schema()))


def test_list_pagination(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    c = d.client()
    ids = [c.submit(good_sweep(), not_before="2099-01-01T00:00:00Z")["id"] for _ in range(3)]
    first = c.jobs(limit=2)
    assert [j["id"] for j in first["jobs"]] == sorted(ids, reverse=True)[:2]
    assert first["next_cursor"]
    second = c.jobs(limit=2, cursor=first["next_cursor"])
    assert [j["id"] for j in second["jobs"]] == sorted(ids, reverse=True)[2:]
    assert second["next_cursor"] is None
    assert {j["state"] for j in c.jobs(state="waiting")["jobs"]} == {"waiting"}
