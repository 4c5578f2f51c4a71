"""Scripted tool-calling models: the answer of the thinking script (script.py) is a Qwen3 `<tool_call>` block.

Reasons and facts: docs/testing.md#scripted-tool-calls.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from benchctl.tinymodels.script import NEWLINE, PARAGRAPH, THINK_CLOSE, THINK_OPEN, scripted_vocab
from benchctl.tinymodels.vocab import SPACE, TT_NORMAL, Vocab

_WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {"type": "dict", "properties": {"city": {"type": "string", "description": "The city name."}},
                   "required": ["city"]},
}
_EDIT = {
    "name": "edit_file",
    "description": "Replace the whole text of a file.",
    "parameters": {"type": "dict", "properties": {
        "path": {"type": "string", "description": "The file's path."},
        "text": {"type": "string", "description": "The new text of the file."}}, "required": ["path", "text"]},
}
#: The code-edit argument: quotes of both kinds, backslashes (a regex and an escaped quote) and newlines.
CODE_EDIT_TEXT = 'def q(s):\n    """Say "hi".\\n"""\n    return re.sub(r"\\\\d+", \'\\\\"\', s)\n'


def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@dataclass(frozen=True)
class ToolVariant:
    """One scripted tool-calling answer and how a BFCL-style task asks for it."""

    text: str
    category: str
    functions: tuple[dict[str, Any], ...]
    answer: tuple[dict[str, Any], ...]


_VALID = _call("get_weather", {"city": "Paris"})
VARIANTS: dict[str, ToolVariant] = {
    "valid": ToolVariant(_VALID, "simple_python", (_WEATHER,), ({"get_weather": {"city": ["Paris"]}},)),
    "bad_json": ToolVariant(_VALID.replace("}}\n</tool_call>", "}\n</tool_call>"), "simple_python",
                            (_WEATHER,), ({"get_weather": {"city": ["Paris"]}},)),
    "unknown_function": ToolVariant(_call("delete_files", {"city": "Paris"}), "simple_python", (_WEATHER,),
                                    ({"get_weather": {"city": ["Paris"]}},)),
    "code_edit": ToolVariant(_call("edit_file", {"path": "q.py", "text": CODE_EDIT_TEXT}), "simple_python",
                             (_EDIT,), ({"edit_file": {"path": ["q.py"], "text": [CODE_EDIT_TEXT]}},)),
    "parallel": ToolVariant(_VALID + "\n" + _call("get_weather", {"city": "Oslo"}), "parallel",
                            (_WEATHER,), ({"get_weather": {"city": ["Paris"]}}, {"get_weather": {"city": ["Oslo"]}})),
}

#: Where a cut may fall: around JSON punctuation runs, words and the tags.
_CHUNK = re.compile(r"</?tool_call>|\\.|[A-Za-z0-9_]+|\s+|[^\sA-Za-z0-9_\\]+")
_RESERVED = {NEWLINE, PARAGRAPH, THINK_OPEN, THINK_CLOSE, SPACE}


def _spm(text: str) -> str:
    return text.replace(" ", SPACE)


def segment(text: str, reserved: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """`text` as pieces (SPM form, `▁` for a space) of distinct strings that concatenate back to it.

    Natural chunks first; a chunk already used (or reserved) is joined to the next one until the join
    is new; a used tail is joined to the piece before it."""
    taken = set(_RESERVED) | set(reserved)
    chunks = [_spm(m) for m in _CHUNK.findall(text)]
    assert "".join(chunks) == _spm(text), "the chunk pattern must cover the text"
    pieces: list[str] = []
    i = 0
    while i < len(chunks):
        piece = chunks[i]
        i += 1
        while piece in taken and i < len(chunks):
            piece += chunks[i]
            i += 1
        while piece in taken:
            piece = pieces.pop() + piece
        pieces.append(piece)
        taken.add(piece)
    return pieces


@functools.lru_cache(maxsize=1)
def tool_vocab() -> Vocab:
    """The scripted vocabulary plus every piece the variants need that it lacks (NORMAL tokens, score
    below every learnt merge), in variant order: one vocabulary for all variants."""
    base = scripted_vocab()
    have = set(base.tokens)
    extra: list[str] = []
    for variant in VARIANTS.values():
        for piece in segment(variant.text):
            if piece not in have:
                have.add(piece)
                extra.append(piece)
    low = min(base.scores) - 2.0
    return replace(
        base,
        tokens=[*base.tokens, *extra],
        scores=[*base.scores, *[low - 1.0 - k for k in range(len(extra))]],
        types=[*base.types, *[TT_NORMAL] * len(extra)],
    )


def answer_ids(variant: str) -> tuple[int, ...]:
    """The token ids of a variant's answer in `tool_vocab()`."""
    index = {tok: i for i, tok in enumerate(tool_vocab().tokens)}
    ids = tuple(index[p] for p in segment(VARIANTS[variant].text))
    assert len(set(ids)) == len(ids), f"variant {variant}: a token repeats"
    return ids
