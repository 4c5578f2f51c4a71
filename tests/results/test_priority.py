"""`report --priority`: the axis that answers the question and why, candidates in order with the one
comparison's sentence against the first, what the first costs on the other axes, and no pick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runbook_factory import fill_job, setup_state

from benchd.results import runbook
from benchd.results.priority import PRIORITIES, priority_lines
from benchd.schemas import EvalResult


def test_priorities_answer_in_order_with_costs(tmp_path: Path) -> None:
    config, store, sweep, _ = setup_state(tmp_path)
    rb = runbook.load_runbook(runbook.write_runbook(config, store, fill_job(store, sweep), charts=False), config)
    store.close()
    gen = priority_lines(rb, "generation")
    assert gen[0] == "priority: fastest generation (generation)" and "answered by generation speed" in gen[1]
    assert "does not pick" in gen[2]
    i = gen.index("context 512:")
    assert gen[i + 1] == "  1. mlx-lm: 130.0 tok/s — first by median"
    assert gen[i + 2].startswith("  2. gguf-spec: 120.0 tok/s — gguf-spec is 7.7 % slower than mlx-lm at generation")
    assert "  what mlx-lm costs on the other axes (medians, pass rates):" in gen
    # a cost is followed by the Pareto view's sentence for the pair on that axis (its α split over the axes):
    # a worse median may be a tie or unresolved, and the line says which
    assert ("    peak memory: 2.38 MiB against the best 1.91 MiB (gguf-plain) — gguf-plain uses 20.0 % less peak "
            "memory than mlx-lm (exact, no spread; α = 0.00625)") in gen
    assert any(line.startswith("    eval pass rate: 1/2 tasks (50 %) against the best 2/2 tasks (100 %) (gguf-plain, "
                               "gguf-spec) — gguf-plain against mlx-lm on eval pass rate is unresolved") for line in gen)
    # the axes the leader has no value on, named in one line after its costs
    assert "    not measured for mlx-lm: energy per generated token, prompt processing" in gen
    assert not [line for line in gen if ": not measured for" in line]
    mem = priority_lines(rb, "memory")
    assert "  2. mlx-lm: 2.38 MiB — mlx-lm uses 25.0 % more peak memory than gguf-plain (exact, no spread; α = 0.05)" in mem
    assert priority_lines(rb, "vision")[3].startswith("  not measured: no candidate ran image probes")
    ctx = priority_lines(rb, "context")
    assert "  broken: no context served (failed at 512, 1024)" in ctx
    for name in PRIORITIES:  # every priority answers, measured or not (a sweep without evals says so)
        assert priority_lines(rb, name)[0].startswith("priority: ")
    env = {**os.environ, "BENCHD_CACHE_DIR": str(config.cache_dir)}
    out = subprocess.run([sys.executable, "-m", "benchctl", "report", "--priority", "code", "--json", "--state-dir",
                          str(config.state_dir)], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["lines"][0] == "priority: best code (code)"


def test_equal_values_share_a_place_and_the_leader_says_so(tmp_path: Path) -> None:
    """Candidates with the same value on the axis get the same place; the first line names them level and
    says their order is by name (nothing measured puts one ahead); an outcome axis ranks by pass rate."""
    import msgspec

    config, store, sweep, _ = setup_state(tmp_path)
    rb = runbook.load_runbook(runbook.write_runbook(config, store, fill_job(store, sweep), charts=False), config)
    store.close()
    view = next(v for v in rb.pareto if v.context == 512)
    level = [msgspec.structs.replace(p, values={**p.values, "gen_tps": 125.0, "code_pass_rate": 0.5}) for p in view.points]
    rb = msgspec.structs.replace(rb, pareto=[msgspec.structs.replace(view, points=level)])
    names = sorted(p.candidate for p in level)
    gen = priority_lines(rb, "generation")
    i = gen.index("context 512:")
    assert gen[i + 1] == (f"  1. {names[0]}: 125.0 tok/s — first by median, level with {', '.join(names[1:])} "
                          "(the order among them is by name, not measured)")
    assert all(gen[i + 1 + k].startswith(f"  1. {n}: 125.0 tok/s — ") for k, n in enumerate(names))
    code = priority_lines(rb, "code")
    assert code[code.index("context 512:") + 1].startswith(f"  1. {names[0]}: 0.500 — first by pass rate, level with")
    # with the suite's per-task outcomes beside it, a pass rate reads as tasks passed, here and in the costs
    evals = [EvalResult(job="j", candidate=n, tier="code", task=f"HumanEval/{t}", passed=t == 0) for n in names
             for t in range(2)]
    rb = msgspec.structs.replace(rb, evals=evals)
    code = priority_lines(rb, "code")
    assert code[code.index("context 512:") + 1].startswith(f"  1. {names[0]}: 1/2 tasks (50 %) — first by pass rate")
    gen = priority_lines(rb, "generation")
    assert "    HumanEval pass rate: 1/2 tasks (50 %), the same for every candidate" in gen
    # the eval tier's pass rate reads as its tasks too; a best shared by some names them
    tier = [EvalResult(job="j", candidate=n, tier="smoke", task=f"t{t}", passed=t < 2 - (n == names[2]))
            for n in names for t in range(4)]
    rates = {n: 0.25 if n == names[2] else 0.5 for n in names}
    split = [msgspec.structs.replace(p, values={**p.values, "eval_pass_rate": rates[p.candidate]}) for p in level]
    rb = msgspec.structs.replace(rb, evals=evals + tier, pareto=[msgspec.structs.replace(view, points=split)])
    gen = priority_lines(rb, "generation")
    assert f"    eval pass rate: 2/4 tasks (50 %), the best measured (level with {names[1]})" in gen
    # the costs' header names both kinds of figure it lists (a pass rate is not a median)
    assert f"  what {names[0]} costs on the other axes (medians, pass rates):" in gen


def test_a_best_median_carries_its_sentence_against_the_next_best(tmp_path: Path) -> None:
    """The leader's best median on another axis is followed by the Pareto view's sentence against the next best:
    a best by median may be a tie or unresolved, and the line must not read as an advantage the comparison denies."""
    import msgspec

    config, store, sweep, _ = setup_state(tmp_path)
    rb = runbook.load_runbook(runbook.write_runbook(config, store, fill_job(store, sweep), charts=False), config)
    store.close()
    view = next(v for v in rb.pareto if v.context == 512)
    ttft = {"mlx-lm": 75.0, "gguf-spec": 76.0, "gguf-plain": 77.0}  # medians apart, the rows' TTFTs the same
    points = [msgspec.structs.replace(p, values={**p.values, "ttft_ms": ttft[p.candidate]}) if p.candidate in ttft
              else p for p in view.points]
    rb = msgspec.structs.replace(rb, pareto=[msgspec.structs.replace(view, points=points)])
    line = next(x for x in priority_lines(rb, "generation") if x.startswith("    time to first token: "))
    said = next(t.axes["ttft_ms"] for t in [*view.ties, *view.tradeoffs] if set(t.pair) == {"mlx-lm", "gguf-spec"})
    assert line == f"    time to first token: 75.0 ms, the best measured — {said}"
    assert "tied" in said or "unresolved" in said  # the rows' TTFTs are equal: no advantage
