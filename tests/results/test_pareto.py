"""Pareto view: hand-built row sets (tests/data/pareto/*.json) with their expected frontier and
"dominated by", committed before the code. Each fixture's description says why the answer is right."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import msgspec
import pytest

from benchd.results import pareto
from benchd.schemas import ContextPareto, EvalResult, ProbePlan, Row, RunbookFlag
from benchd.stats.stop import stop_verdict

FIXTURES = sorted((Path(__file__).parents[1] / "data" / "pareto").glob("*.json"))


def _load(path: Path) -> tuple[list[Row], list[EvalResult], dict]:
    doc = json.loads(path.read_text())
    rows = [msgspec.convert(r, Row) for r in doc["rows"]]
    evals = [msgspec.convert(e, EvalResult) for e in doc["evals"]]
    return rows, evals, doc["expected"]


def test_fixtures_exist() -> None:
    assert len(FIXTURES) >= 4


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture(path: Path) -> None:
    rows, evals, expected = _load(path)
    got = {str(c.context): c for c in pareto.pareto_from_rows(rows, evals)}
    assert sorted(got) == sorted(expected)
    for ctx, exp in expected.items():
        res = got[ctx]
        assert sorted(res.frontier) == sorted(exp["frontier"]), ctx
        dominated = {
            cand: sorted(
                ({"by": d.by, "better_on": d.better_on, "skipped_axes": d.skipped_axes} for d in doms),  # type: ignore[misc]
                key=lambda d: str(d["by"]),
            )
            for cand, doms in res.dominated.items()
        }
        assert dominated == exp["dominated"], ctx
        assert res.excluded == exp["excluded"], ctx
        # Every candidate is either on the frontier, dominated, or excluded (with a reason): none vanish.
        everyone = {r.candidate for r in rows if r.context == int(ctx) and r.kind == "probe"}
        assert set(res.frontier) | set(res.dominated) | set(res.excluded) == everyone
        assert not set(res.frontier) & set(res.dominated)


#: Rates are never exactly repeated (a zero spread of a rate is "noise unknown"): a ±0.1 % wobble.
_WOBBLE = (1.0, 1.001, 0.999)


def _probe_rows(cand: str, gen: list[float], mem: int = 1000, prompt: float = 500.0, ctx: int = 512) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="llama-server", context=ctx, kind="probe", probe=i, status="ok",
                gen_tps=g * _WOBBLE[i % 3], prompt_tps=prompt * _WOBBLE[i % 3], mem_peak_bytes=mem)
            for i, g in enumerate(gen)]


def test_equal_cells_neither_dominates() -> None:
    """Identical deterministic cells: tied (exactly) on every axis, both on the frontier."""
    rows = _probe_rows("a", [100.0] * 3) + _probe_rows("b", [100.0] * 3)
    res = pareto.pareto_from_rows(rows, [])[0]
    assert sorted(res.frontier) == ["a", "b"] and not res.dominated
    (tie,) = res.ties
    assert tie.text is not None and tie.text.startswith("a and b are tied on every axis compared: neither dominates")
    assert tie.axes["gen_tps"].startswith("a and b are tied at generation: within ±2 % (geometric means")
    assert tie.axes["mem_peak_bytes"].startswith("a and b are tied on peak memory: within ±2 %")


def test_no_shared_axis_neither_dominates() -> None:
    """An axis null on one side is skipped and named with why (never a silent win)."""
    a = _probe_rows("a", [100.0, 101.0, 99.0])
    b = [msgspec.structs.replace(r, gen_tps=None, prompt_tps=900.0) for r in _probe_rows("b", [1.0] * 3)]
    res = pareto.pareto_from_rows(a + b, [])[0]
    sp = next(p for p in res.skipped_pairs if p.pair == ["a", "b"])
    assert "gen_tps" in sp.axes and sp.why["gen_tps"] == "not measured on one side"


def test_direction_of_memory_axis() -> None:
    low = _probe_rows("low", [10.0] * 3, mem=100)
    high = _probe_rows("high", [10.0] * 3, mem=200)
    res = pareto.pareto_from_rows(low + high, [])[0]
    (d,) = res.dominated["high"]
    assert d.by == "low" and d.better_on == ["mem_peak_bytes"] and d.tied_on == ["gen_tps", "prompt_tps"]


def test_three_probes_apart_are_different() -> None:
    """The demo's case: 3 vs 3, a 5x gap in speed and in memory, CV under 1 %: dominated on both."""
    small = _probe_rows("small", [2390.0, 2600.0, 2926.0], mem=18_000_000)
    large = [msgspec.structs.replace(r, mem_peak_bytes=89_000_000 + 50_000 * r.probe)
             for r in _probe_rows("large", [512.0, 520.0, 535.0])]
    res = pareto.pareto_from_rows(small + large, [])[0]
    (d,) = res.dominated["large"]
    assert d.by == "small" and d.better_on == ["gen_tps", "mem_peak_bytes"]
    assert d.alpha == 0.05 and d.text is not None and "α = 0.05 over 3 axes" in d.text
    # the sentences have a subject (the dominated candidate) and name the axis in words
    assert d.verdicts["gen_tps"].startswith("large is 5.0× slower than small at generation (geometric means of 3 and 3 values, ")
    assert d.verdicts["gen_tps"].endswith("98.33 % CI 3.4–7.5×; α = 0.0167)"), d.verdicts["gen_tps"]
    assert d.verdicts["mem_peak_bytes"].startswith("large uses 4.9× more peak memory than small")
    assert d.text.startswith("small dominates large: better on generation speed and peak memory")


def test_a_difference_within_the_noise_is_not_better() -> None:
    """With 3 probes a 0.2 % faster candidate is not 'better': both on the frontier, and the pair says
    whether it is tied or unresolved (never 'tied' for 'not known')."""
    rows = _probe_rows("a", [100.0, 101.0, 99.0]) + _probe_rows("b", [100.2, 101.2, 99.2])
    res = pareto.pareto_from_rows(rows, [])[0]
    assert sorted(res.frontier) == ["a", "b"] and not res.dominated
    tie = next(t for t in res.ties if t.pair == ["a", "b"])
    # 3 values a side: no advice on more rounds yet (the spread is not known well enough)
    assert tie.axes["gen_tps"].startswith("a against b at generation is unresolved: a is 0.2 % slower by the estimate, "
                                          "but the interval overlaps ±2 %")
    assert "more round" not in tie.axes["gen_tps"], tie.axes["gen_tps"]
    assert tie.text is not None and tie.text.startswith("neither a nor b is dominated yet: unresolved on generation speed")
    assert tie.status == "unresolved"  # a field, not read back from the sentence
    assert tie.rounds_to_resolve == {}  # nor a count
    six = _probe_rows("a", [100.0, 103.0, 97.0, 101.0, 99.0, 102.0]) + _probe_rows("b", [101.0, 104.0, 97.5, 100.0,
                                                                                       101.5, 103.0])
    tie = next(t for t in pareto.pareto_from_rows(six, [])[0].ties if t.pair == ["a", "b"])
    (n,) = tie.rounds_to_resolve.values()
    assert list(tie.rounds_to_resolve) == ["gen_tps"] and f"about {n:,} more rounds would give" in tie.axes["gen_tps"]


def test_dominated_only_when_different_with_the_tied_axes_named() -> None:
    """slow is 20 % slower: dominated on gen_tps; its 0.5 % prompt edge at zero spread is tied, not a trade-off."""
    fast = _probe_rows("fast", [100.0, 100.3, 99.7, 100.1, 99.9, 100.2], prompt=500.0)
    slow = [msgspec.structs.replace(r, prompt_tps=502.5) for r in _probe_rows("slow", [80.0, 80.2, 79.8, 80.1, 79.9, 80.3])]
    res = pareto.pareto_from_rows(fast + slow, [])[0]
    assert res.frontier == ["fast"]
    (d,) = res.dominated["slow"]
    assert d.by == "fast" and d.better_on == ["gen_tps"] and d.tied_on == ["prompt_tps", "mem_peak_bytes"]
    pt = next(p for p in res.points if p.candidate == "fast")
    assert pt.ci95["gen_tps"] == pytest.approx([99.6003, 100.4003])


def _trade_off_view() -> ContextPareto:
    """fast generates 25 % faster, small uses half the memory."""
    fast = _probe_rows("fast", [100.0, 100.3, 99.7, 100.1, 99.9, 100.2], mem=2000)
    small = _probe_rows("small", [80.0, 80.2, 79.8, 80.1, 79.9, 80.3], mem=1000)
    return pareto.pareto_from_rows(fast + small, [])[0]


def test_a_trade_off_pair_is_recorded_and_printed_with_its_axes() -> None:
    """fast generates 25 % faster, small uses half the memory: neither dominates, both on the frontier, and
    the pair is a trade-off, recorded (not a tie) with every axis's sentence, which the Pareto text prints."""
    from benchd.results.report import pareto_lines

    res = _trade_off_view()
    assert res.frontier == ["fast", "small"] and not res.dominated and not res.ties
    (o,) = res.tradeoffs
    assert o.pair == ["fast", "small"]
    assert o.text.startswith("fast is better on generation speed, small on peak memory: a trade-off")
    assert o.axes["gen_tps"].startswith("fast is 25.0 % faster than small at generation")
    assert o.axes["mem_peak_bytes"].startswith("fast uses 2.0× more peak memory than small")
    lines = pareto_lines(res)
    assert f"  {o.text}" in lines
    assert any(o.axes["gen_tps"] in x for x in lines)


def test_unlike_work_is_said_at_the_context_the_flag_names() -> None:
    """A thinking_mixed flag is printed under its own context's Pareto view, found by its `context` field:
    a flag of another context is not, whatever its detail says."""
    from benchd.results.report import pareto_lines

    res = _trade_off_view()
    here = RunbookFlag(candidate=None, flag="thinking_mixed", context=512, detail="thinking fast on, small off")
    there = RunbookFlag(candidate=None, flag="thinking_mixed", context=128, detail="context 512: thinking a on")
    lines = pareto_lines(res, [here, there])
    assert "  unlike work: thinking fast on, small off" in lines and not any("thinking a on" in x for x in lines)


def test_the_decision_names_a_trade_off_pair_in_every_writer(tmp_path: Path) -> None:
    """The decision block (terminal and Markdown lines, `report --json`, the page) says the trade-off."""
    from test_html import NO_RUNTIME, newer_doc

    from benchd.results import html
    from benchd.results.decision import decision_json, decision_lines

    res = _trade_off_view()
    (o,) = res.tradeoffs
    rb = msgspec.structs.replace(newer_doc(tmp_path), pareto=[res])
    assert f"  trade-off: {o.text}" in decision_lines(rb)
    (ctx,) = decision_json(rb)["contexts"]
    assert ctx["tradeoffs"] == [{"pair": ["fast", "small"], "text": o.text}]
    page = html.render_page(rb, NO_RUNTIME).decode()
    assert "<li class='state-tradeoff'><b>trade-off</b>: fast is better on generation speed" in page


def test_pass_rates_on_a_handful_of_tasks_block_domination() -> None:
    """Two eval tasks cannot tell pass rates apart: the pair is not dominated, unresolved on eval_pass_rate."""
    small = _probe_rows("small", [200.0, 201.0, 202.0])
    large = _probe_rows("large", [100.0, 101.0, 102.0])
    evals = [EvalResult(job="j", candidate=c, tier="smoke", task=t, passed=ok)
             for c in ("small", "large") for t, ok in (("add", True), ("capital", c == "large"))]
    res = pareto.pareto_from_rows(small + large, evals)[0]
    assert not res.dominated
    tie = next(t for t in res.ties if t.pair == ["large", "small"])
    # what is already decided comes first: small would dominate but for the pass rates
    assert tie.text is not None and tie.text.startswith("neither large nor small is dominated yet: small is better on "
                                                        "generation speed; unresolved on eval pass rate"), tie.text
    assert tie.status == "unresolved"


def test_unsteady_frontier_candidate_has_a_caveat() -> None:
    """A frontier cell whose verdict is not steady is named in `caveats` (never silently on the frontier)."""
    rows = _probe_rows("wide", [100.0, 130.0, 70.0, 110.0, 90.0, 120.0])
    plan = ProbePlan(False, 6, 6, 2.0, "gen_tps", 15.0)
    res = pareto.pareto_from_rows(rows, [], plan)[0]
    assert res.frontier == ["wide"] and res.caveats["wide"].startswith("cell verdict unsteady")


def _session_rows(cand: str, ttfts: list[float]) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="llama-server", context=512, kind="session", probe=i + 1, turn=i + 1,
                status="ok", ttft_ms=t) for i, t in enumerate(ttfts)]


def _parallel_rows(cand: str, level: int, aggs: list[float]) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="llama-server", context=512, kind="parallel", status="ok",
                probe=level * 100_000 + b * level + s, concurrency=level, batch=b, agg_gen_tps=agg, gen_tps=agg / level)
            for b, agg in enumerate(aggs) for s in range(level)]


def test_session_and_level_axes_join_the_pareto_view() -> None:
    """Equal cold probes; "warm" is faster on warm turns (session_ttft_ms), "wide" batches better at
    level 2 (agg_gen_tps@2): a trade-off, both on the frontier. Without such rows the axes are absent."""
    probes = _probe_rows("warm", [100.0, 100.0, 100.0]) + _probe_rows("wide", [100.0, 100.0, 100.0])
    warm = _session_rows("warm", [500.0, 50.0, 51.0, 52.0, 50.5, 51.5, 50.2])
    wide = _session_rows("wide", [500.0, 90.0, 91.0, 92.0, 90.5, 91.5, 90.2])
    par = _parallel_rows("warm", 2, [150.0, 151.0, 149.0, 150.5, 150.2, 149.8]) + \
        _parallel_rows("wide", 2, [190.0, 191.0, 189.0, 190.5, 190.2, 189.8])
    res = pareto.pareto_from_rows(probes + warm + wide + par, [])[0]
    assert sorted(res.frontier) == ["warm", "wide"] and not res.dominated
    pts = {p.candidate: p for p in res.points}
    assert pts["warm"].values["session_ttft_ms"] == statistics.median(r.ttft_ms for r in warm[1:])  # not turn 1
    assert pts["wide"].values["agg_gen_tps@2"] == statistics.median({r.batch: r.agg_gen_tps for r in par
                                                                     if r.candidate == "wide"}.values())
    names = [a for a, _ in pareto.axes_of(res.points)]
    assert names[-2:] == ["session_ttft_ms", "agg_gen_tps@2"]
    alone = pareto.pareto_from_rows(probes + warm + wide, [])[0]
    (d,) = alone.dominated["wide"]
    assert d.by == "warm" and d.better_on == ["session_ttft_ms"]
    assert "agg_gen_tps@2" not in [a for a, _ in pareto.axes_of(pareto.pareto_from_rows(probes, [])[0].points)]


def _vision_rows(cand: str, res: tuple[int, int], ttfts: list[float]) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="mlx_vlm.server", context=512, kind="vision", status="ok",
                probe=i, image_width=res[0], image_height=res[1], images=1, image_ttft_ms=t)
            for i, t in enumerate(ttfts)]


def test_image_axes_join_the_pareto_view_per_resolution() -> None:
    """Equal text probes; "small-img" is faster with 512x512 images: it dominates on image_ttft_ms@512x512;
    a candidate without image rows has no value there (the axis is skipped for its pairs)."""
    probes = _probe_rows("small-img", [100.0] * 3) + _probe_rows("big-img", [100.0] * 3) + _probe_rows("text", [100.0] * 3)
    vis = _vision_rows("small-img", (512, 512), [40.0, 41.0, 40.5, 40.2, 40.8, 40.1]) + \
        _vision_rows("big-img", (512, 512), [90.0, 91.0, 90.5, 90.2, 90.8, 90.1])
    res = pareto.pareto_from_rows(probes + vis, [])[0]
    pts = {p.candidate: p for p in res.points}
    assert pts["small-img"].values["image_ttft_ms@512x512"] == statistics.median(r.image_ttft_ms for r in vis[:6])
    assert "image_ttft_ms@512x512" not in pts["text"].values
    (d,) = res.dominated["big-img"]
    assert d.by == "small-img" and d.better_on == ["image_ttft_ms@512x512"]
    assert any("text" in sp.pair and "image_ttft_ms@512x512" in sp.axes for sp in res.skipped_pairs)


def test_the_stop_rule_asks_the_view_question_at_its_alpha() -> None:
    """The rows of a `make test-stress` run (3 interleaved rounds, a hog on every core): small's gen tok/s
    1787, 5051, 5066 beside large's 187, 171, 128, its memory 4x smaller. The stop rule's verdict on gen_tps
    (`stop_verdict`) is the view's at the same α and k; the view rules large out at round 3: 4x larger
    memory is different, and its speeds are not worse (one-sided bounds far inside the margin)."""
    def rows(cand: str, gen: list[float], prompt: list[float], mem: list[int]) -> list[Row]:
        return [Row(job="j", candidate=cand, runtime="llama-server", context=128, kind="probe", probe=i, status="ok",
                    round=i, gen_tps=g, prompt_tps=p, mem_peak_bytes=m)
                for i, (g, p, m) in enumerate(zip(gen, prompt, mem, strict=True))]

    small = rows("small", [1786.74, 5051.33, 5066.19], [83883.8, 84949.8, 80961.4], [17362944, 17485824, 17612800])
    large = rows("large", [186.98, 170.66, 128.39], [833.5, 720.3, 709.9], [72761344, 73560064, 74293248])
    got = stop_verdict(small, large, metric="gen_tps", better="higher", order="interleaved", k=3, alpha=0.05)
    (view,) = pareto.pareto_from_rows(small + large, [], order="interleaved", k=3)
    (d,) = view.dominated["large"]
    assert got.alpha == pytest.approx(0.05 / 3) and d.alpha == 0.05
    assert view.frontier == ["small"] and d.better_on == ["prompt_tps", "mem_peak_bytes"], d
    assert view.pairs_compared == 1 and view.planned_axes == 3
