"""`benchctl compare`: the one comparison per cell and metric (its rank guard checked against brute-force
enumeration), the three verdicts with their CI and α, and the comparability warnings."""

from __future__ import annotations

import itertools
import json
import random
import re
from math import comb
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state
from testlib import benchctl_inproc

from benchd.results import compare, ranktests, runbook
from benchd.results.text import comparison_sentence
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
        p, exact = ranktests.mann_whitney_p(a, b)
        assert exact and p == pytest.approx(_brute_p(a, b)), (a, b)


def test_known_minimum() -> None:
    assert ranktests.mann_whitney_min_p(3, 3) == pytest.approx(0.1)
    assert ranktests.mann_whitney_min_p(4, 4) == pytest.approx(2 / comb(8, 4))


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
    a = runbook.write_runbook(config, store, fill_job(store, sweep, job_id="jobaaaa-0001"), charts=False)
    b = runbook.write_runbook(config, store, fill_job(store, sweep, job_id="jobbbbb-0002", gen_scale=1.25), charts=False)
    yield config, store, runbook.load_runbook(a, config), runbook.load_runbook(b, config)
    store.close()


def test_verdicts(pair) -> None:
    """Three probes per side can be different now (the factory's B is 25 % faster, CV 1 %): the verdict
    carries the ratio's CI and α. The old rule called every 3-vs-3 cell "too few probes"."""
    _config, _store, a, b = pair
    cmp = compare.compare_runbooks(a, b)
    assert cmp.alpha == 0.05 and cmp.margin_pct == 2.0 and "Mann–Whitney" in cmp.test
    m = _metric(cmp, "gguf-plain", 512, "gen_tps")
    assert m.verdict == "different" and m.b_better is True and m.n_a == m.n_b == 3
    assert m.ratio_b_over_a == pytest.approx(1.25)
    assert re.fullmatch(r"different: 25\.0 % \[\d\d–\d\d %\] faster \(α = 0\.05\)", m.text), m.text
    # One interval notation: the verdict's and the sentence's interval read the same.
    assert m.detail is not None
    interval = m.text.partition("[")[2].partition("]")[0]
    assert f"CI {interval}" in comparison_sentence(m.detail, "A", "B")
    assert _metric(cmp, "mlx-lm", 512, "prompt_tps").verdict.startswith("not measured: mlx_lm.server")
    assert "broken@512" not in cmp.only_in_a  # present in both (failed), compared as not measured
    more_a = _with_probes(a, {"gguf-plain": [100.0, 101.0, 99.0, 100.5, 99.5]})
    worse_b = _with_probes(b, {"gguf-plain": [80.0, 81.0, 79.0, 80.5]})
    m = _metric(compare.compare_runbooks(more_a, worse_b), "gguf-plain", 512, "gen_tps")
    assert m.verdict == "different" and m.b_better is False and "slower" in m.text
    # Twins measured tightly enough: tied within the margin, an equivalence statement.
    twin_a = _with_probes(a, {"gguf-plain": [100.0 + 0.1 * (i % 5) for i in range(20)]})
    twin_b = _with_probes(b, {"gguf-plain": [100.05 + 0.1 * (i % 5) for i in range(20)]})
    m = _metric(compare.compare_runbooks(twin_a, twin_b), "gguf-plain", 512, "gen_tps")
    assert m.verdict == "tied" and re.match(r"tied within ±2 % \[([−+]\d\.\d|0\.0)–([−+]\d\.\d|0\.0) %\] ", m.text), m.text
    # A 1.6 % gap with overlapping noise: neither shown different nor tied; says what would resolve it.
    near_b = _with_probes(b, {"gguf-plain": [101.6, 103.7, 99.5, 101.65, 101.55]})
    m = _metric(compare.compare_runbooks(more_a, near_b), "gguf-plain", 512, "gen_tps")
    assert m.verdict == "unresolved" and "more rounds would give an even chance of resolving ±2 %" in m.text


def test_the_sweeps_margins_judge_their_axes_and_the_header_names_them(pair) -> None:
    """Runbook A's `margins = {gen_tps = 30}`: B 25 % faster is tied at ±30 % (the Pareto view's and the
    stop rule's margin on that axis), the other axes keep the table's ±2 %, and the header says so."""
    from benchd.results.text import margin_words

    _config, _store, a, b = pair
    wide = msgspec.structs.replace(a, sweep=msgspec.structs.replace(a.sweep, margins={"gen_tps": 30.0}))
    cmp = compare.compare_runbooks(wide, b)
    m = _metric(cmp, "gguf-plain", 512, "gen_tps")
    assert m.verdict == "tied" and m.text.startswith("tied within ±30 % [")
    assert cmp.margins == {"gen_tps": 30.0} and margin_words(cmp.margin_pct, cmp.margins) == "margin ±2 % (gen_tps ±30 %)"
    assert compare.compare_runbooks(wide, b, margin_pct=2.0).margins == {}  # a given margin replaces them all


def test_warnings(pair) -> None:
    _config, _store, a, b = pair
    assert compare.compare_runbooks(a, b).warnings == []
    other_sweep = msgspec.structs.replace(b.sweep, contexts=[512, 2048], cooldown=Cooldown(policy="thermal"),
                                          sampling=msgspec.structs.replace(b.sweep.sampling, seed=7))
    prov = msgspec.structs.replace(
        b.provenance,
        machine=msgspec.structs.replace(b.provenance.machine, cpu_model="Apple M3 Max"),
        prompts=msgspec.structs.replace(b.provenance.prompts, corpus_sha256="0" * 64),
    )
    w = " | ".join(compare.compare_runbooks(a, msgspec.structs.replace(b, sweep=other_sweep, provenance=prov)).warnings)
    assert "machines differ" in w and "Apple M3 Max" in w
    assert "grids differ" in w and "contexts" in w
    assert "prompt hashes differ" in w
    # a struct's warning names the fields that differ, not the struct's repr
    policy = f"cooldown.policy: {a.sweep.cooldown.policy} vs thermal"
    assert f"cooldown policies differ ({policy}" in w and "Cooldown(" not in w
    assert f"sampling.seed: {a.sweep.sampling.seed} vs 7" in w and "Sampling(" not in w


def test_cli_json(pair) -> None:
    config, _store, a, b = pair
    res = benchctl_inproc("compare", a.id, b.job.id, "--json", "--state-dir", str(config.state_dir),
                          env={"BENCHD_CACHE_DIR": str(config.cache_dir)})
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["a"] == a.id and doc["b"] == b.id and doc["alpha"] == 0.05
    cell = next(c for c in doc["cells"] if c["candidate"] == "gguf-plain" and c["context"] == 512)
    gen = next(m for m in cell["metrics"] if m["metric"] == "gen_tps")
    assert gen["verdict"] == "different" and gen["detail"]["alpha"] == 0.05
    text = benchctl_inproc("compare", a.id, b.id, "--state-dir", str(config.state_dir))
    assert "α = 0.05 per metric" in text.stdout and "different: 25.0 % [" in text.stdout
    # A reason a metric was not measured is said once under the table; its rows point at it.
    lines = text.stdout.splitlines()
    # the metric column reads as the report's cell table does (the JSON keeps the field names)
    row = next(x for x in lines if re.match(r"mlx-lm +512 +prompt tok/s ", x))
    assert not any(re.match(r"\S+ +\d+ +(gen_tps|prompt_tps|ttft_ms|mem_peak_bytes) ", x) for x in lines)
    k = re.search(r"not measured \[(\d+)\]$", row)
    assert k is not None, row
    assert f"[{k.group(1)}] mlx_lm.server reports no prompt timing" in lines
    assert sum("reports no prompt timing" in x for x in lines) == 1
    # A build that did not change is one line; a changed one is shown side by side, its fields marked.
    assert re.search(r"^gguf-plain: the same build in A and B \(.*args .*\)$", text.stdout, re.M), text.stdout
    assert "changed between A and B" not in text.stdout and "binary path" not in text.stdout
    prov = [msgspec.structs.replace(c, fingerprint=msgspec.structs.replace(c.fingerprint, model_sha256="f" * 64))
            if c.candidate == "gguf-plain" and c.fingerprint else c for c in b.provenance.candidates]
    moved = msgspec.structs.replace(b, provenance=msgspec.structs.replace(b.provenance, candidates=prov))
    runbook.resolve_runbook_path(b.id, config).write_bytes(msgspec.json.encode(moved))
    text = benchctl_inproc("compare", a.id, b.id, "--state-dir", str(config.state_dir))
    assert "gguf-plain: changed between A and B: model" in text.stdout, text.stdout
    assert re.search(r"^  \* model sha256 +A \w{12} +B ffffffffffff$", text.stdout, re.M), text.stdout
    assert "mlx-lm: the same build in A and B (" in text.stdout


def _with_kld(rb: runbook.Runbook, chunks: list[float], corpus_sha: str = "c" * 64) -> runbook.Runbook:
    """The runbook with a `[kld]` table (reference gguf-plain) and mlx-lm scored at 512 on these chunk KLDs."""
    from benchd.schemas import Kld, KldCorpus, KldResult

    sweep = msgspec.structs.replace(rb.sweep, kld=Kld(reference="gguf-plain", contexts=[512]))
    res = KldResult(candidate="mlx-lm", reference="gguf-plain", context=512, status="ok", chunk_kld=chunks)
    corpus = KldCorpus(path="/c.txt", source="the sweep's kld.corpus", sha256=corpus_sha, bytes=1, words=1)
    return msgspec.structs.replace(rb, sweep=sweep, kld=[res], kld_corpus=corpus)


def test_kld_between_runbooks(pair) -> None:
    """`compare` judges the kld axis per candidate and context through the one comparison (per-chunk KLDs,
    the axis's 10 % margin, lower is better); not when the corpora differ, saying why."""
    _config, _store, a, b = pair
    assert compare.compare_runbooks(a, b).kld == []  # no [kld] on either side: nothing to say
    base = [0.020, 0.022, 0.019, 0.021, 0.020, 0.023, 0.018, 0.021]
    ka = _with_kld(a, base)
    kb = _with_kld(b, [2 * x for x in base])
    (got,) = compare.compare_runbooks(ka, kb).kld
    assert (got.candidate, got.context, got.reason) == ("mlx-lm", 512, None) and got.verdict is not None
    v = got.verdict
    assert v.verdict == "different" and v.b_better is False and v.ratio == pytest.approx(2.0)
    assert v.margin_pct == 10.0 and "more quality lost" in v.text and v.n_a == v.n_b == 8
    same = compare.compare_runbooks(ka, _with_kld(b, [x * 1.01 for x in base])).kld[0].verdict
    assert same is not None and same.verdict == "tied"
    (other,) = compare.compare_runbooks(ka, _with_kld(b, base, corpus_sha="d" * 64)).kld
    assert other.verdict is None and other.reason is not None and "corpora differ" in other.reason


def test_cli_prints_the_kld_verdict(pair) -> None:
    """`benchctl compare` prints one line per candidate and `[kld]` context scored in both runbooks."""
    config, _store, a, b = pair
    base = [0.020, 0.022, 0.019, 0.021, 0.020, 0.023, 0.018, 0.021]
    for rb, scale in ((a, 1.0), (b, 2.0)):
        path = runbook.resolve_runbook_path(rb.id, config)
        path.write_bytes(msgspec.json.encode(_with_kld(rb, [scale * x for x in base])))
    text = benchctl_inproc("compare", a.id, b.id, "--state-dir", str(config.state_dir),
                           env={"BENCHD_CACHE_DIR": str(config.cache_dir)})
    assert text.returncode == 0, text.stderr
    line = next(x for x in text.stdout.splitlines() if x.startswith("KL divergence, mlx-lm ctx 512"))
    assert "(8 vs 8 chunks): different: " in line and "more quality lost" in line
