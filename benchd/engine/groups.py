"""Server starts a candidate needs, in order: which contexts each start serves, and the tail work (pure).
The last start also runs the sustained generation and the evals; docs/architecture.md#sweep-engine-contracts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchd.schemas import Candidate, Sweep
from benchd.servers.runtimes.base import RuntimeAdapter

#: The sustained generation and evals need room beyond the smallest context.
TAIL_MIN_TOKENS = 1024
#: Room beyond the smallest context for public eval suites (tools in the prompt run to a few thousand tokens).
SUITE_TAIL_TOKENS = 4096

#: Room per image: one token per 14x14 pixels (unmerged ViT-14 patches) plus separators, never under 1024.
_PIXELS_PER_TOKEN, _SEPARATOR_TOKENS, _MIN_IMAGE_TOKENS = 14 * 14, 64, 1024


def image_token_allowance(sweep: Sweep) -> int:
    """Context room for the sweep's largest image request (an upper bound, not a measurement)."""
    w, h = max(sweep.vision.resolutions, key=lambda r: r[0] * r[1])
    per_image = max(_MIN_IMAGE_TOKENS, math.ceil(w * h / _PIXELS_PER_TOKEN) + _SEPARATOR_TOKENS)
    return sweep.vision.images * per_image


@dataclass(frozen=True)
class Group:
    """Cells one server start serves: its context size, the contexts, and the tail work."""

    ctx_size: int | None
    contexts: list[int]
    sustained: bool
    evals: bool
    vision: bool = False


def plan_groups(adapter: RuntimeAdapter, cand: Candidate, sweep: Sweep) -> list[Group]:
    """Server starts for a candidate, in order. The last group also runs sustained + evals."""
    contexts = sorted(sweep.contexts)
    tail_sustained = sweep.sustained.tokens > 0
    tail_evals = sweep.eval_tier != "none" or bool(sweep.evals)
    if not adapter.launcher.restarts_per_context(cand):
        ctx = adapter.launcher.server_ctx_size(cand, contexts[-1], sweep.gen_tokens)
        return [Group(ctx, contexts, tail_sustained, tail_evals, cand.vision)]
    groups = [Group(adapter.launcher.server_ctx_size(cand, c, sweep.gen_tokens), [c], False, False) for c in contexts]
    if cand.vision:
        text = sweep.vision.context if sweep.vision.context is not None else contexts[0]
        ctx = adapter.launcher.server_ctx_size(cand, text + image_token_allowance(sweep), sweep.gen_tokens)
        groups.append(Group(ctx, [], False, False, True))
    if tail_sustained or tail_evals:
        tail_tokens = max(sweep.sustained.tokens, TAIL_MIN_TOKENS, SUITE_TAIL_TOKENS if sweep.evals else 0)
        groups.append(Group(adapter.launcher.server_ctx_size(cand, contexts[0], tail_tokens), [], tail_sustained, tail_evals))
    return groups
