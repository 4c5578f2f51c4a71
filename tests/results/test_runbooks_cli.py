"""`benchctl runbooks` lists the state dir's runbooks offline (ids never cut), and any unique start of
a runbook id or job id names a runbook; a start shared by several is an error naming them (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state

from benchd.errors import BenchdError
from benchd.results import runbook


def test_runbooks_lists_and_prefixes_resolve(tmp_path: Path) -> None:
    config, store, sweep, _ = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep))
    rb = runbook.load_runbook(rid, config)
    twin = msgspec.structs.replace(rb, id=rid[:11] + "zzzztwin01")  # the same date, another job
    (config.runbooks_dir / f"{twin.id}.json").write_bytes(runbook.encode_runbook(twin))
    store.close()
    env = {**os.environ, "BENCHD_CACHE_DIR": str(config.cache_dir), "COLUMNS": "40"}
    base = [sys.executable, "-m", "benchctl"]
    out = subprocess.run([*base, "runbooks", "--state-dir", str(config.state_dir)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert rid in out.stdout and twin.id in out.stdout and "2 runbooks in" in out.stdout  # whole ids at 40 columns
    doc = json.loads(subprocess.run([*base, "runbooks", "--json", "--state-dir", str(config.state_dir)],
                                    capture_output=True, text=True, env=env, timeout=60).stdout)
    assert {r["id"] for r in doc["runbooks"]} == {rid, twin.id}
    assert runbook.resolve_runbook_path(rid[:12], config).stem == rid  # a unique start of the id
    assert runbook.resolve_runbook_path("zzz", config).stem == twin.id  # a unique start of the job id
    with pytest.raises(BenchdError, match=r"'2026-11-30-' is the start of 2 runbook ids"):
        runbook.resolve_runbook_path(rid[:11], config)
    bad = subprocess.run([*base, "report", rid[:11], "--state-dir", str(config.state_dir)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "give more of it" in bad.stderr
