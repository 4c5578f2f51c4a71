"""`benchctl models tiny`: generate the tiny random-weight models (no download, deterministic from a seed).

Works without the daemon and without MLX installed (numpy, gguf, tokenizers, safetensors).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from benchctl import exitcodes


@click.group("models")
def models() -> None:
    """Generate tiny random-weight models for tests and the demo."""


@models.command("tiny")
@click.option("--out", "out", type=click.Path(file_okay=True), default=None,
              help="Write the set to this new directory (default: the cache's models/tiny-SIZE-seedN-v1).")
@click.option("--size", default="small", show_default=True, metavar="small|medium",
              help="small: 64-dim, 2 layers (~0.4 MB f16); medium: 512-dim, 8 layers (~25 M params).")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same bytes.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache dir used when --out is not given (default: $BENCHD_CACHE_DIR or the platform's).")
@click.option("--json", "as_json", is_flag=True, help="Print the paths as JSON.")
@click.pass_context
def tiny(ctx: click.Context, out: str | None, size: str, seed: int, cache_dir: str | None, as_json: bool) -> None:
    """Write target GGUFs (f32, f16, q8_0, q4_0), three draft GGUFs and an MLX model dir."""
    from benchd.errors import BenchdError

    try:
        from benchctl import tinymodels
    except ModuleNotFoundError as exc:  # the `models` extra is missing
        click.echo(f"error: {exc.name} is not installed: pip install 'benchd[models]'", err=True)
        sys.exit(exitcodes.BAD_INPUT)
        return

    def log(msg: str) -> None:
        if not as_json:
            click.echo(msg, err=True)

    try:
        if out is not None:
            result = tinymodels.generate(Path(out), size, seed, log)
        else:
            from benchd.config import Config

            result = tinymodels.ensure(Config.resolve(cache_dir=cache_dir).cache_dir, size, seed, log)
    except ModuleNotFoundError as exc:
        click.echo(f"error: {exc.name} is not installed: pip install 'benchd[models]'", err=True)
        sys.exit(exitcodes.BAD_INPUT)
        return
    except BenchdError as exc:
        click.echo(click.style("error: ", fg="red", bold=True) + str(exc), err=True)
        sys.exit(exitcodes.BAD_INPUT)
        return
    paths = {
        "root": str(result.root), "size": result.size, "seed": result.seed, "n_params": result.n_params,
        "n_vocab": result.n_vocab, "gguf": {k: str(v) for k, v in result.gguf.items()},
        "target": str(result.target), "draft_identical": str(result.draft_identical),
        "draft_noisy": str(result.draft_noisy), "draft_unrelated": str(result.draft_unrelated),
        "mlx_dir": str(result.mlx_dir), "mlx_vlm_dir": str(result.mlx_vlm_dir),
    }
    if as_json:
        sys.stdout.write(json.dumps(paths, indent=2) + "\n")
    else:
        click.echo(str(result.root))
