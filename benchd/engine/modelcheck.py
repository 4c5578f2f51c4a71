"""What a candidate's model files say before a night is spent on them (`benchctl validate`): a model of
the kind its runtime loads, and a trained context (GGUF `<arch>.context_length`, MLX `config.json`
`max_position_embeddings`) that holds every context plus `gen_tokens`. Problems are `(field, message)`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from benchd.files import open_regular, read_regular
from benchd.schemas import Candidate, Sweep

#: Runtimes that load a GGUF file, and those that load an MLX folder.
GGUF_RUNTIMES = ("llama-server",)
MLX_RUNTIMES = ("mlx_lm.server", "mlx_vlm.server")


def _is_gguf(path: str) -> bool:
    try:
        with open_regular(path) as f:  # a FIFO or a device is refused, never waited on
            return bool(f.read(4) == b"GGUF")
    except OSError:
        return False


def trained_context(path: str) -> tuple[int | None, str]:
    """(the model's trained context, where it was read) — None with why when the files do not say."""
    from benchd.servers.runtimes.vision import gguf_metadata

    if os.path.isdir(path):
        return _mlx_trained_context(path)
    try:
        meta = gguf_metadata(path)
    except (OSError, ValueError) as exc:
        return None, f"GGUF header unreadable: {exc}"
    arch = meta.get("general.architecture")
    key = f"{arch}.context_length"
    value = meta.get(key)
    if isinstance(value, int) and value > 0:
        return value, f"GGUF {key}"
    return None, f"GGUF header has no {key}"


def _mlx_trained_context(path: str) -> tuple[int | None, str]:
    try:
        config: Any = json.loads(read_regular(os.path.join(path, "config.json")))
    except (OSError, ValueError, RecursionError) as exc:
        return None, f"config.json unreadable: {exc}"
    for where, section in (("max_position_embeddings", config),
                           ("text_config.max_position_embeddings", (config or {}).get("text_config"))):
        value = section.get("max_position_embeddings") if isinstance(section, dict) else None
        if isinstance(value, int) and value > 0:
            return value, f"config.json {where}"
    return None, "config.json has no max_position_embeddings"


def kind_problem(cand: Candidate) -> tuple[str, str] | None:
    """The model is not of the kind the candidate's runtime loads: (field, why), or None."""
    model = cand.model
    if not model or not os.path.exists(model):
        return None
    if cand.runtime in GGUF_RUNTIMES and (os.path.isdir(model) or not _is_gguf(model)):
        what = "a folder" if os.path.isdir(model) else "not a GGUF file (no GGUF magic)"
        return "model", (f"{model} is {what}; llama-server loads one .gguf file (an MLX folder goes with "
                         "runtime = \"mlx_lm.server\" or \"mlx_vlm.server\")")
    if cand.runtime in MLX_RUNTIMES and not os.path.isdir(model):
        what = "a GGUF file" if _is_gguf(model) else "a file"
        return "model", (f"{model} is {what}; {cand.runtime} loads a folder with config.json and safetensors "
                         "(a .gguf goes with runtime = \"llama-server\")")
    return None


def model_problems(cand: Candidate, sweep: Sweep | None) -> list[tuple[str, str]]:
    """The kind check, then every context (plus gen_tokens) the model was not trained for."""
    kind = kind_problem(cand)
    if kind is not None:
        return [kind]
    if sweep is None or not cand.model or not os.path.exists(cand.model) or cand.external:
        return []
    return _beyond_training(sweep, *trained_context(cand.model))


def _beyond_training(sweep: Sweep, trained: int | None, source: str) -> list[tuple[str, str]]:
    if trained is None:
        return []
    over = [c for c in sweep.contexts if c + sweep.gen_tokens > trained]
    if not over:
        return []
    return [("model", f"the model was trained for a context of {trained:,} tokens ({source}); context"
             f"{'s' if len(over) > 1 else ''} {', '.join(f'{c:,}' for c in over)} plus gen_tokens "
             f"{sweep.gen_tokens:,} exceed{'' if len(over) > 1 else 's'} it (contexts allowed: up to "
             f"{max(trained - sweep.gen_tokens, 0):,})")]
