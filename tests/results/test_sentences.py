"""The comparison sentences (`results.text`): a candidate as subject, the axis in words, one interval
notation, counts in their number, the medians' ratio where it tells another story than the mean."""

from __future__ import annotations

import re

from benchd.results.text import comparison_sentence, dominance_sentence
from benchd.stats.comparison import compare_axis, compare_outcomes, dominance
from benchd.stats.notation import plural


def test_the_slower_candidate_is_the_subject_and_the_medians_are_named() -> None:
    """The issue's case: tiny-mlx runs about a third of tiny-gguf's speed; the mean of the paired
    rounds' ratios and the medians' ratio differ, and the sentence says both."""
    gguf, mlx = [2248.0, 2100.0, 2300.0], [721.0, 600.0, 800.0]
    v = compare_axis(gguf, mlx, axis="gen_tps", better="higher", paired=True)
    text = comparison_sentence(v, "tiny-gguf", "tiny-mlx", medians=(2248.0, 721.0))
    assert text.startswith("tiny-mlx is 3.2× slower than tiny-gguf at generation (geometric mean over 3 paired rounds, "
                           "95 % CI "), text
    assert "; medians 3.1× slower; α = 0.05)" in text
    turned = comparison_sentence(v, "tiny-gguf", "tiny-mlx", medians=(2248.0, 721.0), subject="a")
    assert turned.startswith("tiny-gguf is 3.2× faster than tiny-mlx at generation"), turned


def test_one_interval_notation_and_plurals() -> None:
    """Every interval reads `low–high unit`; one more round is singular."""
    v = compare_axis([100.0, 101.0, 102.0, 100.5, 101.5], [97.4, 98.98, 99.35, 98.49, 98.87], axis="gen_tps",
                     better="higher", paired=True)
    assert v.verdict == "unresolved" and v.rounds_to_resolve == 1, v
    text = comparison_sentence(v, "a", "b")
    assert "about 1 more round would give an even chance of deciding it" in text, text
    assert "about 1 more round would give an even chance of resolving ±2 %" in v.text, v.text
    assert re.search(r"95 % CI −\d+\.\d–[−+]\d+\.\d %", text), text
    assert "[" not in text and plural(2, "round") == "2 rounds" and plural(1, "axis", "axes") == "1 axis"
    mem = compare_axis([1e9, 1.1e9, 1.05e9], [5e8, 5.1e8, 5.2e8], axis="mem_peak_bytes", better="lower")
    assert comparison_sentence(mem, "x", "y").startswith("y uses 2.1× less peak memory than x (geometric means of 3 and "
                                                         "3 values, 95 % CI 1.9–2.3×; α = 0.05)")


def test_tied_and_pass_rates_and_dominance_read_as_sentences() -> None:
    tied = compare_axis([100.0, 100.1, 99.9] * 2, [100.0, 99.9, 100.1] * 2, axis="ttft_ms", better="lower")
    assert comparison_sentence(tied, "a", "b").startswith("b and a are tied to the first token: within ±2 % ("), tied
    rates = compare_outcomes({"t1": True, "t2": True}, {"t1": True, "t2": False})
    assert comparison_sentence(rates, "a", "b", medians=(1.0, 0.5)) == (
        "b against a on eval pass rate is unresolved: more shared tasks would decide it; a tie within ±5 pp needs at "
        "least 52 (50 % vs 100 % over 2 shared tasks; α = 0.05)")
    # from 52 shared tasks a tie is reachable at α = 0.05: the sentence no longer names a count
    many = {f"t{i}": i % 2 == 0 for i in range(60)}
    wide = compare_outcomes(many, {**many, "t1": True, "t3": True, "t5": True})
    assert wide.verdict == "unresolved", wide.text
    assert comparison_sentence(wide, "a", "b") == (
        "b against a on eval pass rate is unresolved: more shared tasks would decide it (over 60 shared tasks; α = 0.05)")
    d = dominance({"gen_tps": [200.0, 201.0, 202.0], "mem_peak_bytes": [1.0, 1.0, 1.0]},
                  {"gen_tps": [100.0, 101.0, 102.0], "mem_peak_bytes": [2.0, 2.0, 2.0]}, axes=["gen_tps", "mem_peak_bytes"])
    assert dominance_sentence(d, "small", "large") == (
        "small dominates large: better on generation speed and peak memory (α = 0.05 over 2 axes, 0.025 each)")
    # memory unresolved at α / 2 but within its margin one-sided: the dominance says the winner is not worse there
    near = dominance({"gen_tps": [2390.0, 2600.0, 2926.0], "mem_peak_bytes": [18.0, 18.1, 18.0]},
                     {"gen_tps": [512.0, 520.0, 535.0], "mem_peak_bytes": [18.5, 18.0, 19.0]},
                     axes=["gen_tps", "mem_peak_bytes"])
    assert dominance_sentence(near, "small", "large") == (
        "small dominates large: better on generation speed; not worse on peak memory (one-sided, α = 0.05) "
        "(α = 0.05 over 2 axes, 0.025 each)")
    # and undecided on a third axis: the side with wins says what it is already not worse on, then what is open
    third = dominance({"gen_tps": [2390.0, 2600.0, 2926.0], "mem_peak_bytes": [18.0, 18.1, 18.0], "ttft_ms": [10.0, 10.1, 10.0]},
                      {"gen_tps": [512.0, 520.0, 535.0], "mem_peak_bytes": [18.5, 18.0, 19.0], "ttft_ms": [9.0, 10.0, 11.0]},
                      axes=["gen_tps", "mem_peak_bytes", "ttft_ms"])
    assert third.status == "undecided" and third.not_worse_on == ["mem_peak_bytes"] and third.unresolved_on == ["ttft_ms"]
    assert dominance_sentence(third, "small", "large") == (
        "neither small nor large is dominated yet: small is better on generation speed and not worse on peak memory "
        "(one-sided, α = 0.05); unresolved on time to first token (α = 0.05 over 3 axes, 0.0167 each)")


def test_an_interval_past_the_margin_that_the_rank_test_does_not_confirm_reads_as_one_clause() -> None:
    """Five rounds 2x slower and one slightly faster: the interval clears ±2 %, the signed-rank p is 0.0625."""
    v = compare_axis([10.0] * 5 + [10.5], [20.0, 21.0, 19.0, 22.0, 9.5, 20.0], axis="ttft_ms", better="lower",
                     paired=True)
    assert v.verdict == "unresolved" and v.ci_low is not None and v.ci_low > 1.02, v
    text = comparison_sentence(v, "a", "b")
    assert ("b is 1.8× slower by the estimate, but the rank test does not confirm it (p = 0.062: the values overlap), "
            "though the interval clears ±2 %; at the spread so far about 1 more round would give") in text, text


def test_the_sentence_says_how_many_server_starts_it_rests_on() -> None:
    """Rows that name their server start (`Row.start`) carry the count into the verdict: a fresh start per
    round says as many starts as rounds; one resident start a side says so (its rounds share its luck)."""
    from benchd.schemas import Row
    from benchd.stats.comparison import compare_rows

    def rows(cand: str, values: list[float], starts: list[int | None]) -> list[Row]:
        return [Row(job="j", candidate=cand, runtime="llama-server", context=128, kind="probe", probe=i, status="ok",
                    gen_tps=v, round=i, visit=0, start=s) for i, (v, s) in enumerate(zip(values, starts, strict=True))]

    a, b = [100.0, 101.0, 99.0, 100.5], [60.0, 61.0, 59.0, 60.5]
    fresh = compare_rows(rows("a", a, [1, 2, 3, 4]), rows("b", b, [1, 2, 3, 4]), "gen_tps", order="interleaved")
    assert fresh.starts == 4
    assert "geometric mean over 4 paired rounds on 4 server starts a side, " in comparison_sentence(fresh, "a", "b")
    once = compare_rows(rows("a", a, [1] * 4), rows("b", b, [1] * 4), "gen_tps", order="interleaved")
    assert once.starts == 1 and "over 4 paired rounds on one server start a side" in comparison_sentence(once, "a", "b")
    unknown = compare_rows(rows("a", a, [None] * 4), rows("b", b, [1, 2, 3, 4]), "gen_tps", order="interleaved")
    assert unknown.starts is None and "server start" not in comparison_sentence(unknown, "a", "b")


def test_what_adds_values_is_the_axis_lever_not_always_rounds() -> None:
    """Six sustained runs a side, overlapping the sustain ratio's ±10 %: more *sustained runs* decide it
    (`[sustained] runs`), not more rounds; the stats verdict's own text says the same."""
    a = [0.80, 0.95, 0.70, 0.90, 0.75, 0.85]
    b = [0.78, 0.92, 0.66, 0.88, 0.70, 0.83]
    v = compare_axis(a, b, axis="sustain_ratio", better="higher", margin_pct=10.0)
    assert v.verdict == "unresolved" and v.rounds_to_resolve is not None and v.lever == "[sustained] runs", v
    text = comparison_sentence(v, "a", "b")
    assert f"about {v.rounds_to_resolve:,} more [sustained] runs would give an even chance of deciding it" in text, text
    assert f"about {v.rounds_to_resolve} more [sustained] runs would give an even chance of resolving ±10 %" in v.text
    speed = compare_axis([100.0, 101.0, 102.0, 100.5, 101.5, 99.0], [97.4, 98.98, 99.35, 98.49, 98.87, 99.5],
                         axis="gen_tps", better="higher", paired=True)
    assert "more round" in comparison_sentence(speed, "a", "b") and "more rounds would give" in speed.text
