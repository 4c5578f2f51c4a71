"""`make demo`: a real sweep end to end on the tiny models, the way a user would run one.

Steps, each a real command a user could type: provision runtimes (cached), generate the tiny models
(cached), write `state/demo-sweep.toml`, start `benchd` on the checkout's `state/`, `benchctl submit
--follow` (which ends with the Pareto view), `benchctl report`, stop the daemon, and print the page to
open (`<runbook>.html`), one line saying what the sweep found, and the next step (`benchctl lock`, naming
no candidate: the tool does not pick).

Why subprocesses and not library calls: the demo doubles as the proof that the installed entry points
work together (the daemon, the socket, the client), which is what a newcomer needs to see.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _sweep_toml(models: object) -> str:
    from benchctl.tinymodels import TinyModels

    assert isinstance(models, TinyModels)
    mlx_runtime = "mlx_lm.server"
    return f"""# The demo sweep: written by `make demo` (benchctl/demo.py). Edit and submit it yourself with
#   benchctl submit state/demo-sweep.toml --follow
name = "demo"
contexts = [256, 1024]          # the same context grid for every candidate
gen_tokens = 64                 # tokens generated per probe
probes = 3                      # recorded probes per (candidate, context)
warmup = 1
eval_tier = "smoke"
deferred = [{{ axis = "concurrency", reason = "the demo measures a single user" }}]

[sampling]
temperature = 0
seed = 0

[sustained]
tokens = 256
window = 64

[cooldown]
policy = "idle"
seconds = 0.5
max_seconds = 5
max_load = 1.0

[[candidates]]
id = "tiny-gguf"
runtime = "llama-server"
model = "{models.target}"
args = ["-t", "2"]

[[candidates]]
id = "tiny-gguf-draft"
runtime = "llama-server"
model = "{models.target}"
args = ["-t", "2"]
[candidates.spec]
kind = "draft"
draft_model = "{models.draft_identical}"
draft_max = 8

[[candidates]]
id = "tiny-mlx"
runtime = "{mlx_runtime}"
model = "{models.mlx_dir}"
"""


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print(f"\n$ {' '.join(args)}", flush=True)
    return subprocess.run(args, text=True, **kw)  # type: ignore[call-overload,no-any-return]


def main(argv: list[str] | None = None) -> int:
    """`python -m benchctl.demo [STATE_DIR]` (default: the checkout's `state/`)."""
    from benchctl.tinymodels import ensure
    from benchd.config import Config

    args = sys.argv[1:] if argv is None else argv
    state = Path(args[0]).absolute() if args else ROOT / "state"
    env = dict(os.environ, BENCHD_STATE_DIR=str(state))
    env.pop("BENCHD_SOCKET", None)
    config = Config.resolve(state_dir=state)
    benchctl = str(BIN / "benchctl")

    if _run([benchctl, "runtimes", "install", "all"], env=env).returncode != 0:
        return 1
    models = ensure(config.cache_dir, size="small", seed=0)
    sweep_path = state / "demo-sweep.toml"
    state.mkdir(parents=True, exist_ok=True)
    sweep_path.write_text(_sweep_toml(models))
    print(f"wrote {sweep_path}")

    print(f"\n$ benchd --state-dir {state}  (in the background; its log: {config.daemon_log_path})", flush=True)
    daemon = subprocess.Popen([str(BIN / "benchd"), "--state-dir", str(state)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while subprocess.run([benchctl, "ping"], env=env, capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                print(f"benchd did not start; see {config.daemon_log_path}", file=sys.stderr)
                return 1
            time.sleep(0.2)
        submitted = _run([benchctl, "submit", str(sweep_path), "--follow"], env=env)  # ends with the Pareto view
        rc = _run([benchctl, "report"], env=env).returncode  # the cells; the Pareto view is printed once, above
        if submitted.returncode != 0 or rc != 0:
            # the daemon is stopped below: advice that works without it (files, offline commands)
            print(f"the demo sweep did not succeed. Why, without the daemon: {benchctl} report (the runbook, offline); "
                  f"the daemon's log {config.daemon_log_path}; the servers' logs under {state / 'logs'}",
                  file=sys.stderr)
            return submitted.returncode or rc
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
    runbooks = sorted(config.runbooks_dir.glob("*.json"))
    print("\nDone. The runbook (JSON + Markdown), the Pareto chart and the page are in", config.runbooks_dir)
    if runbooks:
        print("\nOpen the runbook page (one self-contained file, works offline):")
        print("  ", runbooks[-1].with_suffix(".html"))
        print("\n" + conclusion(runbooks[-1]))
    print("\nNext step: read the tradeoffs (one priority at a time: "
          f"{benchctl} report --priority generation, or memory, first-token, ...), then lock the candidate YOU "
          "choose; the tool does not pick one:")
    print(f"  BENCHD_STATE_DIR={state} {benchctl} lock --candidate ID --note 'why I chose it'")
    return 0


def conclusion(runbook_path: Path) -> str:
    """One line saying what the demo found, from the runbook's Pareto view: per context who is
    dominated (by whom) and who stays on the frontier; the sentences are the report's."""
    from benchd.results.runbook import decode_runbook

    try:
        rb = decode_runbook(runbook_path.read_bytes(), str(runbook_path))
    except Exception as exc:  # the line is a summary: the runbook's own error is the report's to show
        return f"What it found: the runbook could not be read ({exc})"
    parts = []
    for view in rb.pareto:
        out = [f"{d.by} dominates {c}" for c, ds in view.dominated.items() for d in ds]
        stay = ", ".join(view.frontier) or "none"
        parts.append(f"at context {view.context}, " + ("; ".join(out) + f"; on the frontier: {stay}" if out else
                                                       f"no candidate is ruled out (frontier: {stay})"))
    if not parts:
        return "What it found: no Pareto view (no successful probes)."
    return "What it found: " + ". ".join([parts[0], *(p[0].upper() + p[1:] for p in parts[1:])]) + "."


if __name__ == "__main__":
    sys.exit(main())
