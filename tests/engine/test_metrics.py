"""Pure statistics: stream windows, sustained windows, per-cell stats (hand-computed expectations)."""

from __future__ import annotations

import math

import msgspec
import pytest

from benchd.engine.metrics import (
    CellStats,
    cell_stats,
    median_ci,
    metric_stats,
    stream_window,
    stream_window_tps,
    sustain_ratio,
    sustain_ratio_reason,
    sustained_windows,
)
from benchd.schemas import Row


def test_stream_window_excludes_first_token():
    assert stream_window_tps(128, 1.0, 2.27) == pytest.approx(100.0)
    assert stream_window(128, 1.0, 2.27).reason is None


@pytest.mark.parametrize(
    "args,fragment",
    [((1, 0.0, 1.0), "at least 2"), ((0, 0.0, 1.0), "at least 2"), ((5, 1.0, 1.0), "zero"),
     ((None, 0.0, 1.0), "usage"), ((5, None, 1.0), "timestamps")],
)
def test_stream_window_null_with_reason(args, fragment):
    m = stream_window(*args)
    assert m.value is None and fragment in (m.reason or "")
    assert stream_window_tps(*args) is None


def test_sustained_windows_uniform_rate():
    times = [0.5 + 0.01 * i for i in range(1024)]  # 100 tok/s after a 0.5 s TTFT
    w = sustained_windows(times, 1, 128)
    assert len(w) == 1024 // 128
    assert all(x == pytest.approx(100.0) for x in w)
    assert sustain_ratio(w) == pytest.approx(1.0)


def test_sustained_windows_slowdown_and_partial_window_dropped():
    times, t = [], 0.0
    for i in range(300):  # 100 tok/s for 150 tokens, then 50 tok/s
        t += 0.01 if i < 150 else 0.02
        times.append(t)
    w = sustained_windows(times, 1, 100)
    assert len(w) == 3  # 300 // 100; nothing partial
    assert w[0] == pytest.approx(100.0)
    assert w[2] == pytest.approx(50.0)
    assert w[1] == pytest.approx(100 / (0.5 + 1.0))  # 50 fast + 50 slow tokens
    assert sustain_ratio(w) == pytest.approx(0.5)


def test_sustained_windows_multi_token_and_empty_chunks():
    # role-only first chunk (0 tokens), then chunks of 2 tokens every 0.02 s → 100 tok/s
    times = [0.0] + [0.1 + 0.02 * i for i in range(64)]
    per = [0] + [2] * 64
    w = sustained_windows(times, per, 32)
    assert len(w) == 4
    assert all(x == pytest.approx(100.0) for x in w)
    with pytest.raises(ValueError):
        sustained_windows([0.0, 1.0], [1], 4)


def test_sustain_ratio_null_reasons():
    assert sustain_ratio([10.0]) is None and "at least 2" in (sustain_ratio_reason([10.0]) or "")
    assert sustain_ratio([]) is None
    assert sustain_ratio_reason([10.0, 5.0]) is None


def test_median_ci_order_statistics():
    assert median_ci([1, 2, 3, 4, 5]) is None  # n = 5: 93.75 % at best
    lo, hi, cov = median_ci([6, 1, 5, 2, 4, 3])  # type: ignore[misc]
    assert (lo, hi) == (1, 6) and cov == pytest.approx(1 - 2 / 64)
    lo, hi, cov = median_ci(list(range(1, 11)))  # type: ignore[misc]
    assert (lo, hi) == (2, 9) and cov == pytest.approx(1 - 2 * 11 / 1024)
    lo, hi, cov = median_ci(list(range(1, 21)))  # type: ignore[misc]
    assert (lo, hi) == (6, 15) and cov >= 0.95
    # exact coverage check against the binomial for every n up to 60
    for n in range(6, 61):
        _, _, cov = median_ci(list(range(n)))  # type: ignore[misc]
        assert cov >= 0.95


def test_metric_stats_small_n_and_nulls():
    s = metric_stats("gen_tps", [100.0, 102.0, None], ["no timings"])
    assert s.n == 2 and s.n_null == 1 and s.median == 101.0 and s.min == 100.0 and s.max == 102.0
    assert s.ci95_low is None and s.null_reasons["ci95"] == "n < 6"
    assert s.null_reasons["value"] == "no timings"
    assert s.cv == pytest.approx(math.sqrt(2) / 101)
    assert not s.noisy
    one = metric_stats("gen_tps", [5.0])
    assert one.cv is None and one.null_reasons["cv"] == "n < 2"
    none = metric_stats("prompt_tps", [None, None], ["mlx_lm.server reports no prompt timing"] * 2)
    assert none.n == 0 and none.median is None
    assert none.null_reasons["value"] == "mlx_lm.server reports no prompt timing"


def _row(cand, ctx, probe, status="ok", kind="probe", **kw):
    return Row(job="job-00001", candidate=cand, runtime=kw.pop("runtime", "llama-server"), context=ctx,
               kind=kind, probe=probe, status=status, **kw)


def test_cell_stats_groups_counts_and_flags_noise():
    rows = [
        *[_row("a", 2048, i, prompt_tps=1000.0 + i, gen_tps=50.0, ttft_ms=100.0, mem_peak_bytes=10**9)
          for i in range(6)],
        _row("a", 2048, 6, status="failed", error="server crashed (signal 9)"),
        _row("a", 2048, 7, status="timeout", error="probe timeout after 60 s"),
        _row("a", 2048, 8, status="aborted"),
        *[_row("m", 512, i, runtime="mlx_lm.server", gen_tps=[40.0, 60.0, 50.0][i], ttft_ms=20.0,
               mem_peak_bytes=None, null_reasons={"prompt_tps": "mlx_lm.server reports no prompt timing",
                                                  "mem_peak_bytes": "sampler unavailable"})
          for i in range(3)],
        _row("a", 512, 0, gen_tps=49.0),
        _row("a", 0, 0, kind="sustained", gen_tps=1.0),  # excluded
    ]
    cells = cell_stats(rows)
    assert [(c.candidate, c.context) for c in cells] == [("a", 512), ("a", 2048), ("m", 512)]
    a = cells[1]
    assert a.n_ok == 6 and a.n_failed == 2 and a.n_aborted == 1
    assert a.prompt_tps.median == pytest.approx(1002.5)
    assert (a.prompt_tps.ci95_low, a.prompt_tps.ci95_high) == (1000.0, 1005.0)
    assert a.gen_tps.cv == 0.0 and not a.noisy
    assert any("signal 9" in e for e in a.errors) and any("timeout" in e for e in a.errors)
    m = cells[2]
    assert m.runtime == "mlx_lm.server" and m.gen_tps.noisy and m.noisy and m.noisy_metrics == ["gen_tps"]
    assert m.prompt_tps.n == 0 and "no prompt timing" in m.prompt_tps.null_reasons["value"]
    assert m.mem_peak_bytes.null_reasons["value"] == "sampler unavailable"
    # embeddable in a runbook: round-trips through JSON
    back = msgspec.json.decode(msgspec.json.encode(cells), type=list[CellStats])
    assert back == cells


def test_sustained_summary_names_windows_it_could_not_time() -> None:
    from benchd.engine.metrics import sustained_summary

    ticks = [i * 0.01 for i in range(96)]  # one token per chunk, 100 tok/s
    extra, sources = sustained_summary(ticks, 32, 96)
    assert extra["window_tps"] == pytest.approx([100.0, 100.0, 100.0]) and extra["sustain_ratio"] == pytest.approx(1.0)
    assert "unmeasurable" not in sources["window_tps"]
    # A server that packed two tokens into one chunk: 95 chunks for 96 tokens leave the last window short.
    extra, sources = sustained_summary(ticks[:95], 32, 96)
    assert len(extra["window_tps"]) == 2
    assert "1 of 3 windows unmeasurable (95 content chunks carried 96 tokens)" in sources["window_tps"]
