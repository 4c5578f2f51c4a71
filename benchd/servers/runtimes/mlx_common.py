"""What `mlx_lm.server` and `mlx_vlm.server` share: the offline Hugging Face environment, the command from
the provisioned venv (or the candidate's), package versions read from that venv, and the refusal of a
`ctx_size` they would ignore. Split from `base.py`, which keeps what every runtime shares.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.schemas import Candidate
from benchd.servers.runtimes.base import RuntimeAdapter, resolve_mlx_command


def venv_dist_versions(command: list[str], dists: tuple[str, ...]) -> dict[str, str]:
    """Package versions read from the server's venv with importlib.metadata (no subprocess).

    The command's first element lives in `<venv>/bin/`; its `lib/python*/site-packages` holds the
    dist-info metadata. Empty when the layout is not a venv (then nothing is guessed).
    """
    from importlib import metadata

    bin_dir = Path(command[0]).parent
    venv = bin_dir.parent
    site = sorted(venv.glob("lib/python*/site-packages"))
    out: dict[str, str] = {}
    for dist_name in dists if site else ():
        found = list(metadata.distributions(name=dist_name, path=[str(p) for p in site]))
        if found:
            out[dist_name] = found[0].version
    return out


def mlx_version_from_venv(command: list[str], dists: tuple[str, ...]) -> str | None:
    """`mlx-lm 0.32.2, mlx 0.32.4`: the version string recorded for an MLX server (None outside a venv)."""
    found = venv_dist_versions(command, dists)
    return ", ".join(f"{k} {v}" for k, v in found.items()) or None


class MlxServerAdapter(RuntimeAdapter):
    """What mlx_lm.server and mlx_vlm.server share: offline HF env, venv command, venv version.

    Both size their KV cache themselves (no context-size flag with llama-server's meaning), so one
    server start serves every context and `ctx_size` is rejected rather than silently ignored.
    """

    #: Distributions whose versions make up `version()` (first = the server package).
    version_dists: ClassVar[tuple[str, ...]] = ()
    version_source: ClassVar[str] = "venv:importlib.metadata"

    def validate(self, candidate: Candidate) -> list[BenchdError]:
        errors = super().validate(candidate)
        if candidate.ctx_size is not None:
            errors.append(
                BenchdError(
                    "unsupported_ctx_size",
                    f"candidate {candidate.id!r}: {self.name} sizes its KV cache itself; "
                    "`ctx_size` applies to llama-server only (remove it)",
                    f"$.candidates[{candidate.id}].ctx_size",
                )
            )
        return errors

    def command(self, candidate: Candidate, cache_dir: Path) -> tuple[list[str], str]:
        return resolve_mlx_command(self.name, candidate.binary, cache_dir)

    def env(self, candidate: Candidate, config: Config) -> dict[str, str]:
        """Offline hub and an existing HF cache dir (created here: `/v1/models` answers 500 without)."""
        config.hf_cache_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_HUB_CACHE"] = str(config.hf_cache_dir)
        env["PYTHONUNBUFFERED"] = "1"  # log lines reach the log file as they happen
        env.update(candidate.env)
        return env

    def local_token_counter(self, candidate: Candidate) -> Any:
        """The model dir's `tokenizer.json`, counted here (the MLX servers have no /tokenize); None
        without the `tokenizers` package, and the engine calibrates from reported usage instead."""
        return local_tokenizer_counter(candidate.model)

    async def version(self, base_url: str, command: list[str]) -> str | None:
        return mlx_version_from_venv(command, self.version_dists)

    def installed_version(self, command: list[str]) -> str | None:
        return mlx_version_from_venv(command, self.version_dists)

    def installed_packages(self, command: list[str]) -> dict[str, str]:
        """The server package, mlx (+ mlx-metal on macOS) and the tokenizer stack it loads models with."""
        return venv_dist_versions(command, (*self.version_dists, "mlx-metal", "transformers", "tokenizers"))


def local_tokenizer_counter(model_dir: str) -> Callable[[str], Awaitable[int]] | None:
    """An exact `count_tokens` for an MLX/HF model directory from its `tokenizer.json`, or None.

    The MLX servers have no tokenize endpoint, but their model folder carries the tokenizer; when the
    optional `tokenizers` package is importable here, counting locally makes mlx sizing exact (the
    template overhead is still learnt from the first reported `prompt_tokens`). Counting runs in a
    thread: a 100k-token text takes tens of milliseconds.
    """
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(path):
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        tok = Tokenizer.from_file(path)
    except Exception:  # a tokenizer.json this version cannot read: fall back to calibration
        return None

    async def count(text: str) -> int:
        import asyncio

        enc = await asyncio.to_thread(tok.encode, text, add_special_tokens=False)
        return len(enc.ids)

    return count
