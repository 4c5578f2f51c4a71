"""benchd/stats: Newcombe's paired interval, nulls for values ≤ 0, exact only for counters, dominance
by intersection–union (better on one axis, not worse on the others), axes not compared at their size,
and the stop rule's planned looks."""

from __future__ import annotations

import random

import pytest

from benchd.results.text import dominance_sentence
from benchd.schemas import Candidate, Row, Sweep
from benchd.stats import ranktests, stop
from benchd.stats.comparison import compare_axis, compare_outcomes, dominance, tasks_needed


def test_newcombe_method_10_against_the_paper() -> None:
    """Newcombe (1998), Table II example (a): 36 both, 12 first only, 2 second only, 0 neither; method 10
    gives 0.0569 to 0.3404 for first − second (here B − A with B the second: the negated interval)."""
    lo, hi = ranktests.newcombe_paired(36, 12, 2, 0, 0.95)
    assert (lo, hi) == (pytest.approx(-0.3404, abs=1e-4), pytest.approx(-0.0569, abs=1e-4))
    lo5, hi5 = ranktests.newcombe_paired(0, 5, 0, 0, 0.95)  # 5/5 vs 0/5: far narrower than [−17, +100] pp
    assert hi5 < -0.38 and lo5 == -1.0


def test_pass_rates_use_the_score_interval_and_keep_mcnemar() -> None:
    a = {f"t{i}": True for i in range(5)}
    b = {f"t{i}": False for i in range(5)}
    v = compare_outcomes(a, b)
    assert v.method.startswith("Newcombe") and v.guard_p == pytest.approx(2 / 32)
    assert v.verdict == "unresolved" and v.diff == -1.0 and v.diff_high is not None and v.diff_high < -0.38
    assert tasks_needed(5.0, 0.05) == 52 and tasks_needed(13.0, 0.05) == 19


def test_values_at_or_below_zero_are_nulls_with_a_reason() -> None:
    v = compare_axis([0.0, 10.0, 10.1, 9.9], [20.0, 20.2, 19.8, 20.1], axis="j_per_gen_token", better="lower")
    assert v.dropped == 1 and v.dropped_reason and v.n_a == 3 and v.verdict == "different"


def test_zero_spread_is_exact_only_for_counters() -> None:
    assert compare_axis([100.0] * 2, [100.0] * 2, axis="gen_tps", better="higher").verdict == "unresolved"
    assert compare_axis([100.0] * 2, [100.0] * 2, axis="mem_peak_bytes", better="lower").verdict == "tied"


def _noisy(rng: random.Random, mean: float, n: int, cv: float) -> list[float]:
    return [mean * rng.lognormvariate(0, cv) for _ in range(n)]


def test_two_times_faster_and_smaller_dominates_with_five_tasks_each() -> None:
    """A 2x faster and 20 % smaller, both 0/5 on eval: eval is not compared (5 tasks cannot bound ±5 pp)
    and does not block (its estimate is 0); A dominates, better on memory, not worse on the speeds."""
    rng = random.Random(1)
    fails = {f"t{i}": False for i in range(5)}
    a = {"gen_tps": _noisy(rng, 200, 3, 0.03), "mem_peak_bytes": _noisy(rng, 800, 3, 0.005), "eval_pass_rate": fails}
    b = {"gen_tps": _noisy(rng, 100, 3, 0.03), "mem_peak_bytes": _noisy(rng, 1000, 3, 0.005), "eval_pass_rate": fails}
    d = dominance(a, b, axes=["gen_tps", "mem_peak_bytes", "eval_pass_rate"])
    assert d.winner == "a" and d.status == "dominates" and "mem_peak_bytes" in d.better_on, d.text
    assert d.not_compared["eval_pass_rate"].needed == 52 and d.k == 3
    # B far better on eval (5/5 vs 0/5): not compared, but its estimate favours the loser: blocks, by name
    wins = {f"t{i}": True for i in range(5)}
    d2 = dominance(a, {**b, "eval_pass_rate": wins}, axes=["gen_tps", "mem_peak_bytes", "eval_pass_rate"])
    assert d2.winner is None and d2.status == "undecided" and d2.blocked_on == ["eval_pass_rate"], d2.text
    # B 1.5x faster to ready over 3 warm starts: ready_s is not compared (6 a side needed), and blocks
    ready = {"ready_s": [1.5, 1.2, 1.8]}
    d3 = dominance({**a, **ready}, {**b, "ready_s": [1.0, 1.25, 0.8]}, axes=["gen_tps", "mem_peak_bytes", "ready_s"])
    assert d3.winner is None and d3.blocked_on == ["ready_s"] and d3.not_compared["ready_s"].lever == "[ready] starts"


def test_one_sustained_run_each_blocks_only_beyond_its_ten_percent_margin() -> None:
    """The sustain ratio is one run a candidate (never compared): B's 3 % better ratio is within the 10 %
    margin and A dominates, the sentence naming the axis it did not compare; B's 25 % better ratio blocks."""
    rng = random.Random(3)
    a = {"gen_tps": _noisy(rng, 400, 6, 0.02), "mem_peak_bytes": _noisy(rng, 200, 6, 0.005), "sustain_ratio": [0.90]}
    b = {"gen_tps": _noisy(rng, 100, 6, 0.02), "mem_peak_bytes": _noisy(rng, 800, 6, 0.005), "sustain_ratio": [0.927]}
    axes = ["gen_tps", "mem_peak_bytes", "sustain_ratio"]
    d = dominance(a, b, axes=axes, names=("fast", "slow"))
    assert d.winner == "a" and d.blocked_on == [] and d.not_compared["sustain_ratio"].lever == "[sustained] runs"
    assert dominance_sentence(d, "fast", "slow").startswith(
        "fast dominates slow: better on generation speed and peak memory; not compared at this size: sustain ratio (")
    d2 = dominance(a, {**b, "sustain_ratio": [1.125]}, axes=axes)
    assert d2.winner is None and d2.status == "undecided" and d2.blocked_on == ["sustain_ratio"], d2.text
    # 3 starts a side 3x apart: time to ready is not compared at its size yet different, so it counts, named once
    fast_start = dominance({**a, "ready_s": [1.0, 1.01, 0.99]}, {**b, "ready_s": [3.0, 3.05, 2.95]},
                           axes=["gen_tps", "ready_s"], names=("fast", "slow"))
    assert "ready_s" in fast_start.not_compared and fast_start.better_on == ["gen_tps", "ready_s"], fast_start.text
    assert dominance_sentence(fast_start, "fast", "slow").startswith(
        "fast dominates slow: better on generation speed and time to ready (α")
    # KLD over 3 chunks a side: its lever is more chunks, which the sweep's [kld] settings can add
    kld = dominance({**a, "kld": [0.01] * 3}, {**b, "kld": [0.02] * 3}, axes=["gen_tps", "kld"])
    assert kld.not_compared["kld"].lever == "chunks ([kld] tokens or a longer corpus)", kld.text


def test_a_five_percent_edge_on_another_axis_is_not_ruled_out() -> None:
    """B 5 % faster at prompt processing (beyond the 2 % margin): A is not shown not worse there."""
    rng = random.Random(2)
    a = {"gen_tps": _noisy(rng, 200, 6, 0.01), "prompt_tps": _noisy(rng, 1000, 6, 0.01)}
    b = {"gen_tps": _noisy(rng, 100, 6, 0.01), "prompt_tps": _noisy(rng, 1050, 6, 0.01)}
    d = dominance(a, b, axes=["gen_tps", "prompt_tps"])
    assert d.winner is None and d.status in ("undecided", "trade-off"), d.text


def _rows(cand: str, gen: list[float], mem: float) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="llama-server", context=512, kind="probe", probe=i, status="ok",
                round=i, gen_tps=g, prompt_tps=g * 5, ttft_ms=1e5 / g, mem_peak_bytes=mem) for i, g in enumerate(gen)]


def test_the_stop_asks_only_at_planned_looks() -> None:
    assert stop.looks(3, 12) == [3, 6, 12] and stop.look_alpha(3, 12) == pytest.approx(0.05 / 3)
    sweep = Sweep(name="s", contexts=[512], gen_tokens=32, candidates=[
        Candidate(id=x, runtime="llama-server", model="/m") for x in ("fast", "slow")])
    assert stop.planned_axes(sweep) == ["gen_tps", "prompt_tps", "ttft_ms", "mem_peak_bytes", "j_per_gen_token",
                                        "ready_s", "sustain_ratio"]
    fast = _rows("fast", [1000.0, 1010.0, 990.0, 1005.0], 1e8)
    slow = _rows("slow", [100.0, 101.0, 99.0, 100.5], 1e9)
    per = {"fast": fast[:3], "slow": slow[:3]}
    why = stop.stop_reason(per, 3, min_rounds=3, max_rounds=12, order="interleaved", sweep=sweep)
    assert why is not None and "fast vs slow: dominates" in why and "3 looks" in why
    # round 4 is not a planned look: the rule does not ask
    assert stop.stop_reason({"fast": fast, "slow": slow}, 4, min_rounds=3, max_rounds=12, order="interleaved",
                            sweep=sweep) is None
