"""The runbook page as bytes (no browser here: tests/results/test_html_browser.py loads it in Chromium).

Hand-built runbooks (tests/runbook_factory.py) with a null axis (mlx prompt_tps), a candidate whose every
probe failed, a single-candidate sweep, and fields a newer runbook carries (cell verdicts, a drift
sentinel, an energy axis): each renders, says what it has, and leaves nothing out.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from runbook_factory import fill_job, setup_state

from benchd.results import html, runbook
from benchd.results.compare import compare_runbooks
from benchd.schemas import Runbook

NO_RUNTIME = html.Runtime(None, html.MISSING)


def factory_runbook(tmp_path: Path, only: str | None = None) -> Runbook:
    config, store, sweep, _models = setup_state(tmp_path)
    if only:
        sweep = msgspec.structs.replace(sweep, candidates=[c for c in sweep.candidates if c.id == only])
    job = fill_job(store, sweep)
    rb = runbook.build_runbook(config, store, job)
    store.close()
    return rb


def strip_scripts(page: str) -> str:
    return re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)


def test_page_without_the_runtime_has_every_section_and_says_why_no_charts(tmp_path: Path) -> None:
    rb = factory_runbook(tmp_path)
    page = html.render_page(rb, NO_RUNTIME).decode()
    assert page.startswith("<!doctype html>")
    assert "No charts:" in page and "pip install &#x27;benchd[html]&#x27;" in page
    for section in ("summary", "pareto", "probes", "sustained", "evals", "lock"):
        assert f"<section id='{section}'>" in page
    for cand in ("gguf-spec", "gguf-plain", "mlx-lm", "broken"):
        assert cand in strip_scripts(page)
    for ctx in (512, 1024):
        assert f"Context {ctx} tokens" in page
    # Nulls keep their reason; failed probes are listed with their error; deferred axes are there.
    assert "mlx_lm.server reports no prompt timing" in page
    assert "server exited before ready (status 1)" in page
    assert "concurrency" in page and "single-user daily driver" in page
    # A lock command for every candidate, alphabetically; the failed one is said to be refused.
    locks = re.findall(r"<code id='lock-\d+'>([^<]+)</code>", page)
    assert [re.search(r"--candidate (\S+)", c).group(1) for c in locks] == sorted(  # type: ignore[union-attr]
        ["gguf-spec", "gguf-plain", "mlx-lm", "broken"])
    assert all(f"--runbook {rb.id}" in c for c in locks)
    assert "benchctl refuses to lock it" in page
    assert "recommend" not in page.lower()


def test_page_is_self_contained(tmp_path: Path) -> None:
    """No address outside the page in anything it loads: no src=, no <link>, a CSP forbidding requests."""
    page = html.render_page(factory_runbook(tmp_path), NO_RUNTIME).decode()
    assert "default-src 'none'" in page and "connect-src 'none'" in page
    assert not re.search(r"<(script|img|iframe|link)[^>]+(src|href)=", page)
    assert not re.search(r"https?://", strip_scripts(page))


def test_single_candidate_renders(tmp_path: Path) -> None:
    page = html.render_page(factory_runbook(tmp_path, only="gguf-plain"), NO_RUNTIME).decode()
    assert "gguf-plain" in page and "on the frontier" in page
    assert "mlx-lm" not in strip_scripts(page)


def newer_doc(tmp_path: Path) -> Runbook:
    """A factory runbook with the fields that land beside the probes (cell verdicts, the drift sentinel,
    flags, energy, thinking, ties, caveats, short and throttle-suspect probes, a sentinel row), decoded
    from data into the typed runbook the way a runbook file is."""
    doc: dict[str, Any] = msgspec.to_builtins(factory_runbook(tmp_path))
    doc["drift"] = {"candidate": "gguf-plain", "context": 512, "metric": "gen_tps", "ratio": 0.962, "drifted": True,
                    "n_first": 6, "n_sentinel": 3, "target_pct": 2.0,
                    "summary": "the sweep drifted: sentinel median 3.8 % below the first run (p = 0.03)"}
    doc["flags"] = [{"candidate": "mlx-lm", "flag": "thinking-mixed", "detail": "thinking on here, off elsewhere"}]
    doc["design"] = {"order": "interleaved", "why": "the sweep's default", "plan": "rounds of every candidate",
                     "drift_protected": True}
    doc["provenance"]["energy"] = {"source": "rapl:package-0", "granularity": "per probe phase", "available": True,
                                   "scope": "whole package (system energy)"}
    doc["cells"][0]["verdict"] = {"verdict": "drifting", "metric": "gen_tps", "n": 7, "probes_used": 7,
                                  "adaptive": True, "target_ci_pct": 2.0, "ci_half_width_pct": 1.2,
                                  "trend": {"n": 7, "s": 15, "method": "mann-kendall", "slope_per_probe": -0.1,
                                            "drift_pct": -4.5, "p_value": 0.01}, "reason": "trend beyond target"}
    doc["sweep"]["thinking"] = "off"
    for ctx in doc["pareto"]:
        for p in ctx["points"]:
            p["values"]["j_per_gen_token"] = 0.25
        ctx["ties"] = [{"pair": ["gguf-plain", "gguf-spec"], "axes": {"mem_peak_bytes": "CIs overlap"}}]
        ctx["caveats"] = {"mlx-lm": "cell verdict unsteady"}
    probe_rows = [r for r in doc["rows"] if r["kind"] == "probe" and r["status"] == "ok"]
    probe_rows[0].update(short=True, short_reason="EOS after 20 of 32 tokens")
    probe_rows[1]["throttle"] = {"metric": "gen_tps", "value": 8.0, "running_median": 9.1, "drop_pct": 12.0,
                                 "threshold_pct": 10.0, "thermal": "nominal", "suspect": True,
                                 "note": "12 % below the running median, thermal nominal"}
    doc["rows"].append({**probe_rows[2], "kind": "sentinel", "probe": 0})
    return msgspec.convert(doc, Runbook)


def test_fields_that_land_beside_the_probes_are_shown(tmp_path: Path) -> None:
    page = html.render_page(newer_doc(tmp_path), NO_RUNTIME).decode()
    for text in ("drift sentinel", "sentinel median 3.8 % below", "thinking-mixed", "measuring order",
                 "interleaved: the sweep&#x27;s default",
                 "rapl:package-0", "drifting -4.5% after 7 probes (trend beyond target)", "thinking off",
                 "energy per generated token (J), lower is better", "tied with gguf-spec on mem_peak_bytes",
                 "caveat: cell verdict unsteady", "EOS after 20 of 32 tokens", "thermal nominal",
                 "drift sentinel: this cell run again"):
        assert text in page, text
    charts = re.search(r"<script type='application/json' id='benchd-charts'>(.*?)</script>", page, re.S)
    assert charts and "j_per_gen_token" in charts.group(1)


def test_page_with_the_runtime_stays_under_the_size_budget(tmp_path: Path) -> None:
    if not html.available():
        pytest.skip("the html extra is not installed")
    rb = factory_runbook(tmp_path)
    rt = html.vega_runtime(tmp_path / "cache")
    assert rt.script and "vegaEmbed" in rt.script
    page = html.render_page(rb, rt)
    assert len(page) < 1_500_000, len(page)
    assert b"No charts:" not in page
    # The bundle is cached: a second process-level lookup reads the file, byte for byte.
    cached = next((tmp_path / "cache" / "html").glob("vega-bundle-*.js"))
    assert cached.read_text() == rt.script


def test_save_runbook_writes_the_page_beside_the_json(tmp_path: Path) -> None:
    config, store, sweep, _models = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep))
    store.close()
    page = config.runbooks_dir / f"{rid}.html"
    assert page.is_file() and rid in page.read_text()
    listed = runbook.list_runbooks(config)
    assert listed[0]["html"] == str(page)


def test_compare_page(tmp_path: Path) -> None:
    rb = factory_runbook(tmp_path)
    page = html.render_compare_page(compare_runbooks(rb, rb), NO_RUNTIME).decode()
    assert "B / A per cell" in page and "gguf-plain" in page and "tied within ±2 %" in page and "α = 0.05" in page
    path = html.write_compare_page(compare_runbooks(rb, rb), tmp_path)
    assert path.name == f"compare-{rb.id}-vs-{rb.id}.html" and path.stat().st_size > 0


def test_benchctl_report_and_compare_write_pages(tmp_path: Path) -> None:
    import subprocess
    import sys

    config, store, sweep, _models = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep))
    store.close()
    page = config.runbooks_dir / f"{rid}.html"
    page.unlink()
    ctl = [sys.executable, "-m", "benchctl"]
    out = subprocess.run([*ctl, "report", rid, "--html", "--state-dir", str(config.state_dir)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(page) and page.is_file()
    out = subprocess.run([*ctl, "compare", rid, rid, "--html", "--state-dir", str(config.state_dir)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    cmp_page = config.runbooks_dir / f"compare-{rid}-vs-{rid}.html"
    assert out.stdout.strip() == str(cmp_page) and cmp_page.is_file()
    missing = subprocess.run([*ctl, "report", "2026-01-01-nosuchjob1", "--html", "--state-dir", str(config.state_dir)],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def agentic_doc(tmp_path: Path) -> Runbook:
    """A factory runbook with session turns (gguf-plain and mlx-lm, 3 turns at context 512, mlx-lm's turn 3
    a cache miss) and parallel requests at level 2 (2 batches of 2 each; mlx-lm's streams did not overlap,
    so its aggregate is null with the reason), decoded like a runbook file."""
    from benchd.engine.parallel import probe_number

    doc: dict[str, Any] = msgspec.to_builtins(factory_runbook(tmp_path))
    base = {c: next(r for r in doc["rows"] if r["candidate"] == c and r["kind"] == "probe" and r["context"] == 512
                    and r["status"] == "ok") for c in ("gguf-plain", "mlx-lm")}
    for c, row in base.items():
        for turn, (ttft, cached) in enumerate([(400.0, 0), (120.0, 500), (150.0, 1000)], start=1):
            miss = None if turn == 1 else (c == "mlx-lm" and turn == 3)
            doc["rows"].append({**row, "kind": "session", "probe": turn, "turn": turn, "ttft_ms": ttft * (1.5 if c == "mlx-lm" else 1),
                                "cached_tokens": 200 if miss else cached, "prompt_tokens": 520 + 500 * (turn - 1),
                                "reusable_prefix_tokens": None if turn == 1 else cached + 10, "cache_miss": miss})
        for batch in (0, 1):
            for stream in (0, 1):
                agg = 150.0 if c == "gguf-plain" else None
                doc["rows"].append({**row, "kind": "parallel", "probe": probe_number(2, batch, stream), "concurrency": 2,
                                    "batch": batch, "gen_tps": 80.0 + stream, "agg_gen_tps": agg,
                                    "null_reasons": {} if agg else {"agg_gen_tps": "the streams did not overlap"}})
    return msgspec.convert(doc, Runbook)


def test_sessions_and_levels_are_on_the_page(tmp_path: Path) -> None:
    page = html.render_page(agentic_doc(tmp_path), NO_RUNTIME).decode()
    assert "<section id='agentic'>" in page
    for text in ("TTFT per session turn", "reusable prefix", "cache miss", "per request", "aggregate"):
        assert text in page, text
