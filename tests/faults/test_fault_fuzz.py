"""Part 4 of issue 8: bad input. Property-based fuzzing (hypothesis) of the API — against the REAL daemon
over its socket, one keep-alive connection — and of sweep files (in-process through
`benchctl.sweepfile` + msgspec, for volume), plus the check that no code runs a shell (the shell-injection
test on a real llama-server is in test_fault_fuzz_real.py).

Every generated request is invalid BY CONSTRUCTION (a mutation that breaks one rule of the schema or
of the id patterns), so the property is strict: a 4xx with a JSON error body naming a code and a
message; never a 5xx, never a 2xx. Afterwards: the daemon is the same process, the store's row counts
are the same (`Store.counts()`), no job exists, and no file appeared outside `logs/`.

Volume: `$BENCHD_FUZZ_API` API requests and `$BENCHD_FUZZ_FILES` sweep files (defaults 6,000 each, so a
CI run tries over 10,000); the seed is the suite's (`$BENCHD_FAULT_SEED`, printed at the start: set it
to replay a failure). Every seed that ever failed one of these tests is kept in `FAILED_SEEDS` and run
again beside the fresh one; a seed replays the same cases only while the strategies below are unchanged,
so each failure's concrete input is also kept as an explicit case (tests/faults/test_hostile_paths.py).
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from faultlib import RawHttp, figure, store_counts
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hseed
from hypothesis import strategies as st

from benchctl.sweepfile import load_sweep
from benchd.daemon.queue import parse_time
from benchd.errors import BenchdError
from benchd.schemas import Sweep, submit_decoder

pytestmark = [pytest.mark.slow]

N_API = int(os.environ.get("BENCHD_FUZZ_API", "6000"))
N_FILES = int(os.environ.get("BENCHD_FUZZ_FILES", "6000"))
REPO = Path(__file__).resolve().parents[2]

#: Seeds that failed a fuzz test here (the suite's seed, as printed), with what they found; each runs again.
FAILED_SEEDS: dict[str, list[int]] = {
    "api": [
        2021894148,  # env key "A\n": 201, the patterns' `$` also matched before a final newline
    ],
    "sweep_file": [
        1400860991,  # model = "~0": RuntimeError out of Path.expanduser (a `~user` for no such user)
    ],
}

VALID_SWEEP: dict[str, Any] = {
    "name": "fuzz", "contexts": [128], "gen_tokens": 4, "probes": 1, "warmup": 0,
    "sustained": {"tokens": 0}, "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
    "candidates": [{"id": "a", "runtime": "llama-server", "model": "/nonexistent/m.gguf"}],
}

TRAVERSAL = [
    "../", "..", "../../etc/passwd", "/etc/passwd", "/", "a/../b", "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f",
    "%2E%2E/%2E%2E", "a\x00b", "\x00", "%00", "abcdefgh%00", "..\\..\\windows", "abc/def/ghi",
    "~root", "$(id)", "`id`", "a;b", "....//", "%252e%252e%252f", "\u2025/", "ａｂｃｄｅｆｇｈ", "abc\ndef",
]
#: Job ids in URLs: traversal, arbitrary unicode, and valid-looking ids that do not exist (404).
ids = st.one_of(
    st.sampled_from(TRAVERSAL),
    st.text(max_size=40),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=8, max_size=32).map(lambda s: "zz" + s[2:]),
    st.builds(lambda a, b: a + b, st.sampled_from(TRAVERSAL), st.text(max_size=10)),
)
unicode_text = st.text(max_size=60)
huge_ints = st.one_of(st.integers(max_value=-1, min_value=-(10**40)), st.integers(min_value=2**33, max_value=10**40))
not_int = st.one_of(st.text(max_size=10), st.booleans(), st.none(), st.lists(st.integers(), max_size=3),
                    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
                    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)))
not_str = st.one_of(st.integers(), st.booleans(), st.none(), st.lists(st.text(max_size=3), max_size=3),
                    st.floats(allow_nan=False, allow_infinity=False))


def _bad_time(s: str) -> bool:
    try:
        parse_time(s)
    except (ValueError, OverflowError):
        return True
    return False


# ------------------------------------------------------------------------------------------ mutations
#
# Each returns a body (bytes) that breaks at least one rule. `sweep` is a fresh copy of VALID_SWEEP.


@st.composite
def bad_submit(draw: st.DrawFn) -> tuple[str, bytes]:
    sweep = copy.deepcopy(VALID_SWEEP)
    cand = sweep["candidates"][0]
    top: dict[str, Any] = {"sweep": sweep}
    kind = draw(st.sampled_from([
        "raw_bytes", "truncated", "not_object", "deep_nesting", "int_out_of_range", "int_wrong_type",
        "name_invalid", "candidate_id", "runtime", "path_relative", "path_nul", "path_type", "unknown_field",
        "missing_field", "empty_contexts", "duplicate", "cooldown_order", "env_key", "args_bad", "not_before",
        "when", "lone_surrogate", "huge_string",
    ]))
    if kind == "raw_bytes":
        raw = draw(st.binary(max_size=200))
        try:
            json.loads(raw)
            raw = b"{" + raw  # make sure it is not JSON
        except (ValueError, UnicodeDecodeError):
            pass
        return kind, raw
    if kind == "truncated":
        full = json.dumps(top).encode()
        return kind, full[: draw(st.integers(min_value=0, max_value=len(full) - 1))]
    if kind == "not_object":
        return kind, json.dumps(draw(st.one_of(st.integers(), st.text(max_size=20), st.lists(st.integers(), max_size=4),
                                               st.none(), st.booleans()))).encode()
    if kind == "deep_nesting":
        depth = draw(st.integers(min_value=50, max_value=100_000))
        return kind, b'{"sweep": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "int_out_of_range":
        field = draw(st.sampled_from(["gen_tokens", "probes", "warmup", "contexts", "ctx_size", "seed", "sustained"]))
        value = draw(huge_ints)
        if field == "contexts":
            sweep["contexts"] = [value]
        elif field == "ctx_size":
            cand["ctx_size"] = value
        elif field == "seed":
            sweep["sampling"] = {"seed": value}
        elif field == "sustained":
            sweep["sustained"] = {"tokens": value}
        else:
            sweep[field] = value
    elif kind == "int_wrong_type":
        field = draw(st.sampled_from(["gen_tokens", "probes", "warmup", "contexts"]))
        value = draw(not_int.filter(lambda v: not isinstance(v, list)))
        if field == "probes" and (isinstance(value, dict) or value in ("auto", None)):
            value = [value]  # `probes` also takes "auto", a table or null (the default): a list is still wrong
        sweep[field] = [value] if field == "contexts" and draw(st.booleans()) else value
    elif kind == "name_invalid":
        sweep["name"] = draw(st.one_of(not_str, st.text(max_size=120).filter(
            lambda s: not (s and s[0].isascii() and s[0].isalnum() and len(s) <= 100
                           and all(c.isascii() and (c.isalnum() or c in " ._-") for c in s)))))
    elif kind == "candidate_id":
        cid = draw(st.one_of(st.sampled_from(TRAVERSAL), unicode_text, not_str))
        if isinstance(cid, str) and cid and all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in cid) \
                and cid[0] not in "._-" and len(cid) <= 63 and ".." not in cid:
            cid = "../" + cid
        cand["id"] = cid
    elif kind == "runtime":
        cand["runtime"] = draw(st.one_of(not_str, unicode_text.filter(
            lambda s: s not in ("llama-server", "mlx_lm.server", "mlx_vlm.server"))))
    elif kind == "path_relative":
        field = draw(st.sampled_from(["model", "binary", "draft_model"]))
        rel = draw(st.one_of(st.sampled_from(["../m.gguf", "models/m.gguf", "~/m.gguf", "./m", "..", "m"]),
                             st.text(min_size=1, max_size=30).filter(lambda s: not s.startswith("/"))))
        if field == "draft_model":
            cand["spec"] = {"kind": "draft", "draft_model": rel}
        else:
            cand[field] = rel
    elif kind == "path_nul":
        cand[draw(st.sampled_from(["model", "binary"]))] = "/models/" + draw(st.text(max_size=5)) + "\x00" + "/x"
    elif kind == "path_type":
        cand[draw(st.sampled_from(["model", "binary"]))] = draw(st.one_of(not_str.filter(lambda v: v is not None
                                                                          or True), st.just("")))
        if cand.get("binary", "x") is None:
            cand["model"] = None
    elif kind == "unknown_field":
        where = draw(st.sampled_from(["top", "sweep", "candidate", "cooldown", "sampling"]))
        key = draw(unicode_text.filter(lambda k: k not in {"sweep", "not_before", "when"} | set(Sweep.__struct_fields__)
                                       | {"id", "runtime", "model", "request_model", "args", "binary", "env",
                                          "startup_timeout_s", "ctx_size", "spec", "policy", "seconds", "max_seconds",
                                          "target_celsius", "max_load", "temperature", "seed"}))
        target = {"top": top, "sweep": sweep, "candidate": cand, "cooldown": sweep["cooldown"],
                  "sampling": sweep.setdefault("sampling", {})}[where]
        target[key] = draw(st.one_of(st.integers(), unicode_text, st.none()))
    elif kind == "missing_field":
        where = draw(st.sampled_from(["sweep", "name", "contexts", "gen_tokens", "candidates", "id", "runtime", "model"]))
        if where == "sweep":
            del top["sweep"]
        elif where in ("id", "runtime", "model"):
            del cand[where]
        else:
            del sweep[where]
    elif kind == "empty_contexts":
        sweep[draw(st.sampled_from(["contexts", "candidates"]))] = []
    elif kind == "duplicate":
        if draw(st.booleans()):
            sweep["contexts"] = [128, 128]
        else:
            sweep["candidates"] = [cand, dict(cand)]
    elif kind == "cooldown_order":
        sweep["cooldown"] = {"seconds": draw(st.floats(min_value=1, max_value=100)), "max_seconds": 0.5}
    elif kind == "env_key":
        cand["env"] = {draw(st.one_of(st.sampled_from(["1ABC", "A=B", "PATH;rm -rf /", "", "A B", "../X", "A\x00", "A\n"]),
                                      unicode_text.filter(lambda k: not k.isascii() or not k.isidentifier()))): "v"}
    elif kind == "args_bad":
        cand["args"] = draw(st.one_of(st.just(["x" * 5000]), st.lists(not_str, min_size=1, max_size=3).filter(
            lambda xs: any(not isinstance(x, str) for x in xs)), not_str.filter(lambda v: not isinstance(v, list))))
    elif kind == "not_before":
        top["not_before"] = draw(st.one_of(unicode_text.filter(_bad_time), st.integers(), st.sampled_from(
            ["2030-01-01T00:00:00", "tomorrow", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00",
             "2030-13-01T00:00:00Z", "2030-01-01T00:00:00+25:00"])))
    elif kind == "when":
        top["when"] = draw(st.one_of(st.lists(unicode_text.filter(lambda s: s not in ("idle", "ac-power")),
                                              min_size=1, max_size=3), st.just(["idle", "ac-power", "idle"]),
                                     not_str.filter(lambda v: not isinstance(v, list))))
    elif kind == "lone_surrogate":
        text = json.dumps(top)
        return kind, text.replace('"fuzz"', '"fu\\ud800zz"').replace('"a"', '"\\udfff"').encode()
    elif kind == "huge_string":
        field = draw(st.sampled_from(["model", "request_model", "name"]))
        (cand if field != "name" else sweep)[field] = "/" + "x" * draw(st.integers(min_value=4100, max_value=200_000))
    return kind, json.dumps(top).encode()


@st.composite
def bad_get(draw: st.DrawFn) -> tuple[str, str, str]:
    """(kind, method, target) for the id- and query-carrying routes."""
    ident = draw(ids)
    enc = quote(ident, safe="") if draw(st.booleans()) else quote(ident, safe="/%")
    kind = draw(st.sampled_from(["job", "cancel", "events", "runbook", "list", "method", "route"]))
    if kind == "job":
        return kind, "GET", f"/v1/jobs/{enc}"
    if kind == "cancel":
        return kind, "POST", f"/v1/jobs/{enc}/cancel"
    if kind == "events":
        return kind, "GET", f"/v1/jobs/{enc}/events?since={quote(draw(unicode_text), safe='')}&follow=true"
    if kind == "runbook":
        return kind, "GET", f"/v1/runbooks/{enc}"
    if kind == "list":
        param = draw(st.sampled_from(["state", "limit", "cursor"]))
        value = {"state": unicode_text.filter(lambda s: s not in ("queued", "waiting", "running", "succeeded", "failed",
                                                                   "cancelled", "interrupted", "")),
                 "limit": st.one_of(huge_ints.map(str), unicode_text.filter(lambda s: not s.isdigit() or not s)),
                 "cursor": st.sampled_from(TRAVERSAL)}[param]
        return kind, "GET", f"/v1/jobs?{param}={quote(draw(value), safe='')}"
    if kind == "method":
        return kind, draw(st.sampled_from(["PUT", "DELETE", "PATCH"])), draw(st.sampled_from(
            ["/v1/jobs", f"/v1/jobs/{enc}", "/v1/health", "/v1/schema"]))
    return kind, "GET", "/v1/" + enc


# ------------------------------------------------------------------------------------------ the checks


def check_4xx(resp: tuple[int, dict[str, str], bytes], what: Any) -> dict[str, Any]:
    status, headers, body = resp
    assert 400 <= status < 500, (status, what, body[:300])
    assert headers.get("content-type", "").startswith("application/json"), (what, headers)
    err = json.loads(body)["error"]
    assert isinstance(err["code"], str) and err["code"], (what, err)
    assert isinstance(err["message"], str) and err["message"].strip(), (what, err)
    assert "Traceback" not in err["message"], (what, err)
    return err  # type: ignore[no-any-return]


def files_outside_logs(state: Path) -> set[str]:
    return {str(p.relative_to(state)) for p in state.rglob("*")
            if "logs" not in p.relative_to(state).parts and not p.name.startswith("benchd.sqlite3")}


@pytest.mark.parametrize("replay", [None, *FAILED_SEEDS["api"]], ids=lambda s: f"seed{s}" if s else "fresh")
def test_api_fuzz_on_the_real_daemon(run_daemon, fault_seed: int, replay: int | None) -> None:  # type: ignore[no-untyped-def]
    fault_seed = replay or fault_seed
    d = run_daemon()
    http = RawHttp(d.socket)
    # one real job (waiting for 2099) so event cursors and cancel hit an existing job too
    status, _, body = http.request("POST", "/v1/jobs", json.dumps({"sweep": VALID_SWEEP,
                                                                   "not_before": "2099-01-01T00:00:00Z"}).encode(),
                                   {"Content-Type": "application/json"})
    assert status == 201, body
    job = json.loads(body)["id"]
    counts0 = store_counts(d.state_dir)
    files0 = files_outside_logs(d.state_dir)
    tried: dict[str, int] = {}
    statuses: dict[int, int] = {}

    def send(kind: str, method: str, target: str, body: bytes = b"", ctype: str | None = "application/json") -> None:
        headers = {"Content-Type": ctype} if ctype else {}
        resp = http.request(method, target, body, headers)
        tried[kind] = tried.get(kind, 0) + 1
        statuses[resp[0]] = statuses.get(resp[0], 0) + 1
        check_4xx(resp, (kind, method, target[:200], body[:200]))

    n_submit = N_API * 2 // 3

    @hseed(fault_seed)
    @settings(max_examples=n_submit, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(bad_submit(), st.sampled_from(["application/json", "text/plain", None]))
    def fuzz_submit(case: tuple[str, bytes], ctype: str | None) -> None:
        send("submit:" + case[0], "POST", "/v1/jobs", case[1], ctype)

    @hseed(fault_seed + 1)
    @settings(max_examples=N_API - n_submit, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(bad_get(), st.sampled_from(["since", "follow", "none"]))
    def fuzz_ids(case: tuple[str, str, str], cursor: str) -> None:
        kind, method, target = case
        send("route:" + kind, method, target)
        if cursor != "none":  # bad cursors on the existing job
            bad = {"since": quote(str(10**15)), "follow": "maybe"}[cursor]
            send("cursor:" + cursor, "GET", f"/v1/jobs/{job}/events?{cursor}={bad}")

    fuzz_submit()
    fuzz_ids()
    # a few huge bodies (over the 1 MiB limit) and a body-less submit
    for size in (1024 * 1024 + 1, 3 * 1024 * 1024):
        send("huge_body", "POST", "/v1/jobs", b'{"sweep": "' + b"x" * size + b'"}')
    send("empty_body", "POST", "/v1/jobs", b"")
    total = sum(tried.values())
    # the daemon is the same process, answers, and nothing changed
    health = d.client().health()
    assert health["pid"] == d.pid and health["store_error"] is None
    assert d.proc.poll() is None
    assert store_counts(d.state_dir) == counts0, "a rejected request changed the store"
    assert [j["id"] for j in d.client().jobs()["jobs"]] == [job]
    assert d.client().job(job)["state"] == "waiting"
    assert files_outside_logs(d.state_dir) == files0, "a rejected request wrote a file"
    out = d.output()
    assert "Traceback" not in out and "unhandled error" not in out
    server_errors = sum(n for s, n in statuses.items() if s >= 500)
    print(f"\n[faults] API fuzz: {total} requests over one keep-alive connection ({http.reconnects} reconnects); "
          f"statuses {dict(sorted(statuses.items()))}; by kind {dict(sorted(tried.items()))}")
    figure("fuzz_api_requests", total)
    figure("fuzz_5xx_answers", server_errors)
    http.close()


# ------------------------------------------------------------------------------------------ sweep files


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(type(v))


def to_toml(doc: Any) -> str:
    if not isinstance(doc, dict):
        return f"value = {toml_value(doc)}\n"
    return "".join(f"{json.dumps(str(k))} = {toml_value(v)}\n" for k, v in doc.items() if v is not None)


@pytest.mark.parametrize("replay", [None, *FAILED_SEEDS["sweep_file"]],
                         ids=lambda s: f"seed{s}" if s else "fresh")
def test_sweep_file_fuzz(tmp_path: Path, fault_seed: int, replay: int | None) -> None:
    """Generated sweep files (broken TOML, and valid TOML of every invalid mutation above): `load_sweep`
    raises BenchdError naming the file — never another exception — and a file it accepts survives the
    msgspec round trip the daemon's decoder makes. `replay`: a seed that failed once (FAILED_SEEDS)."""
    fault_seed = replay or fault_seed
    print(f"\n[faults] sweep-file fuzz seed {fault_seed} (replay with BENCHD_FAULT_SEED={fault_seed})")
    path = tmp_path / "sweep.toml"
    counts = {"rejected": 0, "accepted": 0}

    @hseed(fault_seed + 2)
    @settings(max_examples=N_FILES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(
        bad_submit().map(lambda kb: ("mutation", kb[1])),
        st.text(max_size=300).map(lambda t: ("text", t.encode("utf-8", "surrogatepass"))),
        st.binary(max_size=200).map(lambda b: ("bytes", b)),
        st.integers(min_value=10, max_value=200_000).map(
            lambda n: ("deep", (to_toml(VALID_SWEEP) + "deep = " + "[" * n + "]" * n + "\n").encode())),
        st.integers(min_value=10, max_value=50_000).map(
            lambda n: ("deep", (to_toml(VALID_SWEEP) + "deep = " + "{a = " * n + "1" + "}" * n + "\n").encode())),
    ))
    def fuzz(case: tuple[str, bytes]) -> None:
        kind, raw = case
        if kind == "mutation":
            try:
                doc = json.loads(raw)
            except (ValueError, RecursionError):
                doc = None
            if isinstance(doc, dict) and isinstance(doc.get("sweep"), dict):
                try:
                    raw = to_toml(doc["sweep"]).encode("utf-8", "surrogatepass")
                except (TypeError, RecursionError):
                    return
        path.write_bytes(raw)
        try:
            sweep = load_sweep(path)
        except BenchdError as exc:
            assert str(path) in exc.message or exc.code in ("malformed",), exc.message
            assert exc.message.strip()
            counts["rejected"] += 1
            return
        counts["accepted"] += 1
        again = submit_decoder.decode(json.dumps({"sweep": __import__("msgspec").to_builtins(sweep)}).encode())
        assert again.sweep == sweep

    fuzz()
    total = counts["rejected"] + counts["accepted"]
    print(f"\n[faults] sweep-file fuzz: {total} files, {counts['rejected']} rejected with BenchdError, "
          f"{counts['accepted']} accepted and round-tripped")
    figure("fuzz_sweep_files", total)


# ------------------------------------------------------------------------------------------ shell


def test_no_shell_anywhere_in_the_code() -> None:
    out = subprocess.run(["grep", "-rnE", r"shell=True|create_subprocess_shell|os\.system|os\.popen|commands\.getoutput",
                          "benchd", "benchctl"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 1 and out.stdout == "", out.stdout


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, "{a = " * 3000 + "1" + "}" * 3000],
                         ids=["arrays", "inline-tables"])
def test_deeply_nested_sweep_file_is_a_clear_error(tmp_path: Path, nested: str) -> None:
    """Regression (found by the fuzzer): tomllib recursed into a RecursionError, so `benchctl validate`
    and `submit` died with a traceback instead of exit 2 naming the file."""
    path = tmp_path / "deep.toml"
    path.write_text(to_toml(VALID_SWEEP) + "deep = " + nested + "\n")
    with pytest.raises(BenchdError, match="nested too deeply") as info:
        load_sweep(path)
    assert str(path) in info.value.message
    out = subprocess.run([sys.executable, "-m", "benchctl", "validate", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "nested too deeply" in out.stderr + out.stdout
