"""Racing on real llama-servers (issue 38): a matrix of flag sets of the tiny model, one combination whose
server cannot start (a q8_0 K cache with flash attention on: the pinned build refuses a block size of 32
over the tiny model's 16-dim heads), and a much slower model. The broken combination's cells fail with the
reason and it leaves the race; the slow model is dropped at a look, by candidates the stored rows say
dominate it, and gets no larger context and no tail; the runbook and the report show the race. Every
verdict is recomputed from the stored rows with the functions the daemon injects, never asserted of the
machine's speed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from benchd.config import Config
from benchd.engine import racing, sweepcheck
from benchd.engine.scheduler import run_job
from benchd.results.runbook import build_runbook
from benchd.schemas import Candidate, Cooldown, Event, Probes, Sustained, Sweep
from benchd.store import Store


def test_a_raced_matrix_drops_the_slow_model_and_the_broken_start(tiny_models: Any, cache_dir: Path,
                                                                   tmp_path: Path) -> None:
    from benchctl.tinymodels import ensure

    slow = ensure(cache_dir, "medium", 0, lambda _m: None)
    cands = [Candidate(id="tiny", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1"],
                       matrix={"-ub": ["64", "128"], "-ctk": ["f16"]}),
             Candidate(id="tiny-q8k", runtime="llama-server", model=str(tiny_models.target), args=["-t", "1", "-fa", "on",
                                                                                              "-ctk", "q8_0"]),
             Candidate(id="slow", runtime="llama-server", model=str(slow.target), args=["-t", "1"])]
    sweep = Sweep(name="race", contexts=[64, 128], gen_tokens=16, warmup=1, probes=Probes(min=6, max=12),
                  racing=True, sustained=Sustained(tokens=16, window=8), sentinel=False,
                  starts="once",  # resident servers: this test is about the race, not starts (CI time, the 600 s guard)
                  cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0), candidates=cands)
    sweep = sweepcheck.expand(sweep).sweep  # what POST /v1/jobs stores
    config = Config.resolve(state_dir=tmp_path, cache_dir=cache_dir)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(config.db_path)
    events: list[Event] = []
    try:
        job, _ = store.create_job(sweep)
        asyncio.run(asyncio.wait_for(run_job(job.id, sweep, store, config, events.append), 600))  # a hang guard
        rb = build_runbook(config, store, job.id)
    finally:
        store.close()
    drops = {e.payload["candidate"]: e.payload for e in events if e.type == "candidate_dropped"}
    ids = [c.id for c in rb.sweep.candidates]
    assert ids == ["tiny.ub64.ctk-f16", "tiny.ub128.ctk-f16", "tiny-q8k", "slow"]
    # the broken start: its cells failed with the server's reason, and it left the race by benchd
    broken = [r for r in rb.rows if r.candidate == "tiny-q8k"]
    assert broken and all(r.status == "failed" and "never became ready" in (r.error or "") for r in broken)
    assert drops["tiny-q8k"]["by"] == ["benchd"] and drops["tiny-q8k"]["context"] == 64
    assert not [r for r in rb.rows if r.candidate == "tiny-q8k" and r.context == 128]
    # the slow model: dropped at a look of the first context, with its record
    d = drops["slow"]
    tinies = {"tiny.ub64.ctk-f16", "tiny.ub128.ctk-f16"}
    assert d["context"] == 64 and d["round"] >= 6 and d["by"] and set(d["by"]) <= tinies
    # every drop by a dominator (the slow model's; a -ub point the other beats, if the rows say so) is what
    # the stored rows of its look say
    race = racing.Race(on=True, alpha=d["alpha"], order="interleaved")
    for loser, p in drops.items():
        if p["by"] == ["benchd"]:
            continue
        rows = {c: [r for r in rb.rows if r.candidate == c and r.context == p["context"] and r.kind == "probe"
                    and r.status == "ok" and r.round is not None and r.round < p["round"] and r.invalidated is None
                    and not r.short] for c in (loser, *p["by"])}
        for by, axes in p["better_on"].items():
            again = race.pair(rows[by], rows[loser], by, loser)
            assert again.winner == "a" and again.better_on == axes, again.text
        # a dropped candidate runs no larger context and no tail
        assert not [r for r in rb.rows if r.candidate == loser and (r.context > p["context"] or r.kind != "probe")]
    survivors = tinies - set(drops)
    assert survivors, drops  # somebody is still in
    assert {r.candidate for r in rb.rows if r.kind == "sustained"} == survivors
    # context 128: the survivors, and a -ub point dropped at a look of 128 (its rows before the drop)
    dropped_at_128 = {c for c, p in drops.items() if p["context"] == 128}
    assert {r.candidate for r in rb.rows if r.context == 128} == survivors | dropped_at_128
    # `benchctl tail` says it as it happens
    from benchctl.commands.tail import _event_text

    ev = next(e for e in events if e.type == "candidate_dropped" and e.payload["candidate"] == "slow")
    assert _event_text(ev).startswith("slow left the race at ctx 64 after round")
    # the runbook's race table and the report
    assert {x.candidate for x in rb.race} == set(drops) >= {"slow", "tiny-q8k"}
    from benchd.results.report import render_markdown

    text = render_markdown(rb)
    assert "## Race" in text and "slow" in text.split("## Race", 1)[1]
    from benchd.results import html

    page = html._race(rb)
    assert "<section id='race'>" in page and "<td>slow</td>" in page and "tiny-q8k" in page
    # the lock keeps the flags: a matrix candidate locks with its full args, and `locked --command` has them
    from benchd.lock import lockfile

    chosen = sorted(survivors)[0]
    locked = lockfile.build_lock(rb, chosen, force=True)
    point = next(c for c in rb.sweep.candidates if c.id == chosen).from_matrix
    assert point is not None and locked.args == ["-t", "1", *point.args]
    argv = lockfile.server_argv(locked, config, port=18080)
    ub = argv.index("-ub")
    assert argv[ub: ub + 2] == ["-ub", point.values["-ub"]] and argv[argv.index("-ctk") + 1] == "f16"
