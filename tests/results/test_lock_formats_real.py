"""The router-mode preset a lock gives (`locked --format llama-server-preset`), read by the real pinned
llama-server (`--models-preset`): it lists the locked candidate with the lock's flags; no model loads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import msgspec
from runbook_factory import fill_job, setup_state

from benchd.lock import formats
from benchd.lock import lockfile as lock
from benchd.results import runbook


def test_the_pinned_router_reads_the_preset(tmp_path: Path, llama_server_bin: Path, tiny_models, free_port) -> None:
    """The pinned llama-server in router mode (`--models-preset`) lists the locked candidate with the
    flags the lock gives (its GET /models shows the argv it would start the model with); no model loads."""
    import time
    import urllib.request

    from benchd.schemas import Candidate, Spec

    config, store, sweep, _ = setup_state(tmp_path)
    real = Candidate(id="gguf-spec", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"],
                     ctx_size=512, binary=str(llama_server_bin),
                     spec=Spec(kind="draft", draft_model=str(tiny_models.draft_identical), draft_max=4))
    rid = runbook.write_runbook(config, store, fill_job(store, msgspec.structs.replace(
        sweep, candidates=[real, *sweep.candidates[1:]])), charts=False)
    store.close()
    locked = lock.build_lock(runbook.load_runbook(rid, config), "gguf-spec")
    preset = tmp_path / "presets.ini"
    preset.write_text(formats.llama_server_preset(locked, config))
    port = free_port()
    log = tmp_path / "router.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(llama_server_bin), "--models-preset", str(preset), "--host", "127.0.0.1",
                                 "--port", str(port), "--no-models-autoload"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline, body = time.monotonic() + 60, None  # a hang guard, not a timing
        while body is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/models", timeout=5) as resp:
                    body = json.loads(resp.read())
            except OSError:
                time.sleep(0.2)
        assert body is not None, log.read_text()[-2000:]
        (entry,) = [m for m in body["data"] if m["id"] == "gguf-spec"]
        args = entry["status"]["args"]
        assert args[args.index("--model") + 1] == str(tiny_models.target)
        assert args[args.index("--ctx-size") + 1] == "512" and args[args.index("--threads") + 1] == "1"
        assert str(tiny_models.draft_identical) in args
    finally:
        proc.terminate()
        proc.wait(timeout=30)
