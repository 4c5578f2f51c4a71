"""The one comparison on synthetic samples: deterministic (seeded), no servers.

Lognormal noise: a value is `median × exp(N(0, cv))`, which is how probe timings spread (a ratio
scale). Rates are measured over seeded trials and each test's docstring states the rate it measured.
"""

from __future__ import annotations

import math
import random

import pytest

from benchd.stats import ranktests
from benchd.stats.comparison import (
    AXES,
    compare_axis,
    compare_outcomes,
    compare_rows,
    dominance,
    paired_samples,
    register_axis,
)


def _draw(rng: random.Random, n: int, median: float, cv: float) -> list[float]:
    return [median * math.exp(rng.gauss(0.0, cv)) for _ in range(n)]


def _rate(trials: int, seed: int, make) -> float:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    return sum(make(rng, i) for i in range(trials)) / trials


def test_three_vs_three_with_a_5x_gap_is_different() -> None:
    a, b = [2390.0, 2600.0, 2926.0], [512.0, 520.0, 535.0]
    v = compare_axis(a, b, axis="gen_tps", better="higher")
    assert v.verdict == "different" and v.b_better is False
    assert v.ci_high is not None and v.ci_high < 1 / 1.02
    assert v.text.startswith("different: ") and "slower" in v.text and "α = 0.05" in v.text
    assert v.guard_p == pytest.approx(0.1)  # 3 vs 3 apart: the rank test's smallest p, accepted by the guard


def test_symmetric_in_a_and_b() -> None:
    rng = random.Random(7)
    for _ in range(50):
        a, b = _draw(rng, 5, 100, 0.05), _draw(rng, 6, 104, 0.05)
        ab = compare_axis(a, b, axis="gen_tps", better="higher")
        ba = compare_axis(b, a, axis="gen_tps", better="higher")
        assert ab.verdict == ba.verdict
        assert ab.ratio == pytest.approx(1 / ba.ratio)  # type: ignore[operator]
        assert ab.ci_low == pytest.approx(1 / ba.ci_high)  # type: ignore[operator]
        assert ab.guard_p == pytest.approx(ba.guard_p)
        if ab.verdict == "different":
            assert ab.b_better is not ba.b_better


def test_overlapping_three_vs_three_is_never_different() -> None:
    """Whatever the noise, 3 vs 3 is different only when the samples do not overlap (the guard)."""
    a, b = [100.0, 100.1, 130.0], [129.0, 131.0, 131.5]
    v = compare_axis(a, b, axis="gen_tps", better="higher")
    assert v.verdict != "different"


@pytest.mark.parametrize("n", [3, 5, 8, pytest.param(12, marks=pytest.mark.slow), pytest.param(20, marks=pytest.mark.slow)])
def test_identical_distributions_are_rarely_different(n: int) -> None:
    """2,000 seeded trials per n, CV cycling over 1, 5, 10 and 15 %, once unpaired and once paired.
    Measured (seeds as below): unpaired 1.6 %, 1.4 %, 1.4 %, 1.2 %, 0.7 % different at n = 3, 5, 8, 12, 20;
    paired 3.0 %, 1.6 %, 1.6 %, 1.0 %, 0.7 %. The bound asserted is the issue's 5 %."""
    cvs = (0.01, 0.05, 0.10, 0.15)

    def unpaired(rng: random.Random, i: int) -> bool:
        cv = cvs[i % 4]
        return compare_axis(_draw(rng, n, 100, cv), _draw(rng, n, 100, cv), axis="gen_tps",
                            better="higher").verdict == "different"

    def paired(rng: random.Random, i: int) -> bool:
        cv = cvs[i % 4]
        return compare_axis(_draw(rng, n, 100, cv), _draw(rng, n, 100, cv), axis="mem_peak_bytes",
                            better="lower", paired=True).verdict == "different"

    assert _rate(2000, n, unpaired) <= 0.05
    assert _rate(2000, 100 + n, paired) <= 0.05


def test_power_grows_with_the_probe_count() -> None:
    """A 20 % gap at CV 10 %, 500 seeded trials per n. Measured: caught 55 % at n = 5, 85 % at n = 8,
    100 % at n = 20."""

    def caught(n: int):  # type: ignore[no-untyped-def]
        return lambda rng, _i: compare_axis(_draw(rng, n, 100, 0.10), _draw(rng, n, 120, 0.10), axis="gen_tps",
                                            better="higher").verdict == "different"

    p5, p8, p20 = (_rate(500, 11, caught(n)) for n in (5, 8, 20))
    assert p20 > p8 > p5


def _drifting(rng: random.Random, n: int, drift) -> tuple[list[float], list[float], list[float], list[float]]:  # type: ignore[no-untyped-def]
    """Twins (same median, CV 1 %) measured on a machine whose speed follows `drift(t)`, t in [0, 1):
    (sequential A, sequential B, interleaved A, interleaved B)."""
    def probe(slot: int, slots: int) -> float:
        return 100 * drift(slot / slots) * math.exp(rng.gauss(0.0, 0.01))

    seq_a = [probe(i, 2 * n) for i in range(n)]
    seq_b = [probe(n + i, 2 * n) for i in range(n)]
    int_a, int_b = [], []
    for r in range(n):  # each round visits both in a seeded random order
        first = rng.random() < 0.5
        x, y = probe(2 * r, 2 * n), probe(2 * r + 1, 2 * n)
        int_a.append(x if first else y)
        int_b.append(y if first else x)
    return seq_a, seq_b, int_a, int_b


@pytest.mark.parametrize("kind", ["linear", "step"])
def test_pairing_cancels_drift_that_the_sequential_design_does_not(kind: str) -> None:
    """Twins at n = 10, a 10 % linear slow-down over the sweep, or a 5 % step half-way through; 300
    seeded trials. Measured: sequential-unpaired calls them different in 99 % (linear) / 100 % (step),
    interleaved-paired in 0 % (both)."""
    drift = (lambda t: 1 - 0.10 * t) if kind == "linear" else (lambda t: 1.0 if t < 0.5 else 0.95)
    seq = pair = 0
    rng = random.Random(5)
    for _ in range(300):
        sa, sb, ia, ib = _drifting(rng, 10, drift)
        seq += compare_axis(sa, sb, axis="gen_tps", better="higher").verdict == "different"
        pair += compare_axis(ia, ib, axis="gen_tps", better="higher", paired=True).verdict == "different"
    assert seq / 300 >= 0.5
    assert pair / 300 <= 0.05


def test_twins_at_n20_cv1_are_tied() -> None:
    rng = random.Random(3)
    for _ in range(200):
        v = compare_axis(_draw(rng, 20, 100, 0.01), _draw(rng, 20, 100, 0.01), axis="gen_tps", better="higher")
        assert v.verdict == "tied", v.text
        assert v.text.startswith("tied within ±2 % [")


def test_unresolved_names_the_rounds_that_would_resolve_it() -> None:
    v = compare_axis([100.0, 104.0, 97.0, 101.0, 99.0], [103.0, 108.0, 99.0, 105.0, 102.0], axis="gen_tps",
                     better="higher")
    assert v.verdict == "unresolved" and v.rounds_to_resolve is not None and v.rounds_to_resolve > 0
    assert v.lever == "rounds"
    assert f"about {v.rounds_to_resolve} more rounds would give an even chance of resolving ±2 %" in v.text
    few = compare_axis([100.0, 104.0, 97.0], [103.0, 108.0, 99.0], axis="gen_tps", better="higher")
    assert few.verdict == "unresolved" and few.rounds_to_resolve is None  # no advice before 5 values
    # that many more rounds at the same spread and estimate would resolve it
    assert v.ci_low is not None and v.ci_low < 1.02


def test_zero_spread_compares_exactly_against_the_margin() -> None:
    tied = compare_axis([100.0] * 3, [101.0] * 3, axis="mem_peak_bytes", better="lower")
    assert tied.verdict == "tied" and "exact" in tied.text
    diff = compare_axis([100.0] * 3, [110.0] * 3, axis="mem_peak_bytes", better="lower")
    assert diff.verdict == "different" and diff.b_better is False and "larger" in diff.text


def test_too_little_to_compare_is_unresolved_with_why() -> None:
    assert "one value" in compare_axis([1.0], [2.0, 2.1], axis="gen_tps", better="higher").text
    assert "not measured" in compare_axis([], [2.0], axis="gen_tps", better="higher").text
    with pytest.raises(ValueError):
        compare_axis([1.0, 2.0], [1.0], axis="gen_tps", better="higher", paired=True)


def test_dominance_bonferroni_and_unresolved_axes() -> None:
    small = {"gen_tps": [2390.0, 2600.0, 2926.0], "mem_peak_bytes": [18.0, 18.1, 18.0]}
    large = {"gen_tps": [512.0, 520.0, 535.0], "mem_peak_bytes": [89.0, 89.3, 89.0]}
    d = dominance(small, large, axes=["gen_tps", "mem_peak_bytes"])
    assert d.winner == "a" and d.better_on == ["gen_tps", "mem_peak_bytes"] and d.k == 2
    assert d.alpha_axis == pytest.approx(0.025) and all(v.alpha == 0.025 for v in d.verdicts.values())
    assert "α = 0.05 over 2 axes" in d.text
    # B's memory as small as A's within a wide noise: A is not shown not worse there (one-sided bound past 2 %)
    fuzzy = {**large, "mem_peak_bytes": [17.0, 18.0, 19.0]}
    d2 = dominance(small, fuzzy, axes=["gen_tps", "mem_peak_bytes"])
    assert d2.winner is None and d2.status == "undecided" and d2.unresolved_on == ["mem_peak_bytes"]
    assert d2.text.startswith("not dominated: unresolved on mem_peak_bytes")
    # B larger within that noise: A is not worse (non-inferiority, α unsplit), so A dominates on gen_tps, and the
    # memory axis, unresolved two-sided, is named as the one A is only shown not worse on (not hidden, not a win)
    d4 = dominance(small, {**large, "mem_peak_bytes": [18.5, 18.0, 19.0]}, axes=["gen_tps", "mem_peak_bytes"])
    assert d4.winner == "a" and d4.verdicts["mem_peak_bytes"].verdict == "unresolved"
    assert d4.standings["mem_peak_bytes"].a_not_worse and d4.not_worse_on == ["mem_peak_bytes"]
    assert d4.better_on == ["gen_tps"] and not d4.tied_on
    assert d4.text.startswith("A dominates B: different and better on gen_tps; not worse on mem_peak_bytes (")
    assert d.not_worse_on == [] and d2.not_worse_on == []
    d3 = dominance(small, {**large, "sustain_ratio": [0.9]}, axes=["gen_tps", "mem_peak_bytes", "sustain_ratio"])
    assert d3.winner == "a" and "sustain_ratio" in d3.skipped and d3.k == 2
    # B better on one, worse on another: neither
    mixed = {"gen_tps": large["gen_tps"], "mem_peak_bytes": [9.0, 9.1, 9.0]}
    assert dominance(small, mixed, axes=["gen_tps", "mem_peak_bytes"]).text.startswith("neither dominates")


def test_bonferroni_guard_needs_more_probes() -> None:
    """3 vs 3 apart passes the guard at α (min p 0.1 is the floor) and still at α/k (the floor holds)."""
    a, b = [100.0, 101.0, 102.0], [200.0, 201.0, 203.0]
    v = dominance({"gen_tps": a, "prompt_tps": a}, {"gen_tps": b, "prompt_tps": b}, axes=["gen_tps", "prompt_tps"])
    assert v.winner == "b"


def test_compare_outcomes_mcnemar() -> None:
    five_a = {f"t{i}": True for i in range(5)}
    five_b = {**five_a, "t3": False}
    assert compare_outcomes(five_a, five_b).verdict == "unresolved"
    rng = random.Random(2)
    weak = {f"t{i}": rng.random() < 0.5 for i in range(300)}
    strong = {t: v or rng.random() < 0.8 for t, v in weak.items()}
    v = compare_outcomes(weak, strong)
    assert v.verdict == "different" and v.b_better is True and "McNemar" in v.text and "α = 0.05" in v.text
    same = {f"t{i}": True for i in range(500)}
    assert compare_outcomes(same, dict(same)).verdict == "tied"
    assert compare_outcomes({"x": True}, {"y": True}).verdict == "unresolved"
    assert compare_outcomes(five_a, five_b).n_a == 5


class _R:
    def __init__(self, v: float, rnd: int | None) -> None:
        self.gen_tps, self.round = v, rnd


def test_pairing_by_round_and_block_medians() -> None:
    a = [_R(100, 0), _R(90, 1), _R(80, 2)]
    b = [_R(102, 0), _R(92, 1), _R(82, 2)]
    s = paired_samples(a, b, "gen_tps", order="interleaved")
    assert s.paired and s.a == [100, 90, 80] and s.b == [102, 92, 82]
    assert not paired_samples(a, b, "gen_tps", order="sequential").paired
    assert not paired_samples([_R(1, None), _R(2, None)], b, "gen_tps", order="interleaved").paired
    blocks = paired_samples([_R(100, 0), _R(104, 0), _R(90, 1), _R(94, 1)],
                            [_R(110, 0), _R(112, 0), _R(99, 1), _R(101, 1)], "gen_tps", order="blocked")
    assert blocks.paired and blocks.a == [102, 92] and blocks.b == [111, 100]
    assert compare_rows(a, b, "gen_tps", order="interleaved").paired


def test_axis_table_is_extensible() -> None:
    try:
        register_axis("test_axis_ms", "lower", words=("slower", "faster"), pareto=False)
        v = compare_axis([10.0, 10.2, 9.9], [20.0, 20.3, 19.8], axis="test_axis_ms", better="lower")
        assert v.verdict == "different" and "slower" in v.text
        # zero spread of a rate that is not a counter: its noise is unknown, never "exact"
        flat = compare_axis([10.0] * 3, [20.0] * 3, axis="test_axis_ms", better="lower")
        assert flat.verdict == "unresolved" and "no spread" in flat.text
    finally:
        AXES.pop("test_axis_ms", None)


def test_exact_tests_against_known_values() -> None:
    assert ranktests.mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8])[0] == pytest.approx(2 / 70)
    assert ranktests.mann_whitney_p([1, 2, 3], [4, 5, 6])[0] == pytest.approx(0.1)
    assert ranktests.mann_whitney_p([1, 2, 3], [1, 2, 3])[0] == pytest.approx(1.0)
    assert ranktests.signed_rank_p([1, 2, 3, 4, 5])[0] == pytest.approx(2 / 32)
    assert ranktests.mcnemar_p(0, 6) == pytest.approx(2 / 64)
    assert ranktests.t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-5)
    assert ranktests.t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    for p, df in ((0.9875, 3.5), (0.975, 1.3), (0.99, 40.0)):
        assert ranktests.t_cdf(ranktests.t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)
    lo, hi = ranktests.clopper_pearson(5, 10, 0.95)
    assert lo == pytest.approx(0.187086, abs=1e-5) and hi == pytest.approx(0.812914, abs=1e-5)
