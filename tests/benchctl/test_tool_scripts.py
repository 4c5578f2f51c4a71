"""The scripted tool-calling models (benchctl/tinymodels/toolscript.py): distinct pieces spell each variant's
`<tool_call>` text, the written weights' greedy steps follow it, and a bad variant is refused.

No server here (the greedy step is recomputed from the MLX weights with numpy, as test_scripted_models.py
does); tests/engine/test_tool_parsers_real.py runs the variants on the real servers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchctl.tinymodels import scripted, toolscript
from benchctl.tinymodels.script import NEWLINE, PARAGRAPH, detokenize
from benchd.errors import BenchdError


def test_segment_spells_the_text_with_distinct_pieces() -> None:
    for name, variant in toolscript.VARIANTS.items():
        pieces = toolscript.segment(variant.text)
        assert detokenize(toolscript.tool_vocab(), toolscript.answer_ids(name)) == variant.text
        assert len(set(pieces)) == len(pieces), name
        assert NEWLINE not in pieces and PARAGRAPH not in pieces  # the prompt's last tokens stay unscripted
    parallel = toolscript.VARIANTS["parallel"].text
    assert parallel.count("<tool_call>") == 2 and parallel.count('"') > 10  # repeated text, distinct ids
    repeated = toolscript.segment('"a" "a" "a"')
    assert "".join(repeated) == '"a"▁"a"▁"a"' and len(set(repeated)) == len(repeated)


def test_variant_texts_are_what_they_claim() -> None:
    def body(text: str) -> list[str]:
        return [part.split("</tool_call>")[0].strip() for part in text.split("<tool_call>")[1:]]

    v = toolscript.VARIANTS
    assert json.loads(body(v["valid"].text)[0]) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    with pytest.raises(json.JSONDecodeError):
        json.loads(body(v["bad_json"].text)[0])
    assert json.loads(body(v["unknown_function"].text)[0])["name"] not in {f["name"] for f in v["unknown_function"].functions}
    code = json.loads(body(v["code_edit"].text)[0])["arguments"]["text"]
    assert code == toolscript.CODE_EDIT_TEXT and all(c in code for c in ('"', "'", "\\", "\n"))
    assert [json.loads(b)["arguments"]["city"] for b in body(v["parallel"].text)] == ["Paris", "Oslo"]


@pytest.mark.parametrize("variant", ["bad_json", "parallel"])
def test_greedy_steps_spell_the_call(variant: str, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    m = scripted.ensure_tool_scripted(tmp_path, variant)
    w = {k: v.astype(np.float32) for k, v in load_file(str(m.mlx_dir / "model.safetensors")).items()}
    embed, head = w["model.embed_tokens.weight"], w["lm_head.weight"]
    h = embed / np.sqrt((embed.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    best = (h @ head.T).argmax(axis=1)
    s = m.script
    out, tok = [], int(best[s.paragraph_id])  # thinking off: the prompt ends in `\n\n`
    while tok != s.eos_id and len(out) < 100:
        out.append(tok)
        tok = int(best[tok])
    assert detokenize(toolscript.tool_vocab(), out) == toolscript.VARIANTS[variant].text == m.answer_text
    assert scripted.ensure_tool_scripted(tmp_path, variant).root == m.root  # cached, keyed by variant


def test_unknown_variant_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(BenchdError) as err:
        scripted.ensure_tool_scripted(tmp_path, "nope")
    assert err.value.field == "variant" and "valid" in str(err.value)
