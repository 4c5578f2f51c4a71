"""Scripted tiny models: greedy decoding follows a fixed thinking script (see `script.py`), GGUF and MLX.

`ensure_scripted(cache_dir, reasoning_tokens, answer_tokens, seed)` returns a `ScriptedModels` set,
generated on first use under `<cache>/models/scripted-<size>-k<K>-a<A>-ctx<N>-seed<S>-v<SCRIPTED_VERSION>/`:
- `target.gguf` (f16) and `mlx/` (the same weights; loads in mlx_lm.server and mlx_vlm.server);
- drafts (f16 GGUF, same vocabulary, always the small shape) of the same script with a share of its transitions changed:
  `draft-identical.gguf` (share 0; a byte copy of a small target), `draft-changed-25/50/75.gguf`, `draft-unrelated.gguf`
  (share 1: every transition wrong). A larger share changes a superset of the smaller one's transitions;
- `manifest.json`: the script's facts (token ids, texts, EOS ids, changed transitions) and the usual keys.

Reasons and facts: docs/testing.md#scripted-models.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchctl.tinymodels.script import (
    EOS_IDS,
    Script,
    changed_transitions,
    chat_template,
    check_sizes,
    detokenize,
    make_script,
    scripted_vocab,
)
from benchctl.tinymodels.weights import SIZES, Arch, Weights, n_params, random_weights

#: Bump when anything that changes the scripted sets' bytes changes (script, vocab, weights, writers).
SCRIPTED_VERSION = 1
DEFAULT_REASONING_TOKENS = 24
DEFAULT_ANSWER_TOKENS = 8
DEFAULT_N_CTX = 32768
#: Shares of changed transitions of the partial drafts (0 and 1 are always there: identical, unrelated).
DRAFT_SHARES = (0.25, 0.5, 0.75)
#: Output weights: unscripted token -> `<think>`; a scripted token -> its successor; runner-up after the answer.
W_DEFAULT, W_NEXT, W_RUNNER_UP = 4.0, 12.0, 8.0
_DRAFT_SEED_OFFSET = 104_729


@dataclass(frozen=True)
class ScriptedModels:
    """One scripted set: paths and the facts a test needs (`script` has the token ids)."""

    root: Path
    size: str
    seed: int
    reasoning_tokens: int
    answer_tokens: int
    n_ctx: int
    target: Path
    mlx_dir: Path
    drafts: dict[float, Path]
    script: Script
    eos_ids: tuple[int, ...]
    reasoning_text: str
    answer_text: str
    n_params: int
    n_vocab: int

    @property
    def draft_identical(self) -> Path:
        return self.drafts[0.0]

    @property
    def draft_unrelated(self) -> Path:
        return self.drafts[1.0]

    def generated_tokens(self, thinking: bool = True) -> int:
        """Tokens generated before stopping (EOS included; with thinking, the two tags and K)."""
        return (self.reasoning_tokens + 2 if thinking else 0) + self.answer_tokens + 1


def scripted_dir_name(size: str, reasoning_tokens: int, answer_tokens: int, seed: int,
                      n_ctx: int = DEFAULT_N_CTX) -> str:
    return f"scripted-{size}-k{reasoning_tokens}-a{answer_tokens}-ctx{n_ctx}-seed{seed}-v{SCRIPTED_VERSION}"


def _arch(script: Script, size: str, n_ctx: int) -> Arch:
    """The random sets' shape for `size`, widened when the script needs more dimensions (one for
    dimension 0 plus one per scripted token, rounded up to 32 so every head count divides it)."""
    base = SIZES[size]
    dims = 1 + len(script.successor())
    return replace(base, n_embd=max(base.n_embd, -(-dims // 32) * 32), n_ctx=n_ctx)


def bigram_weights(arch: Arch, n_vocab: int, script: Script, seed: int,
                   changed: dict[int, int] | None = None) -> Weights:
    """HF-layout weights whose greedy decoding follows `script` (with `changed` successors replaced)."""
    w = random_weights(arch, n_vocab, seed)
    for name, arr in w.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            arr[:] = 0.0
    successor = {**script.successor(), **(changed or {})}
    embed = np.zeros((n_vocab, arch.n_embd), dtype=np.float32)
    embed[:, 0] = 1.0
    head = np.zeros((n_vocab, arch.n_embd), dtype=np.float32)
    head[script.think_open_id, 0] = W_DEFAULT
    for dim, (token, nxt) in enumerate(sorted(successor.items()), start=1):
        embed[token, dim] = 1.0
        head[nxt, dim] = W_NEXT
        if token == script.answer_ids[-1]:
            head[script.answer_ids[0], dim] = W_RUNNER_UP
    w["model.embed_tokens.weight"] = embed
    w["lm_head.weight"] = head
    return w


def _share_name(share: float) -> str:
    return {0.0: "draft-identical", 1.0: "draft-unrelated"}.get(share, f"draft-changed-{round(share * 100)}")


def _script_of(s: dict[str, Any]) -> Script:
    """The manifest's `script` record as a `Script`."""
    return Script(reasoning_ids=tuple(s["reasoning_ids"]), answer_ids=tuple(s["answer_ids"]),
                  think_open_id=s["think_open_id"], think_close_id=s["think_close_id"],
                  paragraph_id=s["paragraph_id"], eos_id=s["eos_id"])


def load_scripted(root: Path) -> ScriptedModels:
    """The scripted set in `root` (must be complete: its manifest is written last)."""
    m: dict[str, Any] = json.loads((root / "manifest.json").read_text())
    s = m["script"]
    script = _script_of(s)
    return ScriptedModels(
        root=root, size=m["size"], seed=m["seed"], reasoning_tokens=m["reasoning_tokens"], answer_tokens=m["answer_tokens"],
        n_ctx=m["n_ctx"], target=root / m["target"], mlx_dir=root / "mlx",
        drafts={float(k): root / v for k, v in m["drafts"].items()}, script=script,
        eos_ids=tuple(s["eos_ids"]), reasoning_text=s["reasoning_text"], answer_text=s["answer_text"],
        n_params=m["n_params"], n_vocab=m["n_vocab"],
    )


def _write_all(tmp: Path, size: str, reasoning_tokens: int, answer_tokens: int, seed: int, n_ctx: int,
               log: Callable[[str], None]) -> None:
    from benchctl.tinymodels import gguf_model, mlx_model

    voc = scripted_vocab()
    script = make_script(reasoning_tokens, answer_tokens, seed)
    arch = _arch(script, size, n_ctx)
    draft_arch = _arch(script, "small", n_ctx)  # drafts stay small (cheaper than the target, as in real use)
    template = chat_template()
    name = f"benchd-scripted-{size}-k{reasoning_tokens}-a{answer_tokens}-seed{seed}"
    target = bigram_weights(arch, voc.size, script, seed)
    log("writing target.gguf")
    gguf_model.write_gguf(tmp / "target.gguf", target, arch, voc, "f16", name, template)
    drafts: dict[str, str] = {"0.0": "draft-identical.gguf"}
    changed_by_share: dict[str, list[list[int]]] = {}
    for share in (0.0, *DRAFT_SHARES, 1.0):
        fname = _share_name(share) + ".gguf"
        if share == 0.0 and draft_arch == arch:
            shutil.copyfile(tmp / "target.gguf", tmp / fname)
            continue
        changed = changed_transitions(script, share, seed + _DRAFT_SEED_OFFSET)
        log(f"writing {fname}")
        draft = bigram_weights(draft_arch, voc.size, script, seed, changed)
        gguf_model.write_gguf(tmp / fname, draft, draft_arch, voc, "f16", f"{name}-{_share_name(share)}", template)
        drafts[str(share)] = fname
        changed_by_share[str(share)] = [[k, v] for k, v in sorted(changed.items())]
    log("writing mlx/")
    mlx_model.write_mlx_dir(tmp / "mlx", target, arch, voc, template, EOS_IDS)
    manifest = {
        "format_version": SCRIPTED_VERSION,
        "kind": "scripted",
        "size": size,
        "seed": seed,
        "reasoning_tokens": reasoning_tokens,
        "answer_tokens": answer_tokens,
        "n_ctx": n_ctx,
        "n_params": n_params(target),
        "n_vocab": voc.size,
        "vocab_sha256": hashlib.sha256(json.dumps(voc.tokens).encode()).hexdigest(),
        "arch": {k: getattr(arch, k) for k in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_ctx")},
        "draft_arch": {k: getattr(draft_arch, k) for k in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff")},
        "target": "target.gguf",
        "drafts": drafts,
        "changed_transitions": changed_by_share,
        "script": {
            "think_open_id": script.think_open_id, "think_close_id": script.think_close_id,
            "paragraph_id": script.paragraph_id, "eos_id": script.eos_id, "eos_ids": list(EOS_IDS),
            "reasoning_ids": list(script.reasoning_ids), "answer_ids": list(script.answer_ids),
            "reasoning_text": detokenize(voc, script.reasoning_ids),
            "answer_text": detokenize(voc, script.answer_ids),
        },
        "files": {p.name: p.stat().st_size for p in sorted(tmp.glob("*.gguf"))},
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _check(size: str, reasoning_tokens: int, answer_tokens: int, seed: int, n_ctx: int) -> None:
    from benchctl.tinymodels import check_args

    check_args(size, seed)
    check_sizes(reasoning_tokens, answer_tokens, n_ctx)


def generate_scripted(out: Path, reasoning_tokens: int = DEFAULT_REASONING_TOKENS,
                      answer_tokens: int = DEFAULT_ANSWER_TOKENS, seed: int = 0, n_ctx: int = DEFAULT_N_CTX,
                      log: Callable[[str], None] | None = None, size: str = "small") -> ScriptedModels:
    """Write a scripted set to `out` (created; must not exist or be empty), atomically."""
    from benchctl.tinymodels import publish

    _check(size, reasoning_tokens, answer_tokens, seed, n_ctx)
    out = Path(out).expanduser().absolute()
    publish(out, lambda tmp: _write_all(tmp, size, reasoning_tokens, answer_tokens, seed, n_ctx,
                                        log or (lambda _m: None)))
    return load_scripted(out)


def ensure_scripted(cache_dir: Path, reasoning_tokens: int = DEFAULT_REASONING_TOKENS,
                    answer_tokens: int = DEFAULT_ANSWER_TOKENS, seed: int = 0, n_ctx: int = DEFAULT_N_CTX,
                    log: Callable[[str], None] | None = None, size: str = "small") -> ScriptedModels:
    """The cached scripted set for these sizes and seed, generated on first use (idempotent).

    `size` "small" (64-dim, 2 layers: thousands of tok/s) or "medium" (512-dim, 8 layers: a few hundred,
    so stream windows last long enough to time); the drafts are small either way."""
    _check(size, reasoning_tokens, answer_tokens, seed, n_ctx)
    root = Path(cache_dir).expanduser().absolute() / "models" / scripted_dir_name(
        size, reasoning_tokens, answer_tokens, seed, n_ctx)
    if (root / "manifest.json").is_file():
        return load_scripted(root)
    return generate_scripted(root, reasoning_tokens, answer_tokens, seed, n_ctx, log, size)


# ------------------------------------------------------------------------------ tool-calling variants

#: Bump when anything that changes the tool sets' bytes changes (toolscript.py's texts or pieces included).
TOOL_SCRIPTED_VERSION = 1
TOOL_REASONING_TOKENS = 4
TOOL_N_CTX = 4096


@dataclass(frozen=True)
class ToolScriptedModels:
    """One tool-calling variant (see toolscript.py): the GGUF, the MLX dir and the script's facts."""

    root: Path
    variant: str
    seed: int
    target: Path
    mlx_dir: Path
    script: Script
    answer_text: str
    n_vocab: int


def tool_scripted_dir_name(variant: str, seed: int) -> str:
    return f"scripted-tools-{variant}-small-k{TOOL_REASONING_TOKENS}-ctx{TOOL_N_CTX}-seed{seed}-v{TOOL_SCRIPTED_VERSION}"


def tool_script(variant: str, seed: int) -> Script:
    """The variant's answer ids after `TOOL_REASONING_TOKENS` seeded word pieces outside the answer."""
    from benchctl.tinymodels import toolscript
    from benchctl.tinymodels.script import PARAGRAPH, THINK_CLOSE, THINK_OPEN, word_piece_ids

    voc = toolscript.tool_vocab()
    answer = toolscript.answer_ids(variant)
    pieces = np.array([i for i in word_piece_ids(voc) if i not in answer])
    reasoning = [int(i) for i in np.random.default_rng(seed).permutation(pieces)[:TOOL_REASONING_TOKENS]]
    index = {tok: i for i, tok in enumerate(voc.tokens)}
    return Script(reasoning_ids=tuple(reasoning), answer_ids=answer, think_open_id=index[THINK_OPEN],
                  think_close_id=index[THINK_CLOSE], paragraph_id=index[PARAGRAPH], eos_id=EOS_IDS[0])


def _load_tool(root: Path) -> ToolScriptedModels:
    m: dict[str, Any] = json.loads((root / "manifest.json").read_text())
    s = m["script"]
    script = _script_of(s)
    return ToolScriptedModels(root=root, variant=m["variant"], seed=m["seed"], target=root / m["target"],
                              mlx_dir=root / "mlx", script=script, answer_text=s["answer_text"], n_vocab=m["n_vocab"])


def _write_tool(tmp: Path, variant: str, seed: int, log: Callable[[str], None]) -> None:
    from benchctl.tinymodels import gguf_model, mlx_model, toolscript

    voc = toolscript.tool_vocab()
    script = tool_script(variant, seed)
    arch = _arch(script, "small", TOOL_N_CTX)
    weights = bigram_weights(arch, voc.size, script, seed)
    log(f"writing the {variant} tool-calling model")
    gguf_model.write_gguf(tmp / "target.gguf", weights, arch, voc, "f16", f"benchd-scripted-tools-{variant}-seed{seed}",
                          chat_template())
    mlx_model.write_mlx_dir(tmp / "mlx", weights, arch, voc, chat_template(), EOS_IDS)
    manifest = {
        "format_version": TOOL_SCRIPTED_VERSION,
        "kind": "scripted-tools",
        "variant": variant,
        "size": "small",
        "seed": seed,
        "n_ctx": TOOL_N_CTX,
        "n_params": n_params(weights),
        "n_vocab": voc.size,
        "vocab_sha256": hashlib.sha256(json.dumps(voc.tokens).encode()).hexdigest(),
        "target": "target.gguf",
        "script": {
            "think_open_id": script.think_open_id, "think_close_id": script.think_close_id,
            "paragraph_id": script.paragraph_id, "eos_id": script.eos_id, "eos_ids": list(EOS_IDS),
            "reasoning_ids": list(script.reasoning_ids), "answer_ids": list(script.answer_ids),
            "answer_pieces": [voc.tokens[i] for i in script.answer_ids],
            "answer_text": toolscript.VARIANTS[variant].text,
        },
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def ensure_tool_scripted(cache_dir: Path, variant: str, seed: int = 0,
                         log: Callable[[str], None] | None = None) -> ToolScriptedModels:
    """The cached tool-calling model of `variant` (a key of `toolscript.VARIANTS`), generated on first use
    under `<cache>/models/scripted-tools-<variant>-small-k<K>-ctx<N>-seed<S>-v<TOOL_SCRIPTED_VERSION>/`."""
    from benchctl.tinymodels import check_args, publish, toolscript
    from benchd.errors import BenchdError

    if variant not in toolscript.VARIANTS:
        raise BenchdError("bad_variant", f"unknown tool variant {variant!r}: use one of "
                          f"{', '.join(toolscript.VARIANTS)}", "variant")
    check_args("small", seed)
    root = Path(cache_dir).expanduser().absolute() / "models" / tool_scripted_dir_name(variant, seed)
    if not (root / "manifest.json").is_file():
        publish(root, lambda tmp: _write_tool(tmp, variant, seed, log or (lambda _m: None)))
    return _load_tool(root)
