"""The scripted tiny models: the weights follow the script, drafts change a known share, bad sizes exit 2.

No server here: the greedy step is recomputed from the written MLX weights with numpy (embedding ->
RMSNorm -> output matrix, which is all a bigram model's logits depend on; the blocks' output projections
are checked to be zero). tests/contract/test_contract_scripted_real.py runs the models on the real servers.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchctl.tinymodels import script as script_mod
from benchctl.tinymodels import scripted
from benchd.errors import BenchdError

BENCHCTL = [sys.executable, "-m", "benchctl"]


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*")) if p.is_file() and p.name != "manifest.json"
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> scripted.ScriptedModels:
    return scripted.generate_scripted(tmp_path_factory.mktemp("scripted") / "m", 12, 5, seed=3)


def _gguf_weights(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}

    def read(name: str) -> np.ndarray:
        t = tensors[name]
        return np.asarray(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])

    return read("token_embd.weight"), read("output.weight")


def _logits(embed: np.ndarray, head: np.ndarray) -> np.ndarray:
    """Logits after every token: RMSNorm (weight 1) of its embedding times the output matrix."""
    h = embed / np.sqrt((embed.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    return h @ head.T


def test_same_seed_same_bytes_other_seed_other_script(models: scripted.ScriptedModels, tmp_path: Path) -> None:
    again = scripted.generate_scripted(tmp_path / "again", 12, 5, seed=3)
    assert _digests(again.root) == _digests(models.root) and again.script == models.script
    other = scripted.generate_scripted(tmp_path / "other", 12, 5, seed=4)
    assert other.script.reasoning_ids != models.script.reasoning_ids
    assert _digests(other.root)["mlx/tokenizer.json"] == _digests(models.root)["mlx/tokenizer.json"]


def test_greedy_steps_follow_the_script(models: scripted.ScriptedModels) -> None:
    from safetensors.numpy import load_file

    w = {k: v.astype(np.float32) for k, v in load_file(str(models.mlx_dir / "model.safetensors")).items()}
    for name, arr in w.items():  # the residual stream is the embedding: nothing written back by the blocks
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            assert not arr.any(), name
    logits = _logits(w["model.embed_tokens.weight"], w["lm_head.weight"])
    best = logits.argmax(axis=1)
    s = models.script
    chain = s.chain()
    assert len(chain) == models.generated_tokens() == 12 + 5 + 3
    assert [int(best[t]) for t in chain[:-1]] == chain[1:]
    assert best[s.paragraph_id] == s.answer_ids[0]  # thinking off: the prompt's `\n\n` leads to the answer
    assert best[s.think_close_id] == s.answer_ids[0]
    unscripted = np.setdiff1d(np.arange(models.n_vocab), [*chain, s.paragraph_id])
    assert (best[unscripted] == s.think_open_id).all()  # any other last prompt token starts the script
    runner_up = np.argsort(logits[s.answer_ids[-1]])[-2]
    assert runner_up == s.answer_ids[0]  # EOS suppressed: the answer repeats
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0] > 10).all()  # clear margins, in f16 too


def test_drafts_change_a_known_nested_share(models: scripted.ScriptedModels) -> None:
    assert sorted(models.drafts) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert models.draft_identical.read_bytes() == models.target.read_bytes()
    chain = models.script.chain()
    wrong_before: set[int] = set()
    for share in sorted(models.drafts):
        best = _logits(*_gguf_weights(models.drafts[share])).argmax(axis=1)
        wrong = {t for t, nxt in itertools.pairwise(chain) if best[t] != nxt}
        assert len(wrong) == round(share * (len(chain) - 1)), share
        assert wrong_before <= wrong  # a larger share changes a superset: acceptance can only fall
        assert all(best[t] not in chain for t in wrong)
        wrong_before = wrong
    manifest = json.loads((models.root / "manifest.json").read_text())
    assert {float(k) for k in manifest["changed_transitions"]} == {0.25, 0.5, 0.75, 1.0}


def test_gguf_and_mlx_metadata_real_runtimes_read(models: scripted.ScriptedModels) -> None:
    import gguf

    fields = gguf.GGUFReader(models.target).fields
    tokens = list(fields["tokenizer.ggml.tokens"].contents())
    types = list(fields["tokenizer.ggml.token_type"].contents())
    s = models.script
    assert tokens[s.think_open_id] == "<think>" and tokens[s.think_close_id] == "</think>"
    assert types[s.think_open_id] == types[s.think_close_id] == gguf.TokenType.USER_DEFINED
    assert fields["tokenizer.ggml.eos_token_id"].contents() == s.eos_id == 4
    template = str(fields["tokenizer.chat_template"].contents())
    assert "enable_thinking" in template and "reasoning_content" in template
    assert template == (models.mlx_dir / "chat_template.jinja").read_text()
    tok = json.loads((models.mlx_dir / "tokenizer.json").read_text())
    added = {a["content"]: a for a in tok["added_tokens"]}
    assert added["<think>"]["special"] is False and added["</think>"]["special"] is False  # mlx_vlm skips specials
    assert added["<|im_end|>"]["special"] is True
    assert json.loads((models.mlx_dir / "generation_config.json").read_text())["eos_token_id"] == [4, 2]
    assert json.loads((models.mlx_dir / "config.json").read_text())["eos_token_id"] == 4
    assert json.loads((models.mlx_dir / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"
    assert models.eos_ids == (4, 2)


def test_prompt_last_token_decides_thinking(models: scripted.ScriptedModels) -> None:
    """HF tokenizer (what mlx_lm/mlx_vlm use): thinking on ends the prompt in `\\n` (unscripted -> <think>),
    Qwen3's thinking-off prompt in `\\n\\n` (-> the answer). llama.cpp's side is checked on the real server."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(models.mlx_dir / "tokenizer.json"))
    head = "<|im_start|>user\nWhy is the sky blue? def return\n<|im_end|>\n<|im_start|>assistant\n"
    on = tok.encode(head, add_special_tokens=False).ids
    off = tok.encode(head + "<think>\n\n</think>\n\n", add_special_tokens=False).ids
    vocab = script_mod.scripted_vocab()
    assert vocab.tokens[on[-1]] == "\n" and on[-1] not in models.script.chain()
    assert off[-1] == models.script.paragraph_id
    assert models.script.think_open_id in off and models.script.think_close_id in off


def test_texts_match_ids(models: scripted.ScriptedModels) -> None:
    vocab = script_mod.scripted_vocab()
    assert models.reasoning_text == "".join(" " + vocab.tokens[i][1:] for i in models.script.reasoning_ids)
    assert len(models.reasoning_text.split()) == 12 and len(models.answer_text.split()) == 5


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"reasoning_tokens": -1}, "reasoning_tokens"),
    ({"answer_tokens": 0}, "answer_tokens"),
    ({"reasoning_tokens": 2000}, "reasoning_tokens"),  # more than the vocabulary's distinct word pieces
    ({"n_ctx": 60}, "n_ctx"),
    ({"reasoning_tokens": 200, "n_ctx": 250}, "n_ctx"),  # script + prompt longer than the context
    ({"seed": -2}, "seed"),
    ({"size": "huge"}, "size"),
])
def test_impossible_sizes_name_the_field(tmp_path: Path, kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(BenchdError) as err:
        scripted.ensure_scripted(tmp_path, **kwargs)
    assert err.value.field == field and err.value.code in ("bad_size", "bad_seed")
    assert not (tmp_path / "models").exists()


def test_ensure_is_idempotent(tmp_path: Path) -> None:
    first = scripted.ensure_scripted(tmp_path, 4, 2, seed=1)
    assert first.root == tmp_path / "models" / f"scripted-small-k4-a2-ctx32768-seed1-v{scripted.SCRIPTED_VERSION}"
    mtime = first.target.stat().st_mtime_ns
    assert scripted.ensure_scripted(tmp_path, 4, 2, seed=1) == first
    assert first.target.stat().st_mtime_ns == mtime


def test_cli_scripted(tmp_path: Path) -> None:
    out = subprocess.run([*BENCHCTL, "models", "tiny", "--kind", "scripted", "--reasoning-tokens", "6",
                          "--answer-tokens", "3", "--out", str(tmp_path / "m"), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout)
    assert facts["kind"] == "scripted" and facts["reasoning_tokens"] == 6 and facts["eos_ids"] == [4, 2]
    assert Path(facts["target"]).is_file() and Path(facts["drafts"]["0.5"]).is_file()
    assert len(facts["answer_text"].split()) == 3
    for args, field in ((["--reasoning-tokens", "-3"], "reasoning_tokens"),
                        (["--answer-tokens", "900"], "answer_tokens"),
                        (["--n-ctx", "10"], "n_ctx")):
        bad = subprocess.run([*BENCHCTL, "models", "tiny", "--kind", "scripted", *args, "--out", str(tmp_path / "n")],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
        assert f"(field {field})" in bad.stderr
    mixed = subprocess.run([*BENCHCTL, "models", "tiny", "--answer-tokens", "3", "--out", str(tmp_path / "r")],
                           capture_output=True, text=True, timeout=60)
    assert mixed.returncode == 2 and "--kind scripted only" in mixed.stderr


def test_medium_target_small_drafts(tmp_path: Path) -> None:
    """A medium target (slow enough to time) follows the same script; its drafts keep the small shape."""
    import gguf

    m = scripted.generate_scripted(tmp_path / "m", 6, 3, seed=0, size="medium")
    assert m.size == "medium" and 10_000_000 < m.n_params < 60_000_000

    def width(path: Path) -> int:
        return int(gguf.GGUFReader(path).fields["llama.embedding_length"].contents())

    assert width(m.target) == 512 and all(width(d) == 64 for d in m.drafts.values())
    best = _logits(*_gguf_weights(m.target)).argmax(axis=1)
    chain = m.script.chain()
    assert [int(best[t]) for t in chain[:-1]] == chain[1:]
    small = scripted.generate_scripted(tmp_path / "s", 6, 3, seed=0)
    assert small.script == m.script  # the script depends on the seed only
