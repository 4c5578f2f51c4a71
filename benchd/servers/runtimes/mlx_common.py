"""What `mlx_lm.server` and `mlx_vlm.server` share: offline HF environment, venv command and package
versions, the ignored `ctx_size` refusal, EOS suppression (docs/runtimes.md#mlx-servers-and-end-of-sequence)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from benchd.config import Config
from benchd.errors import BenchdError
from benchd.files import read_regular
from benchd.lifeline import die_with_daemon
from benchd.schemas import Candidate
from benchd.schemas.json import JSONObject
from benchd.servers import locate
from benchd.servers.runtimes.base import Checks, Launcher, Reader, RenderItem, Requests, RuntimeAdapter

#: Renders and tokenizes conversations as the MLX servers do (`apply_chat_template(..., tokenize=True)`),
#: run by the server's own interpreter.
_RENDER_SCRIPT = """
import json, sys
from transformers import AutoTokenizer
req = json.load(sys.stdin)
tok = AutoTokenizer.from_pretrained(req["model"])
out = []
for msgs, suffix in req["items"]:
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **req["kwargs"])
    out.append(tok.encode(text + suffix, add_special_tokens=False))
json.dump(out, sys.stdout)
"""
RENDER_TIMEOUT_S = 300.0


def interpreter(command: list[str]) -> str:
    """The Python that runs the server: `python -m module`'s interpreter, or the script's venv python."""
    if "-m" in command:
        return command[0]
    return str(Path(command[0]).parent / "python")


def venv_dist_versions(command: list[str], dists: tuple[str, ...]) -> dict[str, str]:
    """Package versions from the command's venv's dist-info (no subprocess); empty when not a venv."""
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


#: Additive bias on EOS/EOT ids for probes that must run to max_tokens (-1000 gave 40/40 tokens).
EOS_BIAS = -1000.0


def _read_json(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _ids(value: object) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _token_id(model_dir: str, token: str) -> int | None:
    """A token's id from `tokenizer.json` (added tokens first, then the model vocabulary)."""
    doc = _read_json(os.path.join(model_dir, "tokenizer.json"))
    for added in doc.get("added_tokens") or ():
        if isinstance(added, dict) and added.get("content") == token and isinstance(added.get("id"), int):
            return int(added["id"])
    vocab = (doc.get("model") or {}).get("vocab") if isinstance(doc.get("model"), dict) else None
    got = vocab.get(token) if isinstance(vocab, dict) else None
    return got if isinstance(got, int) else None


@functools.lru_cache(maxsize=64)
def _eos_ids_cached(model_dir: str, stamp: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    ids: list[int] = []
    where: list[str] = []
    for name in ("config.json", "generation_config.json"):
        got = _ids(_read_json(os.path.join(model_dir, name)).get("eos_token_id"))
        if got:
            ids += got
            where.append(f"{name} eos_token_id")
    eos = _read_json(os.path.join(model_dir, "tokenizer_config.json")).get("eos_token")
    text = eos.get("content") if isinstance(eos, dict) else eos
    if isinstance(text, str):
        tid = _token_id(model_dir, text)
        if tid is not None:
            ids.append(tid)
            where.append(f"tokenizer_config.json eos_token {text!r}")
    return tuple(sorted(set(ids))), ", ".join(where)


def eos_token_ids(model_dir: str) -> tuple[tuple[int, ...], str]:
    """(the model's EOS/EOT ids, which files named them); empty when the dir names none."""
    names = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json")
    stamp = tuple(int(os.stat(p).st_mtime_ns) if os.path.exists(p) else 0
                  for p in (os.path.join(model_dir, n) for n in names))
    return _eos_ids_cached(model_dir, stamp)


#: Inherited variables both MLX servers read (`environment` has where they come from).
MLX_ENV_SCRUB = ("MLX_", "MLXLM_")


class MlxChecks(Checks):
    """The MLX servers' candidate checks: `ctx_size` is refused (they size their KV cache themselves)."""

    def validate(self, candidate: Candidate) -> list[BenchdError]:
        errors = super().validate(candidate)
        if candidate.ctx_size is not None:
            errors.append(
                BenchdError(
                    "unsupported_ctx_size",
                    f"candidate {candidate.id!r}: {self.runtime.name} sizes its KV cache itself; "
                    "`ctx_size` applies to llama-server only (remove it)",
                    f"$.candidates[{candidate.id}].ctx_size",
                )
            )
        return errors


class MlxLauncher(Launcher):
    """The MLX servers' start: the venv's command, the offline HF environment, the venv's versions."""

    #: Distributions whose versions make up `version()` (first = the server package).
    version_dists: ClassVar[tuple[str, ...]] = ()

    def command(self, candidate: Candidate, cache_dir: Path) -> tuple[list[str], str]:
        return locate.resolve_mlx_command(self.runtime.name, candidate.binary, cache_dir)

    def env_ours(self, config: Config) -> dict[str, str]:
        """Offline hub and an existing HF cache dir (created here: `/v1/models` answers 500 without)."""
        config.hf_cache_dir.mkdir(parents=True, exist_ok=True)
        return {
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_CACHE": str(config.hf_cache_dir),
            "PYTHONUNBUFFERED": "1",  # log lines reach the log file as they happen
        }

    async def version(self, base_url: str, command: list[str]) -> str | None:
        return mlx_version_from_venv(command, self.version_dists)

    def installed_version(self, command: list[str]) -> str | None:
        return mlx_version_from_venv(command, self.version_dists)

    def installed_packages(self, command: list[str]) -> dict[str, str]:
        """The server package, mlx (+ mlx-metal on macOS) and the tokenizer stack it loads models with."""
        return venv_dist_versions(command, (*self.version_dists, "mlx-metal", "transformers", "tokenizers"))


class MlxRequests(Requests):
    """The MLX servers' requests: EOS suppressed by `logit_bias`, token counts from the model dir."""

    def length_fields(self, candidate: Candidate, run_to_length: bool) -> JSONObject:
        """`logit_bias` pushing the model's EOS/EOT ids down, so a probe runs to max_tokens."""
        if not run_to_length:
            return {}
        ids, _ = eos_token_ids(candidate.model)
        return {"logit_bias": {str(i): EOS_BIAS for i in ids}} if ids else {}

    def local_token_counter(self, candidate: Candidate) -> Callable[[str], Awaitable[int]] | None:
        """The model dir's `tokenizer.json`, counted here (the MLX servers have no /tokenize); None
        without the `tokenizers` package, and the engine calibrates from reported usage instead."""
        return local_tokenizer_counter(candidate.model)

    async def rendered_tokens(self, base_url: str, candidate: Candidate, command: list[str],
                              items: list[RenderItem], thinking: str) -> list[list[int]]:
        """Rendered and tokenized by the server venv's transformers (one offline subprocess)."""
        import asyncio

        kwargs = {"enable_thinking": thinking == "on"} if thinking != "default" else {}
        request = json.dumps({"model": candidate.model, "items": items, "kwargs": kwargs}).encode()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
        proc = await asyncio.create_subprocess_exec(
            interpreter(command), "-c", _RENDER_SCRIPT, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
            preexec_fn=die_with_daemon())
        try:
            async with asyncio.timeout(RENDER_TIMEOUT_S):
                out, err = await proc.communicate(request)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"rendering the chat template took over {RENDER_TIMEOUT_S:g} s") from None
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"rendering the chat template failed (exit {proc.returncode}): {tail[0][:300]}")
        doc = json.loads(out)
        return [[int(t) for t in ids] for ids in doc]


class MlxReader(Reader):
    """The MLX servers' answers: why a probe ended short although EOS was biased down."""

    def eos_gap(self, candidate: Candidate) -> str:
        ids, where = eos_token_ids(candidate.model)
        if not ids:
            return ("the model dir names no EOS id (config.json, generation_config.json, "
                    "tokenizer_config.json): nothing to suppress")
        return (f"EOS ids {list(ids)} ({where}) were biased by {EOS_BIAS:g}, yet {self.runtime.name} stopped early "
                "(a stop token the model dir does not name?)")


class MlxServerAdapter(RuntimeAdapter):
    """What mlx_lm.server and mlx_vlm.server share. They size their KV cache themselves, so one start serves
    every context and `ctx_size` is rejected rather than ignored."""

    version_source: ClassVar[str] = "venv:importlib.metadata"
    abbreviates: ClassVar[bool] = True  # both servers parse their flags with argparse (allow_abbrev)
    env_scrub: ClassVar[tuple[str, ...]] = MLX_ENV_SCRUB

    checks_part: ClassVar[type[Checks]] = MlxChecks
    launcher_part: ClassVar[type[Launcher]] = MlxLauncher
    requests_part: ClassVar[type[Requests]] = MlxRequests
    reader_part: ClassVar[type[Reader]] = MlxReader


def local_tokenizer_counter(model_dir: str) -> Callable[[str], Awaitable[int]] | None:
    """An exact `count_tokens` (run in a thread) from an MLX/HF model directory's `tokenizer.json`, or None
    when the optional `tokenizers` package is not importable."""
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
