"""Prompt sizing and uniqueness, against fake tokenizer FUNCTIONS.

A pure function stands in for the server's tokenizer here because sizing is plain arithmetic over a
count; the tokenizer is not a server protocol. Accuracy against real servers (prompt tokens within
1 % of every context, llama-server /tokenize and mlx calibration) is tested by the engine tests.
"""

from __future__ import annotations

import math
import re

import pytest

from benchd.engine import prompts
from benchd.engine.corpus import load_corpus
from benchd.engine.prompts import PromptBuilder, prompt_provenance
from benchd.servers.runtimes.mlx_common import local_tokenizer_counter

TEMPLATE_OVERHEAD = 17  # tokens a fake chat template adds around the user message


def byte_level(text: str) -> int:
    """Like the tiny test models: about one token per byte."""
    return len(text.encode("utf-8"))


_WORDISH = re.compile(r"[A-Za-z]{1,4}|\d|[^\sA-Za-z\d]|\s+")


def wordish(text: str) -> int:
    """A BPE-like density (~3 chars per token on code), varying from file to file."""
    return len(_WORDISH.findall(text))


def coarse(text: str) -> int:
    """A very coarse vocabulary: ~7 characters per token."""
    return math.ceil(len(text) / 7)


TOKENIZERS = [byte_level, wordish, coarse]


def server_reports(fn, text: str) -> int:
    """What a server would report as usage.prompt_tokens: the text plus its chat template."""
    return fn(text) + TEMPLATE_OVERHEAD


def test_corpus_is_deterministic_and_recorded():
    c1 = load_corpus()
    load_corpus.cache_clear()
    c2 = load_corpus()
    assert c1.sha256 == c2.sha256 and c1.text == c2.text
    assert list(c1.files) == sorted(c1.files)
    assert len(c1.text) > 500_000  # enough for 128k-token prompts of real models without cycling
    prov = prompt_provenance()
    assert set(prov) == {"corpus", "corpus_sha256", "template_sha256"}
    assert prov["corpus"]["files"] == list(c1.files)
    assert re.fullmatch(r"[0-9a-f]{64}", prov["template_sha256"])
    assert PromptBuilder().corpus_hash == prov["corpus_sha256"]


def test_corpus_missing_files_are_recorded(tmp_path):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "decoder.py").write_text("x = 1\n")
    c = load_corpus(str(tmp_path))
    assert c.files == ("json/decoder.py",)
    assert "typing.py" in c.missing
    with pytest.raises(RuntimeError):
        load_corpus(str(tmp_path / "nothing"))


def test_corpus_cycles_when_short(tmp_path):
    (tmp_path / "heapq.py").write_text("abc\n")
    c = load_corpus(str(tmp_path))
    text, cycles = c.take(len(c.text) * 2 + 3)
    assert len(text) == len(c.text) * 2 + 3 and cycles == 3
    assert text.startswith(c.text + c.text)


async def test_every_prompt_is_unique_at_its_start():
    b = PromptBuilder()
    a1 = await b.build(500, "job1234x/cand/512/0")
    a2 = await b.build(500, "job1234x/cand/512/0")
    assert a1.text.splitlines()[0] != a2.text.splitlines()[0]
    first = a1.text.splitlines()[0]
    assert re.fullmatch(r"\d{12} # probe job1234x/cand/512/0", first), first  # nonce FIRST: tags share prefixes
    assert a1.text[:12] != a2.text[:12]
    assert a1.key == "cand"
    assert a1.messages() == [{"role": "user", "content": a1.text}]
    # the rest is the same corpus prefix
    assert a1.text.split("\n", 1)[1] == a2.text.split("\n", 1)[1]


@pytest.mark.parametrize("fn", TOKENIZERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("target", [256, 2048, 8192, 32768])
async def test_tokenizer_mode_hits_target_after_one_warmup(fn, target):
    b = PromptBuilder()

    async def count(text: str) -> int:
        return fn(text)

    assert b.needs_sizing(target, "c", tokenizer=True)
    warm = await b.build(target, "j/c/x/warmup-0", count)
    assert warm.method == "tokenizer" and warm.tokenizer_calls <= 16
    b.observe(warm, server_reports(fn, warm.text))  # learns the template overhead
    assert not b.needs_sizing(target, "c", tokenizer=True)
    for probe in range(3):
        p = await b.build(target, f"j/c/x/{probe}", count)
        reported = server_reports(fn, p.text)
        assert abs(reported - target) <= max(1, 0.01 * target), (reported, target)
        assert reported <= target  # largest prompt that fits: never over
        assert p.estimated_tokens == reported
        assert p.tokenizer_calls <= 16


@pytest.mark.parametrize("fn", TOKENIZERS, ids=lambda f: f.__name__)
async def test_calibration_converges_for_any_ratio(fn):
    """No tokenizer: sizing requests until needs_sizing() is False, then probes land within 1 %."""
    b = PromptBuilder()
    for target in [512, 2048, 8192, 32768]:
        sizing = 0
        while b.needs_sizing(target, "m"):
            sizing += 1
            assert sizing <= 5, f"calibration did not converge at {target} for {fn.__name__}"
            p = await b.build(target, f"j/m/{target}/sizing-{sizing}")
            b.observe(p, server_reports(fn, p.text))
        for probe in range(3):
            p = await b.build(target, f"j/m/{target}/{probe}")
            assert p.method == "calibrated"
            reported = server_reports(fn, p.text)
            err = b.observe(p, reported)
            assert abs(err) <= 0.01, (fn.__name__, target, reported)


async def test_first_guess_does_not_overflow():
    """The first guess assumes one char per token: real tokenizers undershoot, bytes overshoot only by
    the template overhead (plus any non-ASCII bytes)."""
    for fn in TOKENIZERS:
        b = PromptBuilder()
        p = await b.build(4096, "j/z/4096/0")
        assert p.method == "first-guess"
        assert server_reports(fn, p.text) <= 4096 * 1.01 + TEMPLATE_OVERHEAD


async def test_keys_are_separate():
    b = PromptBuilder()
    p = await b.build(1000, "j/a/1000/0")
    b.observe(p, server_reports(coarse, p.text))
    assert not b.needs_sizing(1000, "a") or True  # a is now calibrated (maybe not yet within 0.5 %)
    assert b.needs_sizing(1000, "b")
    q = await b.build(1000, "j/b/1000/0")
    assert q.method == "first-guess"
    r = await b.build(1000, "anything", key="a")
    assert r.method == "calibrated" and r.key == "a"


def test_template_hash_changes_with_template(monkeypatch):
    h = prompts.template_sha256()
    monkeypatch.setattr(prompts, "INSTRUCTION", "Continue this code:\n\n")
    assert prompts.template_sha256() != h


async def test_target_below_the_header_is_visible_not_hidden():
    """The unique header line + instruction are ~60 bytes: a smaller target cannot be met, and the
    prompt says so through estimated_tokens (the engine's 1 % check then fails the row loudly)."""
    b = PromptBuilder()

    async def count(text: str) -> int:
        return byte_level(text)

    p = await b.build(16, "j/c/16/0", count)
    assert p.body_chars == 0 and p.estimated_tokens > 16


async def test_local_tokenizer_counter(tmp_path):
    """A tokenizer.json written here with `tokenizers` (the same file format MLX model dirs carry)."""
    tokenizers = pytest.importorskip("tokenizers")
    assert local_tokenizer_counter(str(tmp_path)) is None  # no tokenizer.json
    vocab = {"[UNK]": 0, "def": 1, "return": 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    count = local_tokenizer_counter(str(tmp_path))
    assert count is not None
    assert await count("def f ( ) : return 1") == 7
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert local_tokenizer_counter(str(tmp_path)) is None
    b = PromptBuilder()
    p = await b.build(2048, "j/t/2048/0", local_tokenizer_counter(str(tmp_path)) or None)
    assert p.method == "first-guess"  # unreadable tokenizer: calibration path
