"""The runbook: written from a (hand-built) job, validated against its committed JSON schema, real
provenance (sha256 of real files), deferred axes covering every null metric, Markdown with the same
numbers, versioned loading (golden v1 file, unknown versions rejected)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import msgspec
import pytest
from runbook_factory import GEN, fill_job, setup_state

from benchd.errors import BenchdError
from benchd.results import provenance, runbook
from benchd.results.report import render_markdown
from benchd.results.text import fmt_value
from benchd.sensors import facts

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_V1 = ROOT / "tests" / "data" / "runbook_v1.json"
DARWIN = ROOT / "tests" / "data" / "darwin"


@pytest.fixture()
def written(tmp_path: Path):
    config, store, sweep, models = setup_state(tmp_path)
    job = fill_job(store, sweep)
    rid = runbook.write_runbook(config, store, job, charts=False)
    yield config, store, rid, models
    store.close()


def test_write_and_validate(written) -> None:
    config, _store, rid, models = written
    assert rid == "2026-11-30-20261130-020000-abcd"
    path = config.runbooks_dir / f"{rid}.json"
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, runbook.runbook_schema())
    rb = runbook.load_runbook(rid, config)
    assert rb.schema_version == 1 and rb.outcome == "succeeded"
    # Provenance: machine facts from this OS (null only with a reason), benchd version.
    m = rb.provenance.machine
    for field in ("cpu_model", "cores_logical", "memory_bytes", "os", "kernel", "arch", "power_source", "hardware_model"):
        assert getattr(m, field) is not None or field in m.null_reasons, field
    assert m.cores_logical and m.memory_bytes and m.memory_bytes > 0
    assert rb.provenance.benchd.version
    # Model size + sha256 of the real files; the MLX dir hashed with the method named.
    cand = {c.candidate: c for c in rb.provenance.candidates}
    gguf = models["gguf"].read_bytes()
    assert cand["gguf-plain"].model.sha256 == hashlib.sha256(gguf).hexdigest()
    assert cand["gguf-plain"].model.bytes == len(gguf)
    assert cand["gguf-spec"].draft_model is not None
    assert cand["gguf-spec"].draft_model.sha256 == hashlib.sha256(models["draft"].read_bytes()).hexdigest()
    assert cand["mlx-lm"].model.kind == "dir" and cand["mlx-lm"].model.sha256_method == facts.SHA256_DIR_METHOD
    assert cand["mlx-lm"].model.files == 2
    assert cand["broken"].model.kind == "missing" and "sha256" in cand["broken"].model.null_reasons
    assert cand["gguf-plain"].server_version == "b1-0c1e570"
    assert cand["mlx-lm"].server_version == "mlx-lm 0.32.2"
    assert cand["broken"].server_version is None and "server_version" in cand["broken"].null_reasons
    # Cooldowns as they happened: one per recorded probe; the configured policy is in the sweep.
    assert len(rb.cooldowns) == sum(len(v) for v in GEN.values())
    assert rb.sweep.cooldown.policy == "fixed"
    assert rb.provenance.prompts.corpus_sha256
    # The rest of the document.
    assert len(rb.cells) == 8 and len(rb.sustained) == 3 and len(rb.eval_summary) == 3
    noisy = next(c for c in rb.cells if c.candidate == "gguf-spec" and c.context == 1024)
    assert noisy.gen_tps.noisy
    assert [p.context for p in rb.pareto] == [512, 1024]


METRIC_FIELDS = ("prompt_tokens", "cached_tokens", "gen_tokens", "prompt_tps", "gen_tps", "gen_tps_client",
                 "ttft_ms", "e2e_ms", "draft_n", "draft_accepted", "draft_acceptance", "mem_peak_bytes",
                 "swap_in_bytes", "swap_out_bytes", "sustain_ratio", "window_tps")


def test_deferred_lists_every_null_metric(written) -> None:
    config, _store, rid, _ = written
    rb = runbook.load_runbook(rid, config)
    assert any(d.axis == "concurrency" for d in rb.deferred.declared)
    axes = {a.strip() for d in rb.deferred.automatic for a in d.axis.split(",")}
    nulls = {m for r in rb.rows if r.status == "ok" for m in METRIC_FIELDS
             if getattr(r, m) is None and (r.kind == "sustained" or m not in ("sustain_ratio", "window_tps"))}
    assert nulls >= {"prompt_tps", "draft_acceptance", "swap_in_bytes"}
    assert not nulls - axes, f"null metrics without a deferred line: {sorted(nulls - axes)}"
    # The reasons the rows gave are carried over, and the failed candidate has its line too.
    reasons = " ".join(d.reason for d in rb.deferred.automatic)
    assert "mlx_lm.server reports no prompt timing" in reasons
    assert "broken" in reasons and "server exited before ready" in reasons


def test_markdown_renders_same_numbers(written) -> None:
    config, _store, rid, _ = written
    md = (config.runbooks_dir / f"{rid}.md").read_text()
    rb = runbook.load_runbook(rid, config)
    assert md == render_markdown(rb)
    for cand, ctx in (("gguf-plain", 512), ("mlx-lm", 1024), ("gguf-spec", 1024)):
        cell = next(c for c in rb.cells if c.candidate == cand and c.context == ctx)
        med = fmt_value("gen_tps", cell.gen_tps.median)
        lo, hi = fmt_value("gen_tps", cell.gen_tps.min), fmt_value("gen_tps", cell.gen_tps.max)
        line = next(x for x in md.splitlines() if x.startswith(f"| {cand} | {ctx} |"))
        assert f"{med} ({lo}–{hi}" in line
    assert "100.0 (99.0–101.0" in md  # gguf-plain@512 gen_tps, from GEN by hand
    assert "mlx_lm.server reports no prompt timing" in md  # a null shows its reason
    assert "~noisy" in md
    # The Pareto header judges against each axis's margin (the cell CI target is another thing).
    assert "outside ±the axis's margin" in md and "CI target" not in md
    assert hashlib.sha256(Path(rb.provenance.candidates[0].model.path).read_bytes()).hexdigest() in md


def test_charts_written(written) -> None:
    config, store, _, _ = written
    rid = runbook.write_runbook(config, store, "20261130-020000-abcd")  # the fixture's is written without views
    for ext in ("png", "svg"):
        chart = config.runbooks_dir / f"{rid}.pareto.{ext}"
        assert chart.is_file() and chart.stat().st_size > 1000
    assert (config.runbooks_dir / f"{rid}.pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (config.runbooks_dir / f"{rid}.pareto.svg").read_bytes()[:2000]


def test_failed_job_is_marked(tmp_path: Path) -> None:
    config, store, sweep, _ = setup_state(tmp_path)
    job = fill_job(store, sweep, job_id="failedjob-0001", state="failed")
    rid = runbook.write_runbook(config, store, job, charts=False)
    assert runbook.load_runbook(job, config).outcome == "failed"
    assert "outcome: **failed**" in (config.runbooks_dir / f"{rid}.md").read_text()


def test_runbook_id_uses_utc_start_date() -> None:
    assert runbook.runbook_id("abcdefgh", "2026-11-30T23:30:00-02:00", "2026-11-29T00:00:00Z") == "2026-12-01-abcdefgh"
    assert runbook.runbook_id("abcdefgh", None, "2026-11-29T10:00:00.000Z") == "2026-11-29-abcdefgh"


def test_resolve_id_job_path_newest(written, tmp_path: Path) -> None:
    config, store, rid, _ = written
    path = config.runbooks_dir / f"{rid}.json"
    assert runbook.resolve_runbook_path(rid, config) == path
    assert runbook.resolve_runbook_path("20261130-020000-abcd", config) == path
    assert runbook.resolve_runbook_path(str(path), config) == path
    assert runbook.resolve_runbook_path(None, config) == path
    sweep = store.get_sweep("20261130-020000-abcd")
    fill_job(store, sweep, job_id="20261201-010000-ffff", started_at="2026-12-01T01:00:00.000Z")
    newer = runbook.write_runbook(config, store, "20261201-010000-ffff")
    assert runbook.resolve_runbook_path(None, config).stem == newer
    listed = runbook.list_runbooks(config)
    assert [e["id"] for e in listed] == [newer, rid]
    assert listed[0]["outcome"] == "succeeded" and len(listed[0]["charts"]) == 2
    with pytest.raises(BenchdError):
        runbook.resolve_runbook_path("nosuchjob-123", config)
    with pytest.raises(BenchdError):
        runbook.runbook_json("../../etc/passwd", config)
    assert json.loads(runbook.runbook_json(rid, config))["id"] == rid


def test_unknown_version_rejected(written, tmp_path: Path) -> None:
    config, _store, rid, _ = written
    doc = json.loads((config.runbooks_dir / f"{rid}.json").read_text())
    doc["schema_version"] = 99
    bad = tmp_path / "future.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(BenchdError, match="schema_version 99 is not supported"):
        runbook.load_runbook(str(bad), config)
    bad.write_text('{"hello": 1}')
    with pytest.raises(BenchdError, match="not a benchd runbook"):
        runbook.load_runbook(str(bad), config)


def test_golden_v1_loads() -> None:
    """A committed runbook of schema version 1 must keep loading (pyperf's telco.json idea)."""
    rb = runbook.decode_runbook(GOLDEN_V1.read_bytes(), str(GOLDEN_V1))
    assert rb.schema_version == 1
    assert {c.candidate for c in rb.cells} == {"gguf-spec", "gguf-plain", "mlx-lm", "broken"}
    jsonschema.validate(json.loads(GOLDEN_V1.read_text()), runbook.runbook_schema())


def test_committed_schema_matches_code() -> None:
    committed = (ROOT / "schemas" / "runbook.schema.json").read_text()
    assert committed == runbook.schema_json(), "regenerate: python -m benchd.results.runbook > schemas/runbook.schema.json"


def test_model_hash_cache(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"abc")
    cache = tmp_path / "hashes.json"
    first = facts.hash_model(f, cache)
    assert first.sha256 == hashlib.sha256(b"abc").hexdigest() and cache.is_file()
    f.write_bytes(b"abcd")  # new size → new key → hashed again
    assert facts.hash_model(f, cache).sha256 == hashlib.sha256(b"abcd").hexdigest()


@pytest.mark.parametrize(("sample", "source", "percent"), [
    ("pmset_ac_charged.txt", "ac", 100.0), ("pmset_battery_discharging.txt", "battery", None),
    ("pmset_desktop.txt", "ac", None), ("pmset_ups.txt", "battery", 88.0),
])
def test_power_fields_from_pmset_samples(sample: str, source: str, percent: float | None) -> None:
    """macOS power source via benchd.sensors.power.status's darwin-isolated pmset parser, on committed samples."""
    from benchd.sensors.power.status import darwin_status

    text = (DARWIN / sample).read_text()
    got = facts.power_fields(darwin_status(run=lambda _cmd: text))
    assert got["power_source"] == source
    if percent is not None:
        assert got["battery_percent"] == percent
    if got["battery_percent"] is None:
        assert "battery_percent" in got["null_reasons"]
    assert got["sources"]["power_source"] == "pmset -g batt"


def test_linux_power_fields_say_why_when_unknown() -> None:
    from benchd.sensors.power.status import PowerStatus

    got = facts.power_fields(PowerStatus(source="unknown", reason="no supply"))
    assert got["power_source"] is None and got["null_reasons"]["power_source"] == "no supply"
    assert msgspec.json.encode(facts.collect_machine())


def test_cooldown_total_in_markdown(written) -> None:
    config, _store, rid, _ = written
    md = (config.runbooks_dir / f"{rid}.md").read_text()
    assert f"cooldowns as they happened: {sum(len(v) for v in GEN.values())}, total 18.0 s waited" in md


def test_server_version_falls_back_to_events() -> None:
    from benchd.schemas import Event, Row

    rows = [Row(job="j", candidate="c", runtime="llama-server", context=1, kind="probe", probe=0, status="ok",
                binary="/bin/llama-server")]
    events = [Event(seq=1, time="t", type="server_ready", job="j",
                    payload={"candidate": "c", "version": "llama.cpp b1", "binary": "/other"})]
    assert provenance.server_info("c", rows, events) == ("/bin/llama-server", "llama.cpp b1", "event:server_ready")
    assert provenance.server_info("x", rows, events) == (None, None, None)


def test_the_written_file_is_the_runbook_encoded_whole(written) -> None:
    """The runbook is written a row and a cooldown at a time; the bytes are those of encoding it whole,
    and what it holds is what the full rows and events give."""
    config, store, rid, _ = written
    job = "20261130-020000-abcd"
    rb = runbook.build_runbook(config, store, job)
    assert rb.rows == store.results.rows(job)
    assert len(rb.cooldowns) == sum(e.type == "cooldown_finished" for e in store.events.page(job))
    on_disk = runbook.decode_runbook((config.runbooks_dir / f"{rid}.json").read_bytes())
    assert (on_disk.rows, on_disk.cooldowns, on_disk.cells, on_disk.pareto) == (rb.rows, rb.cooldowns, rb.cells, rb.pareto)
    assert b"".join(runbook.iter_runbook_json(rb)) == runbook.encode_runbook(rb)
    empty = msgspec.structs.replace(rb, rows=[], cooldowns=[])
    assert b"".join(runbook.iter_runbook_json(empty)) == runbook.encode_runbook(empty)


def test_every_event_is_read_past_one_page(tmp_path: Path) -> None:
    """A long sweep has more events than one page of the store's event reads: every cooldown is kept."""
    config, store, sweep, _ = setup_state(tmp_path)
    job = fill_job(store, sweep)
    extra = 10_001
    for i in range(extra):
        store.events.append(job, "cooldown_finished", {"candidate": "x", "context": 1, "probe": i,
                                                      "record": {"policy": "fixed", "waited_s": 0.0, "reason": "fixed"}})
    rb = runbook.build_runbook(config, store, job)
    assert len(rb.cooldowns) == sum(1 for e in store.events.iterate(job) if e.type == "cooldown_finished") > extra
