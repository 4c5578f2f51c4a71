"""Racing's look (issue 38), with the one dominance function (benchd.stats): a dominated candidate is
dropped with who dominates it and on which axes; tied candidates and an undecided pair are never dropped;
a candidate with no ok probe and no cell left leaves, by benchd; the drops come back from their events."""

from __future__ import annotations

import random

from benchd.engine import racing
from benchd.schemas import Row
from benchd.stats import stop


def rows(cand: str, gen: list[float], mem: float = 1e8, prompt: float = 1000.0) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="llama-server", context=64, kind="probe", probe=i, round=i,
                status="ok", gen_tps=g, prompt_tps=prompt * (1 + 0.001 * ((i + ord(cand[0])) % 3)),
                mem_peak_bytes=int(mem))
            for i, g in enumerate(gen)]


def race(on: bool = True) -> racing.Race:
    return racing.Race(on=on, alpha=stop.look_alpha(3, 12, racing.RACE_ALPHA),
                       order="interleaved")


def noisy(mean: float, n: int, cv: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [mean * (1 + rng.gauss(0, cv)) for _ in range(n)]


def test_a_slower_and_larger_candidate_is_dropped_with_its_record() -> None:
    r = race()
    got = r.look(64, 4, {"fast": rows("fast", noisy(200, 4, 0.005, 1)),
                         "slow": rows("slow", noisy(20, 4, 0.005, 2), mem=3e8)})
    (drop,) = got
    assert drop.candidate == "slow" and drop.context == 64 and drop.round == 4
    assert list(drop.by) == ["fast"] and "gen_tps" in drop.by["fast"] and "mem_peak_bytes" in drop.by["fast"]
    assert "fast dominates slow" in drop.texts["fast"]
    assert drop.alpha == 0.05 / 3  # the stop rule's split: 3 planned looks (3, 6, 12)
    assert r.alive(["fast", "slow"]) == ["fast"]
    p = drop.payload()
    assert p["by"] == ["fast"] and p["why"].startswith("dominated by fast (better on gen_tps")
    again = race()
    again.resume([p])
    assert again.dropped["slow"] == drop
    assert again.look(64, 5, {"fast": rows("fast", noisy(200, 5, 0.005, 3))}) == []  # a lone survivor stays


def test_tied_and_undecided_candidates_stay() -> None:
    r = race()
    tied = r.look(64, 6, {"a": rows("a", noisy(100, 6, 0.002, 4)), "b": rows("b", noisy(100, 6, 0.002, 5))})
    assert tied == []
    # a trade-off: b faster, a smaller; neither dominates
    assert r.look(64, 6, {"a": rows("a", noisy(100, 6, 0.002, 6), mem=1e8),
                          "b": rows("b", noisy(150, 6, 0.002, 7), mem=2e8)}) == []
    # 20 % apart but too noisy to say at three rounds: undecided, never a drop
    assert r.look(64, 3, {"a": rows("a", noisy(100, 3, 0.3, 8)), "b": rows("b", noisy(80, 3, 0.3, 9))}) == []
    assert not r.dropped


def test_no_ok_probe_leaves_the_race_by_benchd_and_racing_off_drops_nobody() -> None:
    r = race()
    (drop,) = r.look(64, 3, {"ok": rows("ok", noisy(100, 3, 0.01, 10)), "broken": []}, done=["broken"])
    assert drop.candidate == "broken" and drop.payload()["by"] == ["benchd"] and "no ok probe" in (drop.why or "")
    off = race(on=False)
    assert off.look(64, 4, {"fast": rows("fast", noisy(200, 4, 0.005, 1)),
                            "slow": rows("slow", noisy(20, 4, 0.005, 2), mem=3e8)}, done=["slow"]) == []


def test_the_race_compares_pairs_only_at_the_stop_rules_planned_looks() -> None:
    """Round 4 is not a planned look (3, 6, 12): a dominated candidate stays until one; a broken one leaves."""
    r = race()
    cells = {"fast": rows("fast", noisy(200, 4, 0.005, 1)), "slow": rows("slow", noisy(20, 4, 0.005, 2), mem=3e8),
             "broken": []}
    (drop,) = r.look(64, 4, cells, done=["broken"], compare=False)
    assert drop.candidate == "broken" and r.alive(["fast", "slow"]) == ["fast", "slow"]
    (drop,) = r.look(64, 6, {k: v for k, v in cells.items() if k != "broken"})
    assert drop.candidate == "slow" and drop.alpha == stop.look_alpha(3, 12)


def test_the_race_settles_when_no_undecided_pair_can_resolve_in_the_rounds_left() -> None:
    """Near-identical survivors at 5 % noise: at the look after 6 rounds each pair needs far more than the 6
    rounds left for an even chance (stats.stop.stuck_axes), so the race's rounds end, nobody is dropped;
    at round 3 (too few values to say) and at a non-planned round it goes on; a pair 15 % apart that the
    rounds left can resolve keeps it going."""
    r = race()
    near = {c: rows(c, noisy(100, 6, 0.05, 20 + i)) for i, c in enumerate(["a", "b", "c"])}
    why = r.settled(6, near, 3, 12)
    assert why is not None and why.startswith("race settled at the planned look after 6 rounds")
    assert "a vs b: undecided, more rounds than the 6 left" in why and not r.dropped
    assert r.settled(3, {c: v[:3] for c, v in near.items()}, 3, 12) is None
    assert r.settled(5, {c: v[:5] for c, v in near.items()}, 3, 12) is None
    assert r.settled(12, near, 3, 12) is None  # the maximum ends the rounds anyway
    apart = {"a": near["a"], "b": rows("b", noisy(115, 6, 0.05, 30))}
    d = r.pair(apart["a"], apart["b"], "a", "b")
    assert d.status == "undecided" and not stop.stuck_axes(d, 6)
    assert r.settled(6, apart, 3, 12) is None
    assert race(on=False).settled(6, near, 3, 12) is None


def test_a_candidate_whose_pairs_are_all_answered_ends_its_rounds_while_an_open_pair_goes_on() -> None:
    """p and q 15 % apart at 5 % noise: undecided, resolvable in the 6 rounds left (open). s is 3x faster and
    3x larger than both: a trade-off with each (resolved). At the look after 6 rounds s's rounds of the
    context end (`settle`), with each pair's words; it is not dropped; p and q go on. With the open pair
    alone, or at the last look, nobody settles."""
    r = race()
    cells = {"p": rows("p", noisy(100, 6, 0.05, 20)), "q": rows("q", noisy(115, 6, 0.05, 30)),
             "s": rows("s", noisy(300, 6, 0.005, 40), mem=3e8)}
    assert r.pair_kinds(6, cells, 12)[("p", "q")][0] == "open"
    (s,) = r.settle(64, 6, cells, 3, 12)
    assert (s.candidate, s.context, s.round, s.alpha) == ("s", 64, 6, r.alpha)
    assert set(s.pairs) == {"p", "q"} and all("trade-off" in w for w in s.pairs.values())
    assert r.settled_at == {64: {"s": 6}} and not r.dropped
    assert s.payload()["pairs"] == s.pairs
    assert race().settle(64, 6, {k: cells[k] for k in ("p", "q")}, 3, 12) == []
    assert race().settle(64, 12, cells, 3, 12) == []  # the maximum ends the rounds anyway
    assert race().settle(64, 5, cells, 3, 12) == []  # not a planned look
    assert r.settled(6, cells, 3, 12) is None  # the open pair keeps the context going


def test_the_race_judges_each_axis_at_the_sweeps_margin_as_the_pareto_view_does() -> None:
    """`margins = {gen_tps = 10}`: 5 % slower at 0.2 % noise is tied at that margin (nobody dropped) while
    the axis table's 2 % drops it; `open_race` takes the sweep's margins."""
    from benchd.schemas import Candidate, Sweep

    cells = {"a": rows("a", noisy(100, 6, 0.002, 11)), "b": rows("b", noisy(95, 6, 0.002, 12))}
    (drop,) = race().look(64, 6, cells)
    assert drop.candidate == "b" and "gen_tps" in drop.by["a"]
    wide = racing.Race(on=True, alpha=stop.look_alpha(3, 12, racing.RACE_ALPHA), order="interleaved",
                       margins={"gen_tps": 10.0})
    assert wide.look(64, 6, cells) == []
    sweep = Sweep(name="t", contexts=[64], gen_tokens=8, margins={"gen_tps": 10.0}, racing=True,
                  candidates=[Candidate(id=c, runtime="llama-server", model="m") for c in "ab"])
    assert racing.open_race(sweep, pairs=True).margins == {"gen_tps": 10.0}
