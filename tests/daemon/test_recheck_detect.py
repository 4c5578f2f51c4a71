"""Recheck detection through a real `benchd` process, on a hand-built evidence runbook (tests/runbook_factory.py).

No inference server runs here: with the default `[recheck]` settings a queued recheck waits for the
next 03:00, so these tests see what is queued, why, and with which conditions, then cancel it. The
real-server rechecks (verdicts, notification) are in test_recheck_real.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

from runbook_factory import fill_job, setup_state
from testlib import benchctl_inproc, clean_env, wait_until

from benchd.daemon.recheck import next_local_time
from benchd.lock import lockfile as lock
from benchd.results import runbook
from benchd.store import Store


def _factory_lock(base: Path) -> tuple[Any, dict[str, Path]]:
    """A state dir with one evidence runbook and `gguf-spec` locked on it (cache dir beside it)."""
    config, store, sweep, models = setup_state(base)
    fill_job(store, sweep)
    runbook.write_runbook(config, store, "20261130-020000-abcd", charts=False)
    store.close()
    lock.lock_candidate(config, "gguf-spec")
    return config, models


def _env(config: Any) -> dict[str, str]:
    return clean_env(BENCHD_CACHE_DIR=str(config.cache_dir))


def _ctl(config: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return benchctl_inproc(*args, env={"BENCHD_CACHE_DIR": str(config.cache_dir), "BENCHD_SOCKET": str(config.socket),
                                       "BENCHD_STATE_DIR": None})  # type: ignore[dict-item]


def _status(d: Any) -> dict[str, Any]:
    return d.client().request("GET", "/v1/recheck")  # type: ignore[no-any-return]


def test_unchanged_fingerprint_queues_nothing(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    config, _ = _factory_lock(short_base)
    d = run_daemon(state_dir=config.state_dir, env=_env(config))
    st = wait_until(lambda: (s := _status(d))["last_check_at"] and s, timeout=30, what="the start-up check")
    assert st["last_check"] == ["no change (gguf-spec)"] and st["pending"] is None
    assert st["lock_candidate"] == "gguf-spec" and st["settings_error"] is None
    assert [j["id"] for j in d.client().jobs()["jobs"]] == ["20261130-020000-abcd"]


def test_model_change_queues_a_recheck_with_the_conditions(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    config, models = _factory_lock(short_base)
    before = config.locked_path.read_text()
    models["gguf"].write_bytes(models["gguf"].read_bytes() + b"re-quantized")
    d = run_daemon(state_dir=config.state_dir, env=_env(config))
    st = wait_until(lambda: (s := _status(d))["pending"] and s, timeout=30, what="a queued recheck")
    pending, job = st["pending"], st["pending_job"]
    assert pending["candidate"] == "gguf-spec"
    assert len(pending["cause"]) == 1 and pending["cause"][0].startswith("model sha256: "), pending["cause"]
    # the defaults: idle + AC power, not before the next 03:00 local time
    assert job["when"] == ["idle", "ac-power"] and job["state"] in ("queued", "waiting")
    assert job["not_before"] == next_local_time("03:00", datetime.now().astimezone())
    sweep = d.client().job(pending["job"])["sweep"]
    assert sweep["name"] == "recheck-gguf-spec" and sweep["contexts"] == [512, 1024]
    assert sweep["gen_tokens"] == 32 and sweep["warmup"] == 1 and sweep["eval_tier"] == "none"
    assert sweep["probes"] == 3  # the evidence's 3 (the one comparison can call 3 vs 3 different)
    cand = sweep["candidates"][0]
    assert cand["args"] == ["-t", "1"] and cand["binary"] == "/opt/llama/llama-server" and cand["ctx_size"] == 4096
    # status says a recheck is pending and why it waits
    out = _ctl(config, "status")
    assert out.returncode == 0, out.stderr
    assert f"recheck   PENDING job {pending['job']}" in out.stdout and "model sha256" in out.stdout
    # a second check finds the same change but does not queue twice; by hand is refused while one is pending
    again = _ctl(config, "recheck", "--now")
    assert again.returncode == 2 and "already queued" in again.stderr
    # cancelled: the history records it, the [locked] block is byte for byte what the human wrote
    d.client().cancel(pending["job"])
    wait_until(lambda: _status(d)["last"], timeout=30, what="the cancelled recheck in the history")
    text = config.locked_path.read_text()
    assert text.startswith(before.rstrip("\n")) and "[[rechecks]]" in text[len(before):]
    entry = tomllib.loads(text)["rechecks"][-1]
    assert entry["outcome"] == "cancelled" and entry["job"] == pending["job"] and "verdicts" not in entry
    assert entry["fingerprint"]["model_sha256"] != tomllib.loads(before)["locked"]["model_sha256"]
    shown = _ctl(config, "locked", "--state-dir", str(config.state_dir))
    assert "last recheck:" in shown.stdout and "recheck cancelled" in shown.stdout, shown.stdout


def test_bad_settings_keep_the_defaults_and_doctor_says_so(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    config, _ = _factory_lock(short_base)
    settings = config.state_dir / "config.toml"
    for text, needle in (('[recheck]\nwhen = ["idle"]\nsometimes = true\n', "unknown field `sometimes`"),
                         ('[recheck]\nat = "25:00"\n', "recheck.at '25:00' is not a time of day")):
        settings.write_text(text)
        d = run_daemon(state_dir=config.state_dir, env=_env(config))
        st = _status(d)
        assert needle in st["settings_error"] and str(settings) in st["settings_error"], st["settings_error"]
        assert st["settings"]["when"] == ["idle", "ac-power"] and st["settings"]["at"] == "03:00"
        assert d.client().health()["pid"] == d.pid  # still up
        doc = json.loads(_ctl(config, "doctor", "--state-dir", str(config.state_dir), "--json").stdout)
        check = next(c for c in doc["checks"] if c["name"] == "recheck")
        assert check["status"] == "warn" and needle in check["summary"] and "defaults in force" in check["summary"]
        assert doc["recheck"]["from"] == "daemon"
        d.signal(signal.SIGTERM)
        assert d.wait(15) == 0
    # offline, doctor reads the file itself
    doc = json.loads(_ctl(config, "doctor", "--state-dir", str(config.state_dir), "--json").stdout)
    check = next(c for c in doc["checks"] if c["name"] == "recheck")
    assert check["status"] == "warn" and "25:00" in check["summary"] and doc["recheck"]["from"] == "file"
    settings.write_text('[recheck]\nwhen = ["ac-power"]\nat = ""\nrecheck_hours = 12\n')
    doc = json.loads(_ctl(config, "doctor", "--state-dir", str(config.state_dir), "--json").stdout)
    check = next(c for c in doc["checks"] if c["name"] == "recheck")
    assert check["status"] == "ok" and "every 12 h" in check["summary"] and "ac-power" in check["summary"]


def test_recheck_by_hand_needs_a_lock(run_daemon) -> None:  # type: ignore[no-untyped-def]
    d = run_daemon()
    out = d.benchctl("recheck", "--now")
    assert out.returncode == 2 and "no lock file" in out.stderr
    assert d.client().health()["pid"] == d.pid


def test_timer_notices_a_change_while_running_and_by_hand_uses_the_settings(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    """`recheck_hours` is the period of the check while benchd runs (here 0.0003 h = 1.08 s)."""
    config, models = _factory_lock(short_base)
    (config.state_dir / "config.toml").write_text('[recheck]\nrecheck_hours = 0.0003\nwhen = ["idle"]\nat = "23:30"\n')
    d = run_daemon(state_dir=config.state_dir, env=_env(config))
    first = wait_until(lambda: (s := _status(d))["last_check_at"] and s, timeout=30, what="the start-up check")
    assert first["last_check"] == ["no change (gguf-spec)"] and first["next_check_at"]
    models["draft"].write_bytes(b"a new draft")
    st = wait_until(lambda: (s := _status(d))["pending"] and s, timeout=60, what="the timer's recheck")
    assert st["pending"]["cause"][0].startswith("draft model sha256: ") and st["last_check_at"] > first["last_check_at"]
    job = st["pending_job"]
    assert job["when"] == ["idle"] and job["not_before"] == next_local_time("23:30", datetime.now().astimezone())
    d.client().cancel(job["id"])
    wait_until(lambda: _status(d)["last"], timeout=30, what="the cancelled recheck in the history")
    # by hand, without --now: the settings' conditions apply; the cause says who asked
    out = _ctl(config, "recheck")
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    got = d.client().job(job_id)
    assert got["when"] == ["idle"] and got["not_before"] and got["name"] == "recheck-gguf-spec"
    assert "requested by hand" in out.stderr and "when idle" in out.stderr


def test_a_change_without_evidence_to_compare_is_said_not_queued(run_daemon, short_base: Path) -> None:  # type: ignore[no-untyped-def]
    config, models = _factory_lock(short_base)
    for f in config.runbooks_dir.iterdir():  # the evidence runbook was pruned, with its job
        f.unlink()
    store = Store(config.db_path)
    store.delete_jobs(["20261130-020000-abcd"])
    store.close()
    models["gguf"].write_bytes(b"re-quantized")
    d = run_daemon(state_dir=config.state_dir, env=_env(config))
    st = wait_until(lambda: (s := _status(d))["last_check_at"] and s, timeout=30, what="the start-up check")
    assert st["pending"] is None and st["last_check"][0].startswith("model sha256: ")
    assert "cannot recheck: the lock's evidence runbook" in st["last_check"][-1], st["last_check"]
    out = _ctl(config, "recheck", "--now")
    assert out.returncode == 2 and "re-lock on a current runbook" in out.stderr, out.stderr
    assert d.client().health()["pid"] == d.pid
