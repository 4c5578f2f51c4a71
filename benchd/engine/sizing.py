"""Prompt sizing and warm-up between a server start and its first recorded probe: the server's tokenizer,
else the model dir's, else sizing probes (docs/measuring.md#prompt-sizing).
"""

from __future__ import annotations

from benchd.engine import probe
from benchd.engine.prompts import CountTokens, PromptBuilder
from benchd.schemas import Candidate, Sweep
from benchd.servers.runtimes.base import ChatSettings, RuntimeAdapter
from benchd.servers.server import Server

#: Unrecorded probes that size prompts for a runtime without any tokenizer, at most.
MAX_SIZING_PROBES = 6


class PromptSizer:
    def __init__(self, job: str, sweep: Sweep, timeout_s: float) -> None:
        self.job = job
        self.sweep = sweep
        self.timeout_s = timeout_s
        self.prompts = PromptBuilder()
        self.server_tokenizer: dict[int, bool] = {}  # server pid -> answers /tokenize
        self.local_counters: dict[str, CountTokens | None] = {}  # candidate id -> local count_tokens or None

    async def counter(self, adapter: RuntimeAdapter, server: Server) -> CountTokens | None:
        """The server's tokenizer as `count_tokens(text)`, else the adapter's local one, else None."""
        if server.pid not in self.server_tokenizer:
            self.server_tokenizer[server.pid] = await adapter.requests.count_tokens(server.base_url, "hello") is not None
        if not self.server_tokenizer[server.pid]:
            cand = server.candidate
            if cand.id not in self.local_counters:
                self.local_counters[cand.id] = adapter.requests.local_token_counter(cand)
            return self.local_counters[cand.id]

        async def count(text: str) -> int:
            n = await adapter.requests.count_tokens(server.base_url, text)
            if n is None:
                raise RuntimeError("the server's tokenizer stopped answering")
            return n

        return count

    def method(self, method: str, server: Server) -> str:
        """How a prompt was sized, naming whose tokenizer counted it (the row's `sources["prompt"]`)."""
        if method != "tokenizer":
            return f"{method} (calibrated from reported usage.prompt_tokens)"
        if self.server_tokenizer.get(server.pid):
            return "tokenizer (server /tokenize)"
        return "tokenizer (model dir tokenizer.json, counted locally)"

    async def warm_up(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int,
                      count: int | None = None) -> None:
        """Unrecorded probes after a server start, or `count` at a new context; they feed calibration."""
        for w in range(self.sweep.warmup if count is None else count):
            await self.unrecorded(adapter, server, cand, context, f"warmup{w}")

    async def size_prompts(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int) -> None:
        """Without any tokenizer, unrecorded probes at a new context, at most MAX_SIZING_PROBES."""
        if await self.counter(adapter, server) is not None:
            return
        for i in range(MAX_SIZING_PROBES):
            if not self.prompts.needs_sizing(context, cand.id):
                return
            await self.unrecorded(adapter, server, cand, context, f"sizing{i}")

    async def unrecorded(self, adapter: RuntimeAdapter, server: Server, cand: Candidate, context: int, tag: str) -> None:
        prompt = await self.prompts.build(context, f"{self.job}/{cand.id}/{context}/{tag}",
                                          await self.counter(adapter, server), key=cand.id)
        result = await probe.run_chat(adapter, server.base_url, cand, prompt=prompt.text,
                                      settings=ChatSettings.of(self.sweep, min(self.sweep.gen_tokens, 16), to_length=True),
                                      timeout_s=self.timeout_s)
        usage = result.usage or {}
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompts.observe(prompt, usage["prompt_tokens"])
