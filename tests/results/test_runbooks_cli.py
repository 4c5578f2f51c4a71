"""`benchctl runbooks` lists the state dir's runbooks offline (ids never cut), and any unique start of
a runbook id or job id names a runbook; a start shared by several is an error naming them (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state
from testlib import benchctl_inproc

from benchd.errors import BenchdError
from benchd.results import runbook


def test_runbooks_lists_and_prefixes_resolve(tmp_path: Path) -> None:
    config, store, sweep, _ = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep), charts=False)
    rb = runbook.load_runbook(rid, config)
    twin = msgspec.structs.replace(rb, id=rid[:11] + "zzzztwin01")  # the same date, another job
    (config.runbooks_dir / f"{twin.id}.json").write_bytes(runbook.encode_runbook(twin))
    store.close()
    env = {"BENCHD_CACHE_DIR": str(config.cache_dir), "COLUMNS": "40"}
    out = benchctl_inproc("runbooks", "--state-dir", str(config.state_dir), env=env)
    assert out.returncode == 0, out.stderr
    assert rid in out.stdout and twin.id in out.stdout and "2 runbooks in" in out.stdout  # whole ids at 40 columns
    doc = json.loads(benchctl_inproc("runbooks", "--json", "--state-dir", str(config.state_dir), env=env).stdout)
    assert {r["id"] for r in doc["runbooks"]} == {rid, twin.id}
    assert runbook.resolve_runbook_path(rid[:12], config).stem == rid  # a unique start of the id
    assert runbook.resolve_runbook_path("zzz", config).stem == twin.id  # a unique start of the job id
    with pytest.raises(BenchdError, match=r"'2026-11-30-' is the start of 2 runbook ids"):
        runbook.resolve_runbook_path(rid[:11], config)
    bad = benchctl_inproc("report", rid[:11], "--state-dir", str(config.state_dir), env=env)
    assert bad.returncode == 2 and "give more of it" in bad.stderr
