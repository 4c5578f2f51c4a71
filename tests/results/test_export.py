"""`benchctl export`: each format read back (the Markdown table parses, the JSON lines decode, the CSV
loads with the csv module), with the provenance a reader needs; nulls and failed rows export as they
are, without invented values."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import msgspec
from runbook_factory import GEN
from testlib import benchctl_inproc

from benchd.results import export


def _md_table(text: str) -> list[dict[str, str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert all(set(c.strip()) <= {"-", ":"} for c in lines[1].strip("|").split("|"))
    return [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in lines[2:]]


def test_llama_bench_md_parses_with_llama_bench_layout(state) -> None:
    _config, rb = state
    text = export.render_llama_bench_md(rb)
    rows = _md_table(text)
    assert list(rows[0]) == export.MD_COLUMNS
    tg = next(r for r in rows if r["test"] == "tg32 @ d512" and r["model"] == "tiny-q8_0.gguf [gguf-plain]"
              and r["t/s"].startswith(f"{statistics.fmean(GEN[('gguf-plain', 512)]):.2f}"))
    assert tg["t/s"] == f"{statistics.fmean(GEN[('gguf-plain', 512)]):.2f} ± {statistics.stdev(GEN[('gguf-plain', 512)]):.2f}"
    assert tg["size"].endswith("MiB") and tg["threads"] == "n/a" and tg["params"] == "n/a"
    assert any(r["test"] == "pp512" for r in rows)
    assert "build: 0c1e570 (1)" in text  # llama-bench's footer, from the recorded build
    assert f"benchd {rb.provenance.benchd.version}" in text and "machine:" in text
    # what does not map onto the table is said under it, with its reason; nothing invented
    assert "broken @ 512: no row in the table, 1 probe failed: server exited before ready" in text
    assert "mlx-lm @ 512: mlx_lm.server rows are not in the table" in text
    assert "params: n/a — benchd does not read the parameter count" in text
    assert not any(r["model"] == "mlx-lm" or "broken" in r["model"] for r in rows)
    assert "Under the table (left out, abridged, n/a):" in text and "Not in the table" not in text


def test_llama_bench_md_labels_varied_token_counts_as_a_span_and_says_why(state) -> None:
    """Prompts of 511–513 tokens in one cell: the line stays in the table as `pp511-513` and the note under
    it says the label is a span (it said "Not in the table" of a cell that was in it)."""
    _config, rb = state
    n = iter([511, 512, 513] * 10)
    rows = [msgspec.structs.replace(r, prompt_tokens=next(n)) if (r.candidate, r.context, r.kind, r.status)
            == ("gguf-plain", 512, "probe", "ok") else r for r in rb.rows]
    text = export.render_llama_bench_md(msgspec.structs.replace(rb, rows=rows))
    assert any(r["test"] == "pp511-513" and r["model"] == "tiny-q8_0.gguf [gguf-plain]" for r in _md_table(text))
    assert "- gguf-plain @ 512: the test label spans the probes' token counts (prompt [511, 512, 513], gen [32]" in text


def test_jsonl_decodes_with_llama_bench_names_and_nulls(state) -> None:
    _config, rb = state
    objs = [json.loads(line) for line in export.render_jsonl(rb).splitlines()]
    assert len(objs) == sum(1 for r in rb.rows if r.kind == "probe")
    ok = next(o for o in objs if o["candidate"] == "gguf-plain" and o["context"] == 512 and o["probe"] == 0)
    assert ok["build_commit"] == "0c1e570" and ok["build_number"] == 1
    assert ok["model_filename"].endswith("tiny-q8_0.gguf") and ok["model_size"] > 0
    assert (ok["n_prompt"], ok["n_gen"], ok["n_depth"]) == (512, 32, 512)
    assert ok["avg_ts"] == GEN[("gguf-plain", 512)][0] == ok["gen_tps"] and ok["samples_ts"] == [ok["avg_ts"]]
    assert ok["stddev_ts"] is None and "stddev_ts" in ok["null_reasons"]
    assert ok["benchd_version"] == rb.provenance.benchd.version and ok["machine"]
    failed = next(o for o in objs if o["candidate"] == "broken")
    assert failed["status"] == "failed" and failed["avg_ts"] is None and failed["gen_tps"] is None
    assert "server exited before ready" in failed["null_reasons"]["avg_ts"]
    mlx = next(o for o in objs if o["candidate"] == "mlx-lm")
    assert mlx["prompt_tps"] is None and mlx["null_reasons"]["prompt_tps"] == "mlx_lm.server reports no prompt timing"
    assert mlx["build_commit"] is None and "not a llama.cpp server" in mlx["null_reasons"]["build_commit"]


def test_csv_loads_every_row_with_provenance(state) -> None:
    _config, rb = state
    rows = list(csv.DictReader(io.StringIO(export.render_csv(rb))))
    assert len(rows) == len(rb.rows)
    assert {r["benchd_version"] for r in rows} == {rb.provenance.benchd.version}
    broken = [r for r in rows if r["candidate"] == "broken"]
    assert broken and all(r["status"] == "failed" and r["gen_tps"] == "" for r in broken)
    mlx = next(r for r in rows if r["candidate"] == "mlx-lm" and r["kind"] == "probe")
    assert mlx["prompt_tps"] == "" and json.loads(mlx["null_reasons"])["prompt_tps"]
    plain = next(r for r in rows if r["candidate"] == "gguf-plain" and r["kind"] == "probe")
    assert float(plain["gen_tps"]) in GEN[("gguf-plain", int(plain["context"]))]
    assert plain["build_commit"] == "0c1e570"


def test_cli_export_writes_each_format(state, tmp_path: Path) -> None:
    config, rb = state
    for fmt in export.FORMATS:
        out = tmp_path / f"out.{fmt}"
        p = benchctl_inproc("export", rb.id, "--format", fmt, "-o", str(out), "--state-dir", str(config.state_dir))
        assert p.returncode == 0, p.stderr
        assert out.read_text() == export.FORMATS[fmt](rb)
    p = benchctl_inproc("export", "no-such-runbook", "--format", "csv", "--state-dir", str(config.state_dir))
    assert p.returncode == 2, p.stderr
