"""The one interval notation (benchd.stats.notation): verdicts and sentences write a ratio's interval alike."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchd.stats import notation
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
    (1.001, 0.9996, 1.002, True, "0.0–+0.2 %"),  # an end that rounds to zero has no sign: not "−0.0"
])
def test_ratio_interval(r: float, lo: float, hi: float, signed: bool, want: str) -> None:
    assert ratio_interval(r, lo, hi, signed=signed) == want


def test_an_unsigned_end_that_rounds_to_zero_has_no_sign() -> None:
    assert notation.fmt_interval(-0.01, 3.2, "%") == "0.0–3.2 %"


def test_a_wide_unresolved_verdict_reads_as_a_multiple() -> None:
    """Three noisy values a side, B about 3× A: unresolved, its interval a multiple across 1."""
    v = compare_axis([10.0, 30.0, 90.0], [30.0, 90.0, 270.0], axis="gen_tps", better="higher")
    assert v.verdict == "unresolved" and v.ci_low is not None and v.ci_low < 1 / 1.5
    assert v.text.startswith("unresolved: [0.") and "×]" in v.text and "%]" not in v.text, v.text


@pytest.mark.parametrize(("fmt", "want"), [
    (lambda: notation.plural(1, "probe"), "1 probe"),
    (lambda: notation.plural(1200, "axis", "axes"), "1,200 axes"),
    (lambda: notation.fmt_bytes(1.5 * (1 << 30)), "1.50 GiB"),
    (lambda: notation.fmt_bytes(512), "512 B"),
    (lambda: notation.fmt_duration(3902), "1h05m"),
    (lambda: notation.fmt_duration(182), "3m02s"),
    (lambda: notation.fmt_duration(48.4), "48s"),
    (lambda: notation.fmt_duration(None), "?"),
    (lambda: notation.n_more(1, "rounds"), "1 more round"),
    (lambda: notation.n_more(1, "[ready] starts"), "1 more [ready] start"),  # a lever's name, at one
    (lambda: notation.n_more(5, "[sustained] runs"), "5 more [sustained] runs"),
    (lambda: notation.n_more(1, "chunks ([kld] tokens or a longer corpus)"), "1 more chunk ([kld] tokens or a longer corpus)"),
    (lambda: notation.n_more(1_200, "shared tasks"), "1,200 more shared tasks"),
])
def test_counts_bytes_and_durations_are_written_once_for_every_stage(fmt: Callable[[], str], want: str) -> None:
    assert fmt() == want


def test_a_count_of_more_samples_has_its_thousands_separator() -> None:
    """Warm starts of 10 s and 11 s a side, their 10 % margin barely overlapped: the advice names over a
    thousand more starts, written `1,671`, as every other count is; past its estimate's bound, `10,000`."""
    a = [10.28, 9.58, 9.8, 10.11, 9.7, 9.98, 10.05, 9.75]
    b = [10.92, 10.6, 11.08, 10.93, 10.57, 11.47, 10.89, 10.57]
    v = compare_axis(a, b, axis="ready_s", better="lower", margin_pct=10)
    assert v.rounds_to_resolve == 1671 and "about 1,671 more [ready] starts" in v.text, v.text
    far = compare_axis([100.0, 101.0, 99.0, 100.5, 99.5, 100.2],
                       [102.1656, 102.7767, 101.0451, 101.9619, 101.6563, 102.4712], axis="gen_tps", better="higher")
    assert far.rounds_to_resolve is None and "more than 10,000 more rounds" in far.text, far.text  # estimate ≈ margin
