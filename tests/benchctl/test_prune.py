"""`benchctl prune`: what goes, what stays (locked runbooks, unfinished jobs, pinned runtimes), driven as
a subprocess on a state dir built with the real Store and a lock file in the lock's TOML shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from benchctl.commands.prune import parse_duration
from benchd.schemas import Candidate, Sweep
from benchd.servers.provision import llama_dir
from benchd.stats.notation import fmt_bytes
from benchd.store import Store

BIN = Path(sys.executable).parent
DAY = 86400.0
NOW = time.time()


def _iso(days_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days_ago)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _age(path: Path, days: float) -> None:
    t = NOW - days * DAY
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t))


def _write(path: Path, text: str = "x" * 100, days: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    _age(path, days)
    return path


def _sweep(model: str) -> Sweep:
    return Sweep(name="t", contexts=[64], gen_tokens=4, candidates=[Candidate(id="c", runtime="llama-server", model=model)])


def _runbook(state: Path, job: str, days: float) -> list[Path]:
    rid = f"2026-10-01-{job}"
    return [_write(state / "runbooks" / f"{rid}{s}", days=days) for s in (".json", ".md", ".pareto.png")]


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    state, cache = tmp_path / "state", tmp_path / "cache"
    state.mkdir(mode=0o700)
    models = cache / "models"
    w: dict[str, Any] = {"state": state, "cache": cache}
    w["model_old"] = _write(models / "tiny-old" / "model.gguf", days=60).parent
    w["model_locked"] = _write(models / "tiny-locked" / "model.gguf", days=60).parent
    w["model_pending"] = _write(models / "tiny-pending" / "model.gguf", days=60).parent
    w["model_new"] = _write(models / "tiny-new" / "model.gguf", days=1).parent
    w["runtime_old"] = _write(cache / "runtimes" / "llama.cpp-0.0.1" / "bin" / "llama-server", days=90).parent.parent
    w["runtime_pinned"] = _write(llama_dir(cache) / "bin" / "llama-server", days=90).parent.parent
    for key, days in (("model_old", 60), ("model_locked", 60), ("model_pending", 60), ("runtime_old", 90), ("runtime_pinned", 90)):
        _age(w[key], days)  # the dirs too: a dir's own mtime counts as "last written"

    store = Store(state / "benchd.sqlite3")
    jobs = {"old": 40, "locked": 40, "previous": 40, "recent": 1}
    for name, days in jobs.items():
        job_id = f"job-{name}-0001"
        store.create_job(_sweep(str(w["model_new"] / "model.gguf")), job_id=job_id)
        store.update_job(job_id, state="succeeded", started_at=_iso(days + 0.1), finished_at=_iso(days))
        # Files written recently: the store's finished_at, not the mtime, dates a known job.
        _write(state / "logs" / job_id / "c.log", days=0)
        w[f"runbook_{name}"] = _runbook(state, job_id, days=0)
    store.create_job(_sweep(str(w["model_pending"] / "model.gguf")), job_id="job-running-0001")
    store.update_job("job-running-0001", state="running", started_at=_iso(50))
    w["logs_running"] = _write(state / "logs" / "job-running-0001" / "c.log", days=50).parent
    store.close()
    w["logs_unknown_old"] = _write(state / "logs" / "job-gone-00001" / "c.log", days=45).parent
    w["logs_unknown_new"] = _write(state / "logs" / "job-gone-00002" / "c.log", days=2).parent
    _age(w["logs_unknown_old"], 45)
    _age(w["logs_unknown_new"], 2)
    w["daemon_log"] = _write(state / "logs" / "benchd.log", days=100)
    w["lock"] = _write(state / "locked.toml", (
        "[locked]\nschema_version = 1\ncandidate = \"c\"\nruntime = \"llama-server\"\n"
        f"model_path = \"{w['model_locked'] / 'model.gguf'}\"\nrunbook = \"2026-10-01-job-locked-0001\"\n"
        "[previous]\nschema_version = 1\ncandidate = \"c\"\nruntime = \"llama-server\"\n"
        f"model_path = \"{w['model_new'] / 'model.gguf'}\"\nrunbook = \"2026-10-01-job-previous-0001\"\n"
    ))
    return w


def prune(w: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHD_")}
    env.update(BENCHD_STATE_DIR=str(w["state"]), BENCHD_CACHE_DIR=str(w["cache"]))
    done = subprocess.run([str(BIN / "benchctl"), "prune", *args], capture_output=True, text=True, env=env, timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _expected_deleted(w: dict[str, Any]) -> set[str]:
    return {
        str(w["state"] / "logs" / "job-old-0001"), str(w["state"] / "logs" / "job-locked-0001"),
        str(w["state"] / "logs" / "job-previous-0001"), str(w["logs_unknown_old"]),
        *(str(p) for p in w["runbook_old"]), str(w["model_old"]), str(w["runtime_old"]),
        "job:job-old-0001",  # the store record; the locked jobs' records stay
    }


def test_dry_run_lists_and_deletes_nothing(world: dict[str, Any]) -> None:
    done = prune(world, "--older-than", "30d", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {i["path"] for i in report["deleted"]} == _expected_deleted(world)
    assert all(Path(p).exists() for p in _expected_deleted(world) if not p.startswith("job:"))
    kept = {k["path"]: k["why"] for k in report["kept"]}
    assert kept[str(world["runbook_locked"][0])] == "locked.toml refers to it"
    assert kept[str(world["runbook_previous"][0])] == "locked.toml refers to it"  # the [previous] lock too
    assert kept[str(world["model_locked"])] == "locked.toml refers to it"
    assert kept[str(world["model_pending"])] == "an unfinished job's sweep uses it"
    assert kept[str(world["logs_running"])] == "job job-running-0001 is running"
    assert report["freed_bytes"] == 0 and report["dry_run"] is True


def test_prune_deletes_exactly_the_old_things(world: dict[str, Any]) -> None:
    done = prune(world, "--older-than", "30d")
    assert done.returncode == 0, done.stderr
    for path in _expected_deleted(world):
        assert not Path(path).exists(), path
        assert "deleted " in done.stdout and path in done.stdout
    for key in ("model_locked", "model_pending", "model_new", "runtime_pinned", "logs_running",
                "logs_unknown_new", "daemon_log", "lock"):
        assert world[key].exists(), key
    for key in ("runbook_locked", "runbook_previous", "runbook_recent"):
        assert all(p.exists() for p in world[key]), key
    assert (world["state"] / "logs" / "job-recent-0001").exists()
    assert (world["state"] / "benchd.sqlite3").exists()
    store = Store(world["state"] / "benchd.sqlite3")
    left = {j.id for j in store.list_jobs(limit=100).jobs}
    store.close()
    assert left == {"job-locked-0001", "job-previous-0001", "job-recent-0001", "job-running-0001"}
    assert f"deleted {len(_expected_deleted(world))} items, " in done.stdout
    again = prune(world, "--older-than", "30d")
    assert again.returncode == 0 and "nothing older than 30d to delete" in again.stdout


def test_unreadable_lock_keeps_every_runbook_and_cache(world: dict[str, Any]) -> None:
    world["lock"].write_text("this is [not toml")
    done = prune(world, "--older-than", "30d", "--json")
    report = json.loads(done.stdout)
    deleted = {i["path"] for i in report["deleted"]}
    assert not any("runbooks" in p or "/cache/" in p for p in deleted)
    assert str(world["state"] / "logs" / "job-old-0001") in deleted  # logs are not evidence a lock needs
    assert all(p.exists() for p in world["runbook_old"])
    assert any("cannot read" in w and "keeping every runbook" in w for w in report["warnings"])


def test_bad_duration_is_exit_2(world: dict[str, Any]) -> None:
    done = prune(world, "--older-than", "soon")
    assert done.returncode == 2 and "not a duration" in done.stderr


def test_units() -> None:
    assert parse_duration("30d") == 30 * DAY
    assert parse_duration("2w") == 14 * DAY
    assert parse_duration("90min") == parse_duration("90m") == 5400
    assert parse_duration("1.5h") == 5400
    with pytest.raises(ValueError):
        parse_duration("30")
    assert fmt_bytes(512, 1) == "512 B"
    assert fmt_bytes(3 * 1024**3, 1) == "3.0 GiB"
