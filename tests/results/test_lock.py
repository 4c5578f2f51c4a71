"""The human lock: round trip (TOML parsed back and compared with the runbook's candidate), refusals
(unknown id, no successful rows, dominated without --force), [previous] on re-lock, atomic writes,
the TOML emitter's escaping, and the adapter's argv for `locked --command` (a real llama-server started
from it answering /health: test_lock_real.py)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runbook_factory import fill_job, setup_state
from testlib import benchctl_inproc

from benchd.errors import BenchdError
from benchd.lock import lockfile as lock
from benchd.results import runbook
from benchd.results.pareto import pareto_from_rows

BENCHCTL = [sys.executable, "-m", "benchctl"]


@pytest.fixture()
def state(tmp_path: Path):
    config, store, sweep, models = setup_state(tmp_path)
    job = fill_job(store, sweep)
    rid = runbook.write_runbook(config, store, job, charts=False)
    yield config, runbook.load_runbook(rid, config), models
    store.close()


def _cli(config, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return benchctl_inproc(*args, "--state-dir", str(config.state_dir),
                           env={"BENCHD_CACHE_DIR": str(config.cache_dir), **(env or {})})


def test_round_trip(state) -> None:

    config, rb, models = state
    path, _doc = lock.lock_candidate(config, "gguf-spec", note='fast "enough"\nand fits')
    assert path == config.locked_path
    data = tomllib.loads(path.read_text())
    got = data["locked"]
    cand = next(c for c in rb.sweep.candidates if c.id == "gguf-spec")
    assert got["schema_version"] == 2
    fp = got["fingerprint"]  # read when the runbook was written; the fixture's binary does not exist
    assert fp["model_sha256"] == hashlib.sha256(models["gguf"].read_bytes()).hexdigest()
    assert fp["binary"] == "/opt/llama/llama-server" and "binary_sha256" not in fp
    assert "/opt/llama/llama-server" in fp["null_reasons"]["binary_sha256"]
    assert fp["args"] == ["-t", "1"] and fp["source"] == "read from files when the runbook was written"
    assert got["candidate"] == cand.id and got["runtime"] == cand.runtime
    assert got["model_path"] == cand.model and got["args"] == cand.args and got["ctx_size"] == cand.ctx_size
    assert cand.spec is not None
    assert got["spec"] == {"kind": cand.spec.kind, "draft_model": cand.spec.draft_model, "draft_max": cand.spec.draft_max}
    assert got["sampling"] == {"temperature": rb.sweep.sampling.temperature, "seed": rb.sweep.sampling.seed}
    assert got["model_sha256"] == hashlib.sha256(models["gguf"].read_bytes()).hexdigest()
    assert got["model_bytes"] == models["gguf"].stat().st_size
    assert got["binary"] == "/opt/llama/llama-server" and got["binary_version"] == "b1-0c1e570"
    assert got["runbook"] == rb.id and got["note"] == 'fast "enough"\nand fits' and got["locked_at"]
    for cell in (c for c in rb.cells if c.candidate == "gguf-spec"):
        ev = got["evidence"][str(cell.context)]
        assert ev["gen_tps"] == cell.gen_tps.median and ev["prompt_tps"] == cell.prompt_tps.median
        assert ev["mem_peak_bytes"] == cell.mem_peak_bytes.median and ev["n_ok"] == cell.n_ok
        # every other axis of the Pareto view the choice was made on: its value, or null with a reason
        (point,) = [pt for p in rb.pareto if p.context == cell.context for pt in p.points if pt.candidate == "gguf-spec"]
        others = {k: v for k, v in point.values.items() if k not in lock.LockEvidence.__struct_fields__}
        assert ev.get("axes", {}) == {k: v for k, v in others.items() if v is not None}
        assert {k for k, v in others.items() if v is None} <= set(ev["null_reasons"])
    assert '[locked.evidence."512"]' in path.read_text()
    assert "previous" not in data
    assert lock.read_lock(path).locked.candidate == "gguf-spec"
    assert [p.name for p in path.parent.iterdir() if ".tmp" in p.name] == []


def _without_evals(config, rb: runbook.Runbook) -> runbook.Runbook:  # type: ignore[no-untyped-def]
    """The factory runbook rewritten without its two eval tasks. Two tasks cannot tell pass rates apart
    (unresolved), which blocks every domination; without them gguf-plain dominates mlx-lm at 1024
    (faster and smaller, both different at three probes)."""
    new = msgspec.structs.replace(rb, evals=[], eval_summary=[],
                                  pareto=pareto_from_rows(rb.rows, [], rb.sweep.probe_plan()))
    runbook.resolve_runbook_path(rb.id, config).write_bytes(runbook.encode_runbook(new))
    return new


def test_refusals(state) -> None:
    config, rb, _ = state
    with pytest.raises(BenchdError, match="no candidate 'nope'"):
        lock.build_lock(rb, "nope")
    with pytest.raises(BenchdError, match="no successful probe rows"):
        lock.build_lock(rb, "broken")
    # two eval tasks cannot compare pass rates (not compared), and their estimate favours gguf-plain: dominated
    with pytest.raises(BenchdError, match=r"dominated \(at context 1024: gguf-plain"):
        lock.build_lock(rb, "mlx-lm")
    rb = _without_evals(config, rb)
    with pytest.raises(BenchdError, match=r"dominated \(at context 1024: gguf-plain \(better on gen_tps, mem_peak_bytes\)") as exc:
        lock.build_lock(rb, "mlx-lm")
    assert "--force" in exc.value.message
    assert not config.locked_path.exists()
    forced = lock.build_lock(rb, "mlx-lm", force=True)
    assert forced.forced and "1024" in forced.dominated_by


def test_cli_refusals_exit_2(state) -> None:
    config, rb, _ = state
    _without_evals(config, rb)
    for cand, needle in (("nope", "no candidate 'nope'"), ("broken", "no successful probe rows"),
                         ("mlx-lm", "is dominated")):
        res = _cli(config, "lock", "--candidate", cand)
        assert res.returncode == 2, res.stderr
        assert needle in res.stderr
    assert not config.locked_path.exists()
    res = _cli(config, "lock", "--candidate", "mlx-lm", "--force", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["locked"]["forced"] is True


def test_relock_moves_previous_and_cli_json(state, tmp_path: Path) -> None:
    config, _rb, _ = state
    out = tmp_path / "my.lock.toml"
    assert _cli(config, "lock", "--candidate", "gguf-spec", "--out", str(out)).returncode == 0
    res = _cli(config, "lock", "--candidate", "gguf-plain", "--out", str(out), "--note", "smaller")
    assert res.returncode == 0 and "[previous]" in res.stdout
    data = tomllib.loads(out.read_text())
    assert data["locked"]["candidate"] == "gguf-plain" and data["previous"]["candidate"] == "gguf-spec"
    assert "previous" not in data["previous"]
    shown = _cli(config, "locked", "--file", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["locked"]["candidate"] == "gguf-plain" and doc["previous"]["candidate"] == "gguf-spec"
    text = _cli(config, "locked", "--file", str(out))
    assert "gguf-plain" in text.stdout and "smaller" in text.stdout
    # The evidence in the report's words and units, not field names ("gen_tps 100.0").
    evidence = next(x for x in text.stdout.splitlines() if x.strip().startswith("context 512:"))
    assert re.search(r"generation speed [\d.]+ tok/s, prompt processing .*peak memory [\d.]+ [KMG]iB", evidence), evidence
    assert "gen_tps" not in evidence and "mem_peak_bytes" not in evidence
    # a null figure is said once, on its own line with its reason (mlx-lm reports no prompt timing)
    mlx = tmp_path / "mlx.lock.toml"
    assert _cli(config, "lock", "--candidate", "mlx-lm", "--out", str(mlx), "--force").returncode == 0
    lines = _cli(config, "locked", "--file", str(mlx)).stdout.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("context 512:"))
    assert "prompt processing" not in lines[at] and "null" not in lines[at], lines[at]
    assert lines[at + 1].strip().startswith("prompt processing null: "), lines[at:at + 3]
    missing = _cli(config, "locked", "--file", str(tmp_path / "none.toml"))
    assert missing.returncode == 2 and "no lock file" in missing.stderr


def test_unknown_lock_version_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "locked.toml"
    bad.write_text('[locked]\nschema_version = 7\ncandidate = "x"\n')
    with pytest.raises(BenchdError, match="schema_version 7 is not supported"):
        lock.read_lock(bad)


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_text, st.one_of(_text, st.integers(-2**63, 2**63 - 1), st.booleans(),
                                        st.floats(allow_nan=False), st.lists(_text, max_size=4)), max_size=6),
       _text)
def test_toml_emitter_round_trips(table: dict, sub_key: str) -> None:
    doc = {"t": table, "u": {sub_key: {"k": "v"}}}
    assert tomllib.loads(lock.dumps_toml(doc)) == doc


def test_command_is_the_adapters(state) -> None:
    """`locked --command` argv comes from the llama-server adapter: model, host, port, -c, spec, args."""
    config, rb, models = state
    fake_bin = config.state_dir / "llama-server"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    locked = msgspec.structs.replace(lock.build_lock(rb, "gguf-spec"), binary=str(fake_bin))
    argv = lock.server_argv(locked, config, port=18080)
    assert argv[0] == str(fake_bin)
    for pair in (["-m", str(models["gguf"])], ["--host", "127.0.0.1"], ["--port", "18080"], ["-c", "4096"],
                 ["-md", str(models["draft"])], ["--spec-draft-n-max", "8"]):
        i = argv.index(pair[0])
        assert argv[i: i + 2] == pair
    assert argv[1:3] == ["-t", "1"]  # the candidate's args first, benchd's own flags after them
    mlx = lock.build_lock(rb, "mlx-lm", force=True)
    env = lock.server_env(mlx, config)  # what the MLX adapter adds: offline hub, an existing HF cache
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HUB_CACHE"] == str(config.hf_cache_dir)


def test_command_unsets_inherited_runtime_knobs(state, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon starts servers without inherited LLAMA_ARG_* (issue 13): so does the locked command."""
    config, rb, _ = state
    fake_bin = config.state_dir / "llama-server"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    monkeypatch.setenv("LLAMA_ARG_N_GPU_LAYERS", "0")
    locked = msgspec.structs.replace(lock.build_lock(rb, "gguf-spec"), binary=str(fake_bin))
    assert lock.server_command_line(locked, config, port=18080).startswith("env -u LLAMA_ARG_N_GPU_LAYERS ")


def test_the_evidence_keeps_every_axis_of_the_pareto_view(tmp_path: Path) -> None:
    """Beyond the fixed medians, the lock keeps each other axis the view had for the candidate (here time to
    ready from its warm starts), and a null one with its reason: nothing the choice was made on is dropped."""
    config, store, sweep, _ = setup_state(tmp_path)
    job = fill_job(store, sweep)
    for s in (0.9, 1.0, 1.1):
        store.events.append(job, "server_ready", {"candidate": "gguf-spec", "ready_s": s, "purpose": "ready",
                                                 "cache": "warm", "cold": False, "resident_before": 1.0})
    rb = runbook.build_runbook(config, store, job)
    store.close()
    for ev in lock.build_lock(rb, "gguf-spec").evidence.values():
        assert ev.axes == {"ready_s": 1.0}
        assert ev.null_reasons["j_per_gen_token"] == "no value in the Pareto view (the runbook's deferred axes say why)"
