"""benchctl's daemon commands: pure pieces (--at, sweep files) and the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from benchctl.commands.jobs import plan, resolve_at
from benchctl.sweepfile import load_sweep, read_sweep_dict
from benchd.errors import BenchdError

BENCHCTL = [sys.executable, "-m", "benchctl"]


def run_ctl(*args: str, socket: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BENCHD_STATE_DIR", "BENCHD_SOCKET")}
    if socket is not None:
        env["BENCHD_SOCKET"] = str(socket)
    return subprocess.run([*BENCHCTL, *args], capture_output=True, text=True, timeout=timeout, env=env)


# ------------------------------------------------------------------------------------------- --at

TZ = timezone(timedelta(hours=2))  # a fixed local zone for the arithmetic (resolve_at uses the system's)


def test_at_hhmm_later_today_and_tomorrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        now = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
        assert resolve_at("11:00", now) == "2026-11-30T11:00:00Z"
        assert resolve_at("10:30", now) == "2026-12-01T10:30:00Z"  # not in the past: the next occurrence
        assert resolve_at("09:15", now) == "2026-12-01T09:15:00Z"
        assert resolve_at("7:05", now) == "2026-12-01T07:05:00Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_at_hhmm_is_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        now = datetime(2026, 7, 1, 8, 0, tzinfo=UTC)  # 10:00 in Berlin (CEST, +02:00)
        assert resolve_at("11:00", now) == "2026-07-01T09:00:00Z"
        assert resolve_at("09:00", now) == "2026-07-02T07:00:00Z"
        assert resolve_at("2026-07-03T12:00", now) == "2026-07-03T10:00:00Z"  # naive ISO = local
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_at_iso_with_offset_and_errors() -> None:
    now = datetime(2026, 11, 30, 10, 30, tzinfo=TZ)
    assert resolve_at("2026-12-24T18:00:00+01:00", now) == "2026-12-24T17:00:00Z"
    assert resolve_at("2026-12-24T18:00:00Z", now) == "2026-12-24T18:00:00Z"
    for bad in ("25:00", "12:60", "noon", "12:5x", ""):
        with pytest.raises(ValueError):
            resolve_at(bad, now)


# ------------------------------------------------------------------------------------------ sweep files

SWEEP = """
name = "s"
contexts = [128]
gen_tokens = 4
[[candidates]]
id = "a"
runtime = "llama-server"
model = "models/m.gguf"
binary = "~/bin/llama-server"
[candidates.spec]
kind = "draft"
draft_model = "../d.gguf"
"""


def test_sweep_paths_resolve_against_the_files_folder(tmp_path: Path) -> None:
    sub = tmp_path / "cfg"
    sub.mkdir()
    f = sub / "sweep.toml"
    f.write_text(SWEEP)
    sweep = load_sweep(f)
    cand = sweep.candidates[0]
    assert cand.model == str(sub / "models" / "m.gguf")
    assert cand.binary == str(Path.home() / "bin" / "llama-server")
    assert cand.spec is not None and cand.spec.draft_model == str(tmp_path / "d.gguf")


def test_sweep_errors_name_file_field_and_reason(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(SWEEP.replace("gen_tokens = 4", 'gen_tokens = "four"'))
    with pytest.raises(BenchdError) as info:
        load_sweep(f)
    assert str(f) in info.value.message and "int" in info.value.message
    assert info.value.field == "$.gen_tokens"
    f.write_text(SWEEP + "\ncolour = 'red'\n")
    with pytest.raises(BenchdError) as info:
        load_sweep(f)
    assert "colour" in info.value.message
    f.write_text("name = \n")
    with pytest.raises(BenchdError, match="not valid TOML"):
        read_sweep_dict(f)
    with pytest.raises(BenchdError, match="no such file"):
        read_sweep_dict(tmp_path / "missing.toml")


def test_plan_counts_cells_and_states_its_assumptions(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.replace("contexts = [128]", "contexts = [128, 1024]\nprobes = 2\nwarmup = 1"))
    p = plan(load_sweep(f), gen_tps=10.0, prompt_tps=100.0, startup_s=5.0)
    assert [(c["candidate"], c["context"]) for c in p["cells"]] == [("a", 128), ("a", 1024)]
    assert p["rows"] == 2 * 2 + 1  # probes per cell + one sustained row
    assert p["assumptions"]["gen_tps"] == 10.0 and "not measurements" in p["assumptions"]["note"]
    assert p["estimate_s"]["low"] <= p["estimate_s"]["high"]


def test_plan_counts_a_server_start_per_round(tmp_path: Path) -> None:
    """Two candidates at the default `starts` (a fresh start per round): 3-12 rounds make 3-12 starts per
    candidate and context, each with its warm-up request; `starts = "once"` makes one."""
    import msgspec

    from benchd.schemas import Candidate

    f = tmp_path / "s.toml"
    f.write_text(SWEEP)
    sweep = load_sweep(f)
    two = msgspec.structs.replace(sweep, candidates=[sweep.candidates[0],
                                                     Candidate(id="b", runtime="llama-server", model=sweep.candidates[0].model)],
                                  sustained=msgspec.structs.replace(sweep.sustained, tokens=0), sentinel=False)
    p = plan(two, gen_tps=10.0, prompt_tps=100.0, startup_s=5.0)
    assert (p["assumptions"]["servers_started"], p["assumptions"]["servers_started_max"]) == (2 * 3, 2 * 12)
    assert p["assumptions"]["starts"] == "round"
    once = plan(msgspec.structs.replace(two, starts="once"), gen_tps=10.0, prompt_tps=100.0, startup_s=5.0)
    assert (once["assumptions"]["servers_started"], once["assumptions"]["servers_started_max"]) == (2, 2)
    # the extra starts and their warm-up requests are in the estimate
    assert p["estimate_s"]["low"] - once["estimate_s"]["low"] >= (6 - 2) * 5.0
    assert p["requests"] - once["requests"] == 2 * (3 - 1) * two.warmup


def test_plan_counts_the_kld_step(tmp_path: Path) -> None:
    """The [kld] step joins the estimate: per context the reference's logits run and one run per candidate
    (the reference scored against itself too), each its whole chunks at the assumed prompt rate plus a
    model load; the high end repeats each candidate's run KLD_ATTEMPTS times (the reference's once)."""
    from benchd.engine.kld import KLD_ATTEMPTS

    f = tmp_path / "s.toml"
    f.write_text(SWEEP)
    base = plan(load_sweep(f), gen_tps=10.0, prompt_tps=100.0, startup_s=5.0)
    assert base["kld"] is None
    f.write_text(SWEEP.replace("[candidates.spec]", '[kld]\nreference = "a"\ncontexts = [512, 1024]\n'
                               'tokens = 4096\n[[candidates]]\nid = "b"\nruntime = "llama-server"\n'
                               'model = "models/m.gguf"\n[candidates.spec]'))
    p = plan(load_sweep(f), gen_tps=10.0, prompt_tps=100.0, startup_s=5.0)
    k = p["kld"]
    assert k["runs"] == 2 * (1 + 2) and k["corpus_tokens_source"] == "kld.tokens"
    assert k["tokens_evaluated"] == 6 * 4096  # 8 chunks of 512, 4 of 1024: 4096 tokens a run
    per_run = 4096 / 100.0 + 5.0
    assert k["estimate_s"] == {"low": round(6 * per_run), "high": round(2 * per_run + KLD_ATTEMPTS * 4 * per_run)}
    assert "100 tok/s prompt" in k["assumption"]
    assert p["estimate_s"]["low"] >= base["estimate_s"]["low"] + k["estimate_s"]["low"]  # b's probes on top


# ------------------------------------------------------------------------------------------- the CLI


def test_validate_is_offline_and_checks_files(tmp_path: Path, short_base: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(SWEEP)
    out = run_ctl("validate", str(f), "--json", socket=short_base / "nothing.sock")
    assert out.returncode == 2, out.stderr  # model, draft model and binary are missing
    doc = json.loads(out.stdout)
    assert not doc["ok"]
    assert any("model" in p and "does not exist" in p for p in doc["problems"])
    assert doc["rows"] == 3 + 1  # default 3 probes + one sustained row
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.gguf").write_bytes(b"")
    (tmp_path.parent / "d.gguf").write_bytes(b"")
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    f.write_text(SWEEP.replace("~/bin/llama-server", str(exe)))
    out = run_ctl("validate", str(f), socket=short_base / "nothing.sock")
    problems = [ln for ln in out.stderr.splitlines() if ln.startswith("problem:")]
    assert out.returncode == (2 if problems else 0), out.stderr
    assert "estimated duration" in out.stdout and "assumptions, not measurements" in out.stdout
    (tmp_path.parent / "d.gguf").unlink()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="the split needs Linux and at least 2 usable cores")
def test_validate_shows_the_pin_client_split(tmp_path: Path) -> None:
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.replace('gen_tokens = 4', 'gen_tokens = 4\npin_client = true').replace(
        'runtime = "llama-server"', 'runtime = "llama-server"\nargs = ["-t", "1"]'))
    out = run_ctl("validate", str(f), socket=tmp_path / "nothing.sock")
    cores = sorted(os.sched_getaffinity(0))
    assert f"server cores {cores[:1]}, client cores {cores[1:]}" in out.stdout, out.stdout
    assert json.loads(run_ctl("validate", str(f), "--json", socket=tmp_path / "nothing.sock").stdout)["pin_client"] is True


def test_unreachable_is_exit_3_with_one_line(short_base: Path) -> None:
    sock = short_base / "s" / "benchd.sock"  # short: pytest's tmp_path is over 104 bytes on macOS
    for args in (["ping"], ["jobs"], ["status"], ["cancel", "abcdefgh"], ["tail", "abcdefgh"]):
        out = run_ctl(*args, socket=sock)
        assert out.returncode == 3, (args, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        # jobs reads the store offline when no daemon answers: here there is none to read either
        offline = f"; and it cannot be read offline: no job store at {sock.parent / 'benchd.sqlite3'}" \
            if args == ["jobs"] else ""
        assert lines == [f"benchd is not running on {sock}: start it with `benchd --state-dir {sock.parent}`"
                         f" or `benchctl service install`{offline}"], out.stderr


def test_too_long_socket_path_is_exit_3_naming_the_length(short_base: Path) -> None:
    """Issue 14, finding 6: "AF_UNIX path too long" used to escape as an error (exit 1). No daemon can
    listen there (benchd refuses the same 103-byte limit), so it is "unreachable" with the reason."""
    sock = short_base / ("x" * 110) / "benchd.sock"
    n = len(str(sock).encode())
    for args in (["ping"], ["jobs"], ["tail", "abcdefgh"]):
        out = run_ctl(*args, socket=sock)
        assert out.returncode == 3, (args, out.stdout, out.stderr)
        offline = f"; and it cannot be read offline: no job store at {sock.parent / 'benchd.sqlite3'}" \
            if args == ["jobs"] else ""  # jobs reads the store offline; there is none here
        assert out.stderr.strip().splitlines() == [
            f"cannot reach benchd on {sock}: the socket path is {n} bytes, over the 103-byte limit of Unix "
            f"sockets (sun_path is 104 bytes on macOS); use a shorter --socket / $BENCHD_SOCKET or --state-dir{offline}"
        ], out.stderr


def test_ping_jobs_status_against_a_daemon(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    out = run_ctl("ping", socket=d.socket)
    assert out.returncode == 0 and f"pid {d.pid}" in out.stdout
    doc = json.loads(run_ctl("ping", "--json", socket=d.socket).stdout)
    assert doc["pid"] == d.pid and doc["state_dir"] == str(d.state_dir)
    assert json.loads(run_ctl("jobs", "--json", socket=d.socket).stdout)["jobs"] == []
    out = run_ctl("status", "nope", socket=d.socket)
    assert out.returncode == 2 and "job ids are" in out.stderr
    out = run_ctl("status", "abcdefgh-0000", socket=d.socket)
    assert out.returncode == 2 and "no job" in out.stderr


def test_ping_answers_and_imports_nothing_heavy(run_daemon) -> None:  # type: ignore[no-untyped-def]
    """`benchctl ping` via the installed entry point answers and imports nothing heavy.

    The wall time (median of 5) is printed, not asserted: a test's verdict must not depend on how busy
    the machine is; what keeps ping fast is what it imports, which is asserted.
    """
    d = run_daemon()
    exe = Path(sys.executable).parent / "benchctl"
    if not exe.exists():
        pytest.skip("benchctl entry point not installed in this environment")
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = subprocess.run([str(exe), "ping", "--socket", str(d.socket)], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        assert out.returncode == 0, out.stderr
    median = sorted(times)[2]
    print(f"benchctl ping wall time, median of 5 (measured here): {median * 1000:.0f} ms")
    # What it imports is the real guarantee: no aiohttp, no rich, no msgspec schemas.
    probe = subprocess.run([sys.executable, "-X", "importtime", "-m", "benchctl", "ping", "--socket",
                            str(d.socket)], capture_output=True, text=True)
    heavy = [m for m in ("aiohttp", "rich", "uvloop", "psutil") if f" {m}\n" in probe.stderr or f"| {m}\n"
             in probe.stderr]
    assert heavy == [], heavy
