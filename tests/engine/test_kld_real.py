"""KL divergence on the real tools with the tiny models: the pinned llama-perplexity and the MLX venv.

One runner per module scores every candidate at one context against the f32 GGUF reference (the reference's
logits made once, in a fresh cache dir per session); each test reads its figures. The verdicts compare
figures with their own recorded uncertainty, never wall-clock times.

The validate tests run the real `benchctl validate` and `llama-tokenize`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchd.engine import kld
from benchd.schemas import Candidate, Kld, KldResult, Sweep

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
def gguf_run(tiny_models: Any, llama_perplexity_bin: Path, mlx_argv: dict[str, list[str]], cache_dir: Path,
             tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, KldResult], list[Any], Path]:
    """The small model (64-dim): f32 reference; f32 itself, the q8_0 weights and the MLX dir (f16)."""
    g = tiny_models.gguf
    cands = [
        Candidate(id="f32", runtime="llama-server", model=str(g["f32"]), args=["-t", "2", "--port", "1"]),
        Candidate(id="w-q8", runtime="llama-server", model=str(g["q8_0"]), args=["-t", "2"]),
        Candidate(id="mlx", runtime="mlx_lm.server", model=str(tiny_models.mlx_dir)),
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


def _heads32(root: Path, mlx: bool = False) -> Path:
    """A 64-dim tiny model with two 32-dim heads: `heads32-f16.gguf` and (`mlx`) the same weights as `mlx/`."""
    from benchctl.tinymodels import gguf_model, mlx_model, vocab, weights

    voc = vocab.build_vocab()
    arch = weights.Arch(n_embd=64, n_layer=2, n_head=2, n_head_kv=1, n_ff=128)
    w = weights.impose_structure(weights.random_weights(arch, voc.size, 7), voc.suppressed_ids())
    gguf_model.write_gguf(root / "heads32-f16.gguf", w, arch, voc, "f16", "benchd-tiny-heads32")
    if mlx:
        mlx_model.write_mlx_dir(root / "mlx", w, arch, voc)
    return root / "heads32-f16.gguf"


def _ok(r: KldResult, tokens: int = TOKENS) -> KldResult:
    assert r.status == "ok", r.reason
    assert r.tool == "llama-perplexity" and r.tool_version and r.binary_sha256
    assert r.attempts >= 1 and r.summary in ("summary block", "last chunk line")
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
    from benchd.results.report import render_markdown, render_text

    md, text = render_markdown(rb), render_text(rb)
    assert "## KL divergence" in md and rb.kld_corpus.sha256 in md and f"{rb.kld_corpus.tokens} tokens" in md
    assert "q4 @ 256: KLD" in text and "KL divergence against f32" in text
    import json

    from benchd.results.export import render_jsonl

    klds = [o for o in map(json.loads, render_jsonl(rb).splitlines()) if o["kind"] == "kld"]
    assert {o["candidate"] for o in klds} == {"f32", "q4"} and all(o["corpus_sha256"] for o in klds)
    from benchd.results import html

    if html.available():  # the page: the section, its chart of KLD by memory, the corpus's sha256
        page = html.render_page(rb, html.vega_runtime(cache_dir)).decode()
        assert "<section id='kld'>" in page and "chart-kld" in page and rb.kld_corpus.sha256 in page


# ------------------------------------------------------------------------------------------------ MLX


@pytest.fixture(scope="module")
def mlx_run(mlx_argv: dict[str, list[str]], llama_perplexity_bin: Path, cache_dir: Path, mlx_env: dict[str, str],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, KldResult]:
    """The 32-dim-head model as an MLX dir (the reference), its 4-bit weights (mlx_lm.convert), its KV cache at
    4 bits from token 0, and the same weights as a GGUF (not scored: llama-perplexity needs a GGUF reference)."""
    import subprocess

    root = tmp_path_factory.mktemp("heads32-mlx")
    gguf = _heads32(root, mlx=True)
    python = kld._mlx_python(cache_dir)
    subprocess.run([python, "-m", "mlx_lm", "convert", "--hf-path", str(root / "mlx"), "--mlx-path",
                    str(root / "mlx-q4"), "-q", "--q-bits", "4", "--q-group-size", "32"], env=mlx_env, check=True,
                   capture_output=True, timeout=300)
    kv = ["--kv-group-size", "32", "--quantized-kv-start", "0"]
    m = str(root / "mlx")
    cands = [Candidate(id="bf", runtime="mlx_lm.server", model=m),
             Candidate(id="w4", runtime="mlx_lm.server", model=str(root / "mlx-q4")),
             Candidate(id="kv4", runtime="mlx_lm.server", model=m, args=["--kv-bits", "4", *kv]),
             Candidate(id="gguf", runtime="llama-server", model=str(gguf))]
    results, _ = _run(_sweep(cands, "bf"), _fresh_cache(tmp_path_factory, cache_dir),
                      tmp_path_factory.mktemp("kld-state"))
    return results


def _mlx_ok(r: KldResult) -> KldResult:
    assert r.status == "ok", r.reason
    assert r.tool and r.tool.startswith("mlx_lm") and r.tool_version and "mlx-lm 0.32.2" in r.tool_version
    assert r.tokens_scored == (TOKENS // CTX) * (CTX - 1 - CTX // 2) and r.seconds and r.mem_peak_bytes
    return r


def test_mlx_scores_weights_and_kv_bits_against_an_mlx_reference(mlx_run: dict[str, KldResult]) -> None:
    ref, w4, kv4 = (_mlx_ok(mlx_run[k]) for k in ("bf", "w4", "kv4"))
    assert ref.kld_mean is not None and abs(ref.kld_mean) <= 1e-4 and ref.top1_agree == 1.0
    for r in (w4, kv4):
        assert r.kld_mean is not None and r.kld_mean_se is not None
        assert r.kld_mean - 3 * r.kld_mean_se > abs(ref.kld_mean), r.candidate
        assert r.comparability is None  # the same runtime on both sides
    assert kv4.kld_p99 is not None and kv4.kld_median is not None and kv4.kld_p99 >= kv4.kld_median
    assert "--kv-bits" in kv4.argv and kv4.notes == ["--kv-bits 4 from token 0 (--quantized-kv-start)"]


def test_a_gguf_candidate_needs_a_gguf_reference(mlx_run: dict[str, KldResult]) -> None:
    r = mlx_run["gguf"]
    assert r.status == "null" and r.reason and "needs a GGUF reference" in r.reason
    assert r.kld_mean is None and "kld_mean" in r.null_reasons


def test_an_mlx_candidate_against_a_gguf_reference_says_how_comparable(gguf_run: Any) -> None:
    results, _, _ = gguf_run
    r = _mlx_ok(results["mlx"])
    assert r.comparability == kld.CROSS_RUNTIME
    assert r.kld_mean is not None and r.kld_mean >= 0 and r.kld_p99 is not None
    assert r.top1_agree is not None and r.top1_agree > 0.9  # the same weights (f16 here), two runtimes


# ------------------------------------------------------------------------- real tools (validate)


def _validate(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "sweep.toml"
    path.write_text(body)
    return subprocess.run([sys.executable, "-m", "benchctl", "validate", str(path)], capture_output=True,
                          text=True, timeout=120)


def test_validate_counts_the_corpus_in_the_references_tokenizer(tmp_path: Path, tiny_models: Any,
                                                                 llama_perplexity_bin: Path) -> None:
    """~3 KB of text is more than 2 x 1,024 bytes but fewer than 2 x 1,024 tokens: only a tokenizer knows."""
    (tmp_path / "text.txt").write_text(kld.DEFAULT_CORPUS.read_text()[:3000])
    out = _validate(tmp_path, f'''name = "k"
contexts = [64]
gen_tokens = 8
[kld]
reference = "a"
corpus = "text.txt"
contexts = [1024]
[[candidates]]
id = "a"
runtime = "llama-server"
model = "{tiny_models.gguf['f32']}"
''')
    assert out.returncode == 2, out.stdout + out.stderr
    assert "kld.corpus" in out.stdout + out.stderr and "fewer than two chunks" in out.stdout + out.stderr


def test_validate_refuses_a_candidate_with_another_tokenizer(tmp_path: Path, tiny_models: Any,
                                                             llama_perplexity_bin: Path, cache_dir: Path) -> None:
    real = next((cache_dir / "models").glob("smollm2-*/*.gguf"), None)
    if real is None:
        pytest.skip("the real-model package is not fetched (make setup fetches it)")
    out = _validate(tmp_path, f'''name = "k"
contexts = [64]
gen_tokens = 8
[kld]
reference = "a"
[[candidates]]
id = "a"
runtime = "llama-server"
model = "{tiny_models.gguf['f32']}"
[[candidates]]
id = "b"
runtime = "llama-server"
model = "{real}"
''')
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert "candidates[1].model" in text and "tokenizer" in text and "'b'" in text
