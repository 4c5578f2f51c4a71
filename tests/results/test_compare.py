"""`benchctl compare`: the exact Mann–Whitney U test against brute-force enumeration, the probe
minimum it states, verdicts below it, and the comparability warnings."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from math import comb
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state

from benchd.results import compare, runbook
from benchd.schemas import Cooldown


def _brute_p(a: list[float], b: list[float]) -> float:
    """Two-sided permutation p-value of the rank sum, by listing every split (the independent oracle)."""
    pooled = a + b
    order = sorted(pooled)
    ranks = {v: (order.index(v) + 1 + len(order) - order[::-1].index(v)) / 2 for v in pooled}
    r = [ranks[v] for v in pooled]
    n1 = len(a)
    mean = n1 * sum(r) / len(r)
    obs = abs(sum(r[:n1]) - mean)
    hits = sum(1 for idx in itertools.combinations(range(len(r)), n1) if abs(sum(r[i] for i in idx) - mean) >= obs - 1e-9)
    return hits / comb(len(r), n1)


def test_exact_test_matches_enumeration() -> None:
    rng = random.Random(1)
    for _ in range(60):
        n1, n2 = rng.randint(1, 7), rng.randint(1, 7)
        a = [float(rng.randint(0, 6)) for _ in range(n1)]  # small range: plenty of ties
        b = [float(rng.randint(0, 6)) for _ in range(n2)]
        _, p = compare.mann_whitney_exact(a, b)
        assert p == pytest.approx(_brute_p(a, b)), (a, b)


def test_known_values_and_minimum() -> None:
    assert compare.mann_whitney_exact([1, 2, 3, 4], [5, 6, 7, 8])[1] == pytest.approx(2 / 70)
    assert compare.mann_whitney_exact([1, 2, 3], [4, 5, 6])[1] == pytest.approx(0.1)
    assert compare.mann_whitney_exact([1, 2, 3, 4], [5, 6, 7, 8])[0] == 0.0
    assert compare.min_p_value(3, 3) == pytest.approx(0.1)
    assert compare.min_probes_per_side(0.05) == 4
    assert compare.min_probes_per_side(0.01) == 5  # 2/C(10,5) = 0.0079


def _with_probes(rb: runbook.Runbook, gen: dict[str, list[float]]) -> runbook.Runbook:
    """The runbook with its ok gguf-plain@512 rows replaced by len(values) rows of those gen_tps."""
    keep = [r for r in rb.rows if not (r.candidate == "gguf-plain" and r.context == 512 and r.kind == "probe")]
    base = next(r for r in rb.rows if r.candidate == "gguf-plain" and r.context == 512)
    new = [msgspec.structs.replace(base, probe=i, gen_tps=v) for i, v in enumerate(gen["gguf-plain"])]
    return msgspec.structs.replace(rb, rows=[*keep, *new])


def _metric(cmp: compare.Comparison, cand: str, ctx: int, metric: str) -> compare.MetricComparison:
    cell = next(c for c in cmp.cells if c.candidate == cand and c.context == ctx)
    return next(m for m in cell.metrics if m.metric == metric)


@pytest.fixture()
def pair(tmp_path: Path):
    config, store, sweep, _ = setup_state(tmp_path)
    a = runbook.write_runbook(config, store, fill_job(store, sweep, job_id="jobaaaa-0001"))
    b = runbook.write_runbook(config, store, fill_job(store, sweep, job_id="jobbbbb-0002", gen_scale=1.25))
    yield config, store, runbook.load_runbook(a, config), runbook.load_runbook(b, config)
    store.close()


def test_verdicts(pair) -> None:
    _config, _store, a, b = pair
    cmp = compare.compare_runbooks(a, b)
    assert cmp.min_probes_per_side == 4 and "exact" in cmp.test and "two-sided" in cmp.test
    m = _metric(cmp, "gguf-plain", 512, "gen_tps")
    assert m.verdict == compare.TOO_FEW and m.p_value is None  # 3 probes per side
    assert m.ratio_b_over_a == pytest.approx(1.25)
    assert _metric(cmp, "mlx-lm", 512, "prompt_tps").verdict.startswith("not measured: mlx_lm.server")
    assert "broken@512" not in cmp.only_in_a  # present in both (failed), compared as not measured
    more_a = _with_probes(a, {"gguf-plain": [100.0, 101.0, 99.0, 100.5, 99.5]})
    more_b = _with_probes(b, {"gguf-plain": [120.0, 121.0, 119.0, 120.5, 119.5]})
    m = _metric(compare.compare_runbooks(more_a, more_b), "gguf-plain", 512, "gen_tps")
    assert m.verdict == "B better" and m.p_value == pytest.approx(2 / comb(10, 5))
    same_b = _with_probes(b, {"gguf-plain": [100.2, 99.8, 101.0, 99.0, 100.0]})
    m = _metric(compare.compare_runbooks(more_a, same_b), "gguf-plain", 512, "gen_tps")
    assert m.verdict == compare.TIED and m.p_value is not None and m.p_value > 0.05 and "Mann–Whitney" in (m.why or "")
    worse_b = _with_probes(b, {"gguf-plain": [80.0, 81.0, 79.0, 80.5]})
    assert _metric(compare.compare_runbooks(more_a, worse_b), "gguf-plain", 512, "gen_tps").verdict == "B worse"
    # Significant but within the precision asked for (target_ci_pct 2 %): tied, never "better".
    near_b = _with_probes(b, {"gguf-plain": [101.6, 101.7, 101.5, 101.65, 101.55]})
    m = _metric(compare.compare_runbooks(more_a, near_b), "gguf-plain", 512, "gen_tps")
    assert m.p_value is not None and m.p_value < 0.05
    assert m.verdict == compare.TIED and "within the ±2 % target" in (m.why or "")


def test_beyond_noise_rule() -> None:
    """Issue 15's tie rule: CIs apart (or, below six probes, Mann–Whitney significant), and beyond the margin."""
    base = [100.0, 100.4, 99.6, 100.2, 99.8, 100.1]
    assert compare.beyond_noise(base, [v * 1.10 for v in base])[0]  # 10 %, CIs apart
    beyond, why = compare.beyond_noise(base, [v * 1.002 for v in base])  # the 0.2 % difference
    assert not beyond and "0.2 % apart" in why
    beyond, why = compare.beyond_noise(base, [v + 1.0 for v in base])  # CIs apart but 1 % < the 2 % target
    assert not beyond and "within the ±2 % target" in why
    assert compare.beyond_noise(base, [v + 1.0 for v in base], margin_pct=0.5)[0]
    beyond, why = compare.beyond_noise([100.0, 101.0, 99.0], [100.2, 101.2, 99.2])  # 3 probes: cannot tell
    assert not beyond and "too few probes" in why
    assert compare.beyond_noise([100.0, 101.0, 99.0, 100.5], [120.0, 121.0, 119.0, 120.5])[0]  # 4 vs 4: the exact test
    noisy = [80.0, 120.0, 95.0, 105.0, 90.0, 110.0, 85.0, 115.0]
    beyond, why = compare.beyond_noise(noisy, [v * 1.08 for v in noisy])
    assert not beyond and "CIs overlap" in why
    # A wide (unsteady) cell does not lose to a steady one on a rank test its spread makes meaningless.
    steady = [100.0 + 0.1 * i for i in range(8)]
    wide = [96.0, 70.0, 97.0, 130.0, 95.0, 99.0, 60.0, 94.0]
    beyond, why = compare.beyond_noise(steady, wide)
    assert not beyond and "CIs overlap" in why


def test_warnings(pair) -> None:
    _config, _store, a, b = pair
    assert compare.compare_runbooks(a, b).warnings == []
    other_sweep = msgspec.structs.replace(b.sweep, contexts=[512, 2048], cooldown=Cooldown(policy="thermal"))
    prov = msgspec.structs.replace(
        b.provenance,
        machine=msgspec.structs.replace(b.provenance.machine, cpu_model="Apple M3 Max"),
        prompts=msgspec.structs.replace(b.provenance.prompts, corpus_sha256="0" * 64),
    )
    w = " | ".join(compare.compare_runbooks(a, msgspec.structs.replace(b, sweep=other_sweep, provenance=prov)).warnings)
    assert "machines differ" in w and "Apple M3 Max" in w
    assert "grids differ" in w and "contexts" in w
    assert "prompt hashes differ" in w
    assert "cooldown policies differ" in w


def test_cli_json(pair) -> None:
    config, _store, a, b = pair
    res = subprocess.run([sys.executable, "-m", "benchctl", "compare", a.id, b.job.id, "--json", "--state-dir",
                          str(config.state_dir)], capture_output=True, text=True, timeout=60, check=False,
                         env={**os.environ, "BENCHD_CACHE_DIR": str(config.cache_dir)})
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["a"] == a.id and doc["b"] == b.id and doc["min_probes_per_side"] == 4
    cell = next(c for c in doc["cells"] if c["candidate"] == "gguf-plain" and c["context"] == 512)
    gen = next(m for m in cell["metrics"] if m["metric"] == "gen_tps")
    assert gen["verdict"] == "too few probes to call a difference"
    text = subprocess.run([sys.executable, "-m", "benchctl", "compare", a.id, b.id, "--state-dir",
                           str(config.state_dir)], capture_output=True, text=True, timeout=60, check=False)
    assert "Mann–Whitney U" in text.stdout and "too few probes to call a difference" in text.stdout
