"""KL divergence on the real tools with the tiny models: the pinned llama-perplexity and the MLX venv.

One runner per module scores every candidate at one context against the f32 GGUF reference (the reference's
logits made once, in a fresh cache dir per session); each test reads its figures. The verdicts compare
figures with their own recorded uncertainty, never wall-clock times.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from benchd.engine import kld
from benchd.schemas import Candidate, Kld, KldResult, Sweep

pytestmark = pytest.mark.real

CTX = 256
TOKENS = 2048  # 8 chunks of 256: 127 scored tokens each, 1,016 in all


def _sweep(cands: list[Candidate], reference: str, tokens: int = TOKENS, **kw: Any) -> Sweep:
    return Sweep(name="kld", contexts=[64], gen_tokens=8, candidates=cands,
                 kld=Kld(reference=reference, contexts=[CTX], tokens=tokens, **kw))


def _run(sweep: Sweep, cache: Path, state: Path) -> tuple[dict[str, KldResult], list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    runner = kld.KldRunner("job-kld", sweep, cache, state, lambda t, **p: events.append((t, p)), set())
    asyncio.run(runner.run())
    results = {p["candidate"]: KldResult(**p) for t, p in events if t == "kld_finished"}
    return results, events


@pytest.fixture(scope="module")
def gguf_run(tiny_models: Any, llama_perplexity_bin: Path, cache_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, KldResult], list[Any], Path]:
    """The small model (64-dim): f32 reference; f32 itself and the q8_0 weights."""
    g = tiny_models.gguf
    cands = [
        Candidate(id="f32", runtime="llama-server", model=str(g["f32"]), args=["-t", "2", "--port", "1"]),
        Candidate(id="w-q8", runtime="llama-server", model=str(g["q8_0"]), args=["-t", "2"]),
    ]
    cache = _fresh_cache(tmp_path_factory, cache_dir)
    results, events = _run(_sweep(cands, "f32"), cache, tmp_path_factory.mktemp("kld-state"))
    return results, events, cache


def _fresh_cache(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    return _fresh_cache_at(tmp_path_factory.mktemp("kld-cache"), cache_dir)


def _fresh_cache_at(cache: Path, cache_dir: Path) -> Path:
    """A cache dir with the real one's runtimes (the pinned build) and an empty logits cache."""
    (cache / "runtimes").symlink_to(cache_dir / "runtimes")
    return cache


@pytest.fixture(scope="module")
def kv_run(llama_perplexity_bin: Path, cache_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, KldResult]:
    """A tiny model with 32-dim heads (the small set's 16 do not divide a q8_0/q4_0 block of 32): f16 weights
    and cache as the reference, the same weights with q8_0 and q4_0 K caches."""
    f16 = str(_heads32(tmp_path_factory.mktemp("heads32")))
    cands = [Candidate(id="f16", runtime="llama-server", model=f16, args=["-t", "2"])]
    cands += [Candidate(id=f"kv-{t}", runtime="llama-server", model=f16, args=["-t", "2", "-ctk", t])
              for t in ("q8_0", "q4_0")]
    results, _ = _run(_sweep(cands, "f16"), _fresh_cache(tmp_path_factory, cache_dir),
                      tmp_path_factory.mktemp("kld-state"))
    return results


def _heads32(root: Path) -> Path:
    from benchctl.tinymodels import gguf_model, vocab, weights

    voc = vocab.build_vocab()
    arch = weights.Arch(n_embd=64, n_layer=2, n_head=2, n_head_kv=1, n_ff=128)
    w = weights.impose_structure(weights.random_weights(arch, voc.size, 7), voc.suppressed_ids())
    gguf_model.write_gguf(root / "heads32-f16.gguf", w, arch, voc, "f16", "benchd-tiny-heads32")
    return root / "heads32-f16.gguf"


def _ok(r: KldResult, tokens: int = TOKENS) -> KldResult:
    assert r.status == "ok", r.reason
    assert r.tool == "llama-perplexity" and r.tool_version and r.binary_sha256
    assert r.tokens_scored == (tokens // CTX) * (CTX - 1 - CTX // 2) and r.chunks == tokens // CTX
    assert r.seconds is not None and r.seconds > 0 and r.mem_peak_bytes, r  # time and memory per candidate
    return r


def test_the_reference_against_itself_is_zero(gguf_run: Any) -> None:
    results, events, _ = gguf_run
    r = _ok(results["f32"])
    assert r.kld_mean is not None and abs(r.kld_mean) <= 1e-5, r.kld_mean  # the file's 16-bit rounding only
    assert r.top1_agree == 1.0
    assert r.dropped_args == ["--port", "1"] and "--port" not in r.argv
    assert r.reference_seconds is not None  # made in this run, not read from a cache
    corpus = next(p["corpus"] for t, p in events if t == "kld_started" and "corpus" in p)
    assert corpus["tokens"] > TOKENS and len(corpus["sha256"]) == 64


def test_q8_0_weights_lose_something(gguf_run: Any) -> None:
    results, _, _ = gguf_run
    ref, q8 = _ok(results["f32"]), _ok(results["w-q8"])
    assert q8.kld_mean is not None and ref.kld_mean is not None and q8.kld_mean_se is not None
    assert q8.kld_mean - 3 * q8.kld_mean_se > ref.kld_mean
    if q8.summary == "summary block":
        assert q8.kld_median is not None and q8.kld_p99 is not None and q8.kld_p99 >= q8.kld_median
    else:
        assert "lost" in q8.null_reasons["kld_p99"]
    assert q8.top1_agree is not None and q8.top1_agree < 1.0


def test_a_q4_0_cache_loses_more_than_a_q8_0_one(kv_run: dict[str, KldResult]) -> None:
    q8, q4 = _ok(kv_run["kv-q8_0"]), _ok(kv_run["kv-q4_0"])
    assert q8.kld_mean is not None and q4.kld_mean is not None and q4.kld_mean_se and q8.kld_mean_se
    assert q4.kld_mean - q8.kld_mean > 3 * (q4.kld_mean_se ** 2 + q8.kld_mean_se ** 2) ** 0.5
    assert "-ctk" in q4.argv and "q4_0" in q4.argv


def test_the_reference_logits_are_cached_by_model_hash(gguf_run: Any, tiny_models: Any,
                                                      tmp_path: Path) -> None:
    _, _, cache = gguf_run
    files = list((cache / "kld").glob("*.bin"))
    assert len(files) == 1
    same = Candidate(id="f32", runtime="llama-server", model=str(tiny_models.gguf["f32"]), args=["-t", "2"])
    sweep = _sweep([same], "f32")
    results, events = _run(sweep, cache, tmp_path)
    assert results["f32"].reference_seconds is None  # read from the cache, not made again
    assert not [p for t, p in events if t == "kld_started" and p.get("purpose") == "reference logits"]
    assert list((cache / "kld").glob("*.bin")) == files


def test_a_sweep_scores_after_its_probes_and_the_runbook_shows_it(tiny_models: Any, cache_dir: Path,
                                                                   tmp_path: Path) -> None:
    """The engine's tail step: one probe per cell, then `[kld]`; the runbook's kld list, corpus and the
    Pareto view's kld axis come from the job's events."""
    from benchd.config import Config
    from benchd.engine.scheduler import run_job
    from benchd.results.runbook import build_runbook
    from benchd.schemas import Cooldown, Sustained
    from benchd.store import Store

    g = tiny_models.gguf
    cands = [Candidate(id="f32", runtime="llama-server", model=str(g["f32"]), args=["-t", "2"]),
             Candidate(id="q4", runtime="llama-server", model=str(g["q4_0"]), args=["-t", "2"])]
    sweep = Sweep(name="kld-sweep", contexts=[64], gen_tokens=8, probes=1, warmup=0, candidates=cands,
                  sustained=Sustained(tokens=0), sentinel=False, order="sequential",
                  cooldown=Cooldown(policy="fixed", seconds=0, max_seconds=0),
                  kld=Kld(reference="f32", contexts=[CTX], tokens=TOKENS))
    config = Config.resolve(state_dir=tmp_path / "state", cache_dir=_fresh_cache_at(tmp_path, cache_dir))
    config.state_dir.mkdir(parents=True)
    store = Store(config.db_path)
    job, _ = store.create_job(sweep)
    types: list[str] = []
    outcome = asyncio.run(run_job(job.id, sweep, store, config, lambda e: types.append(e.type)))
    assert outcome.state == "succeeded", outcome
    last_probe = max(i for i, t in enumerate(types) if t == "probe_finished")
    assert min(i for i, t in enumerate(types) if t.startswith("kld_")) > last_probe  # after every probe
    rb = build_runbook(config, store, job.id)
    by = {r.candidate: r for r in rb.kld}
    assert set(by) == {"f32", "q4"} and all(r.status == "ok" for r in rb.kld)
    assert by["q4"].kld_mean is not None and by["f32"].kld_mean is not None
    assert by["q4"].kld_mean > by["f32"].kld_mean
    assert rb.kld_corpus is not None and rb.kld_corpus.sha256 and rb.kld_corpus.tokens
    points = {p.candidate: p for p in rb.pareto[0].points}
    assert points["q4"].values["kld"] is not None and points["f32"].values["kld"] is not None
