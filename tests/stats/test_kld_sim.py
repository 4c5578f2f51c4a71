"""A small run of benchmarks/kld_sim.py (the `kld` axis's verdicts on simulated per-chunk KLDs, through the
functions the daemon calls): seeded, so its counts are fixed; the full run's figures are in
benchmarks/RESULTS.md section 18."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "benchmarks"


def test_the_kld_axis_false_different_rate_is_within_alpha_at_a_small_size() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("kld_sim", BENCH / "kld_sim.py")
        assert spec is not None and spec.loader is not None
        sim = importlib.util.module_from_spec(spec)
        sys.modules["kld_sim"] = sim  # (its dataclasses look their module up)
        spec.loader.exec_module(sim)
    finally:
        sys.path.remove(str(BENCH))
    reps = 30
    lines: list[str] = []
    got = {case.name: (case, r) for case, r in sim.main(["--reps", str(reps), "--seed", "3"], out=lines.append)}
    assert len(lines) == 2 + len(got) and lines[0].startswith("# kld_sim: 30 replicates")
    for name, (case, r) in got.items():
        alpha = r["alpha_axis"]
        assert 0 < alpha < 0.05, (name, r)
        if case.ask == "twins":
            assert r["different"] <= alpha + 3 * sim.mc(r["different"], reps), (name, r)
        if case.ask == "margin":
            assert r["different_b_worse"] <= alpha / 2 + 3 * sim.mc(r["different_b_worse"], reps), (name, r)
        if case.same:
            assert r["different"] == 0, (name, r)
    # power where the sim has it: a real 2x (and 1.5x on 40 chunks) difference is found, the right way round
    assert got["power: B 1.5x, 40 chunks"][1]["different_b_worse"] >= 0.8
    assert got["power: B 2x, 9 chunks (a q4_0 against a q8_0 KV cache is several times)"][1]["different_b_worse"] >= 0.8
