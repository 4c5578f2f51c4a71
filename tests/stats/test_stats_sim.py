"""A small run of benchmarks/stats_sim.py (the stop loop and the Pareto view, through the functions the
daemon calls): seeded, so its counts are fixed; the full run's figures are in benchmarks/RESULTS.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SIM = Path(__file__).parents[2] / "benchmarks" / "stats_sim.py"


def test_the_simulation_meets_its_goals_at_a_small_size() -> None:
    spec = importlib.util.spec_from_file_location("stats_sim", SIM)
    assert spec is not None and spec.loader is not None
    sim = importlib.util.module_from_spec(spec)
    sys.modules["stats_sim"] = sim  # (its dataclasses look their module up)
    spec.loader.exec_module(sim)
    lines: list[str] = []
    got = {case.name: r for case, r in sim.main(["--reps", "40", "--seed", "3"], out=lines.append)}
    assert len(lines) == 2 + len(got) and lines[0].startswith("# stats_sim: 40 replicates")
    for name, r in got.items():
        if name.startswith("trap"):
            assert r["dominates_a"] <= 0.05, (name, r)
        if name.startswith("true:"):
            assert r["dominates_a"] >= 0.75, (name, r)
        if name.startswith(("identical", "true ratio")):
            assert r["dominates_any"] <= 0.05 and r["different_b_any_look"] <= 0.05, (name, r)
    assert got["true: the same at the defaults (auto, first look at 3 rounds)"]["rounds"] < 6
