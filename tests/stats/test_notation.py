"""The one interval notation (benchd.stats.notation): verdicts and sentences write a ratio's interval alike."""

from __future__ import annotations

import pytest

from benchd.stats.comparison import compare_axis
from benchd.stats.notation import ratio_interval


@pytest.mark.parametrize(("r", "lo", "hi", "signed", "want"), [
    (1.0, 0.99, 1.02, True, "−1.0–+2.0 %"),      # a tie: signed percentages
    (1.05, 0.98, 1.2, False, "−2.0–+20 %"),      # across 1, both ends near it: still percentages
    (2.9, 0.36, 22.9, False, "0.36–23×"),        # across 1 but wide: a multiple, not "−64–+2190 %"
    (1.25, 1.22, 1.28, False, "22–28 %"),        # different, small: in the estimate's frame
    (0.7, 0.69, 0.71, False, "29–31 %"),
    (5.0, 3.0, 9.0, False, "3.0–9.0×"),          # different, a multiple
    (0.2, 0.1, 0.3, False, "3.3–10×"),           # lower: the multiple it is lower by
])
def test_ratio_interval(r: float, lo: float, hi: float, signed: bool, want: str) -> None:
    assert ratio_interval(r, lo, hi, signed=signed) == want


def test_a_wide_unresolved_verdict_reads_as_a_multiple() -> None:
    """Three noisy values a side, B about 3× A: unresolved, its interval a multiple across 1."""
    v = compare_axis([10.0, 30.0, 90.0], [30.0, 90.0, 270.0], axis="gen_tps", better="higher")
    assert v.verdict == "unresolved" and v.ci_low is not None and v.ci_low < 1 / 1.5
    assert v.text.startswith("unresolved: [0.") and "×]" in v.text and "%]" not in v.text, v.text
