"""Secrets in a candidate's `env` (issue 36): a value whose name looks secret (TOKEN, KEY, SECRET,
PASSWORD, ...) is `<redacted>` wherever results are written — the runbook JSON, the page, the report,
exports, the lock file — and the lock records the name to supply at start: the recheck takes the value
from benchd's environment (unset: a clear error), the printed command takes it from the shell."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from runbook_factory import fill_job, setup_state

from benchd.errors import BenchdError
from benchd.lock import lockfile as lock
from benchd.lock.recheck import recheck_sweep
from benchd.results import runbook
from benchd.servers.runtimes.environment import REDACTED, redact_sweep

SECRET = "hf_S3cretValue36"


@pytest.fixture()
def secret_runbook(tmp_path: Path):  # type: ignore[no-untyped-def]
    config, store, sweep, _models = setup_state(tmp_path)
    cands = [msgspec.structs.replace(c, env={"HF_TOKEN": SECRET, "OMP_NUM_THREADS": "2"}) if c.id == "gguf-plain"
             else c for c in sweep.candidates]
    job = fill_job(store, msgspec.structs.replace(sweep, candidates=cands))
    rid = runbook.write_runbook(config, store, job)
    yield config, runbook.load_runbook(rid, config), rid
    store.close()


def test_redact_sweep_keeps_what_is_not_secret() -> None:
    from benchd.schemas import Candidate, Sweep

    s = Sweep(name="s", contexts=[1], gen_tokens=1, candidates=[
        Candidate(id="a", runtime="llama-server", model="/m", env={"MY_API_KEY": "k", "TOKENIZERS_PARALLELISM": "0",
                                                                    "DB_PASSWORD": "p", "N": "1"})])
    assert redact_sweep(s).candidates[0].env == {"DB_PASSWORD": REDACTED, "MY_API_KEY": REDACTED,
                                                 "N": "1", "TOKENIZERS_PARALLELISM": "0"}


def test_no_written_result_holds_the_secret(secret_runbook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config, rb, _rid = secret_runbook
    cand = next(c for c in rb.sweep.candidates if c.id == "gguf-plain")
    assert cand.env == {"HF_TOKEN": REDACTED, "OMP_NUM_THREADS": "2"}
    written = [p for p in config.runbooks_dir.rglob("*") if p.is_file()]
    assert any(p.suffix == ".json" for p in written)
    for p in written:
        assert SECRET.encode() not in p.read_bytes(), p
    from benchd.results.report import render_markdown

    assert SECRET not in render_markdown(rb)
    path = tmp_path / "locked.toml"
    lock.write_lock(path, lock.build_lock(rb, "gguf-plain", force=True))
    text = path.read_text()
    assert SECRET not in text and "HF_TOKEN" in text and REDACTED in text


def test_the_lock_names_the_secret_to_supply_at_start(secret_runbook, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    config, rb, _ = secret_runbook
    path = tmp_path / "locked.toml"
    lock.write_lock(path, lock.build_lock(rb, "gguf-plain", force=True))
    locked = lock.read_lock(path).locked
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(BenchdError) as info:
        recheck_sweep(locked, config)
    assert info.value.code == "secret_not_set" and "HF_TOKEN" in info.value.message
    monkeypatch.setenv("HF_TOKEN", "from-benchds-env")
    env = recheck_sweep(locked, config).candidates[0].env
    assert env == {"HF_TOKEN": "from-benchds-env", "OMP_NUM_THREADS": "2"}
    fake_bin = tmp_path / "llama-server"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    line = lock.server_command_line(msgspec.structs.replace(locked, binary=str(fake_bin)), config)
    assert 'HF_TOKEN="$HF_TOKEN"' in line and "from-benchds-env" not in line and REDACTED not in line


def test_the_lock_forms_reference_the_secret_by_name(secret_runbook, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every form of the lock names the variable the user supplies at start instead of `<redacted>`:
    llama-swap's `${env.NAME}` macro, the shell's `NAME="$NAME"`, the preset a comment naming it; the
    value benchd's environment holds is in none of them."""
    import configparser
    import json

    from benchd.lock import formats

    config, rb, _ = secret_runbook
    path = tmp_path / "locked.toml"
    lock.write_lock(path, lock.build_lock(rb, "gguf-plain", force=True))
    fake_bin = tmp_path / "llama-server"
    fake_bin.write_text("#!/bin/sh\n")
    fake_bin.chmod(0o755)
    locked = msgspec.structs.replace(lock.read_lock(path).locked, binary=str(fake_bin))
    monkeypatch.setenv("HF_TOKEN", "from-benchds-env")
    out = {fmt: formats.render(fmt, locked, config) for fmt in ("shell", "llama-swap", "llama-server-preset")}
    for fmt, text in out.items():
        assert REDACTED not in text and "from-benchds-env" not in text and SECRET not in text, (fmt, text)
    swap_env = [json.loads(x.strip().removeprefix("- ")) for x in out["llama-swap"].splitlines()
                if x.startswith("      - ")]
    assert "HF_TOKEN=${env.HF_TOKEN}" in swap_env and "OMP_NUM_THREADS=2" in swap_env, swap_env
    assert 'HF_TOKEN="$HF_TOKEN"' in out["shell"]
    preset = out["llama-server-preset"]
    assert "; the router's environment needs HF_TOKEN set" in preset
    ini = configparser.ConfigParser(comment_prefixes=(";",), interpolation=None)
    ini.read_string("[top]\n" + preset)  # keys before the first section belong to the file
    assert all("HF_TOKEN" not in k.upper() for k in ini["gguf-plain"]), dict(ini["gguf-plain"])
