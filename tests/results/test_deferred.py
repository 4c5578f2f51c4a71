"""Deferred axes: every null metric in a row set appears, with the reason the rows carry."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from benchd.engine.energy import ENERGY_FIELDS
from benchd.results.deferred import NO_REASON, automatic_deferred
from benchd.schemas import Deferred, EvalResult, Row, Sweep, ThermalReading, sweep_json_decoder
from benchd.stats.rows import carried_metrics


def listed_metrics(kind: str) -> list[str]:
    """The metrics a row of `kind` carries, less energy (its deferred lines are its own: energy_deferred)."""
    return [m for m in carried_metrics(kind) if m not in ENERGY_FIELDS]


def make_sweep(**over) -> Sweep:
    doc = {
        "name": "t", "contexts": [512, 2048], "gen_tokens": 16, "probes": 2, "eval_tier": "none",
        "candidates": [
            {"id": "ll", "runtime": "llama-server", "model": "/m/a.gguf",
             "spec": {"kind": "draft", "draft_model": "/m/d.gguf"}},
            {"id": "lm", "runtime": "mlx_lm.server", "model": "/m/lm"},
            {"id": "vl", "runtime": "mlx_vlm.server", "model": "/m/vl"},
        ],
    }
    doc.update(over)
    return sweep_json_decoder.decode(msgspec.json.encode(doc))


FULL: dict[str, Any] = dict(prompt_tokens=512, cached_tokens=0, gen_tokens=16, prompt_tps=1.0, gen_tps=1.0, gen_tps_client=1.0,
            ttft_ms=1.0, e2e_ms=1.0, draft_n=1, draft_accepted=1, draft_acceptance=1.0, mem_peak_bytes=1,
            mem_rss_anon_bytes=1, mem_rss_file_bytes=1, swap_in_bytes=0, swap_out_bytes=0, layer_split="33/33",
            reasoning_tokens=0, thinking="off", ttfat_ms=1.0, thermal_before=ThermalReading(source="psutil", celsius=40.0), server_version="b1",
            thermal_after=ThermalReading(source="psutil", celsius=41.0), window_tps=[1.0, 1.0], sustain_ratio=1.0,
            **dict.fromkeys(ENERGY_FIELDS, 1.0), window_j=[1.0, 1.0])


def row(cand, runtime, ctx, probe, kind="probe", status="ok", nulls=(), reasons=None, **kw) -> Row:
    vals: dict[str, Any] = {k: v for k, v in FULL.items() if kind == "sustained" or k not in ("thermal_after", "window_tps",
                                                                             "sustain_ratio", "window_j")}
    for m in nulls:
        vals[m] = None
    vals.update(kw)
    if status != "ok":
        vals = {k: v for k, v in kw.items() if k == "error"}
    return Row(job="job-00001", candidate=cand, runtime=runtime, context=ctx, kind=kind, probe=probe,
               status=status, null_reasons=reasons or {}, **vals)


def full_rows(sweep: Sweep) -> list[Row]:
    out = []
    for c in sweep.candidates:
        for ctx in sweep.contexts:
            out += [row(c.id, c.runtime, ctx, p) for p in range(sweep.probes)]
        out.append(row(c.id, c.runtime, 0, 0, kind="sustained"))
    return out


def covered(entries: list[Deferred], metric: str, cand: str) -> bool:
    return any(metric in e.axis.split(", ") and f"{cand} (" in e.reason for e in entries)


def assert_every_null_appears(sweep: Sweep, rows: list[Row]) -> list[Deferred]:
    entries = automatic_deferred(sweep, rows)
    for r in rows:
        if r.status != "ok":
            assert any(e.axis == "probes" and e.reason.startswith(f"{r.candidate} (") and r.status in e.reason
                       for e in entries), r
            continue
        for m in listed_metrics(r.kind):
            if getattr(r, m) is None:
                assert covered(entries, m, r.candidate), (m, r.candidate)
                reason = r.null_reasons.get(m)
                assert any(reason in e.reason for e in entries if m in e.axis) if reason else True
    return entries


def test_sessions_and_levels_remove_their_deferred_entries():
    """prefix-cache and concurrency are deferred only while the sweep does not measure them."""
    sweep = make_sweep(session={"turns": 4}, concurrency=[1, 2])
    axes = {e.axis for e in automatic_deferred(sweep, full_rows(sweep))}
    assert "prefix-cache" not in axes and "concurrency" not in axes
    only_one = make_sweep(concurrency=[1])
    assert "concurrency" in {e.axis for e in automatic_deferred(only_one, full_rows(only_one))}


def test_fixed_entries_and_scope():
    sweep = make_sweep(sustained={"tokens": 0, "window": 8})
    entries = automatic_deferred(sweep, full_rows(sweep))
    axes = {e.axis for e in entries}
    assert {"vision", "concurrency", "quality", "prefix-cache", "contexts", "sampling"} <= axes
    assert "energy" not in axes  # measured in every row: no deferred line
    assert any(e.axis == "eval" and "eval_tier none" in e.reason for e in entries)
    assert any(e.axis == "sustained" and "sustained.tokens = 0" in e.reason for e in entries)
    vision = next(e for e in entries if e.axis == "vision")
    assert "no image probe (vision = false" in vision.reason


def test_public_suites_are_named_where_the_eval_tier_is_none():
    """With `eval_tier = "none"` and public suites, the deferred lines say the built-in tasks did not run
    and name the suites that did, instead of "no quality check ran"."""
    entries = {e.axis: e.reason for e in automatic_deferred(make_sweep(evals=["code", "tools"]), [])}
    assert entries["eval"] == ("eval_tier none: the built-in eval tasks did not run (the public suites did: "
                               "HumanEval, BFCL tool-call, each its own axis)")
    assert entries["quality"] == ("quality beyond the eval tier (none) and the public suites (HumanEval, BFCL "
                                  "tool-call) is not measured")
    plain = {e.axis: e.reason for e in automatic_deferred(make_sweep(), [])}
    assert plain["eval"] == "eval_tier none: no quality check ran"
    assert plain["quality"] == "quality beyond the eval tier (none) is not measured"


def test_complete_rows_give_only_fixed_entries():
    sweep = make_sweep(eval_tier="smoke")
    entries = automatic_deferred(sweep, full_rows(sweep))
    assert not any(" (" in e.reason and "—" in e.reason for e in entries)
    assert not any(e.axis in ("probes", "eval") for e in entries)


def test_runtime_nulls_with_reasons():
    sweep = make_sweep()
    rows = full_rows(sweep)
    no_prompt = "mlx_lm.server reports no prompt timing"
    no_spec = "no speculative decoding configured"
    rows = [
        row(r.candidate, r.runtime, r.context, r.probe, kind=r.kind,
            nulls=("prompt_tps", "draft_n", "draft_accepted", "draft_acceptance"),
            reasons={"prompt_tps": no_prompt, "draft_n": no_spec, "draft_accepted": no_spec,
                     "draft_acceptance": no_spec})
        if r.candidate == "lm" else r
        for r in rows
    ]
    entries = assert_every_null_appears(sweep, rows)
    pt = [e for e in entries if e.axis == "prompt_tps"]
    assert len(pt) == 1  # probe rows and the sustained row: one line, not one per kind
    assert no_prompt in pt[0].reason and "lm (mlx_lm.server)" in pt[0].reason and "4 of 4 ok probe" in pt[0].reason
    assert "1 of 1 ok sustained" in pt[0].reason and pt[0].reason.count("lm (mlx_lm.server)") == 1
    # the draft trio shares one reason: one line, not three
    assert any(e.axis == "draft_n, draft_accepted, draft_acceptance" and no_spec in e.reason for e in entries)


def test_a_rows_place_outside_the_rounds_is_no_deferred_axis_but_a_new_metric_declared_null_is():
    """`round`/`visit` are where a row ran, not a measurement: their null reason stays in the row."""
    sweep = make_sweep()
    rows = [row(r.candidate, r.runtime, r.context, r.probe, kind=r.kind, round=None, visit=None,
                reasons={"round": "sustained generation: outside the rounds",
                         "visit": "sustained generation: outside the rounds"}) if r.kind == "sustained" else r
            for r in full_rows(sweep)]
    assert not [e for e in automatic_deferred(sweep, rows) if "round" in e.axis.split(", ")]
    rows[0] = row("ll", "llama-server", 512, 0, image_ttft_ms=None, reasons={"image_ttft_ms": "no image asked"})
    assert any(e.axis == "image_ttft_ms" and "no image asked" in e.reason for e in automatic_deferred(sweep, rows))


def test_null_without_reason_is_reported_as_a_bug():
    sweep = make_sweep()
    rows = full_rows(sweep)
    rows[0] = row("ll", "llama-server", 512, 0, nulls=("mem_peak_bytes",))
    entries = assert_every_null_appears(sweep, rows)
    e = next(e for e in entries if e.axis == "mem_peak_bytes")
    assert NO_REASON in e.reason and "1 of 4" in e.reason


def test_failures_missing_probes_and_thermal():
    sweep = make_sweep()
    rows = [r for r in full_rows(sweep) if not (r.candidate == "vl" and r.context == 2048)]
    rows = [r for r in rows if not (r.candidate == "vl" and r.kind == "sustained")]
    rows.append(row("ll", "llama-server", 4096, 9, status="failed", error="server crashed: signal 9\nlog tail"))
    rows.append(row("lm", "mlx_lm.server", 512, 7, status="aborted"))
    cold = ThermalReading(source="psutil", available=False, reason="no sensors in this VM")
    rows[0] = row("ll", "llama-server", 512, 0, thermal_before=cold)
    entries = assert_every_null_appears(sweep, rows)
    assert any(e.axis == "probes" and "1 failed" in e.reason and "signal 9" in e.reason for e in entries)
    assert any(e.axis == "probes" and "1 aborted" in e.reason for e in entries)
    assert any(e.axis == "probes" and "vl (" in e.reason and "context 2048: 2 of 2" in e.reason for e in entries)
    assert any(e.axis == "sustained" and "vl (" in e.reason for e in entries)
    assert any(e.axis == "thermal" and "no sensors in this VM" in e.reason for e in entries)


def test_random_null_sets_all_appear():
    rng = random.Random(4)
    sweep = make_sweep()
    for _ in range(30):
        rows = []
        for r in full_rows(sweep):
            nulls = tuple(m for m in listed_metrics(r.kind) if rng.random() < 0.15)
            reasons = {m: f"reason-{rng.randrange(3)}" for m in nulls if rng.random() < 0.8}
            status = "failed" if rng.random() < 0.05 else "ok"
            rows.append(row(r.candidate, r.runtime, r.context, r.probe, kind=r.kind, status=status,
                            nulls=nulls, reasons=reasons))
        entries = assert_every_null_appears(sweep, rows)
        for e in entries:  # every entry is a valid Deferred (length limits hold)
            msgspec.json.decode(msgspec.json.encode(e), type=Deferred)


def test_eval_entries():
    sweep = make_sweep(eval_tier="standard")
    evals = [EvalResult(job="job-00001", candidate="ll", tier="standard", task="fibonacci", passed=True,
                        sandboxed=False),
             EvalResult(job="job-00001", candidate="lm", tier="standard", task="fibonacci", passed=False,
                        sandboxed=True)]
    entries = automatic_deferred(sweep, full_rows(sweep), evals)
    assert any(e.axis == "eval-sandbox" and "ll (" in e.reason and "fibonacci" in e.reason for e in entries)
    assert any(e.axis == "eval" and "vl (" in e.reason and "no result" in e.reason for e in entries)
    assert not any(e.axis == "eval" and "lm (" in e.reason for e in entries)
    assert not any(e.axis == "eval" and "eval_tier none" in e.reason for e in entries)


def test_the_same_axis_and_reason_is_one_line_naming_every_candidate():
    """Issue 15: two candidates with the same null reason give one line naming both, not two lines."""
    sweep = make_sweep()
    no_spec = "no spec configured"
    rows = [row(r.candidate, r.runtime, r.context, r.probe, kind=r.kind,
                nulls=("draft_n", "draft_accepted", "draft_acceptance"),
                reasons=dict.fromkeys(("draft_n", "draft_accepted", "draft_acceptance"), no_spec))
            for r in full_rows(sweep)]
    entries = assert_every_null_appears(sweep, rows)
    trio = [e for e in entries if e.axis == "draft_n, draft_accepted, draft_acceptance"]
    assert len(trio) == 1
    for c in sweep.candidates:
        assert trio[0].reason.count(f"{c.id} ({c.runtime})") == 1
    axes = [(e.axis, e.reason) for e in entries]
    assert len(axes) == len(set(axes))


def test_energy_null_is_one_line_per_reason():
    sweep = make_sweep()
    no_rapl = "energy not measured: no powercap (/sys/class/powercap does not exist)"
    no_idle = "no idle baseline: the cooldown lasted 0.00 s, under the 0.5 s a baseline needs"
    idle = [f for f in ENERGY_FIELDS if f == "idle_watts" or f.endswith("_above_idle")]
    rows = [
        row(r.candidate, r.runtime, r.context, r.probe, kind=r.kind, nulls=(*ENERGY_FIELDS, "window_j"),
            reasons={**dict.fromkeys(ENERGY_FIELDS, no_rapl), "window_j": no_rapl})
        if r.candidate == "lm" else
        row(r.candidate, r.runtime, r.context, r.probe, kind=r.kind, nulls=idle, reasons=dict.fromkeys(idle, no_idle))
        for r in full_rows(sweep)
    ]
    entries = automatic_deferred(sweep, rows)
    energy = [e for e in entries if e.axis.startswith("energy")]
    assert len(energy) == 2, energy
    whole = next(e for e in energy if e.axis == "energy")
    assert whole.reason.startswith(no_rapl) and "null in 5 of 15 ok rows" in whole.reason
    part = next(e for e in energy if e.axis != "energy")
    assert part.axis == "energy: " + ", ".join(sorted(idle)) and "null in 10 of 15 ok rows" in part.reason
    assert not any("idle_watts" in e.axis for e in entries if not e.axis.startswith("energy"))  # not listed twice


def test_vision_line_goes_away_for_measured_candidates():
    """A vision candidate with an ok image probe has no "vision" line; text candidates share one line
    saying their image figures are null and why; a vision candidate whose image probes all failed is
    named with the server's error."""
    cands = [{"id": "txt", "runtime": "llama-server", "model": "/m/a.gguf"},
             {"id": "vl", "runtime": "mlx_vlm.server", "model": "/m/vl", "vision": True},
             {"id": "lv", "runtime": "llama-server", "model": "/m/t.gguf", "mmproj": "/m/p.gguf", "vision": True}]
    sweep = make_sweep(candidates=cands)
    rows = [*full_rows(sweep), row("vl", "mlx_vlm.server", 512, 0, kind="vision", image_tokens=80, image_ttft_ms=9.0),
            row("lv", "llama-server", 512, 0, kind="vision", status="failed",
                error="HTTP 400: Failed to load image or audio file")]
    lines = [e for e in automatic_deferred(sweep, rows) if e.axis == "vision"]
    assert len(lines) == 2
    assert lines[0].reason.startswith("txt (llama-server): no image probe (vision = false")
    assert "lv (llama-server): no successful image probe: HTTP 400: Failed to load image" in lines[1].reason
    assert not any("vl (" in e.reason for e in lines)
