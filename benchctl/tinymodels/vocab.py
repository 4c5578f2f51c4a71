"""The tiny models' vocabulary: a Llama-2-style SPM/BPE vocabulary with byte fallback and ChatML tokens.

Layout of the ids (fixed; the output-projection code in gguf_model.py relies on `suppressed_ids`):
0 `<unk>`, 1 `<s>` (BOS), 2 `</s>`, 3 `<|im_start|>`, 4 `<|im_end|>` (EOS/EOT, ChatML), 5..260 the bytes,
then the 94 printable ASCII characters and `▁`, then the merged pieces in merge order.

Reasons and facts: docs/testing.md#the-tiny-vocabulary.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from benchctl.tinymodels import corpus

SPACE = "\u2581"  # "▁", SentencePiece's visible space
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
UNK_ID, BOS_ID, PAD_ID, IM_START_ID, EOS_ID = 0, 1, 2, 3, 4
BYTE_BASE = len(SPECIALS)
#: Total vocabulary size aimed at (the trainer may stop a little short on a small corpus).
TARGET_SIZE = 1024
#: Runs of spaces (code indentation) as pieces of their own, merged last so words keep their "▁".
INDENT_MERGES = [(SPACE, SPACE), (SPACE * 2, SPACE * 2), (SPACE * 4, SPACE * 4)]

#: gguf.TokenType values (kept literal so this module does not import gguf).
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_BYTE = 1, 2, 3, 4, 6

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class Vocab:
    tokens: list[str]
    scores: list[float]
    types: list[int]
    merges: list[tuple[str, str]]

    @property
    def size(self) -> int:
        return len(self.tokens)

    def suppressed_ids(self) -> list[int]:
        """Ids a random model must never emit: control tokens, EOS, and anything that is not plain ASCII.

        Suppressing them in the output projection makes generation run to max_tokens with valid text.
        Byte tokens are allowed only for newline; pieces only if they are printable ASCII (plus `▁`).
        """
        out: list[int] = []
        for i, (tok, typ) in enumerate(zip(self.tokens, self.types, strict=True)):
            if typ == TT_BYTE:
                if i - BYTE_BASE != 0x0A:
                    out.append(i)
            elif typ != TT_NORMAL:
                out.append(i)
            elif not all(c == SPACE or 0x20 < ord(c) < 0x7F for c in tok):
                out.append(i)
        return out

    def hf_tokenizer_json(self) -> dict[str, Any]:
        """A Llama-2-style `tokenizer.json` (BPE + byte fallback) for `tokenizers`/`transformers`."""
        # Control tokens are special; user-defined ones (the scripted models' think tags) are added tokens
        # that are NOT special, like Qwen3's `<think>`: mlx_vlm skips special tokens when detokenizing.
        added = [
            {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": typ != TT_USER_DEFINED}
            for i, (t, typ) in enumerate(zip(self.tokens, self.types, strict=True))
            if typ in (TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED)
        ]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": SPACE},
                {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
            ]},
            "pre_tokenizer": None,
            "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ]},
            "model": {
                "type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                "vocab": {t: i for i, t in enumerate(self.tokens)},
                "merges": [[a, b] for a, b in self.merges],
            },
        }

    def hf_tokenizer_config(self) -> dict[str, Any]:
        return {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "<|im_end|>",
            "unk_token": "<unk>",
            "pad_token": "</s>",
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 32768,
            "chat_template": CHAT_TEMPLATE,
        }

    def hf_special_tokens_map(self) -> dict[str, str]:
        return {"bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>", "pad_token": "</s>"}


def _training_lines() -> list[str]:
    """The corpus as lines; the extra words repeated so they become whole pieces early."""
    lines = [ln for ln in (corpus.PROSE + corpus.CODE).splitlines() if ln.strip()]
    lines += [" ".join(corpus.EXTRA_WORDS)] * 8
    return lines


@functools.lru_cache(maxsize=1)
def build_vocab() -> Vocab:
    """Train the merges (deterministic: fixed text, `tokenizers` breaks count ties by pair order)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    alphabet = [chr(c) for c in range(0x21, 0x7F)] + [SPACE]
    n_fixed = len(SPECIALS) + 256 + len(alphabet) + len(INDENT_MERGES)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_SIZE - n_fixed + len(alphabet),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
    )
    tok.train_from_iterator(_training_lines(), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    learnt = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    merges: list[tuple[str, str]] = [(a, b) for a, b in learnt] + INDENT_MERGES

    tokens = list(SPECIALS)
    types = [TT_UNKNOWN] + [TT_CONTROL] * (len(SPECIALS) - 1)
    scores = [0.0] * len(SPECIALS)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TT_BYTE] * 256
    scores += [0.0] * 256
    tokens += alphabet
    types += [TT_NORMAL] * len(alphabet)
    scores += [0.0] * len(alphabet)
    seen = set(tokens)
    for rank, (a, b) in enumerate(merges):
        piece = a + b
        if piece in seen:
            continue
        seen.add(piece)
        tokens.append(piece)
        types.append(TT_NORMAL)
        scores.append(-float(rank + 1))
    return Vocab(tokens=tokens, scores=scores, types=types, merges=merges)
