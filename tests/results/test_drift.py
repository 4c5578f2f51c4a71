"""The drift sentinel's summary, from hand-built rows: the first cell vs its re-run at the end, judged by
the one comparison (drift only when it says different), and the same verdict as `compare` on those rows."""

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
    assert d.verdict == "different" and d.alpha == 0.05 and d.text is not None and d.text in d.summary


def test_no_drift_within_the_target() -> None:
    first = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    d, _ = sweep_drift(_sweep(), _rows("probe", first) + _rows("sentinel", [v * 1.01 for v in first]))
    assert d is not None and d.drifted is False and "no sweep drift beyond ±3 %" in d.summary
    assert d.verdict == "tied" and "tied within ±3 %" in d.summary


def test_no_sentinel_says_why() -> None:
    d, why = sweep_drift(_sweep(sentinel=False), _rows("probe", [100.0] * 6))
    assert d is None and why == "sentinel = false"
    d, why = sweep_drift(Sweep(name="t", contexts=[128], gen_tokens=8, probes=3, candidates=[
        Candidate(id="a", runtime="llama-server", model="/m.gguf")]), _rows("probe", [100.0] * 3))
    assert d is None and why == "a fixed probe count runs it only with sentinel = true"
    d, why = sweep_drift(_sweep(), _rows("probe", [100.0] * 6))
    assert d is None and why is not None and "never ran" in why



def test_a_point_estimate_beyond_the_target_is_not_drift_unless_different() -> None:
    """A 5 % lower median whose noise the sentinel cannot tell from a 3 % change: unresolved, not drift."""
    d, _ = sweep_drift(_sweep(sentinel=True), _rows("probe", [100.0, 108.0, 93.0]) + _rows("sentinel", [95.0, 103.0, 88.0]))
    assert d is not None and d.drift_pct is not None and d.drift_pct < -3
    assert d.drifted is None and d.verdict == "unresolved" and d.summary.startswith("sweep drift unresolved")
    # three apart with CV 1 %: different at three probes each (the old rule could never say so below four)
    d, _ = sweep_drift(_sweep(sentinel=True), _rows("probe", [100.0, 101.0, 99.0]) + _rows("sentinel", [90.0, 91.0, 89.0]))
    assert d is not None and d.drifted is True and d.p_value == 0.1


def test_sentinel_says_what_compare_says_on_the_same_rows() -> None:
    from benchd.results.compare import compare_metric

    first = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    for scale in (0.9, 0.985, 0.96, 1.2):
        again = [v * scale * (1 + 0.01 * (i % 3 - 1)) for i, v in enumerate(first)]
        rows = _rows("probe", first) + _rows("sentinel", again)
        d, _ = sweep_drift(_sweep(), rows)
        m = compare_metric("gen_tps", "higher", _rows("probe", first), _rows("probe", again), margin_pct=3.0)
        assert d is not None and d.verdict == m.verdict and d.text == m.text
