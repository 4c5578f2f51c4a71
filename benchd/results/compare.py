"""Compare two runbooks cell by cell: medians side by side, ratio B/A, and a significance call.

The test is the exact two-sided Mann–Whitney U (Wilcoxon rank-sum) test at α = 0.05 on the probe
values of a cell: distribution-free (probe timings are not normal, and a handful of probes cannot show
that they are), exact (the permutation distribution of the rank sum is enumerated, ties included by
mid-ranks, so no normal approximation is trusted at n = 3..10). With n probes per side the smallest
two-sided p-value it can ever give is 2 / C(2n, n): 0.1 at n = 3, 0.029 at n = 4, so it needs at least
`min_probes_per_side()` (= 4 at α = 0.05) per side; below that the verdict is "too few probes to call
a difference", never a guess. No scipy: the distribution is counted by dynamic programming.

Ties are ties: a difference counts only beyond the noise — the two cells' distribution-free
95 % CIs of the median do not overlap (or, for cells too small for a CI, the exact test is
significant) — and larger than the sweep's
`target_ci_pct` (the precision the user asked for: a 0.8 % gap is not a finding when every cell was
measured to ±2 %). Otherwise the verdict is `tied`, with why. `beyond_noise` is the one rule; the
Pareto view uses it too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from fractions import Fraction
from math import comb
from typing import Any

from msgspec import Struct

from benchd.engine.metrics import median_ci
from benchd.results.comparison import AXES, AxisVerdict, compare_axis
from benchd.results.evalcompare import EvalComparison, compare_evals
from benchd.schemas import Fingerprint, Runbook
from benchd.servers.fingerprint import changed_kinds, changes, runbook_fingerprint

ALPHA = 0.05
TEST_NAME = "Mann–Whitney U (Wilcoxon rank-sum), exact, two-sided"
TOO_FEW = "too few probes to call a difference"
TIED = "tied"
#: The practical margin when a runbook names none (the default `target_ci_pct`).
DEFAULT_MARGIN_PCT = 2.0
#: Metrics compared, with the direction that is better.
METRICS: tuple[tuple[str, str], ...] = (
    ("gen_tps", "higher"), ("prompt_tps", "higher"), ("ttft_ms", "lower"), ("mem_peak_bytes", "lower"),
    ("j_per_gen_token", "lower"),
)
#: Exact enumeration up to this many pooled probes; beyond, the rank-sum DP would be slow in Python.
EXACT_LIMIT = 80


def min_p_value(n1: int, n2: int) -> float:
    """The smallest two-sided exact p-value possible with these sample sizes (complete separation)."""
    if n1 == 0 or n2 == 0:
        return 1.0
    return min(1.0, 2 / comb(n1 + n2, n1))


def min_probes_per_side(alpha: float = ALPHA) -> int:
    """The fewest probes per side (equal sizes) with which the exact test can ever reach `alpha`."""
    n = 1
    while min_p_value(n, n) > alpha:
        n += 1
    return n


def _midranks2(values: Sequence[float]) -> list[int]:
    """Twice the mid-ranks (1-based) of `values`: integers even with ties."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks2 = [0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        r2 = (i + 1) + (j + 1)  # 2 × mean of ranks i+1..j+1
        for k in range(i, j + 1):
            ranks2[order[k]] = r2
        i = j + 1
    return ranks2


def mann_whitney_exact(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(U of `a`, exact two-sided p-value) under the permutation distribution of the rank sum.

    Counts, over every way of choosing len(a) of the pooled mid-ranks, how often the rank sum is at
    least as far from its mean as observed. Ties are handled exactly (conditional on the tie pattern).
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    if n1 + n2 > EXACT_LIMIT:
        raise ValueError(f"exact test limited to {EXACT_LIMIT} pooled values")
    ranks2 = _midranks2([*a, *b])
    w2 = sum(ranks2[:n1])
    u = w2 / 2 - n1 * (n1 + 1) / 2
    # dp[k][s] = number of k-subsets of the ranks seen so far with doubled rank sum s
    dp: list[dict[int, int]] = [{} for _ in range(n1 + 1)]
    dp[0][0] = 1
    for r in ranks2:
        for k in range(min(n1, len(ranks2)) - 1, -1, -1):
            for s, cnt in dp[k].items():
                dp[k + 1][s + r] = dp[k + 1].get(s + r, 0) + cnt
    total = comb(n1 + n2, n1)
    mean2 = Fraction(n1 * sum(ranks2), n1 + n2)
    dev = abs(w2 - mean2)
    extreme = sum(cnt for s, cnt in dp[n1].items() if abs(s - mean2) >= dev)
    return u, min(1.0, extreme / total)


def beyond_noise(a: Sequence[float], b: Sequence[float], margin_pct: float = DEFAULT_MARGIN_PCT) -> tuple[bool, str]:
    """Whether the medians of `a` and `b` differ by more than the noise, and why (or why not).

    Beyond the noise = the two 95 % CIs of the median do not overlap (both cells have six values or
    more), or — where a cell is too small for a CI but the exact test can reach α — a Mann–Whitney
    p < α; and in either case the medians differ by more than `margin_pct` %. The CI comes first on
    purpose: a wide (unsteady) cell must not win on a rank test its spread makes meaningless.
    """
    if not a or not b:
        return False, "not measured on one side"
    ma, mb = statistics.median(a), statistics.median(b)
    rel = abs(mb - ma) / abs(ma) * 100 if ma else (0.0 if mb == ma else math.inf)
    ca, cb = median_ci(a), median_ci(b)
    if ca is not None and cb is not None:
        if not (ca[1] < cb[0] or cb[1] < ca[0]):
            return False, f"95 % CIs overlap; medians {rel:.1f} % apart"
        how = "95 % CIs apart"
    elif min_p_value(len(a), len(b)) <= ALPHA and len(a) + len(b) <= EXACT_LIMIT:
        p = mann_whitney_exact(a, b)[1] if ma != mb else 1.0
        if p >= ALPHA:
            return False, f"Mann–Whitney p = {p:.3g}; medians {rel:.1f} % apart"
        how = f"Mann–Whitney p = {p:.3g}"
    else:
        return False, f"too few probes to tell ({len(a)} vs {len(b)})"
    if rel <= margin_pct:
        return False, f"medians {rel:.1f} % apart ({how}), within the ±{margin_pct:g} % target"
    return True, f"medians {rel:.1f} % apart ({how})"


class MetricComparison(Struct, kw_only=True):
    metric: str
    better: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    ratio_b_over_a: float | None
    p_value: float | None
    verdict: str  # "B better" | "B worse" | TIED | TOO_FEW | "not measured: ..."
    why: str | None = None


class CellComparison(Struct, kw_only=True):
    candidate: str
    context: int
    metrics: list[MetricComparison]


class BuildComparison(Struct, kw_only=True):
    """One candidate's fingerprints in A and B, and what changed between them (binary, version, model, args)."""

    candidate: str
    a: Fingerprint | None
    b: Fingerprint | None
    changed: list[str]
    changes: list[str]


class ReadyComparison(Struct, kw_only=True):
    """One candidate's time to ready in A and B over its warm or its cold starts (`results.comparison`)."""

    candidate: str
    cache: str  # "warm" | "cold"
    verdict: AxisVerdict


class ImageComparison(Struct, kw_only=True):
    """One vision candidate's TTFT with the images of one resolution in A and B (`results.comparison`,
    axis image_ttft_ms@WxH), and the median image tokens of each side (a changed count explains a change)."""

    candidate: str
    resolution: str
    verdict: AxisVerdict
    image_tokens_a: float | None = None
    image_tokens_b: float | None = None


class AgenticComparison(Struct, kw_only=True):
    """One cell's session or concurrency axis in A and B (`results.comparison`): session_ttft_ms over the
    warm turns' TTFTs, agg_gen_tps@N over the level's batch aggregates."""

    candidate: str
    context: int
    axis: str
    verdict: AxisVerdict


class Comparison(Struct, kw_only=True):
    a: str
    b: str
    test: str
    alpha: float
    min_probes_per_side: int
    warnings: list[str]
    cells: list[CellComparison]
    only_in_a: list[str]
    only_in_b: list[str]
    builds: list[BuildComparison] = []
    ready: list[ReadyComparison] = []
    #: Public eval suites per candidate, paired on shared task ids (`evalcompare`).
    evals: list[EvalComparison] = []
    images: list[ImageComparison] = []
    agentic: list[AgenticComparison] = []


def _samples(rb: Runbook) -> dict[tuple[str, int], list[Any]]:
    cells: dict[tuple[str, int], list[Any]] = {}
    for r in rb.rows:
        if r.kind == "probe" and r.status == "ok" and not r.short:
            cells.setdefault((r.candidate, r.context), []).append(r)
    return cells


def _compare_metric(metric: str, better: str, ra: list[Any], rb_: list[Any],
                    margin_pct: float = DEFAULT_MARGIN_PCT) -> MetricComparison:
    a = [float(v) for r in ra if (v := getattr(r, metric)) is not None]
    b = [float(v) for r in rb_ if (v := getattr(r, metric)) is not None]
    med_a = statistics.median(a) if a else None
    med_b = statistics.median(b) if b else None
    ratio = med_b / med_a if med_a not in (None, 0) and med_b is not None else None
    p: float | None = None
    why: str | None = None
    if not a or not b:
        reasons = {getattr(r, "null_reasons", {}).get(metric) for r in [*ra, *rb_]} - {None}
        verdict = "not measured" + (f": {'; '.join(sorted(str(x) for x in reasons))}" if reasons else "")
    elif len(a) + len(b) > EXACT_LIMIT:
        verdict = "too many probes for the exact test"
    elif min_p_value(len(a), len(b)) > ALPHA and (median_ci(a) is None or median_ci(b) is None):
        verdict = TOO_FEW
    else:
        if min_p_value(len(a), len(b)) <= ALPHA:
            _, p = mann_whitney_exact(a, b)
        beyond, why = beyond_noise(a, b, margin_pct)
        if not beyond:
            verdict = TIED
        else:
            b_higher = (med_b or 0) > (med_a or 0)
            verdict = "B better" if b_higher == (better == "higher") else "B worse"
    return MetricComparison(metric=metric, better=better, n_a=len(a), n_b=len(b), median_a=med_a,
                            median_b=med_b, ratio_b_over_a=ratio, p_value=p, verdict=verdict, why=why)


_MACHINE_FIELDS = ("hardware_model", "chip", "cpu_model", "cores_logical", "cores_physical", "memory_bytes",
                   "os", "os_version", "kernel", "arch")


def comparability_warnings(a: Runbook, b: Runbook) -> list[str]:
    """What makes the two runbooks not like for like: machine, grid, prompts, cooldown, models, servers."""
    out: list[str] = []
    ma, mb = a.provenance.machine, b.provenance.machine
    diff = [f"{f}: {getattr(ma, f)!r} vs {getattr(mb, f)!r}" for f in _MACHINE_FIELDS if getattr(ma, f) != getattr(mb, f)]
    if diff:
        out.append("machines differ (" + "; ".join(diff) + ")")
    if ma.power_source != mb.power_source:
        out.append(f"power source differs: {ma.power_source!r} vs {mb.power_source!r}")
    sa, sb = a.sweep, b.sweep
    grid = [(name, x, y) for name, x, y in (
        ("contexts", sa.contexts, sb.contexts), ("gen_tokens", sa.gen_tokens, sb.gen_tokens),
        ("probes", sa.probes, sb.probes), ("warmup", sa.warmup, sb.warmup),
        ("sampling", sa.sampling, sb.sampling), ("eval_tier", sa.eval_tier, sb.eval_tier),
        ("thinking", sa.thinking, sb.thinking), ("ignore_eos", sa.ignore_eos, sb.ignore_eos)) if x != y]
    if grid:
        out.append("grids differ (" + "; ".join(f"{n}: {x} vs {y}" for n, x, y in grid) + ")")
    pa, pb = a.provenance.prompts.corpus_sha256, b.provenance.prompts.corpus_sha256
    if pa is None or pb is None:
        out.append("prompt hashes unknown for " + " and ".join(
            x for x, h in (("A", pa), ("B", pb)) if h is None) + ": cannot tell whether the prompts match")
    elif pa != pb:
        out.append(f"prompt hashes differ: {pa[:12]} vs {pb[:12]}")
    ea, eb = a.provenance.energy.source, b.provenance.energy.source
    if ea != eb:
        out.append(f"energy sources differ: {ea!r} vs {eb!r} (J/token is not comparable across counters)")
    if sa.cooldown != sb.cooldown:
        out.append(f"cooldown policies differ: {sa.cooldown} vs {sb.cooldown}")
    cb = {c.candidate: c for c in b.provenance.candidates}
    for ca in a.provenance.candidates:
        other = cb.get(ca.candidate)
        if other is None:
            continue
        if ca.model.sha256 != other.model.sha256:
            out.append(f"{ca.candidate}: model sha256 differs ({str(ca.model.sha256)[:12]} vs {str(other.model.sha256)[:12]})")
        if ca.server_version != other.server_version:
            out.append(f"{ca.candidate}: server version differs ({ca.server_version} vs {other.server_version})")
        ta, tb = _thinking_seen(a, ca.candidate), _thinking_seen(b, ca.candidate)
        if ta and tb and ta != tb:
            out.append(f"{ca.candidate}: thinking {'/'.join(ta)} vs {'/'.join(tb)}: one side's rates count "
                       "reasoning tokens the other did not generate")
    return out


def compare_builds(a: Runbook, b: Runbook) -> list[BuildComparison]:
    """Per candidate in both runbooks: the two fingerprints and what changed (comparing two builds)."""
    ids_b = {c.candidate for c in b.provenance.candidates}
    out = []
    for cand in (c.candidate for c in a.provenance.candidates if c.candidate in ids_b):
        fa, fb = runbook_fingerprint(a, cand), runbook_fingerprint(b, cand)
        both = fa is not None and fb is not None
        out.append(BuildComparison(candidate=cand, a=fa, b=fb, changed=changed_kinds(fa, fb) if both else [],  # type: ignore[arg-type]
                                   changes=changes(fa, fb) if both else []))  # type: ignore[arg-type]
    return out


def _thinking_seen(rb: Runbook, candidate: str) -> list[str]:
    """The thinking states a candidate's ok probe rows observed (sorted)."""
    return sorted({r.thinking for r in rb.rows if r.candidate == candidate and r.kind == "probe"
                   and r.status == "ok" and r.thinking})


def compare_ready(a: Runbook, b: Runbook) -> list[ReadyComparison]:
    """Per candidate in both runbooks with starts on both sides: ready_s of the warm starts, and of the
    cold ones, B against A through the one comparison."""
    out = []
    ids_b = {s.candidate for s in b.ready}
    for cand in sorted({s.candidate for s in a.ready} & ids_b):
        for cache in ("warm", "cold"):
            xa = [s.ready_s for s in a.ready if s.candidate == cand and s.cache == cache and s.ready_s]
            xb = [s.ready_s for s in b.ready if s.candidate == cand and s.cache == cache and s.ready_s]
            if xa or xb:
                out.append(ReadyComparison(candidate=cand, cache=cache, verdict=compare_axis(
                    xa, xb, axis="ready_s", better=AXES["ready_s"].better)))
    return out


def _image_samples(rb: Runbook) -> dict[tuple[str, str], list[Any]]:
    out: dict[tuple[str, str], list[Any]] = {}
    for r in rb.rows:
        if r.kind == "vision" and r.status == "ok" and r.image_ttft_ms is not None and r.image_width and r.image_height:
            out.setdefault((r.candidate, f"{r.image_width}x{r.image_height}"), []).append(r)
    return out


def compare_images(a: Runbook, b: Runbook) -> list[ImageComparison]:
    """Per (vision candidate, resolution) with ok image probes on both sides: image_ttft_ms, B against A."""
    from benchd.results.axes import image_axis

    sa, sb = _image_samples(a), _image_samples(b)
    out = []
    for cand, res in sorted(set(sa) & set(sb)):
        ra, rb_ = sa[(cand, res)], sb[(cand, res)]
        w, h = (int(x) for x in res.split("x"))
        axis = image_axis(w, h)
        toks_a = [r.image_tokens for r in ra if r.image_tokens is not None]
        toks_b = [r.image_tokens for r in rb_ if r.image_tokens is not None]
        out.append(ImageComparison(
            candidate=cand, resolution=res,
            verdict=compare_axis([r.image_ttft_ms for r in ra], [r.image_ttft_ms for r in rb_], axis=axis.name,
                                 better=axis.better, margin_pct=a.sweep.probe_plan().target_ci_pct),
            image_tokens_a=statistics.median(toks_a) if toks_a else None,
            image_tokens_b=statistics.median(toks_b) if toks_b else None))
    return out


def compare_agentic(a: Runbook, b: Runbook) -> list[AgenticComparison]:
    """Per cell with session or parallel rows on both sides: the session and level axes, B against A
    (the samples the Pareto view's noise rule uses, `pareto.cell_samples`)."""
    from benchd.results.agentic import samples

    sa, sb = samples(a.rows), samples(b.rows)
    out = []
    for ctx, cand in sorted(set(sa) & set(sb)):
        for axis in sorted(set(sa[(ctx, cand)]) & set(sb[(ctx, cand)])):
            out.append(AgenticComparison(candidate=cand, context=ctx, axis=axis, verdict=compare_axis(
                    sa[(ctx, cand)][axis], sb[(ctx, cand)][axis], axis=axis, better=AXES[axis].better,
                    margin_pct=a.sweep.probe_plan().target_ci_pct)))
    return out


def compare_runbooks(a: Runbook, b: Runbook) -> Comparison:
    sa, sb = _samples(a), _samples(b)
    margin = a.sweep.probe_plan().target_ci_pct
    keys_a = {(r.candidate, r.context) for r in a.rows if r.kind == "probe"}
    keys_b = {(r.candidate, r.context) for r in b.rows if r.kind == "probe"}
    cells = [
        CellComparison(candidate=c, context=x, metrics=[
            _compare_metric(m, d, sa.get((c, x), []), sb.get((c, x), []), margin) for m, d in METRICS])
        for c, x in sorted(keys_a & keys_b)
    ]
    return Comparison(
        a=a.id, b=b.id, test=TEST_NAME, alpha=ALPHA, min_probes_per_side=min_probes_per_side(ALPHA),
        warnings=comparability_warnings(a, b), cells=cells,
        only_in_a=[f"{c}@{x}" for c, x in sorted(keys_a - keys_b)],
        only_in_b=[f"{c}@{x}" for c, x in sorted(keys_b - keys_a)], builds=compare_builds(a, b),
        ready=compare_ready(a, b),
        evals=compare_evals(a, b), images=compare_images(a, b), agentic=compare_agentic(a, b),
    )
