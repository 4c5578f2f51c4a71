"""`benchctl report`: medians with spread, noisy cells marked, nulls with their reason (never 0 or
blank) in every format; the Pareto view; JSON via the real CLI; charts optional with a clear message."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state
from testlib import benchctl_inproc

from benchd.errors import BenchdError
from benchd.results import plot, report, runbook
from benchd.schemas import Row


def test_text_table(state) -> None:
    _config, rb = state
    text = report.render_text(rb, pareto=True)
    line = next(x for x in text.splitlines() if x.startswith("gguf-plain") and " 512 " in x)
    assert "100.0 (99.0–101.0, cv 1.0%)" in line  # median (min–max, cv) of GEN[gguf-plain, 512]
    noisy = next(x for x in text.splitlines() if x.startswith("gguf-spec") and " 1024 " in x)
    assert "100.0 (80.0–120.0, cv 20.0%) ~noisy" in noisy
    mlx = next(x for x in text.splitlines() if x.startswith("mlx-lm") and " 512 " in x)
    ref = mlx.split("null ")[1].split()[0]  # e.g. "[7]"
    assert f"{ref} prompt_tps: mlx_lm.server reports no prompt timing" in text
    # beside the null, the prefill rate derived from TTFT, its source named (it is not the server's figure)
    derived = mlx.split(f"null {ref} ≈")[1].split()
    assert float(derived[0]) > 0 and f"{derived[1]} prompt_tps ≈ derived, not the server's: prompt tokens ÷ TTFT" in text
    assert "broken excluded: no successful probe rows in this context" in text
    # The one comparison: two eval tasks cannot compare pass rates (not compared at this size) and their
    # estimate favours the faster, smaller candidate, so it dominates, with the α split over the planned axes.
    # Time to first token is unresolved two-sided but shown not worse one-sided: the sentence names it.
    assert ("gguf-plain dominates mlx-lm: better on generation speed and peak memory; not worse on time to first "
            "token (one-sided, α = 0.05); not compared at this size: eval pass rate and sustain ratio (α = 0.05 over 8 "
            "axes") in text
    assert ("mlx-lm against gguf-plain on eval pass rate is unresolved: more shared tasks would decide it; a tie "
            "within ±5 pp needs at least 119 (50 % vs 100 % over 2 shared tasks; α = 0.00625)") in text
    assert "mlx-lm is 22.2 % slower than gguf-plain at generation (geometric means of 3 and 3 values" in text
    assert "verdict" in text and "too few" in line
    assert "not compared: prompt processing (not measured on one side); energy per generated token" in text


def test_csv_nulls_have_reasons(state) -> None:
    _config, rb = state
    got = list(csv.DictReader(io.StringIO(report.render_csv(rb))))
    assert len(got) == len(rb.cells) * len(report.COLUMNS)
    for r in got:
        if r["median"] == "null":
            assert r["null_reason"], r
        else:
            float(r["median"])
    mlx = next(r for r in got if r["candidate"] == "mlx-lm" and r["metric"] == "prompt_tps" and r["context"] == "512")
    assert mlx["median"] == "null" and "mlx_lm.server reports no prompt timing" in mlx["null_reason"]
    spec = next(r for r in got if r["candidate"] == "gguf-spec" and r["metric"] == "gen_tps" and r["context"] == "1024")
    assert spec["noisy"] == "True" and float(spec["median"]) == 100.0
    assert "n < 6" in spec["null_reason"]  # the CI is null with its reason at three probes


def test_cli_json_and_md(state) -> None:
    config, rb = state
    env = {"BENCHD_CACHE_DIR": str(config.cache_dir)}
    base = ["report", "--state-dir", str(config.state_dir)]
    res = benchctl_inproc(*base, "--json", "--pareto", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["runbook"] == rb.id  # no RUNBOOK given: the newest
    cell = next(c for c in doc["cells"] if c["candidate"] == "gguf-plain" and c["context"] == 512)
    assert cell["gen_tps"]["median"] == 100.0 and cell["gen_tps"]["min"] == 99.0
    assert {p["context"] for p in doc["pareto"]} == {512, 1024}
    md = benchctl_inproc(*base, rb.job.id, "--format", "md", env=env)
    assert md.returncode == 0 and md.stdout == (config.runbooks_dir / f"{rb.id}.md").read_text()
    bad = benchctl_inproc(*base, "nosuchjob-0000", env=env)
    assert bad.returncode == 2 and "no runbook" in bad.stderr


def test_plot_missing_is_clear(state, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, rb = state
    monkeypatch.setattr(plot, "available", lambda: False)
    with pytest.raises(BenchdError, match="matplotlib is not installed"):
        plot.write_charts(rb, tmp_path)
    out = runbook.save_runbook(config, rb)  # charts skipped, the runbook itself still written
    assert out.is_file()


def test_charts_non_empty(state, tmp_path: Path) -> None:
    _config, rb = state
    paths = plot.write_charts(rb, tmp_path / "charts")
    assert sorted(p.suffix for p in paths) == [".png", ".svg"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_rich_table(state, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The TTY path (rich) prints the same cells and the null notes (on a terminal 250 columns wide)."""
    monkeypatch.setenv("COLUMNS", "250")
    _config, rb = state
    report.print_rich(rb, pareto=True)
    out = capsys.readouterr().out
    assert "gguf-plain" in out and "100.0 (99.0–101.0" in out
    assert "mlx_lm.server reports no prompt timing" in out and "~noisy" in out
    assert "frontier" in out


def test_rich_table_keeps_ids_whole_at_100_columns(state, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """At 100 columns the candidate ids are printed whole (the other columns wrap), with the legend."""
    monkeypatch.setenv("COLUMNS", "100")
    _config, rb = state
    report.print_rich(rb)
    out = capsys.readouterr().out
    assert report.VERDICT_NOTE.split()[0] in out
    for cand in ("gguf-plain", "gguf-spec", "mlx-lm"):
        assert any(line.lstrip("│┃ ").startswith(cand) for line in out.splitlines()), (cand, out[:3000])


def test_a_re_run_or_stalled_probe_says_why_in_a_note(tmp_path: Path) -> None:
    """The probes column counts re-runs of invalidated probes and the ok probes benchd stalled through; the
    note beside it gives each one's reason."""
    config, store, sweep, _ = setup_state(tmp_path)
    job = fill_job(store, sweep)
    why = ("invalidated: the server process was stopped for ~3.1 s during the probe; its numbers are not used and "
           "the probe is run again")
    store.results.commit_row(Row(job=job, candidate="gguf-plain", runtime="llama-server", context=512, kind="probe",
                                 probe=3, status="failed", error=why, invalidated="server-stopped", stalled_s=0.0))
    ok = [r for r in store.results.rows(job) if r.candidate == "gguf-plain" and r.context == 512]
    store.results.commit_row(msgspec.structs.replace(ok[1], probe=4, stalled_s=1.3))
    rb = runbook.build_runbook(config, store, job)
    store.close()
    text = report.render_text(rb)
    line = next(x for x in text.splitlines() if x.startswith("gguf-plain") and " 512 " in x)
    ref = line.split("(+1 re-run, 1 stalled) ")[1].split()[0]
    stall = ("benchd was not run for ~1.3 s during the probe (its 0.1 s poll woke that late: the machine or the "
             "daemon was paused); the figures include the pause")
    assert f"{ref} gguf-plain@512: probe 3: {why}; probe 4: {stall}" in text.splitlines()
