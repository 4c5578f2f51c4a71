"""Rechecks, the pure parts: fingerprints and what changed, the hash cache, verdict words, probe counts,
the lock's [[rechecks]] history (appended without touching [locked], kept on re-lock), the recheck sweep,
the settings file, the notifier's choice of command and the next HH:MM.

The runtime binary here is a real executable file (a shell script that answers `--version` like
llama-server does); the daemon-level and real-server paths are in tests/daemon/test_recheck_detect.py and test_recheck_real.py,
the fingerprint of a real MLX install in test_recheck_verdicts_real.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state

from benchd.config_toml import load_settings
from benchd.daemon.recheck import next_local_time
from benchd.lock import lockfile as lock
from benchd.lock.notify import notify, notify_argv
from benchd.lock.recheck import (
    baseline,
    describe,
    finish_entry,
    last_recheck,
    recheck_probes,
    recheck_sweep,
    verdicts,
)
from benchd.results import runbook
from benchd.results.compare import MetricComparison, compare_metric, compare_runbooks
from benchd.sensors import facts
from benchd.servers.fingerprint import changed_kinds, changes, executable_of, take_fingerprint
from benchd.stats.comparison import AXES, compare_to_history


def _fake_llama(path: Path, build: int) -> Path:
    path.write_text(f'#!/bin/sh\necho "version: 0.5.0 (build {build}, commit 0c1e570)"\n')
    path.chmod(0o755)
    return path


@pytest.fixture()
def state(tmp_path: Path):
    config, store, sweep, models = setup_state(tmp_path)
    binary = _fake_llama(tmp_path / "bin-llama-server", 1)
    sweep = msgspec.structs.replace(sweep, candidates=[msgspec.structs.replace(c, binary=str(binary))
                                                       if c.runtime == "llama-server" else c for c in sweep.candidates])
    fill_job(store, sweep)
    rid = runbook.write_runbook(config, store, "20261130-020000-abcd", charts=False)
    yield config, runbook.load_runbook(rid, config), models, binary, store
    store.close()


def test_fingerprint_and_changes(state) -> None:
    config, rb, models, binary, _ = state
    cand = next(c for c in rb.sweep.candidates if c.id == "gguf-spec")
    fp = take_fingerprint(cand, config, "test")
    assert fp.binary == str(binary) and fp.binary_realpath == str(binary.resolve())
    assert fp.binary_sha256 == hashlib.sha256(binary.read_bytes()).hexdigest()
    assert fp.binary_bytes == binary.stat().st_size and fp.version == "llama.cpp b1-0c1e570"
    assert fp.model_sha256 == hashlib.sha256(models["gguf"].read_bytes()).hexdigest()
    assert fp.draft_model_sha256 == hashlib.sha256(models["draft"].read_bytes()).hexdigest()
    # the runbook carries the same fingerprint, and the lock copies it
    prov = next(p for p in rb.provenance.candidates if p.candidate == "gguf-spec")
    assert prov.fingerprint is not None and prov.fingerprint.binary_sha256 == fp.binary_sha256
    assert lock.build_lock(rb, "gguf-spec").fingerprint == prov.fingerprint
    # a touch (same bytes, new mtime) is no change; new bytes + a new version are
    os.utime(binary, ns=(1, 1))
    assert changes(fp, take_fingerprint(cand, config, "test")) == []
    _fake_llama(binary, 2)
    new = take_fingerprint(cand, config, "test")
    lines = changes(fp, new)
    assert [line.split(":")[0] for line in lines] == ["binary sha256", "version"]
    assert "version: llama.cpp b1-0c1e570 -> llama.cpp b2-0c1e570" in lines
    assert changed_kinds(fp, new) == ["binary", "version"]
    models["gguf"].write_bytes(b"other weights")
    assert changed_kinds(new, take_fingerprint(cand, config, "test")) == ["model"]
    # a binary that no longer exists is a change, said with the reason
    binary.unlink()
    gone = take_fingerprint(cand, config, "test")
    assert any(line.startswith("binary sha256: ") and "unreadable" in line for line in changes(new, gone))


def test_mlx_dir_hash_is_cached_by_stat(tmp_path: Path) -> None:
    d = tmp_path / "mlx"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"w" * 1000)
    (d / "config.json").write_text("{}")
    cache = tmp_path / "hashes.json"
    first = facts.hash_model(d, cache)
    keys = json.loads(cache.read_text())
    assert len(keys) == 1 and "|dir|" in next(iter(keys))
    # poison the cached digest: an unchanged dir must be answered from the cache, not re-read
    cache.write_text(json.dumps({k: "cached" for k in keys}))
    assert facts.hash_model(d, cache).sha256 == "cached"
    (d / "model.safetensors").write_bytes(b"x" * 1000)  # same size, new mtime and bytes
    again = facts.hash_model(d, cache)
    assert again.sha256 not in ("cached", first.sha256) and again.bytes == first.bytes == 1002


def _m(metric: str, a: list[float], b: list[float], threshold: float = 5.0) -> MetricComparison:
    rows_a = [_Probe(metric, v) for v in a]
    rows_b = [_Probe(metric, v) for v in b]
    return compare_metric(metric, AXES[metric].better, rows_a, rows_b, margin_pct=threshold)  # type: ignore[arg-type]


class _Probe:
    def __init__(self, metric: str, v: float | None) -> None:
        setattr(self, metric, v)
        self.null_reasons = {metric: "mlx_lm.server reports no prompt timing"} if v is None else {}


BASE = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]


@pytest.mark.parametrize(("metric", "scale", "start", "worse"), [
    ("gen_tps", 0.70, "30.0 % slower: different: ", True),
    ("gen_tps", 1.30, "30.0 % faster: different: ", False),
    ("gen_tps", 0.99, "same: tied within ±5 % [", False),
    ("ttft_ms", 1.40, "40.0 % slower: different: ", True),
    ("mem_peak_bytes", 1.10, "10.0 % larger: different: ", True),
    ("mem_peak_bytes", 0.90, "10.0 % smaller: different: ", False),
    ("j_per_gen_token", 1.25, "25.0 % more energy per token: different: ", True),
    ("j_per_gen_token", 0.80, "20.0 % less energy per token: different: ", False),
])
def test_verdict_words(metric: str, scale: float, start: str, worse: bool) -> None:
    """The one comparison's verdict in words, energy per token included; a regression is different and worse."""
    m = _m(metric, BASE, [v * scale for v in BASE])
    text, regressed = describe(m)
    assert text.startswith(start) and text.endswith("(α = 0.05)") and regressed is worse, text
    assert m.text in text  # the same words `compare` prints


def test_unresolved_and_not_measured_are_never_regressions() -> None:
    text, worse = describe(_m("gen_tps", [100.0, 130.0, 80.0], [90.0, 115.0, 70.0]))
    assert text.startswith("unresolved: ") and not worse
    text, worse = describe(_m("prompt_tps", [100.0], [None]))  # type: ignore[list-item]
    assert text == "not measured: mlx_lm.server reports no prompt timing" and not worse


def test_between_session_spread_once_there_are_three_earlier_rechecks() -> None:
    """A within-session difference that lies inside the spread of earlier rechecks is not a regression."""
    m = _m("gen_tps", BASE, [v * 0.90 for v in BASE])
    wide = compare_to_history([100.0, 80.0, 95.0, 120.0], m.median_b or 0, axis="gen_tps", better="higher",
                              margin_pct=5.0)
    text, worse = describe(m, wide)
    assert "10.0 % slower: different" in text and "against earlier rechecks: unresolved" in text and not worse
    tight = compare_to_history([100.0, 100.5, 99.5, 100.2], m.median_b or 0, axis="gen_tps", better="higher",
                               margin_pct=5.0)
    assert tight.verdict == "different" and tight.guard_p == pytest.approx(2 / 5)
    assert describe(m, tight)[1] is True


def test_recheck_probes() -> None:
    assert recheck_probes(1) == 3 and recheck_probes(6) == 6


def test_history_appended_without_touching_locked_and_kept_on_relock(state) -> None:
    config, rb, _models, _binary, store = state
    path, _ = lock.lock_candidate(config, "gguf-spec", note="daily")
    before = path.read_text()
    sweep = recheck_sweep(lock.read_lock(path).locked, config)
    assert sweep.name == "recheck-gguf-spec" and sweep.contexts == [512, 1024] and sweep.probes == 3
    assert sweep.candidates[0].binary == rb.sweep.candidates[0].binary and sweep.eval_tier == "none"
    assert sweep.sustained.tokens == 0 and {d.axis for d in sweep.deferred} >= {"eval", "sustained"}
    # a "recheck" job: the same candidate 30 % slower at generation, written as a runbook
    slow = msgspec.structs.replace(rb.sweep, probes=5)
    fill_job(store, slow, job_id="20261130-040000-beef", gen_scale=0.7)
    rid = runbook.write_runbook(config, store, "20261130-040000-beef", charts=False)
    lf = lock.read_lock(path)
    entry = finish_entry(config, lf, job="20261130-040000-beef", outcome="succeeded", runbook_id=rid,
                         lock_runbook=lf.locked.runbook, locked_at=lf.locked.locked_at, cause=["version: a -> b"],
                         fingerprint=lf.locked.fingerprint, threshold_pct=5.0)
    # three evidence probes against five, 30 % slower at CV 1 %: different, a regression (the old rule
    # had "no verdict: too few probes" here); the medians are kept for later rechecks
    assert entry.verdicts["512"]["gen_tps"].startswith("30.0 % slower: different: ") and entry.regressed
    assert entry.medians["512"]["gen_tps"] == pytest.approx(120.0 * 0.7)
    lock.append_recheck(path, entry)
    text = path.read_text()
    assert text.startswith(before.rstrip("\n")) and text.count("[[rechecks]]") == 1
    assert tomllib.loads(text)["locked"] == tomllib.loads(before)["locked"]
    again = msgspec.structs.replace(entry, job="20261130-050000-cafe", regressed=True, regressions=["x"])
    doc = lock.append_recheck(path, again)
    assert [e.job for e in doc.rechecks] == ["20261130-040000-beef", "20261130-050000-cafe"]
    assert last_recheck(doc) == again
    # a human re-locks: the history stays, but belongs to the previous lock
    _, relocked = lock.lock_candidate(config, "gguf-plain")
    assert len(relocked.rechecks) == 2 and last_recheck(relocked) is None
    assert lock.read_lock(path).previous is not None


def test_verdicts_with_enough_probes(state) -> None:
    config, rb, _models, _binary, store = state
    six = msgspec.structs.replace(rb.sweep, probes=6)
    from runbook_factory import GEN

    saved = dict(GEN)
    GEN.update({key: values * 2 for key, values in saved.items()})  # six probes per cell, this test only
    try:
        fill_job(store, six, job_id="20261130-060000-aaaa")
        fill_job(store, six, job_id="20261130-070000-bbbb", gen_scale=0.7)
        a = runbook.load_runbook(runbook.write_runbook(config, store, "20261130-060000-aaaa", charts=False), config)
        b = runbook.load_runbook(runbook.write_runbook(config, store, "20261130-070000-bbbb", charts=False), config)
    finally:
        GEN.clear()
        GEN.update(saved)
    got, regressions, medians = verdicts(a, b, "gguf-plain", 5.0)
    assert got["512"]["gen_tps"].startswith("30.0 % slower: different: ")
    assert got["512"]["prompt_tps"].startswith("same: tied within ±5 %")
    assert regressions[0].startswith(("generation speed at context 1024: 30.0 % slower", "generation speed at context 512: 30.0 % slower"))
    assert set(medians) == {"512", "1024"}
    # the same rows through `compare` give the same verdict
    cmp = compare_runbooks(a, b, margin_pct=5.0)
    m = next(m for c in cmp.cells if c.candidate == "gguf-plain" and c.context == 512 for m in c.metrics
             if m.metric == "gen_tps")
    assert m.verdict == "different" and m.text in got["512"]["gen_tps"]
    assert compare_runbooks(a, b).builds[0].changed == []


def test_settings_file(tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    assert load_settings(f) == (load_settings(f)[0], None)  # no file: defaults, no error
    f.write_text('[recheck]\nwhen = []\nat = "23:59"\nthreshold_pct = 10\nnotify_command = ["/bin/true"]\n')
    got, err = load_settings(f)
    assert err is None and got.recheck.at == "23:59" and got.recheck.when == [] and got.recheck.threshold_pct == 10
    for text, needle in (('[recheck]\nat = "7:00"\n', "recheck.at '7:00' is not a time of day"),
                         ('[recheck]\nwhen = ["sunny"]\n', "field recheck.when[0]"),
                         ('[recheck]\nrecheck_hours = 0\n', "field recheck.recheck_hours"),
                         ("[recheckk]\n", "unknown field `recheckk`"), ("x = \n", "not valid TOML")):
        f.write_text(text)
        got, err = load_settings(f)
        assert err is not None and needle in err and str(f) in err and err.endswith("using the defaults"), err
        assert got.recheck.when == ["idle", "ac-power"] and got.recheck.at == "03:00"


def test_next_local_time() -> None:
    now = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    got = datetime.fromisoformat(next_local_time("03:00", now))
    local = got.astimezone()
    assert (local.hour, local.minute, local.second) == (3, 0, 0)
    assert 0 < (got - now).total_seconds() <= 24 * 3600
    assert next_local_time("03:00", got) != next_local_time("03:00", now)  # at 03:00 sharp: the next day


def test_notifier_choice_and_a_failing_command(tmp_path: Path) -> None:
    argv, how = notify_argv("t", 'm "q"', ["/x/notify", "--flag"])
    assert argv == ["/x/notify", "--flag", "t", 'm "q"'] and how == "notify_command"
    argv, how = notify_argv("t", 'm "q"', [])
    if sys.platform == "darwin":
        assert argv == ["osascript", "-e", 'display notification "m \\"q\\"" with title "t"']
    elif argv is not None:
        assert how == "notify-send" and argv[-2:] == ["t", 'm "q"']
    else:
        assert "no desktop notifier" in how
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    bad.chmod(0o755)
    assert asyncio.run(notify("t", "m", [str(bad)])) == "notify_command: exit 3 nope"
    assert asyncio.run(notify("t", "m", [str(tmp_path / "missing")])).startswith("notify_command: failed")


def test_executable_of() -> None:
    assert executable_of("/venv/bin/python -m mlx_lm.server") == "/venv/bin/python"
    assert executable_of(sys.executable) == sys.executable and executable_of(None) is None
    assert lock.locked_candidate(lock.Locked(
        schema_version=2, candidate="m", runtime="mlx_lm.server", model_path="/m", runbook="r", locked_at="t",
        binary="/venv/bin/python -m mlx_lm.server")).binary == "/venv/bin/python"


def test_a_version_1_lock_is_checked_on_what_it_recorded(state) -> None:
    """A lock written before fingerprints (schema 1): binary path, version string and model sha256 only."""
    config, _rb, models, binary, _ = state
    path, _ = lock.lock_candidate(config, "gguf-spec")
    data = tomllib.loads(path.read_text())["locked"]
    data.pop("fingerprint")
    data["schema_version"] = 1
    data["binary_version"] = "llama.cpp b1-0c1e570"  # as llama-server's /props makes the adapter record it
    path.write_text(lock.dumps_toml({"locked": data}))
    lf = lock.read_lock(path)
    base = baseline(lf)
    assert base.binary == str(binary) and base.binary_sha256 is None and base.version == "llama.cpp b1-0c1e570"
    now = take_fingerprint(lock.locked_candidate(lf.locked), config, "test")
    assert changes(base, now) == []  # no sha256 to compare the binary with: no evidence of a change
    _fake_llama(binary, 7)
    models["gguf"].write_bytes(b"new")
    got = take_fingerprint(lock.locked_candidate(lf.locked), config, "test")
    assert changed_kinds(base, got) == ["model", "version"]


def test_summary_words_for_held_confirmed_and_not_confirmed() -> None:
    from benchd.lock.recheck import summary
    from benchd.schemas import RecheckEntry

    base = RecheckEntry(at="t", job="j2", outcome="succeeded", candidate="c", locked_at="l", lock_runbook="r",
                        verdicts={"512": {"gen_tps": "30.0 % slower: different: 30.0 % [29–31 %] slower"}},
                        regressed=True, regressions=["generation speed at context 512: 30.0 % slower: different"])
    held = msgspec.structs.replace(base, confirming="j3")
    assert summary(held).startswith("suspected regression, being confirmed by recheck job j3: generation speed")
    confirmed = msgspec.structs.replace(base, confirms="j1")
    assert summary(confirmed).startswith("REGRESSED (confirmed by a second run; first: job j1): generation speed")
    gone = msgspec.structs.replace(base, confirms="j1", regressed=False, regressions=[],
                                   verdicts={"512": {"gen_tps": "same: tied within ±5 % [−2.0–+0.1 %]"}})
    assert summary(gone) == "not confirmed (job j1's regression did not repeat): no regression: every metric the same"
    failed = msgspec.structs.replace(base, outcome="failed", error="server exited")
    assert summary(failed) == "recheck failed: server exited"


def test_recheck_contexts_a_person_names_in_the_lock(state) -> None:
    from benchd.errors import BenchdError

    config, _rb, _models, _binary, _ = state
    path, doc = lock.lock_candidate(config, "gguf-spec")
    subset = msgspec.structs.replace(doc.locked, recheck_contexts=[1024])
    assert recheck_sweep(subset, config).contexts == [1024]
    with pytest.raises(BenchdError, match=r"recheck_contexts \[4096\] are not among the lock's evidence contexts"):
        recheck_sweep(msgspec.structs.replace(doc.locked, recheck_contexts=[4096]), config)
    # written by hand into the file, it reads back (the person's edit; benchd never writes it)
    text = path.read_text().replace('candidate = "gguf-spec"', 'candidate = "gguf-spec"\nrecheck_contexts = [512]', 1)
    path.write_text(text)
    assert recheck_sweep(lock.read_lock(path).locked, config).contexts == [512]
