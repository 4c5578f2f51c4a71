"""The demo's closing words (`benchctl.demo.conclusion`): one line per run saying, per context, who is
dominated by whom and who stays on the frontier — read from the runbook, naming no pick."""

from __future__ import annotations

from pathlib import Path

import msgspec
from runbook_factory import fill_job, setup_state

from benchctl.demo import conclusion
from benchd.results import runbook
from benchd.schemas import Domination


def test_the_closing_line_says_what_was_found(tmp_path: Path) -> None:
    config, store, sweep, _ = setup_state(tmp_path)
    rid = runbook.write_runbook(config, store, fill_job(store, sweep), charts=False)
    store.close()
    path = config.runbooks_dir / f"{rid}.json"
    # the factory's rows: at 1024 gguf-plain is different-and-better on generation and memory, not worse elsewhere
    assert conclusion(path) == ("What it found: at context 512, no candidate is ruled out (frontier: gguf-plain, "
                                "gguf-spec, mlx-lm). At context 1024, gguf-plain dominates mlx-lm; on the "
                                "frontier: gguf-plain, gguf-spec.")
    rb = runbook.load_runbook(rid, config)
    first = rb.pareto[0]
    ruled = msgspec.structs.replace(first, frontier=["gguf-plain", "mlx-lm"], dominated={"gguf-spec": [
        Domination(by="gguf-plain", better_on=["mem_peak_bytes"], skipped_axes=[])]})
    path.write_bytes(runbook.encode_runbook(msgspec.structs.replace(rb, pareto=[ruled])))
    assert conclusion(path) == ("What it found: at context 512, gguf-plain dominates gguf-spec; on the frontier: "
                                "gguf-plain, mlx-lm.")
