"""Server starts a candidate needs, in order: which contexts each start serves, and the tail work.

llama-server restarts per context (its `-c` is sized to the context, so memory is measured there)
unless `ctx_size` pins it; the MLX servers start once for every context. The last start also runs the
sustained generation and the eval tier. Pure: the scheduler runs the groups, this only plans them.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchd.schemas import Candidate, Sweep
from benchd.servers.runtimes.base import RuntimeAdapter

#: The sustained generation and evals need room beyond the smallest context.
TAIL_MIN_TOKENS = 1024


@dataclass(frozen=True)
class Group:
    """Cells one server start serves: its context size, the contexts, and the tail work."""

    ctx_size: int | None
    contexts: list[int]
    sustained: bool
    evals: bool


def plan_groups(adapter: RuntimeAdapter, cand: Candidate, sweep: Sweep) -> list[Group]:
    """Server starts for a candidate, in order. The last group also runs sustained + evals."""
    contexts = sorted(sweep.contexts)
    tail_sustained = sweep.sustained.tokens > 0
    tail_evals = sweep.eval_tier != "none"
    if not adapter.restarts_per_context(cand):
        ctx = adapter.server_ctx_size(cand, contexts[-1], sweep.gen_tokens)
        return [Group(ctx, contexts, tail_sustained, tail_evals)]
    groups = [Group(adapter.server_ctx_size(cand, c, sweep.gen_tokens), [c], False, False) for c in contexts]
    if tail_sustained or tail_evals:
        tail_tokens = max(sweep.sustained.tokens, TAIL_MIN_TOKENS)
        groups.append(Group(adapter.server_ctx_size(cand, contexts[0], tail_tokens), [], tail_sustained, tail_evals))
    return groups
