"""The script a scripted tiny model follows, its vocabulary and its chat template (no weights here).

Reasons and facts: docs/testing.md#the-thinking-script.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, replace
from importlib import resources

import numpy as np

from benchctl.tinymodels.vocab import EOS_ID, PAD_ID, SPACE, TT_NORMAL, TT_USER_DEFINED, Vocab, build_vocab

THINK_OPEN, THINK_CLOSE, NEWLINE, PARAGRAPH = "<think>", "</think>", "\n", "\n\n"
#: Tokens generated besides the reasoning and the answer: `<think>`, `</think>`, EOS.
FRAME_TOKENS = 3
#: Room a chat prompt needs besides the script (the template's frame plus a short user message).
PROMPT_ROOM = 64
#: The EOS ids a runtime should know (Qwen3 lists `<|im_end|>` and `<|endoftext|>`; here `</s>` plays the
#: second). The script ends with the first.
EOS_IDS = (EOS_ID, PAD_ID)


@functools.lru_cache(maxsize=1)
def chat_template() -> str:
    """Qwen3-0.6B's chat template, verbatim (copied from llama.cpp's `models/templates/`)."""
    return resources.files("benchctl.tinymodels").joinpath("qwen3_chat_template.jinja").read_text()


@functools.lru_cache(maxsize=1)
def scripted_vocab() -> Vocab:
    """The tiny vocabulary plus `<think>`, `</think>` (user-defined) and the pieces `\\n`, `\\n\\n`.

    `\\n` must be a piece (not only the byte token) for the `\\n\\n` merge to exist in the HF BPE model;
    llama.cpp's SPM tokenizer then picks the pieces too (a symbol found in the vocabulary wins over bytes).
    """
    base = build_vocab()
    low = min(base.scores) - 1.0
    return replace(
        base,
        tokens=[*base.tokens, THINK_OPEN, THINK_CLOSE, NEWLINE, PARAGRAPH],
        scores=[*base.scores, 0.0, 0.0, low, low - 1.0],
        types=[*base.types, TT_USER_DEFINED, TT_USER_DEFINED, TT_NORMAL, TT_NORMAL],
        merges=[*base.merges, (NEWLINE, NEWLINE)],
    )


def word_piece_ids(vocab: Vocab) -> list[int]:
    """Pieces a script may use: one whole ASCII word with its leading `▁` (readable, one chunk each)."""
    return [
        i for i, (tok, typ) in enumerate(zip(vocab.tokens, vocab.types, strict=True))
        if typ == TT_NORMAL and tok.startswith(SPACE) and len(tok) >= 3 and tok[1:].isascii() and tok[1:].isalpha()
    ]


@dataclass(frozen=True)
class Script:
    """Token ids of one script. `successor` maps each scripted token to the next; others go to `<think>`."""

    reasoning_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]
    think_open_id: int
    think_close_id: int
    paragraph_id: int
    eos_id: int

    def chain(self) -> list[int]:
        """Every token the model generates with thinking on, EOS included."""
        return [self.think_open_id, *self.reasoning_ids, self.think_close_id, *self.answer_ids, self.eos_id]

    def transitions(self) -> list[tuple[int, int]]:
        """(token, next token) for every step of the chain, in order: the transitions a draft may change."""
        chain = self.chain()
        return list(itertools.pairwise(chain))

    def successor(self) -> dict[int, int]:
        """The best next token of every scripted token (`\\n\\n` closes a prompt with thinking off)."""
        return {**dict(self.transitions()), self.paragraph_id: self.answer_ids[0]}


def check_sizes(reasoning_tokens: int, answer_tokens: int, n_ctx: int) -> None:
    """Raise BenchdError naming the field when the script cannot be built or cannot fit its context."""
    from benchd.errors import BenchdError

    for field, value, low in (("reasoning_tokens", reasoning_tokens, 0), ("answer_tokens", answer_tokens, 1),
                              ("n_ctx", n_ctx, PROMPT_ROOM + FRAME_TOKENS + 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise BenchdError("bad_size", f"{field} must be an integer >= {low}, got {value!r}", field)
    available = len(word_piece_ids(scripted_vocab()))
    if reasoning_tokens + answer_tokens > available:
        raise BenchdError(
            "bad_size",
            f"reasoning_tokens + answer_tokens = {reasoning_tokens + answer_tokens} exceeds the {available} "
            "distinct word pieces of the vocabulary (every scripted token must be distinct)",
            "reasoning_tokens" if reasoning_tokens >= answer_tokens else "answer_tokens",
        )
    length = reasoning_tokens + answer_tokens + FRAME_TOKENS
    if length + PROMPT_ROOM > n_ctx:
        raise BenchdError(
            "bad_size",
            f"the script ({length} tokens) plus a {PROMPT_ROOM}-token prompt does not fit n_ctx={n_ctx}",
            "n_ctx",
        )


def make_script(reasoning_tokens: int, answer_tokens: int, seed: int) -> Script:
    """A script of distinct word pieces drawn from `numpy.random.default_rng(seed)` (same seed, same script)."""
    vocab = scripted_vocab()
    pieces = np.array(word_piece_ids(vocab))
    picked = [int(i) for i in np.random.default_rng(seed).permutation(pieces)[: reasoning_tokens + answer_tokens]]
    index = {tok: i for i, tok in enumerate(vocab.tokens)}
    return Script(
        reasoning_ids=tuple(picked[:reasoning_tokens]), answer_ids=tuple(picked[reasoning_tokens:]),
        think_open_id=index[THINK_OPEN], think_close_id=index[THINK_CLOSE], paragraph_id=index[PARAGRAPH],
        eos_id=EOS_ID,
    )


def changed_transitions(script: Script, share: float, seed: int) -> dict[int, int]:
    """{token: wrong next token} for `round(share x transitions)` of the script's transitions.

    One seeded permutation serves every share, so a larger share changes a superset of a smaller one's
    transitions: a draft's acceptance can only fall as the share grows. A changed transition points at a
    word piece outside the script (never the right token).
    """
    steps = script.transitions()
    n = round(share * len(steps))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(steps))
    scripted = set(script.chain())
    outside = [i for i in word_piece_ids(scripted_vocab()) if i not in scripted]
    wrong = rng.choice(np.array(outside), size=len(steps))
    return {steps[int(k)][0]: int(wrong[int(k)]) for k in order[:n]}


def detokenize(vocab: Vocab, ids: list[int] | tuple[int, ...]) -> str:
    """The text of word pieces (what a runtime streams for them): `▁` becomes a space."""
    return "".join(vocab.tokens[i] for i in ids).replace(SPACE, " ")
