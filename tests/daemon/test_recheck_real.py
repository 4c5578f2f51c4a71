"""Rechecks end to end with real llama-server processes: lock, change the runtime "binary", restart benchd.

The runtime the lock records is a wrapper script at a path of the test's own: at first it execs the
pinned llama-server unchanged; then it is replaced by one that reports another build in `--version` (a
new hash and a new version string, the same server underneath: an upgrade that changed nothing); then
by one that also runs the server in a slower real configuration. The slower one appends
`--ubatch-size 1`, which makes llama-server process the prompt one token per batch. Fewer threads
(`-t 1` against the default) was tried first, and on this loaded 2-core machine it made the server
faster (prompt 1,022 vs 390 tok/s, generation 132 vs 21 tok/s on the medium model), so it cannot
serve as a dependable slowdown.

Thresholds (the settings file's `threshold_pct`) are generous bounds, set for this shared machine:
under the other engineers' load (load average 13-14 on 2 cores) the same server's generation median
moved between ~200 and ~1,300 tok/s from one run to the next (scheduling latency per streamed token),
prompt medians by up to ~55 %. So the unchanged build is judged with a ±95 % margin (a run in a quieter
moment may read `faster`; a noisy one reads `same` or `unresolved`), and the slow build with 50 %: a
one-token micro-batch costs the prompt rate 85-97 % here, and its probes do not overlap the
evidence's, so the one comparison calls it different (its CI below −50 %). Even so a single run can land in a
busy minute (benchmarks/recheck_false_regressions.py: 1-2 first-run false regressions in 10 unchanged
rechecks here; the daemon confirms a regression with a second run before it notifies), so each case
may take up to `ATTEMPTS` rechecks, the later ones queued by hand (`benchctl recheck --now`): the
unchanged build must end without a regression in one of them, the slow build with a confirmed one;
every run stays in the lock's history.

The notifier is replaced (`[recheck] notify_command`) by a script that appends its arguments to a file:
a test cannot see a desktop notification, and what the daemon would post is exactly those arguments.
"""

from __future__ import annotations

import json
import os
import signal
import tomllib
from pathlib import Path
from typing import Any

import pytest
from testlib import clean_env, wait_until

from benchd.store import utcnow

pytestmark = [pytest.mark.slow]

SAME_VERSION = 'exec {real} "$@"\n'
NEW_VERSION = ('case "$1" in --version) echo "version: 0.0.2 (build {build}, commit feedbee)"; exit 0;; esac\n'
               'exec {real} "$@"{extra}\n')


def _wrapper(path: Path, real: Path, body: str, build: int = 0, extra: str = "") -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text("#!/bin/sh\n" + body.format(real=real, build=build, extra=extra))
    tmp.chmod(0o755)
    os.replace(tmp, path)  # a new inode and mtime, as an upgrade leaves it


def _status(d: Any) -> dict[str, Any]:
    return d.client().request("GET", "/v1/recheck")  # type: ignore[no-any-return]


def _stop(d: Any) -> None:
    d.signal(signal.SIGTERM)
    assert d.wait(20) == 0


def _checked_since(d: Any, since: str) -> dict[str, Any]:
    """The status once this daemon's start-up check has run (the state file keeps the previous one)."""
    return wait_until(lambda: (s := _status(d))["last_check_at"] and s["last_check_at"] > since and s,  # type: ignore[no-any-return]
                      timeout=30, what="the start-up check")


def _wait_verdict(d: Any, job_before: str | None, timeout: float = 240) -> dict[str, Any]:
    """The newest history entry once it is not the one seen before (the recheck job ran and was judged)
    and nothing is pending, read from one status snapshot (two reads let a confirming job end between
    them, returning the held entry with its confirmation already done)."""
    def done() -> dict[str, Any] | None:
        status = _status(d)
        last = status["last"]
        return last if last and last["job"] != job_before and not status["pending"] else None
    return wait_until(done, timeout=timeout, interval=0.5, what="the recheck's verdict")  # type: ignore[no-any-return]


#: Rechecks allowed per case (the first queued by the daemon, the others by hand).
ATTEMPTS = 3


def _attempts(d: Any, first: dict[str, Any], wanted: Any) -> tuple[dict[str, Any], list[str]]:
    """The first verdict `wanted` accepts (queuing more rechecks by hand), and every job judged."""
    entry, jobs = first, [first["job"]]
    while not wanted(entry) and len(jobs) < ATTEMPTS:
        print(f"attempt {len(jobs)} not as expected on this busy machine: {entry.get('verdicts')}")
        out = d.benchctl("recheck", "--now")
        assert out.returncode == 0, out.stderr
        entry = _wait_verdict(d, entry["job"])
        jobs.append(entry["job"])
    return entry, jobs


def test_lock_then_runtime_changes(run_daemon, short_base: Path, tiny_models, llama_server_bin) -> None:  # type: ignore[no-untyped-def]
    state = short_base / "s"
    state.mkdir(mode=0o700)
    bin_dir = short_base / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "llama-server"
    _wrapper(wrapper, llama_server_bin, SAME_VERSION)
    notified = short_base / "notified.txt"
    notifier = bin_dir / "notify"
    notifier.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {notified}\n')
    notifier.chmod(0o755)
    settings = '[recheck]\nwhen = ["ac-power"]\nat = ""\nthreshold_pct = {}\nnotify_command = ["' + str(notifier) + '"]\n'
    (state / "config.toml").write_text(settings.format(95))
    env = clean_env(BENCHD_CACHE_DIR=str(short_base / "cache"))  # keeps the test's hashes out of the shared cache

    # 1. a sweep and a lock on it
    d = run_daemon(env=env)
    sweep = {"name": "daily", "contexts": [512], "gen_tokens": 16, "probes": 6, "warmup": 1,
             "sustained": {"tokens": 0}, "cooldown": {"policy": "fixed", "seconds": 0, "max_seconds": 0},
             "candidates": [{"id": "tiny", "runtime": "llama-server", "model": str(tiny_models.target),
                             "binary": str(wrapper), "args": ["-t", "1", "-tb", "1"]}]}
    job = d.client().submit(sweep)["id"]
    rb = wait_until(lambda: d.client().job(job)["runbook_id"], timeout=180, interval=0.5, what="the evidence runbook")
    assert d.client().job(job)["state"] == "succeeded"
    st = wait_until(lambda: (s := _status(d))["last_check_at"] and s, timeout=30, what="the start-up check")
    assert st["last_check"] == ["no lock"] and st["pending"] is None
    out = d.benchctl("lock", "--candidate", "tiny", "--state-dir", str(state))
    assert out.returncode == 0, out.stderr
    lock_path = state / "locked.toml"
    locked_text = lock_path.read_text()
    fp = tomllib.loads(locked_text)["locked"]["fingerprint"]
    assert fp["binary"] == str(wrapper) and fp["binary_realpath"] == str(wrapper)
    assert fp["version"].startswith("llama.cpp b1-") and fp["model_sha256"]
    _stop(d)

    # 2. restart with nothing changed: no recheck
    since = utcnow()
    d = run_daemon(env=env)
    st = _checked_since(d, since)
    assert st["last_check"] == ["no change (tiny)"] and st["pending"] is None
    _stop(d)

    # 3. "upgrade" to a build that reports another version and hashes differently, same server underneath
    _wrapper(wrapper, llama_server_bin, NEW_VERSION, build=9999)
    d = run_daemon(env=env)
    st = wait_until(lambda: ((s := _status(d))["pending"] or s["last"]) and s, timeout=60, what="a recheck")
    pending_job = d.client().job((st["pending"] or st["last"])["job"])
    assert pending_job["when"] == ["ac-power"] and pending_job["not_before"] is None  # the configured conditions
    first = _wait_verdict(d, None)
    assert any(c.startswith("binary sha256: ") for c in first["cause"]), first["cause"]
    assert "version: llama.cpp b1-0c1e570 -> llama.cpp b9999-feedbee" in first["cause"], first["cause"]
    same, same_jobs = _attempts(d, first, lambda e: not e.get("regressed"))
    assert same["outcome"] == "succeeded" and same["runbook"] and same["lock_runbook"] == rb, same
    verdicts = same["verdicts"]["512"]
    # The compared metrics, plus energy per token (issue 16), which is "not measured" where the machine has
    # no readable counter (this VM) and judged like the others where it has one.
    assert set(verdicts) - {"j_per_gen_token"} == {"gen_tps", "prompt_tps", "ttft_ms", "mem_peak_bytes"}, verdicts
    assert verdicts["mem_peak_bytes"].startswith("same"), verdicts
    assert all(v.startswith(("same", "unresolved", "not measured")) or v.split(":")[0].endswith(" faster")
               for v in verdicts.values()), verdicts
    assert not same.get("regressed") and not same.get("regressions") and not same.get("notified")
    print(f"unchanged build, judged at 95 % (attempt {len(same_jobs)}): {verdicts}")
    _stop(d)
    notified.unlink(missing_ok=True)  # a false alarm of an earlier attempt is not what step 4 checks

    # 4. a build that is really slower: a regression, significant and beyond the threshold
    _wrapper(wrapper, llama_server_bin, NEW_VERSION, build=10000, extra=" --ubatch-size 1")
    (state / "config.toml").write_text(settings.format(50))
    d = run_daemon(env=env)
    first = _wait_verdict(d, same["job"])
    assert "version: llama.cpp b9999-feedbee -> llama.cpp b10000-feedbee" in first["cause"]
    slow, slow_jobs = _attempts(d, first, lambda e: e.get("regressed"))
    assert slow["outcome"] == "succeeded" and slow["regressed"] is True, slow
    assert slow.get("confirms") and "confirming the regression found by recheck job" in slow["cause"][0], json.dumps(slow)
    print(f"slow build, judged at 50 % (attempt {len(slow_jobs)}): {slow['verdicts']}")
    prompt = slow["verdicts"]["512"]["prompt_tps"]
    assert " % slower: different: " in prompt and "(α = 0.05)" in prompt, prompt
    assert any(r.startswith("prompt processing at context 512: ") and " % slower: different" in r for r in slow["regressions"])
    assert slow["notified"] == "notify_command: posted"
    title, message = notified.read_text().splitlines()[:2]
    assert title == "benchd: tiny got slower"
    assert "llama.cpp b1-0c1e570 -> llama.cpp b10000-feedbee" in message and "prompt processing at context 512" in message
    # benchctl locked and status show it; the lock file has both entries and its [locked] block as written
    shown = d.benchctl("locked", "--state-dir", str(state))
    assert "verdict: REGRESSED (confirmed by a second run" in shown.stdout, shown.stdout
    assert "prompt processing at context 512: " in shown.stdout and " % slower: different" in shown.stdout
    status = d.benchctl("status")
    assert "recheck   last" in status.stdout and "REGRESSED (confirmed" in status.stdout, status.stdout
    assert "prompt processing at context 512: " in status.stdout and " % slower: different" in status.stdout
    text = lock_path.read_text()
    assert text.startswith(locked_text)
    doc = tomllib.loads(text)
    assert doc["locked"] == tomllib.loads(locked_text)["locked"]
    jobs = [e["job"] for e in doc["rechecks"]]
    assert text.count("[[rechecks]]") == len(jobs) >= 3 and jobs[-1] == slow["job"]
    assert all(j in jobs for j in same_jobs + slow_jobs)
    held = next(e for e in doc["rechecks"] if e["job"] == slow["confirms"])  # the first slow run, held
    assert held["regressed"] and held["confirming"] == slow["job"] and held["notified"].startswith("held until")
    # comparing the two builds by hand: both fingerprints side by side, what changed called out
    cmp = d.benchctl("compare", rb, slow["runbook"], "--state-dir", str(state))
    assert cmp.returncode == 0, cmp.stderr
    assert "tiny: changed between A and B: binary, version" in cmp.stdout, cmp.stdout
    assert "* version" in cmp.stdout and "b10000-feedbee" in cmp.stdout
    builds = json.loads(d.benchctl("compare", rb, slow["runbook"], "--state-dir", str(state), "--json").stdout)["builds"]
    assert builds[0]["changed"] == ["binary", "version"] and builds[0]["b"]["version"] == "llama.cpp b10000-feedbee"
