"""The measuring design, pure: the seeded round orders, the mirrored block order, the rounds as a range,
blocked's spread of a fixed count, what validate says about it, and `rows.decide`'s placement fields."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from benchd.engine import plan
from benchd.engine.rows import SEQUENTIAL, Cell, Placement, ServerFacts, build_row, failed_row
from benchd.schemas import Candidate, Probes, Row, Sweep
from benchd.stats.rows import PROBE_METRICS, SUSTAINED_METRICS, carried_metrics


def _sweep(n: int = 2, **kw: Any) -> Sweep:
    cands = [Candidate(id=f"c{i}", runtime="llama-server", model="/m.gguf") for i in range(n)]
    return Sweep(name="t", contexts=[128], gen_tokens=8, candidates=cands, **kw)


def test_round_orders_are_fresh_seeded_and_reproducible() -> None:
    ids = ["a", "b", "c", "d"]
    orders = [plan.round_order(ids, seed=7, context=128, round_=r) for r in range(40)]
    assert all(sorted(o) == ids for o in orders)  # every round visits every candidate once
    assert orders == [plan.round_order(ids, seed=7, context=128, round_=r) for r in range(40)]  # resume draws the same
    assert len({tuple(o) for o in orders}) > 5  # fresh per round, not one fixed order
    firsts = Counter(o[0] for o in orders)
    assert set(firsts) == set(ids)  # no candidate always goes first
    assert plan.round_order(ids, seed=8, context=128, round_=0) != plan.round_order(ids, seed=7, context=128, round_=0) \
        or plan.round_order(ids, seed=8, context=128, round_=1) != plan.round_order(ids, seed=7, context=128, round_=1)
    assert plan.job_seed("20261201-000000-aaaa") == plan.job_seed("20261201-000000-aaaa")


def test_blocks_are_abba_for_two_and_mirrored_for_more() -> None:
    assert [x for r in range(4) for x in plan.block_order(["A", "B"], r)] == list("ABBAABBA")
    three = [x for r in range(2) for x in plan.block_order(["A", "B", "C"], r)]
    assert three == list("ABCCBA")
    positions = {c: sum(i for i, x in enumerate(three) if x == c) for c in "ABC"}
    assert len(set(positions.values())) == 1  # each candidate's mean position is the same: a linear drift cancels


@pytest.mark.parametrize(("probes", "rounds", "sizes"), [(3, 3, [1, 1, 1]), (5, 3, [2, 2, 1]), (2, 3, [1, 1, 0]),
                                                         (9, 2, [5, 4])])
def test_blocked_spreads_a_fixed_count_over_its_rounds(probes: int, rounds: int, sizes: list[int]) -> None:
    rp = plan.round_plan(_sweep(probes=probes, order="blocked", rounds=rounds), "blocked")
    assert [rp.block_size(r) for r in range(rounds)] == sizes and sum(sizes) == probes
    assert rp.min_rounds == rp.max_rounds == rounds


def test_the_plan_is_a_range_with_its_stop_rule() -> None:
    auto = _sweep(probes=Probes(min=6, max=20))
    rp = plan.round_plan(auto, "interleaved")
    assert (rp.min_rounds, rp.max_rounds) == (6, 20) and "6-20 rounds" in rp.text()
    assert "every pair's gen_tps verdict is resolved" in rp.text()
    single = plan.round_plan(_sweep(1, probes="auto"), "interleaved")
    assert "CI of the median" in single.text()
    assert plan.round_plan(_sweep(probes=4), "interleaved").text().startswith("4 rounds")
    assert "blocked instead if the servers do not fit" in plan.design_text(_sweep(probes=Probes(min=6, max=20),
                                                                                  starts="once"))
    assert "not drift-protected" in plan.design_text(_sweep(order="sequential"))


def test_the_plan_counts_a_server_start_per_round_by_default_with_a_pair() -> None:
    auto = _sweep(probes=Probes(min=6, max=20))
    assert plan.starts_per_context(auto, "interleaved") == (6, 20)
    text = plan.design_text(auto)
    assert "a fresh server start per candidate every round (6-20 starts per candidate and context)" in text
    assert "do not fit" not in text  # one server at a time: no fallback to blocked
    assert plan.starts_per_context(_sweep(probes=Probes(min=6, max=20), starts="once"), "interleaved") == (1, 1)
    assert plan.starts_per_context(_sweep(1, probes=4), "interleaved") == (1, 1)  # one candidate: "once"
    assert plan.starts_per_context(_sweep(order="blocked", rounds=4, probes=8), "blocked") == (4, 4)
    assert any("rests on one start a side" in n for n in plan.plan_problems(_sweep(starts="once")))
    assert any("used by order \"interleaved\" only" in n for n in plan.plan_problems(_sweep(order="blocked",
                                                                                             starts="round")))


def test_validate_notes() -> None:
    assert any("nothing to interleave" in n for n in plan.plan_problems(_sweep(1, order="interleaved")))
    assert any("almost never" in n for n in plan.plan_problems(_sweep(order="blocked", rounds=2)))
    assert any("used by order \"blocked\" only" in n for n in plan.plan_problems(_sweep(rounds=4)))
    assert plan.plan_problems(_sweep()) == []


def test_rows_record_round_and_visit_with_sources() -> None:
    cand = Candidate(id="a", runtime="llama-server", model="/m.gguf")
    placed = build_row(Cell("j", cand, 128, "probe", 0, Placement(3, 1, "order interleaved: seed 5")),
                       status="ok", started_at="t", server=None)
    assert (placed.round, placed.visit) == (3, 1) and placed.sources["round"] == "order interleaved: seed 5"
    seq = build_row(Cell("j", cand, 128, "probe", 0, SEQUENTIAL), status="ok", started_at="t", server=None)
    assert seq.round is None and "sequential" in seq.null_reasons["round"] and "round" not in seq.sources


def test_every_null_carried_metric_has_a_reason_and_no_measured_one_has() -> None:
    """One list (stats.rows) says which metrics a row carries: build_row gives each null one a reason and
    none to a field that holds a value, the server's facts included (a layer split the server reported)."""
    cand = Candidate(id="a", runtime="llama-server", model="/m.gguf")
    server = ServerFacts(128, "/bin/llama-server", "b1", layer_split="33/33 layers on GPU", split_note="server log")
    for kind in ("probe", "sustained"):
        row = build_row(Cell("j", cand, 128, kind, 0, SEQUENTIAL), status="ok", started_at="t", server=server)
        assert (row.layer_split, row.server_version) == ("33/33 layers on GPU", "b1")
        assert row.sources["layer_split"] == "server log"
        assert not {k for k in row.null_reasons if getattr(row, k) is not None}, row.null_reasons
        nulls = [m for m in carried_metrics(kind) if getattr(row, m) is None]
        assert nulls and all(row.null_reasons[m] == "not reported for this probe" for m in nulls)
    assert set(SUSTAINED_METRICS) - set(PROBE_METRICS) == {"thermal_after", "window_tps", "sustain_ratio"}
    assert set(SUSTAINED_METRICS) <= set(Row.__struct_fields__)  # every listed metric is a row field


def test_a_row_failed_outside_a_request_is_decided_like_any_other() -> None:
    """`failed_row` (no server, no room, a broken session) goes through `decide`: failed, its error kept, and
    every carried metric null with the failure as the reason."""
    cand = Candidate(id="a", runtime="llama-server", model="/m.gguf")
    row = failed_row(Cell("j", cand, 128, "session", 2, SEQUENTIAL), "server never became ready: exit 1",
                     started_at="t", server=ServerFacts(256, None, None), extra={"turn": 2})
    assert (row.status, row.error, row.ctx_size, row.turn) == ("failed", "server never became ready: exit 1", 256, 2)
    assert row.null_reasons["gen_tps"] == "probe failed: server never became ready: exit 1"
