"""Fixtures the results tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from runbook_factory import fill_job, setup_state

from benchd.results import runbook


@pytest.fixture()
def state(tmp_path: Path):
    """A written factory runbook: (config, the runbook as loaded back from its file)."""
    config, store, sweep, _ = setup_state(tmp_path)
    job = fill_job(store, sweep)
    rid = runbook.write_runbook(config, store, job, charts=False)
    yield config, runbook.load_runbook(rid, config)
    store.close()
