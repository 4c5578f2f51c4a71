"""`make demo`: a real sweep end to end on the tiny models, the way a user would run one.

Steps, each a real command a user could type: provision runtimes (cached), generate the tiny models
(cached), write `state/demo-sweep.toml`, start `benchd` on the checkout's `state/`, `benchctl submit
--follow` (which ends with the Pareto view), `benchctl report`, stop the daemon, and print the page to
open (`<runbook>.html`), one line saying what the sweep found, and the next step (`benchctl lock`, naming
no candidate: the tool does not pick). `--real` (`make demo-real`): the same flow on SmolLM2-135M, f16 vs
q8_0 KV cache on llama-server with HumanEval, and a line on what its pass rates can say.

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

from benchd.stats.notation import plural

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
probes = 6                      # rounds of every candidate: six is the fewest for a cell's 95 % CI of the
                                # median (3 leaves every cell "too few"); a fixed count compares at the full α
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
max_seconds = 3                 # the demo keeps its waits short (a sweep of yours: 5 or more)
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


#: The MLX copy of SmolLM2-135M on this project's 2-core x86 machine: prompt and generation tok/s measured
#: once with mlx_lm's stream_generate (331-token prompt, 24 tokens; load 3.6, beside other work), RESULTS.md §3c.
MLX_REAL_PROMPT_TOK_S = 5.9
MLX_REAL_GEN_TOK_S = 3.6
#: The real demo's grid and code eval (the sweep below; the MLX estimate is computed from them).
REAL_CONTEXTS = (256, 1024)
REAL_GEN_TOKENS = 64
#: Rounds per cell: six is the fewest that give a cell's median a 95 % CI (fewer: every cell "too few").
REAL_PROBES = 6
REAL_CODE_TASKS = 12
#: Per HumanEval task on SmolLM2 (prompt tokens, answer tokens): rounded from the real demo's runbook.
REAL_CODE_TOKENS = (150, 100)


def mlx_real_minutes() -> int:
    """Minutes the MLX copy would add to the real demo at the measured rates: 1 warm-up + the probes per
    context, then the code eval."""
    requests = 1 + REAL_PROBES
    prompt = requests * sum(REAL_CONTEXTS) + REAL_CODE_TASKS * REAL_CODE_TOKENS[0]
    gen = requests * len(REAL_CONTEXTS) * REAL_GEN_TOKENS + REAL_CODE_TASKS * REAL_CODE_TOKENS[1]
    return round((prompt / MLX_REAL_PROMPT_TOK_S + gen / MLX_REAL_GEN_TOK_S) / 60)


def _real_sweep_toml(model: object) -> str:
    """The real-model demo: SmolLM2-135M on llama-server, f16 KV cache vs a q8_0 one (flash attention on,
    as the pinned build needs for a quantized V cache), HumanEval on both; the MLX copy deferred with why."""
    from benchctl.realmodel import RealModel

    assert isinstance(model, RealModel)
    return f"""# The real-model demo sweep: written by `make demo-real` (benchctl/demo.py). Edit and submit it with
#   benchctl submit state/demo-real-sweep.toml --follow
name = "demo-real"
contexts = {list(REAL_CONTEXTS)}
gen_tokens = {REAL_GEN_TOKENS}
probes = {REAL_PROBES}                      # the fewest that give each cell a verdict
warmup = 1
eval_tier = "none"
evals = ["code"]                # HumanEval, graded in the eval sandbox
eval_limit = {{ code = {REAL_CODE_TASKS} }}      # a fixed subset, evenly over HumanEval's order (the same ids everywhere)
deferred = [
  {{ axis = "concurrency", reason = "the demo measures a single user" }},
  {{ axis = "sustained", reason = "not run (sustained.tokens = 0): the demo runs in a few minutes on 2 cores" }},
  {{ axis = "candidate smollm2-mlx (mlx_lm.server on {model.mlx_dir.name})", reason = "the same weights dequantized to MLX read the prompt at ~{MLX_REAL_PROMPT_TOK_S} and decode at ~{MLX_REAL_GEN_TOK_S} tok/s on a 2-core x86 CPU (mlx has no fast CPU kernels; RESULTS.md §3c): its probes and {REAL_CODE_TASKS} HumanEval answers would add ~{mlx_real_minutes()} minutes. tests/engine/test_smollm2_real.py checks its tokens agree with llama-server's" }},
]

[sampling]
temperature = 0
seed = 0

[sustained]
tokens = 0

[cooldown]
policy = "idle"
seconds = 0.5
max_seconds = 5
max_load = 1.0

[[candidates]]
id = "smollm2-f16kv"
runtime = "llama-server"
model = "{model.gguf}"
args = ["-t", "1"]

[[candidates]]
id = "smollm2-q8kv"
runtime = "llama-server"
model = "{model.gguf}"
args = ["-t", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
"""


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print(f"\n$ {' '.join(args)}", flush=True)
    return subprocess.run(args, text=True, **kw)  # type: ignore[call-overload,no-any-return]


def main(argv: list[str] | None = None) -> int:
    """`python -m benchctl.demo [--real] [STATE_DIR]` (default: the checkout's `state/`); `--real`: the
    SmolLM2-135M sweep (`make demo-real`, docs/testing.md#the-real-model-demo) instead of the tiny models."""
    from benchctl.tinymodels import ensure
    from benchd.config import Config

    args = list(sys.argv[1:] if argv is None else argv)
    real = "--real" in args
    args = [a for a in args if a != "--real"]
    state = Path(args[0]).absolute() if args else ROOT / "state"
    env = dict(os.environ, BENCHD_STATE_DIR=str(state))
    env.pop("BENCHD_SOCKET", None)
    config = Config.resolve(state_dir=state)
    benchctl = str(BIN / "benchctl")

    if _run([benchctl, "runtimes", "install", "all"], env=env).returncode != 0:
        return 1
    state.mkdir(parents=True, exist_ok=True)
    if real:
        from benchctl import realmodel

        sweep_path = state / "demo-real-sweep.toml"
        sweep_path.write_text(_real_sweep_toml(realmodel.ensure(config.cache_dir, print)))
    else:
        sweep_path = state / "demo-sweep.toml"
        sweep_path.write_text(_sweep_toml(ensure(config.cache_dir, size="small", seed=0)))
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
            print(f"the demo sweep did not succeed. Why, with the daemon stopped (these read the state dir "
                  f"offline): {benchctl} jobs --state-dir {state} (the job and its error); {benchctl} logs "
                  f"--state-dir {state} (the daemon's log, {config.daemon_log_path}); {benchctl} logs JOB "
                  f"--state-dir {state} (its servers' logs, under {state / 'logs'}); {benchctl} report "
                  f"--state-dir {state} (the runbook, if one was written)", file=sys.stderr)
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
        if real:
            print("\n" + real_evals_line(runbooks[-1]))
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


def real_evals_line(runbook_path: Path) -> str:
    """What the real demo's HumanEval can say: each candidate's pass@1 with its exact 95 % interval (the
    runbook's), the tasks the two KV caches answered differently, and what n tasks cannot resolve."""
    from benchd.results.runbook import decode_runbook

    try:
        rb = decode_runbook(runbook_path.read_bytes(), str(runbook_path))
    except Exception as exc:  # the runbook's own error is the report's to show
        return f"HumanEval: the runbook could not be read ({exc})"
    code = [s for s in rb.eval_summary if s.tier == "code"]
    if not code:
        return "HumanEval: no code eval in the runbook."
    parts = []
    for s in code:
        ci = ("" if s.ci_low is None or s.ci_high is None else
              f" (95 % CI {100 * s.ci_low:.0f}-{100 * s.ci_high:.0f} %)")
        fails = ", ".join(f"{k} {v}" for k, v in sorted(s.failures.items()))
        parts.append(f"{s.candidate} {s.passed}/{s.completed if s.completed is not None else s.total}{ci}"
                     + (f", failures: {fails}" if fails else ""))
    by_task: dict[str, dict[str, bool]] = {}
    for r in rb.evals:
        if r.tier == "code":
            by_task.setdefault(r.task, {})[r.candidate] = r.passed
    differ = sorted(t for t, got in by_task.items() if len(set(got.values())) > 1)
    n = max((s.total for s in code), default=0)
    widest = max((s.ci_high - s.ci_low for s in code if s.ci_low is not None and s.ci_high is not None), default=None)
    width = "" if widest is None else f" (here up to {100 * widest:.0f} points wide)"
    return (f"HumanEval pass@1 on {n} tasks, greedy: " + "; ".join(parts) + ". "
            + (f"The two candidates' grades differ on {plural(len(differ), 'task')} ({', '.join(differ)}). " if differ else
               "Both candidates pass and fail the same tasks. ")
            + f"What {n} tasks can say: each pass rate lies in its interval{width}; a difference between the "
              "KV caches smaller than that is not resolved (the report pairs the tasks)."
            + (" No task passed: that bounds a 135M model's rate, it does not measure it."
               if all(s.passed == 0 for s in code) else ""))

if __name__ == "__main__":
    sys.exit(main())
