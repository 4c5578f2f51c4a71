"""`KldRunner` without a tool: the scoring run faked, its output a recorded llama-perplexity run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.engine import kld
from benchd.schemas import Candidate, Kld, Sweep

DATA = Path(__file__).resolve().parents[1] / "data" / "kld"
FULL = (DATA / "kl-divergence-full.txt").read_text()
CUT = (DATA / "kl-divergence-cut.txt").read_text()
NO_BLOCK = FULL.split("====== Perplexity")[0]


def _runner(tmp_path: Path, outputs: list[tuple[int | None, str]]) -> tuple[kld.KldRunner, list[dict[str, Any]]]:
    cands = [Candidate(id=c, runtime="llama-server", model=f"/{c}.gguf") for c in ("ref", "q8")]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("word " * 4000)
    sweep = Sweep(name="k", contexts=[512], gen_tokens=8, candidates=cands,
                  kld=Kld(reference="ref", contexts=[512], corpus=str(corpus)))
    events: list[dict[str, Any]] = []
    runner = kld.KldRunner("job", sweep, tmp_path / "cache", tmp_path / "state",
                           lambda type_, **p: events.append({"type": type_, **p}), set())
    left = list(outputs)

    async def run_tool(*_a: object, **_k: object) -> kld.Run:
        status, text = left.pop(0)
        return kld.Run(status, text, 2.0, 1000, "test", None)

    runner.plan = lambda cand, ctx, base, out: kld.Plan(["tool"], "llama-perplexity", "b1", "/tool", None, [])  # type: ignore[method-assign]
    kld.run_tool = run_tool  # type: ignore[assignment]
    return runner, events


@pytest.fixture(autouse=True)
def _restore() -> Any:
    saved = kld.run_tool
    yield
    kld.run_tool = saved


def test_a_summary_block_is_scored_in_one_run(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, [(0, FULL)])
    r = asyncio.run(runner.score(runner.ref, 512, Path("/base"), 1.5))
    assert (r.status, r.attempts, r.summary, r.reference_seconds) == ("ok", 1, "summary block", 1.5)
    assert r.kld_mean == pytest.approx(0.002596) and not r.null_reasons


def test_a_lost_summary_is_run_again_then_the_last_chunk_line_stands_in(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, [(0, CUT)] + [(0, NO_BLOCK)] * 3)
    r = asyncio.run(runner.score(runner.ref, 512, Path("/base"), None))
    assert (r.status, r.attempts, r.summary) == ("ok", 4, "last chunk line")
    assert set(r.null_reasons) == {"kld_median", "kld_p99", "kld_max", "ppl_reference"}
    assert "was lost in 4 runs" in r.null_reasons["kld_p99"]


def test_a_cut_output_in_every_attempt_fails(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, [(0, CUT)] * 4)
    r = asyncio.run(runner.score(runner.ref, 512, Path("/base"), None))
    assert r.status == "failed" and r.attempts == 4 and "stopped before its last chunk in 4 runs" in (r.reason or "")


def test_a_killed_run_fails_with_its_status(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, [(None, "hung")])
    r = asyncio.run(runner.score(runner.ref, 512, Path("/base"), None))
    assert r.status == "failed" and r.reason == "llama-perplexity timed out: hung"


def test_run_records_a_failed_reference_and_a_tokenizer_mismatch(tmp_path: Path) -> None:
    runner, events = _runner(tmp_path, [])
    tok = kld.Tokenizer("k", 3, "test")
    kld.tokenizer_of, saved_tok = (lambda cand: tok), kld.tokenizer_of  # type: ignore[assignment]
    kld.tokenizer_mismatch, saved_mis = (lambda ref, t, c: "another tokenizer"), kld.tokenizer_mismatch  # type: ignore[assignment]
    runner.corpus_record = lambda: kld.corpus_facts(runner.sweep)  # type: ignore[method-assign]

    async def no_logits(ctx: int) -> tuple[Path | None, str, float | None]:
        return None, "no logits", None

    runner.reference_logits = no_logits  # type: ignore[method-assign]
    try:
        asyncio.run(runner.run())
    finally:
        kld.tokenizer_of, kld.tokenizer_mismatch = saved_tok, saved_mis  # type: ignore[assignment]
    done = [(e["candidate"], e["status"], e["reason"]) for e in events if e["type"] == "kld_finished"]
    assert done == [("ref", "failed", "no logits"), ("q8", "failed", "no logits")]
    assert [e.get("purpose") for e in events if e["type"] == "kld_started"] == ["corpus"]


def test_run_scores_the_reference_and_nulls_another_tokenizer(tmp_path: Path) -> None:
    runner, events = _runner(tmp_path, [(0, FULL)])
    tok = kld.Tokenizer("k", 3, "test")
    kld.tokenizer_of, saved_tok = (lambda cand: tok), kld.tokenizer_of  # type: ignore[assignment]
    kld.tokenizer_mismatch, saved_mis = (lambda ref, t, c: "another tokenizer"), kld.tokenizer_mismatch  # type: ignore[assignment]
    runner.corpus_record = lambda: kld.corpus_facts(runner.sweep)  # type: ignore[method-assign]

    async def logits(ctx: int) -> tuple[Path | None, str, float | None]:
        return Path("/base"), "made", 3.0

    runner.reference_logits = logits  # type: ignore[method-assign]
    try:
        asyncio.run(runner.run())
    finally:
        kld.tokenizer_of, kld.tokenizer_mismatch = saved_tok, saved_mis  # type: ignore[assignment]
    done = {e["candidate"]: e for e in events if e["type"] == "kld_finished"}
    assert done["ref"]["status"] == "ok" and done["ref"]["reference_seconds"] == 3.0
    assert done["q8"]["status"] == "null" and done["q8"]["null_reasons"] == {"kld_mean": "another tokenizer"}
