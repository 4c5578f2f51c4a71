"""The decision first (issue 35): per context the frontier, who is dominated (by whom, on which axes),
what stays undecided and what would decide it; then the candidates (runtime, model and sha256, args,
spec and draft, binary, server version); then metadata and the deferred axes, one row per axis. The
terminal report, the Markdown and the page keep that order; the words of a state come from one table."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
from test_html import NO_RUNTIME, newer_doc

from benchd.results import html
from benchd.results.decision import context_decision, decision_lines, deferred_rows, open_axes, undecided_text
from benchd.results.report import render_markdown, render_text
from benchd.results.text import STATE_WORDS, axis_word
from benchd.schemas import ContextPareto, NotCompared, Tie
from benchd.stats.axes import AXES, register_axis


def _in_order(text: str, marks: list[str]) -> None:
    at = [text.index(m) for m in marks]
    assert at == sorted(at), list(zip(marks, at, strict=True))


def test_the_decision_names_who_is_dominated_by_whom_on_which_axes(tmp_path: Path) -> None:
    lines = decision_lines(newer_doc(tmp_path))
    text = "\n".join(lines)
    ctx1024 = text[text.index("context 1024:"):]
    frontier = next(x for x in ctx1024.splitlines() if x.strip().startswith(f"{STATE_WORDS['frontier']}:"))
    assert "gguf-plain" in frontier and "gguf-spec" in frontier and "mlx-lm" not in frontier
    (ruled,) = [x for x in ctx1024.splitlines() if x.strip().startswith(f"{STATE_WORDS['dominated']}:")]
    assert "mlx-lm by gguf-plain" in ruled
    assert ruled.count(axis_word("gen_tps")) == 1  # the dominance's axes said once, not listed and then repeated
    assert axis_word("gen_tps") in ruled and axis_word("mem_peak_bytes") in ruled
    assert "gen_tps" not in ruled and "mem_peak_bytes" not in ruled  # labels, not field names
    # a caveat is said of a frontier member only (mlx-lm is dominated at 1024)
    assert "mlx-lm: frontier with a caveat" not in ctx1024
    assert f"{STATE_WORDS['excluded']}: broken" in ctx1024
    # how many pair questions the view asked, and that each kept its own α (three candidates: three pairs)
    assert "  3 pairs compared, each on its own (its verdict keeps its α; no correction across pairs)" in ctx1024


def test_an_undecided_pair_says_what_would_decide_it() -> None:
    nc = NotCompared(reason="too few values to reach a verdict", have=3, needed=6, lever="rounds")
    p = ContextPareto(context=512, frontier=["a", "b"], dominated={}, excluded={}, skipped_pairs=[], points=[],
                      ties=[Tie(pair=["a", "b"], axes={}, status="unresolved", unresolved_on=["gen_tps"],
                                blocked_on=["ttft_ms"], not_compared={"ttft_ms": nc})])
    (u,) = context_decision(p).undecided
    assert u.status == "unresolved" and STATE_WORDS[u.status] == "undecided"
    gen, ttft = u.decide
    assert gen == f"more rounds: the interval on {axis_word('gen_tps')} still overlaps the margin"
    assert ttft == f"{axis_word('ttft_ms')}: 3 more rounds (too few values to reach a verdict)"
    one_run = NotCompared(reason="1 value a side: comparing needs 6", have=1, needed=6, lever="[sustained] runs")
    sustain = Tie(pair=["a", "b"], axes={}, status="unresolved", blocked_on=["sustain_ratio"],
                  not_compared={"sustain_ratio": one_run})
    (u,) = context_decision(msgspec.structs.replace(p, ties=[sustain])).undecided
    assert u.decide == [f"{axis_word('sustain_ratio')}: 5 more [sustained] runs (1 value a side: comparing needs 6)"]
    older = msgspec.structs.replace(one_run, lever=None)  # a runbook from before `[sustained] runs`: today's lever
    (u,) = context_decision(msgspec.structs.replace(p, ties=[msgspec.structs.replace(
        sustain, not_compared={"sustain_ratio": older})])).undecided
    assert u.decide[0].startswith(f"{axis_word('sustain_ratio')}: 5 more [sustained] runs ("), u.decide
    fixed = NotCompared(reason="1 value a side: comparing needs 6", have=1, needed=6, lever=None)
    register_axis("made_up", "higher", label="made up", source="candidate", lever=None)  # nothing adds values
    try:
        (u,) = context_decision(msgspec.structs.replace(p, ties=[Tie(
            pair=["a", "b"], axes={}, status="unresolved", blocked_on=["made_up"],
            not_compared={"made_up": fixed})])).undecided
    finally:
        AXES.pop("made_up")
    assert u.decide == ["made up: 1 value a side: comparing needs 6, and no setting adds values: your "
                        "judgement"]  # no promise of values nothing can add
    said = Tie(pair=["a", "b"], axes={}, status="unresolved", unresolved_on=["gen_tps"],
               text="neither a nor b is dominated yet: unresolved on generation speed (α = 0.05)")
    (u,) = context_decision(msgspec.structs.replace(p, ties=[said])).undecided
    assert undecided_text(u) == "a against b: unresolved on generation speed (α = 0.05)"  # the pair named once
    many = Tie(pair=["a", "b"], axes={}, status="unresolved", unresolved_on=["gen_tps", "prompt_tps", "ttft_ms"])
    (u,) = context_decision(msgspec.structs.replace(p, ties=[many])).undecided
    assert u.decide == [f"more rounds: the intervals on {axis_word('gen_tps')}, {axis_word('prompt_tps')} and "
                        f"{axis_word('ttft_ms')} still overlap the margin"]  # one lever, not a line per axis
    counted = msgspec.structs.replace(many, rounds_to_resolve={"gen_tps": 1, "ttft_ms": 19, "ready_s": 4})
    (u,) = context_decision(msgspec.structs.replace(p, ties=[counted])).undecided
    assert u.decide[0].endswith(f"the margin (an even chance at the spread so far: about 1 more round on "
                                f"{axis_word('gen_tps')}, about 19 more rounds on {axis_word('ttft_ms')})")
    ready = msgspec.structs.replace(many, unresolved_on=["ready_s"], rounds_to_resolve={"ready_s": 4})
    (u,) = context_decision(msgspec.structs.replace(p, ties=[ready])).undecided
    assert u.decide[0].endswith(f"(an even chance at the spread so far: about 4 more [ready] starts on "
                                f"{axis_word('ready_s')})")  # the axis's own lever


def test_a_ties_open_axes_come_from_its_fields_and_from_an_older_runbooks_sentences() -> None:
    """One reader of a tie's open axes (the decision's and the lock's thin-evidence warning): the field,
    or, in a runbook from before `Tie.status`, the axis sentences that say a comparison is open."""
    now = Tie(pair=["a", "b"], axes={"ttft_ms": "unresolved: the CIs overlap"}, status="unresolved",
              unresolved_on=["gen_tps"])
    assert open_axes(now) == ["gen_tps"]  # the field, not the prose
    older = Tie(pair=["a", "b"], axes={"gen_tps": "unresolved: the CIs overlap", "ttft_ms": "tied within ±2 %",
                                       "mem_peak_bytes": "a's peak memory is unresolved (n 3)"})
    assert open_axes(older) == ["gen_tps", "mem_peak_bytes"]


def test_deferred_axes_one_row_per_axis(tmp_path: Path) -> None:
    rb = newer_doc(tmp_path)
    raw = [d.axis for d in (*rb.deferred.declared, *rb.deferred.automatic)]
    rows = deferred_rows(rb)
    assert sorted(d.axis for d in rows) == sorted(set(raw))
    assert len(raw) > len(rows), "the fixture declares an axis benchd also defers"
    both = next(d for d in rows if d.axis == "concurrency")
    assert both.origin == "the sweep file and benchd" and len(both.reasons) == 2
    md = render_markdown(rb)
    section = md[md.index("## Deferred axes"):]
    section = section[:section.index("\n## ", 4)]
    assert len(re.findall(r"^\| concurrency \|", section, re.M)) == 1


def test_text_and_markdown_open_on_the_decision_then_candidates_then_metadata(tmp_path: Path) -> None:
    rb = newer_doc(tmp_path)
    text = render_text(rb)
    _in_order(text, ["Decision per context", "\nCandidates\n  ", "machine:", "Deferred axes", "medians (min–max"])
    block = text[text.index("  gguf-spec: llama-server"):]
    block = block[:block.index("\n  gguf-plain:")]
    prov = next(c for c in rb.provenance.candidates if c.candidate == "gguf-spec")
    assert prov.model.sha256 and prov.model.sha256 in block and "tiny-draft.gguf" in block and "-t 1" in block
    assert prov.server_version and prov.server_version in block
    md = render_markdown(rb)
    _in_order(md, ["## Decision", "## Candidates", "## Machine", "## Sweep", "## Deferred axes", "## Results",
                   "## Pareto view"])
    assert "### Context 512" in md[:md.index("## Candidates")]


def test_the_page_opens_on_the_decision(tmp_path: Path) -> None:
    page = html.render_page(newer_doc(tmp_path), NO_RUNTIME).decode()
    _in_order(page, ["<section id='decision'>", "<section id='candidates'>", "<section id='summary'>",
                     "<section id='pareto'>"])
    decision = page[page.index("<section id='decision'>"):page.index("<section id='candidates'>")]
    assert "mlx-lm by gguf-plain" in decision and "the trade-off is yours" in decision
    summary = page[page.index("<section id='summary'>"):page.index("<section id='pareto'>")]
    assert summary.count("<td>concurrency</td>") == 1


def test_the_png_legend_says_each_state_in_the_pages_word(tmp_path: Path) -> None:
    """The PNG's points are marked by the state the page shows (`records.pareto_points`), the legend
    saying it in `STATE_WORDS`' word: a tied pair is not drawn as 'frontier' while the page says tied."""
    from matplotlib.figure import Figure

    from benchd.results import plot
    from benchd.results.records import pareto_points

    rb = newer_doc(tmp_path)
    for p in rb.pareto:
        ax = Figure().subplots()
        plot._panel(ax, p, plot._states(rb, p), "mem_peak_bytes", 1 << 20, "peak memory", "memory")
        _, labels = ax.get_legend_handles_labels()
        drawn = [pt for pt in pareto_points(rb, p) if pt.values.get("mem_peak_bytes") is not None
                 and pt.values.get("gen_tps") is not None]
        assert {STATE_WORDS[pt.status] for pt in drawn} == {x for x in labels if not x.startswith("frontier of")}
        assert "on the frontier (all axes)" not in labels


def test_report_json_carries_the_decision_as_data(tmp_path: Path) -> None:
    """`report --json` opens on what the text opens on: the decision per context, the candidates, the
    deferred axes one row per axis, as data (the same records, not their lines)."""
    from benchd.results.report import report_json

    rb = newer_doc(tmp_path)
    doc = report_json(rb)
    assert list(doc)[:6] == ["runbook", "outcome", "sweep", "decision", "candidates", "deferred"]
    assert "does not pick" in doc["decision"]["no_pick"]
    by_ctx = {c["context"]: c for c in doc["decision"]["contexts"]}
    ctx = by_ctx[1024]
    assert "gguf-plain" in ctx["frontier"] and "mlx-lm" not in ctx["frontier"]
    ruled = next(r for r in ctx["ruled_out"] if r["candidate"] == "mlx-lm")
    assert ruled["by"] == "gguf-plain" and axis_word("gen_tps") in ruled["axes"]
    assert "broken" in ctx["excluded"]
    for c in doc["decision"]["contexts"]:
        for u in c["undecided"]:
            assert u["word"] == STATE_WORDS[u["status"]] and u["would_decide"]
    for d in decision_lines(rb):  # every frontier the lines name is in the data
        if d.strip().startswith(f"{STATE_WORDS['frontier']}:"):
            assert any(", ".join(c["frontier"]) in d for c in doc["decision"]["contexts"])
    spec = next(c for c in doc["candidates"] if c["candidate"] == "gguf-spec")
    assert spec["runtime"] == "llama-server" and "tiny-draft.gguf" in spec["spec_draft_model"]
    assert sorted(d["axis"] for d in doc["deferred"]) == sorted({d.axis for d in deferred_rows(rb)})
