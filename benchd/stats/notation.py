"""How figures are written, once for every stage: a ratio B/A and its interval (a multiple from MULTIPLE_AT on,
else a percentage), a byte count, a duration, a count with its noun."""

from __future__ import annotations

MINUS = "\N{MINUS SIGN}"
MULTIPLE_AT = 1.5


def fmt_signed(v: float, digits: int = 1) -> str:
    """`+1.3`, `−0.4`, and `0.0` where it rounds to zero (never `−0.0`): a signed change, with a minus sign."""
    txt = f"{v:+.{digits}f}"
    return f"{0:.{digits}f}" if float(txt) == 0 else txt.replace("-", MINUS)


def fmt_interval(low: float, high: float, unit: str, *, signed: bool = False) -> str:
    """`1.1–13×`, `0.36–23×`, `1.0–7.5 %`, signed `−1.0–+1.3 %` (an interval across 0), `−5.0–+45 pp`."""
    def one(v: float) -> str:
        if unit == "×" and abs(v) < 1:
            return f"{v:.2g}"
        digits = 1 if abs(v) < 10 else 0
        return fmt_signed(v, digits) if signed else fmt_signed(v, digits).lstrip("+")
    return f"{one(low)}–{one(high)}{'' if unit == '×' else ' '}{unit}"


def ratio_amount(r: float) -> tuple[str, bool]:
    """(`3.7×` or `4.2 %`, B's value is the higher) for a ratio B/A."""
    up = r >= 1
    f = r if up else 1 / r
    return (f"{f:.1f}×" if f < 10 else f"{f:.0f}×") if f >= MULTIPLE_AT else f"{abs(r - 1) * 100:.1f} %", up


def ratio_interval(r: float, lo: float, hi: float, *, signed: bool) -> str:
    """In the estimate's frame (`1.1–13×`, `1.0–7.5 %`); `signed` or across 1: `−1.0–+1.3 %`, wide `0.36–23×`."""
    if signed or lo < 1 <= hi:
        if 1 / MULTIPLE_AT < lo and hi < MULTIPLE_AT:
            return fmt_interval((lo - 1) * 100, (hi - 1) * 100, "%", signed=True)
        return fmt_interval(lo, hi, "×")
    up = r >= 1
    if (r if up else 1 / r) >= MULTIPLE_AT:
        return fmt_interval(lo, hi, "×") if up else fmt_interval(1 / hi, 1 / lo, "×")
    return fmt_interval((lo - 1) * 100, (hi - 1) * 100, "%") if up else fmt_interval((1 - hi) * 100, (1 - lo) * 100, "%")


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 more round`, `2 more rounds`: the count and the word in its number (`words` when not word + s)."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def n_more(n: int, things: str) -> str:
    """`1 more [ready] start`, `5 more [sustained] runs`: a count of a plural phrase (a lever), singular at one."""
    words = things.split(" ")
    at = next((i for i, w in enumerate(words) if w.endswith("s") and not w.startswith("[")), None)
    one = things if at is None else " ".join([*words[:at], words[at][:-1], *words[at + 1:]])
    return plural(n, f"more {one}", f"more {things}")


#: Binary units, largest first: a byte count reads in the largest unit it reaches.
BYTE_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def fmt_bytes(v: float, digits: int = 2) -> str:
    """`1.50 GiB`, `12.00 MiB`, `512 B`: binary units, `digits` decimals."""
    for unit, scale in BYTE_UNITS:
        if abs(v) >= scale:
            return f"{v / scale:.{digits}f} {unit}"
    return f"{v:.0f} B"


def fmt_duration(seconds: float | None) -> str:
    """`1h05m`, `3m02s`, `48s`; `?` for None."""
    if seconds is None:
        return "?"
    h, rem = divmod(round(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")
