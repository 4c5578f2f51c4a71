"""`mlx_vlm.server`: the only module that knows its flags and answer shape (mlx-vlm 0.7.10).
Reasons and facts: docs/runtimes.md#mlx_vlmserver."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import aiohttp
import msgspec

from benchd.config import HOST
from benchd.probe_result import ProbeResult
from benchd.schemas import Candidate
from benchd.servers.runtimes import base
from benchd.servers.runtimes.mlx_common import MLX_ENV_SCRUB, MlxLauncher, MlxReader, MlxServerAdapter
from benchd.servers.runtimes.vision import VisionFacts, mlx_dir_facts

_RESERVED: dict[str, str] = {
    "--model": "use `model`",
    "--host": "benchd always binds 127.0.0.1",
    "--port": "benchd allocates a free port",
    "--draft-model": "use `spec.draft_model`",
    "--draft-kind": "use `spec.kind`",
    "--draft-block-size": "use `spec.draft_max`",
    "--api-key": "benchd talks to the server without a key",
    "--reload": "a reloader child process would escape supervision",
    "--vision-cache-size": "benchd sets it to 1 for image probes (unique images per probe)",
}

#: `mlx_vlm.apc.DEFAULT_BLOCK_SIZE` in the pinned 0.7.10 (`APC_BLOCK_SIZE` overrides it).
APC_BLOCK_SIZE = 16

PEAK_MEMORY_SOURCE = "server:peak_memory (mx.get_peak_memory, server lifetime)"


class MlxVlmLauncher(MlxLauncher):
    """mlx_vlm.server's start: `--vision-cache-size 1` for image probes, the spec flags."""

    version_dists: ClassVar[tuple[str, ...]] = ("mlx-vlm", "mlx")

    def argv(self, candidate: Candidate, *, command: list[str], port: int, ctx_size: int | None) -> list[str]:
        argv = ["--model", candidate.model, "--host", HOST, "--port", str(port)]
        if candidate.vision:
            argv += ["--vision-cache-size", "1"]  # not 0: docs/runtimes.md#mlx_vlmserver
        spec = candidate.spec
        if spec is not None:
            assert spec.kind is not None  # resolved when the sweep is decoded (Spec.__post_init__)
            argv += ["--draft-model", spec.draft_model or candidate.model, "--draft-kind", spec.kind]
            if spec.draft_max is not None:
                argv += ["--draft-block-size", str(spec.draft_max)]
        return [*command, *candidate.args, *argv]  # benchd's own flags last: the parser's last one wins

    async def check_ready(self, base_url: str) -> base.Readiness:
        return await base.json_health(base_url, self.runtime.health_path, ("healthy", "ok"))


class MlxVlmReader(MlxReader):
    """mlx_vlm.server's answers: rates from `timings`, and its own MLX peak memory."""

    def normalize(self, result: ProbeResult, *, spec_configured: bool) -> base.Normalized:
        """Server timings for both rates (client window recorded beside), usage, and the MLX peak."""
        norm = self.normalize_timings(result, spec_configured=spec_configured)
        timings: dict[str, Any] = result.timings or {}
        peak_gb = base.json_number(timings.get("peak_memory", (result.final or {}).get("peak_memory")))
        peak = round(peak_gb * 1e9) if peak_gb else None
        if peak is not None:
            norm.sources["server_peak_memory_bytes"] = PEAK_MEMORY_SOURCE
        else:
            norm.null_reasons["server_peak_memory_bytes"] = "mlx_vlm.server reported no peak_memory"
        return dataclasses.replace(norm, server_peak_memory_bytes=peak)

    def eos_gap(self, candidate: Candidate) -> str:
        if candidate.spec is not None:
            return (f"mlx_vlm's speculative path ({candidate.spec.kind}) applies no logits processors, so "
                    "EOS cannot be suppressed there")
        return super().eos_gap(candidate)


class MlxVlmSessions(base.Sessions):
    """mlx_vlm.server's sessions: a start with its prefix cache (`APC_*`), reused in whole blocks."""

    def session_start(self, candidate: Candidate) -> base.SessionStart:
        """A start of its own with `APC_ENABLED=1` (its prefix cache; the scrub removes inherited `APC_*`)
        and `APC_DISK_ENABLED=0` (its disk tier outlives the start); a candidate's own values win."""
        env = {"APC_ENABLED": "1", "APC_DISK_ENABLED": "0", **candidate.env}
        given = [k for k in ("APC_ENABLED", "APC_DISK_ENABLED") if k in candidate.env]
        set_here = ", ".join(f"{k}={env[k]}" + (" (candidate env)" if k in given else "")
                             for k in ("APC_ENABLED", "APC_DISK_ENABLED"))
        notes = (f"mlx_vlm.server {set_here}: its prefix cache in memory, the disk tier kept across starts off; "
                 "a server start of its own: cold probes run without it")
        return base.SessionStart(msgspec.structs.replace(candidate, env=env), True, notes)

    def prefix_cache_rule(self, candidate: Candidate) -> base.PrefixCacheRule:
        """Whole blocks of `APC_BLOCK_SIZE` tokens (16 unless the candidate's env sets it), prompt only."""
        raw = candidate.env.get("APC_BLOCK_SIZE", "")
        block = int(raw) if raw.isdigit() and int(raw) > 0 else APC_BLOCK_SIZE
        given = "candidate env APC_BLOCK_SIZE" if raw.isdigit() and int(raw) > 0 else "apc.DEFAULT_BLOCK_SIZE"
        return base.PrefixCacheRule(block, False,
                                    f"mlx_vlm apc.py: the prompt's K/V in blocks of {block} tokens ({given}), "
                                    "harvested after prefill, the generated tokens not cached")


class MlxVlmParallel(base.Parallel):
    """mlx_vlm.server's parallel requests: continuous batching capped by `--max-num-seqs`."""

    slots_flags = ("--max-num-seqs",)

    def parallel_start(self, candidate: Candidate, level: int, ctx_size: int | None) -> base.ParallelStart:
        """Continuous batching capped by `--max-num-seqs N` (unless the candidate sets it). Nothing makes it
        serve one at a time: a row's seed is per position, and a draft model's rows batch too (the worker
        coalesces speculative requests, `MLX_VLM_SPEC_BATCH_COALESCE_MS`)."""
        slots, given = self.parallel_slots(candidate)
        args = candidate.args if slots is not None else [*candidate.args, "--max-num-seqs", str(level)]
        return base.ParallelStart(msgspec.structs.replace(candidate, args=args), None,
                                  f"mlx_vlm.server continuous batching, {given or f'--max-num-seqs {level}'} (server/"
                                  "generation.py: one batch for every active request, a seed per row position)")


class MlxVlmImages(base.Images):
    """mlx_vlm.server's images: the vision model in the model dir."""

    def vision_facts(self, candidate: Candidate) -> VisionFacts:
        return mlx_dir_facts(candidate.model)


class MlxVlmTools(base.Tools):
    """mlx_vlm.server's tool calls: the parser `/health` names."""

    async def tool_parser(self, base_url: str, candidate: Candidate, command: list[str]) -> str | None:
        """`loaded_tool_parser` from `GET /health` (mlx_vlm's `_infer_tool_parser_from_processor`, the
        parser its `/chat/completions` uses unless a request overrides it), as `mlx_vlm.tools.parsers.<name>`."""
        try:
            status, raw = await base.http_get(base_url, self.runtime.health_path, timeout_s=5.0)
            doc = msgspec.json.decode(raw) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return None
        name = doc.get("loaded_tool_parser") if isinstance(doc, dict) else None
        return f"mlx_vlm mlx_vlm.tools.parsers.{name}" if isinstance(name, str) and name else None


class MlxVlmAdapter(MlxServerAdapter):
    """mlx_vlm.server's facts and parts."""

    name: ClassVar[str] = "mlx_vlm.server"
    spec_kinds: ClassVar[tuple[str, ...]] = ("dflash", "eagle3", "mtp")
    spec_kinds_without_draft: ClassVar[tuple[str, ...]] = ("mtp",)
    reserved_args: ClassVar[dict[str, str]] = _RESERVED
    thinking_top_level: ClassVar[bool] = True
    env_scrub: ClassVar[tuple[str, ...]] = (
        *MLX_ENV_SCRUB, "APC_", "KV_", "MAX_KV_SIZE", "QUANTIZED_KV_START", "PREFILL_STEP_SIZE",
        "EXPERT_CACHE_GB", "TOP_LOGPROBS_K",
    )

    launcher_part = MlxVlmLauncher
    reader_part = MlxVlmReader
    sessions_part = MlxVlmSessions
    parallel_part = MlxVlmParallel
    images_part = MlxVlmImages
    tools_part = MlxVlmTools
