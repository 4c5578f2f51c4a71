"""`mlx_lm.server` (mlx-lm 0.32.2): its flags and answer shape (docs/runtimes.md#mlx_lmserver)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec

from benchd.config import HOST
from benchd.lifeline import die_with_daemon
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate
from benchd.servers.runtimes import base, flags
from benchd.servers.runtimes.mlx_common import (
    MlxChecks,
    MlxLauncher,
    MlxReader,
    MlxRequests,
    MlxServerAdapter,
    interpreter,
)

_RESERVED: dict[str, str] = {
    "--model": "use `model`",
    "--host": "benchd always binds 127.0.0.1",
    "--port": "benchd allocates a free port",
    "--draft-model": "use `spec.draft_model`",
    "--num-draft-tokens": "use `spec.draft_max`",
}

#: `--prompt-cache-size` default in the pinned mlx_lm.server (`server.py` argparse).
PROMPT_CACHE_DEFAULT = 10
NO_PROMPT_TIMING = "mlx_lm.server reports no prompt timing"
NO_DRAFT_COUNTS = "mlx_lm.server exposes no draft acceptance figures"


_MLX_LM_PARSER = """
import sys
from pathlib import Path
from mlx_lm.utils import load_tokenizer
parser = load_tokenizer(Path(sys.argv[1])).tool_parser
print(parser.__module__ if parser is not None else "")
"""


def _ask_venv(python: str, code: str, arg: str) -> str | None:
    """One line from a snippet run in the server's interpreter (offline hub), or None on any failure."""
    try:
        proc = subprocess.run([python, "-c", code, arg], capture_output=True, text=True, timeout=120, check=False,
                              env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "TRANSFORMERS_VERBOSITY": "error"},
                              preexec_fn=die_with_daemon())
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = proc.stdout.strip().splitlines()
    return out[-1] if proc.returncode == 0 and out and out[-1] else None


class MlxLmChecks(MlxChecks):
    """mlx_lm.server's tune matrix."""

    def tune_matrix(self, model: str, binary: str | None, cores: int
                    ) -> tuple[dict[str, Sequence[str | bool]], list[str]]:
        """`--kv-bits` none / 8 / 4 (a quantized KV cache; it serves requests one at a time) and
        `--prefill-step-size` 512 / 2048 (the default)."""
        return ({"--kv-bits": [False, "8", "4"], "--prefill-step-size": ["512", "2048"]},
                ["--kv-bits none / 8 / 4: KV cache quantization (mlx_lm.server then serves one request at a time)",
                 "--prefill-step-size 512 / 2048: prompt processing step (2048 is the default)"])


class MlxLmLauncher(MlxLauncher):
    """mlx_lm.server's start: `--prompt-cache-size 0` for cold probes, the draft model's flags."""

    version_dists: ClassVar[tuple[str, ...]] = ("mlx-lm", "mlx")

    def argv(self, candidate: Candidate, *, command: list[str], port: int, ctx_size: int | None) -> list[str]:
        argv = ["--model", candidate.model, "--host", HOST, "--port", str(port)]
        # The LRU prompt cache reuses the chat template's prefix across requests (even with a unique
        # first line): size 0 turns it off so
        # `cached_tokens` is 0 and every probe processes its whole prompt.
        if not any(a.split("=", 1)[0] == "--prompt-cache-size" for a in candidate.args):
            argv += ["--prompt-cache-size", "0"]
        spec = candidate.spec
        if spec is not None and spec.draft_model is not None:
            argv += ["--draft-model", spec.draft_model]
            if spec.draft_max is not None:
                argv += ["--num-draft-tokens", str(spec.draft_max)]
        return [*command, *candidate.args, *argv]  # benchd's own flags last: the parser's last one wins

    async def check_ready(self, base_url: str) -> base.Readiness:
        return await base.json_health(base_url, self.runtime.health_path, ("ok",))


class MlxLmRequests(MlxRequests):
    """mlx_lm.server's requests: `model` is `default_model` unless the candidate names one."""

    def request_model(self, candidate: Candidate) -> str:
        return candidate.request_model or "default_model"


class MlxLmReader(MlxReader):
    """mlx_lm.server's answers: usage only, the generation rate from the client's window."""

    def normalize(self, result: ProbeResult, *, spec_configured: bool) -> base.Normalized:
        """Usage from the server; generation rate from the client's stream window; no prompt rate."""
        return self.normalize_usage(result, spec_configured=spec_configured,
                                    no_timings="mlx_lm.server reports no timings", no_prompt_rate=NO_PROMPT_TIMING,
                                    no_cache_details="mlx_lm.server sent no prompt_tokens_details",
                                    no_draft_counts=NO_DRAFT_COUNTS)


class MlxLmSessions(base.Sessions):
    """mlx_lm.server's sessions: a start with its LRU of prompt caches."""

    def session_start(self, candidate: Candidate) -> base.SessionStart:
        """A start of its own with the LRU prompt cache at its default size, unless the candidate sets one."""
        if any(a.split("=", 1)[0] == "--prompt-cache-size" for a in candidate.args):
            return base.SessionStart(candidate, False,
                                     "mlx_lm.server --prompt-cache-size as the candidate's args set it")
        started = msgspec.structs.replace(candidate, args=[*candidate.args, "--prompt-cache-size",
                                                           str(PROMPT_CACHE_DEFAULT)])
        return base.SessionStart(started, True, f"mlx_lm.server --prompt-cache-size {PROMPT_CACHE_DEFAULT} (its "
                                                "default LRU of prompt caches), a server start of its own: cold "
                                                "probes run with 0")


class MlxLmParallel(base.Parallel):
    """mlx_lm.server's parallel requests: `--decode-concurrency` / `--prompt-concurrency`, unseeded bodies."""

    slots_flags = ("--decode-concurrency",)

    def parallel_start(self, candidate: Candidate, level: int, ctx_size: int | None) -> base.ParallelStart:
        """`--decode-concurrency N --prompt-concurrency N` (unless set); a draft model or `--kv-bits` serialises."""
        slots, given = self.parallel_slots(candidate)
        args = list(candidate.args)
        if slots is None:
            args += ["--decode-concurrency", str(level)]
        if not any(a.split("=", 1)[0] == "--prompt-concurrency" for a in args):
            args += ["--prompt-concurrency", str(level)]
        serial = None
        if candidate.spec is not None:
            serial = "mlx_lm.server serves one request at a time with a draft model (server.py is_batchable)"
        elif any(a.split("=", 1)[0] == "--kv-bits" for a in args):
            serial = "mlx_lm.server serves one request at a time with --kv-bits (server.py _is_batchable)"
        notes = f"mlx_lm.server {given or f'--decode-concurrency {level}'} --prompt-concurrency {level}"
        return base.ParallelStart(msgspec.structs.replace(candidate, args=args), None, notes, serial)

    def parallel_body(self, body: dict[str, Any]) -> str | None:
        """No `seed`: a request with one is never batched (server.py `_is_batchable`)."""
        body.pop("seed", None)
        temp = body.get("temperature")
        kind = "greedy" if not temp else f"temperature {temp}, unseeded"
        return f"no seed sent (mlx_lm.server batches only unseeded requests); sampling stays {kind}"


class MlxLmTools(base.Tools):
    """mlx_lm.server's tool calls: the parser module its own `load_tokenizer` picks."""

    async def tool_parser(self, base_url: str, candidate: Candidate, command: list[str]) -> str | None:
        """The tool parser module mlx_lm.server loaded for this model: its own `load_tokenizer` run in the
        server's interpreter (`tool_parser_type` from the tokenizer config, else inferred from the chat
        template), named as `mlx_lm.tool_parsers.<module>`; None when it has none or the query fails."""
        found = await asyncio.to_thread(_ask_venv, interpreter(command), _MLX_LM_PARSER, candidate.model)
        return f"mlx_lm {found}" if found else None


class MlxLmAdapter(MlxServerAdapter):
    """mlx_lm.server's facts and parts."""

    name: ClassVar[str] = "mlx_lm.server"
    spec_kinds: ClassVar[tuple[str, ...]] = ("draft",)
    reserved_args: ClassVar[dict[str, str]] = _RESERVED

    flag_values: ClassVar[dict[str, flags.FlagValues]] = {
        "--kv-bits": flags.FlagValues(None, "mlx_lm/server.py argparse (type=int)", 1),
        "--prefill-step-size": flags.FlagValues(None, "mlx_lm/server.py argparse (type=int)", 1),
    }

    checks_part = MlxLmChecks
    launcher_part = MlxLmLauncher
    requests_part = MlxLmRequests
    reader_part = MlxLmReader
    sessions_part = MlxLmSessions
    parallel_part = MlxLmParallel
    tools_part = MlxLmTools
