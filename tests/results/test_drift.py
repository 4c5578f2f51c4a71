"""The drift sentinel's summary (issue 15), from hand-built rows: the first cell vs its re-run at the end."""

from __future__ import annotations

from benchd.results.drift import sweep_drift
from benchd.schemas import Candidate, Row, Sweep


def _sweep(**kw: object) -> Sweep:
    return Sweep(name="t", contexts=[512, 128], gen_tokens=8, probes="auto",
                 candidates=[Candidate(id="a", runtime="llama-server", model="/m.gguf"),
                             Candidate(id="b", runtime="llama-server", model="/m.gguf")], **kw)  # type: ignore[arg-type]


def _rows(kind: str, values: list[float], cand: str = "a", ctx: int = 128) -> list[Row]:
    return [Row(job="j", candidate=cand, runtime="llama-server", context=ctx, kind=kind, probe=i, status="ok",  # type: ignore[arg-type]
                gen_tps=v) for i, v in enumerate(values)]


def test_drift_beyond_the_target_is_reported_with_ratio_and_p() -> None:
    first = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    rows = _rows("probe", first) + _rows("sentinel", [v * 0.9 for v in first]) + _rows("probe", [5.0] * 6, "b")
    d, why = sweep_drift(_sweep(), rows)
    assert why is None and d is not None
    assert (d.candidate, d.context, d.metric) == ("a", 128, "gen_tps")  # first candidate, smallest context
    assert d.drifted and d.ratio is not None and abs(d.ratio - 0.9) < 1e-9 and d.drift_pct is not None
    assert d.p_value is not None and d.p_value < 0.01 and "drifted -10.0 %" in d.summary


def test_no_drift_within_the_target() -> None:
    first = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    d, _ = sweep_drift(_sweep(), _rows("probe", first) + _rows("sentinel", [v * 1.01 for v in first]))
    assert d is not None and d.drifted is False and "no sweep drift beyond ±3 %" in d.summary


def test_no_sentinel_says_why() -> None:
    d, why = sweep_drift(_sweep(sentinel=False), _rows("probe", [100.0] * 6))
    assert d is None and why is not None and "sentinel off" in why
    d, why = sweep_drift(Sweep(name="t", contexts=[128], gen_tokens=8, probes=3, candidates=[
        Candidate(id="a", runtime="llama-server", model="/m.gguf")]), _rows("probe", [100.0] * 3))
    assert d is None and why is not None  # a fixed count: off unless asked for
    d, why = sweep_drift(_sweep(), _rows("probe", [100.0] * 6))
    assert d is None and why is not None and "never ran" in why
    few = _rows("probe", [100.0, 101.0, 99.0]) + _rows("sentinel", [90.0, 91.0, 89.0])
    d, _ = sweep_drift(_sweep(sentinel=True), few)
    assert d is not None and d.p_value is None and "too few probes" in d.null_reasons["p_value"]
