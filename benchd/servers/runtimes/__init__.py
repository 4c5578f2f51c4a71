"""Runtime adapters by name: `get_adapter(candidate.runtime)`, the one way to runtime-specific code."""

from __future__ import annotations

from benchd.errors import BenchdError
from benchd.servers.runtimes.base import Normalized, Readiness, RuntimeAdapter
from benchd.servers.runtimes.llama_server import LlamaServerAdapter
from benchd.servers.runtimes.mlx_lm import MlxLmAdapter
from benchd.servers.runtimes.mlx_vlm import MlxVlmAdapter
from benchd.servers.runtimes.openai import OpenAIAdapter

ADAPTERS: dict[str, RuntimeAdapter] = {
    "llama-server": LlamaServerAdapter(),
    "mlx_lm.server": MlxLmAdapter(),
    "mlx_vlm.server": MlxVlmAdapter(),
    "openai": OpenAIAdapter(),
}


def get_adapter(runtime: str) -> RuntimeAdapter:
    try:
        return ADAPTERS[runtime]
    except KeyError:
        raise BenchdError(
            "unknown_runtime", f"unknown runtime {runtime!r}; known: {', '.join(ADAPTERS)}", "runtime"
        ) from None


__all__ = ["ADAPTERS", "Normalized", "Readiness", "RuntimeAdapter", "get_adapter"]
