"""The axis table the one comparison (`results.comparison`) reads: every axis a user can choose on.

A new axis registers here (`register_axis`) and so joins Pareto, `compare`, the report and the page.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Direction = Literal["higher", "lower"]


class Axis(NamedTuple):
    """An axis a user can choose on: its better direction, the words for B's value being higher /
    lower, whether Pareto and `compare` use it, and whether its values are per-task outcomes."""

    name: str
    better: Direction
    words: tuple[str, str]
    pareto: bool
    compare: bool
    outcomes: bool


#: The axis table, in display order.
AXES: dict[str, Axis] = {}


def register_axis(name: str, better: Direction, *, words: tuple[str, str] = ("higher", "lower"),
                  pareto: bool = True, compare: bool = True, outcomes: bool = False) -> Axis:
    """Add (or replace) an axis in the table; returns it."""
    if better not in ("higher", "lower"):
        raise ValueError(f"axis {name}: better must be 'higher' or 'lower', not {better!r}")
    AXES[name] = axis = Axis(name, better, words, pareto, compare, outcomes)
    return axis


register_axis("gen_tps", "higher", words=("faster", "slower"))
register_axis("prompt_tps", "higher", words=("faster", "slower"))
register_axis("ttft_ms", "lower", words=("slower", "faster"), pareto=False)
register_axis("mem_peak_bytes", "lower", words=("larger", "smaller"))
register_axis("eval_pass_rate", "higher", words=("higher", "lower"), compare=False, outcomes=True)
register_axis("code_pass_rate", "higher", words=("higher", "lower"), compare=False, outcomes=True)
register_axis("tool_pass_rate", "higher", words=("higher", "lower"), compare=False, outcomes=True)
register_axis("sustain_ratio", "higher", words=("higher", "lower"), compare=False)
register_axis("j_per_gen_token", "lower", words=("more energy per token", "less energy per token"))
#: Time to ready (spawn -> health answers) over a candidate's warm starts; its cold starts are compared apart.
#: Per candidate, not per cell: `compare` judges it in `compare_ready`, Pareto from the runbook's warm starts.
register_axis("ready_s", "lower", words=("slower to start", "faster to start"), compare=False)
#: Session probes: the median TTFT of turns >= 2 on a warm prompt cache.
register_axis("session_ttft_ms", "lower", words=("slower", "faster"))
#: Parallel requests: the aggregate gen tok/s of N simultaneous streams, one axis per level ("agg_gen_tps@N").
LEVEL_AXIS_PREFIX = "agg_gen_tps@"


#: Image probes: the median TTFT with the sweep's images of one resolution, one axis per resolution
#: ("image_ttft_ms@512x512"), on the Pareto view of the context the images sit in.
IMAGE_AXIS_PREFIX = "image_ttft_ms@"


def image_axis(width: int, height: int) -> Axis:
    """The axis of one image resolution (registered the first time it is seen)."""
    name = f"{IMAGE_AXIS_PREFIX}{width}x{height}"
    return AXES.get(name) or register_axis(name, "lower", words=("slower", "faster"))


def level_axis(n: int) -> Axis:
    """The axis of concurrency level `n` (registered the first time a level is seen)."""
    name = f"{LEVEL_AXIS_PREFIX}{n}"
    return AXES.get(name) or register_axis(name, "higher", words=("faster", "slower"))


def pareto_axes() -> list[Axis]:
    return [a for a in AXES.values() if a.pareto]


def compare_metrics() -> list[Axis]:
    return [a for a in AXES.values() if a.compare]
