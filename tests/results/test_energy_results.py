"""Energy in the results: the report's J/gen tok column and energy section, `compare`, the chart, and
runbooks written before energy existed (the committed golden v1 file)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import msgspec
import pytest

from benchd.engine.metrics import cell_stats
from benchd.results import compare, report
from benchd.results.pareto import pareto_from_rows
from benchd.results.plot import available, write_charts
from benchd.results.runbook import decode_runbook
from benchd.schemas import EnergyInfo, Runbook

GOLDEN = Path(__file__).parents[1] / "data" / "runbook_v1.json"
SRC = "rapl:package-0 + rapl:package-0/dram"


def _with_energy(j_plain: list[float]) -> Runbook:
    """The golden runbook with J/gen token on its ok probe rows: gguf-plain's per probe from `j_plain`, 0.2 elsewhere."""
    rb = decode_runbook(GOLDEN.read_bytes())
    it = iter(j_plain * 10)
    rows = [msgspec.structs.replace(
        r, j_per_gen_token=(next(it) if r.candidate == "gguf-plain" else 0.2) if r.status == "ok" else None,
        sources={**r.sources, "j_per_gen_token": f"{SRC}; gen phase J / completion tokens - 1"}) for r in rb.rows]
    energy = EnergyInfo(source=SRC, available=True, granularity="RAPL ~1 ms", scope="system energy: whole package")
    prov = msgspec.structs.replace(rb.provenance, energy=energy)
    return msgspec.structs.replace(rb, rows=rows, provenance=prov, pareto=pareto_from_rows(rows, rb.evals),
                                   cells=cell_stats([r for r in rows if r.kind == "probe"]))


def test_report_shows_j_per_gen_token_and_the_energy_section() -> None:
    rb = _with_energy([0.1])
    text = report.render_text(rb, pareto=True)
    assert "J/gen tok" in text and "energy per generated token (lower)" in text
    plain = next(x for x in text.splitlines() if x.startswith("gguf-plain") and " 512 " in x)
    assert "0.100 (0.100–0.100, cv 0.0%)" in plain
    md = report.render_markdown(rb)
    assert "## Energy" in md and f"- source: `{SRC}`" in md and "- scope: system energy" in md
    assert "| candidate | context | J/prompt tok | J/gen tok |" in md
    assert "j_per_gen_token" in {r["metric"] for r in csv.DictReader(io.StringIO(report.render_csv(rb)))}


def test_old_runbook_without_energy_still_renders_with_the_reason() -> None:
    rb = decode_runbook(GOLDEN.read_bytes())
    assert rb.cells[0].j_per_gen_token is None and rb.provenance.energy.source is None
    text = report.render_text(rb)
    assert report.NOT_IN_RUNBOOK in text
    assert "- not measured: the job recorded no energy source" in report.render_markdown(rb)


def test_compare_compares_j_per_gen_token() -> None:
    a = _with_energy([0.10, 0.11, 0.12, 0.10, 0.11])
    b = _with_energy([0.20, 0.21, 0.22, 0.20, 0.21])
    cmp = compare.compare_runbooks(a, b)
    got = [m for c in cmp.cells if c.candidate == "gguf-plain" for m in c.metrics if m.metric == "j_per_gen_token"]
    assert got and all(m.better == "lower" and m.ratio_b_over_a and m.ratio_b_over_a > 1.5 for m in got)
    # three probes per cell (the golden file), twice the energy at a few % spread: different, in words
    assert all(m.verdict == "different" and m.b_better is False and "more energy per token" in m.text
               and m.n_a == m.n_b == 3 for m in got), [m.text for m in got]
    broken = [m for c in cmp.cells if c.candidate == "broken" for m in c.metrics if m.metric == "j_per_gen_token"]
    assert broken and all(m.verdict.startswith("not measured") for m in broken)
    plain = decode_runbook(GOLDEN.read_bytes())
    warns = compare.comparability_warnings(plain, a)
    assert any("energy sources differ" in w for w in warns)


@pytest.mark.skipif(not available(), reason="matplotlib not installed")
def test_chart_has_an_energy_row(tmp_path: Path) -> None:
    (png, svg) = write_charts(_with_energy([0.1]), tmp_path)
    assert "joules per generated token" in svg.read_text()
    (png0, svg0) = write_charts(decode_runbook(GOLDEN.read_bytes()), tmp_path / "old")
    assert "J/gen token not measured" in svg0.read_text() and png.stat().st_size > png0.stat().st_size
