"""A running job's ETA: the probe rows and the eval tasks left, each at the time measured for its kind.
Reasons and facts: docs/architecture.md#the-eta."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def _evals_left(eval_seconds: Mapping[str, Sequence[float]], eval_planned: Mapping[str, int],
                overall: float | None) -> float:
    """Seconds of the planned eval tasks left, each at its tier's mean task time (else `overall`)."""
    out = 0.0
    for tier, planned in eval_planned.items():
        done = eval_seconds.get(tier, ())
        per_task = sum(done) / len(done) if done else overall
        left = max(0, planned - len(done))
        if left:
            out += left * (per_task if per_task is not None else 0.0)
    return out


def estimate(elapsed_s: float, rows_done: int, rows_left: int, rows_left_max: int | None,
             eval_seconds: Mapping[str, Sequence[float]], eval_planned: Mapping[str, int],
             kld_left_s: float = 0.0) -> tuple[float, float | None] | None:
    """(eta_s, eta_max_s) from what ran so far; `eval_seconds` by tier/suite (one value per finished task),
    `eval_planned` the tasks planned by tier/suite, `kld_left_s` the `[kld]` step's seconds left
    (`engine.kld.seconds_left`). None when nothing was measured."""
    measured = [s for values in eval_seconds.values() for s in values]
    if rows_done <= 0 and not measured:
        return None
    per_row = max(0.0, elapsed_s - sum(measured)) / rows_done if rows_done > 0 else None
    overall = sum(measured) / len(measured) if measured else per_row
    evals_left = _evals_left(eval_seconds, eval_planned, overall)
    row_time = per_row if per_row is not None else (overall or 0.0)
    eta = row_time * max(0, rows_left) + evals_left + kld_left_s
    eta_max = row_time * max(0, rows_left_max) + evals_left + kld_left_s if rows_left_max is not None else None
    return eta, eta_max
