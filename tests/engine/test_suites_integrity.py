"""The suites' wheels are the pinned ones (sha256 checked on load and after a download), and a BFCL run cut
short by its budget is still stratified: the categories are interleaved over the task order."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchd.engine import suites
from benchd.errors import BenchdError


def test_the_cached_wheels_are_the_pinned_ones(eval_suites: Path) -> None:
    for suite in suites.SUITES:
        data = suites.load(suite, eval_suites)
        assert data.sha256 == suites.PACKAGES[suite].sha256


def test_a_tampered_wheel_is_refused(eval_suites: Path, tmp_path: Path) -> None:
    pkg = suites.PACKAGES["code"]
    copy = pkg.cache_path(tmp_path)
    copy.parent.mkdir(parents=True)
    shutil.copy(pkg.cache_path(eval_suites), copy)
    with copy.open("ab") as fh:
        fh.write(b"\0")
    with pytest.raises(BenchdError) as err:
        suites.load("code", tmp_path)
    assert err.value.code == "eval_data_corrupt" and err.value.field == "evals" and pkg.sha256 in err.value.message


@pytest.mark.parametrize("limit", [60, 200, None])
def test_every_prefix_of_a_bfcl_run_is_stratified(eval_suites: Path, limit: int | None) -> None:
    tools = suites.load("tools", eval_suites)
    order = suites.subset(tools, limit)
    total = {c: sum(t.category == c for t in order) for c in suites.BFCL_CATEGORIES}
    for n in range(1, len(order) + 1, max(1, len(order) // 50)):
        head = order[:n]
        for c in suites.BFCL_CATEGORIES:  # each category within one task of its share, at any stop
            assert abs(sum(t.category == c for t in head) - n * total[c] / len(order)) <= 1.0 + 1e-9, (n, c)
    assert sorted(t.id for t in order) == sorted(t.id for t in suites.subset(tools, limit))
