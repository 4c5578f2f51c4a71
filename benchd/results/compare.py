"""Compare two runbooks cell by cell: medians side by side, ratio B/A, and the one comparison's verdict.

Each metric of each cell shared by the two runbooks is one question to `comparison.compare_axis` at
α (different / tied / unresolved, with the ratio's CI; the runbook's `target_ci_pct` is the margin).
Two runbooks are two sessions, so their probes are never paired. What makes the two not like for like
(machine, grid, prompts, cooldown, models, servers, builds) is listed first.
"""

from __future__ import annotations

import statistics
from typing import TypedDict

from msgspec import Struct

from benchd.results.evalcompare import EvalComparison, compare_evals
from benchd.schemas import Fingerprint, Row, Runbook
from benchd.servers.fingerprint import changed_kinds, changes, runbook_fingerprint
from benchd.stats.comparison import (
    ALPHA,
    AXES,
    DEFAULT_MARGIN_PCT,
    AxisVerdict,
    compare_axis,
    compare_metrics,
)

TEST_NAME = ("the one comparison: 95 % CI of the ratio B/A (Welch on log values) within / outside ±margin, "
             "guarded by the exact Mann–Whitney test")


class MetricComparison(Struct, kw_only=True):
    """One metric of one cell: the medians, their ratio B/A, and the comparison's verdict (`different`,
    `tied`, `unresolved`, or `not measured: why`) with its one-line text; `detail` the full verdict."""

    metric: str
    better: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    ratio_b_over_a: float | None
    verdict: str
    text: str
    b_better: bool | None = None
    detail: AxisVerdict | None = None


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
    """One candidate's time to ready in A and B over its warm or its cold starts (`stats.comparison`)."""

    candidate: str
    cache: str  # "warm" | "cold"
    verdict: AxisVerdict


class ImageComparison(Struct, kw_only=True):
    """One vision candidate's TTFT with the images of one resolution in A and B (`stats.comparison`,
    axis image_ttft_ms@WxH), and the median image tokens of each side (a changed count explains a change)."""

    candidate: str
    resolution: str
    verdict: AxisVerdict
    image_tokens_a: float | None = None
    image_tokens_b: float | None = None


class AgenticComparison(Struct, kw_only=True):
    """One cell's session or concurrency axis in A and B (`stats.comparison`): session_ttft_ms over the
    warm turns' TTFTs, agg_gen_tps@N over the level's batch aggregates."""

    candidate: str
    context: int
    axis: str
    verdict: AxisVerdict


class KldComparison(Struct, kw_only=True):
    """One candidate's KL divergence at one `[kld]` context in A and B (`stats.comparison`, axis kld, over the
    per-chunk mean KLDs); no verdict, with `reason`, when the corpus or the reference's model differ (the
    figures then measure different things)."""

    candidate: str
    context: int
    verdict: AxisVerdict | None = None
    reason: str | None = None


class Comparison(Struct, kw_only=True):
    a: str
    b: str
    test: str
    alpha: float
    margin_pct: float
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
    kld: list[KldComparison] = []
    #: Where `alpha` comes from ("fixed", "the stop rule's: ...", "given").
    alpha_source: str | None = None


class _Medians(TypedDict):
    """The MetricComparison fields known before the comparison."""

    metric: str
    better: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    ratio_b_over_a: float | None


def _samples(rb: Runbook) -> dict[tuple[str, int], list[Row]]:
    cells: dict[tuple[str, int], list[Row]] = {}
    for r in rb.rows:
        if r.kind == "probe" and r.status == "ok" and not r.short:
            cells.setdefault((r.candidate, r.context), []).append(r)
    return cells


def compare_metric(metric: str, better: str, ra: list[Row], rb_: list[Row], *,
                   margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA) -> MetricComparison:
    """One metric of one cell of A (`ra`) against B (`rb_`): ok probe rows of each side."""
    a = [float(v) for r in ra if (v := getattr(r, metric, None)) is not None]
    b = [float(v) for r in rb_ if (v := getattr(r, metric, None)) is not None]
    med_a = statistics.median(a) if a else None
    med_b = statistics.median(b) if b else None
    ratio = med_b / med_a if med_a not in (None, 0) and med_b is not None else None
    base = _Medians(metric=metric, better=better, n_a=len(a), n_b=len(b), median_a=med_a,
                    median_b=med_b, ratio_b_over_a=ratio)
    if not a or not b:
        reasons = {getattr(r, "null_reasons", {}).get(metric) for r in [*ra, *rb_]} - {None}
        verdict = "not measured" + (f": {'; '.join(sorted(str(x) for x in reasons))}" if reasons else "")
        return MetricComparison(verdict=verdict, text=verdict, **base)
    v = compare_axis(a, b, axis=metric, better="lower" if better == "lower" else "higher",
                     margin_pct=margin_pct, alpha=alpha)
    return MetricComparison(verdict=v.verdict, text=v.text, b_better=v.b_better, detail=v, **base)


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


def _image_samples(rb: Runbook) -> dict[tuple[str, str], list[Row]]:
    out: dict[tuple[str, str], list[Row]] = {}
    for r in rb.rows:
        if r.kind == "vision" and r.status == "ok" and r.image_ttft_ms is not None and r.image_width and r.image_height:
            out.setdefault((r.candidate, f"{r.image_width}x{r.image_height}"), []).append(r)
    return out


def compare_images(a: Runbook, b: Runbook) -> list[ImageComparison]:
    """Per (vision candidate, resolution) with ok image probes on both sides: image_ttft_ms, B against A."""
    from benchd.stats.axes import image_axis

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
            verdict=compare_axis([t for r in ra if (t := r.image_ttft_ms) is not None],  # all are (_image_samples)
                                 [t for r in rb_ if (t := r.image_ttft_ms) is not None], axis=axis.name,
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


def _kld_mismatch(a: Runbook, b: Runbook) -> str | None:
    """Why A's and B's KLDs are not against the same thing (corpus text, reference model), or None."""
    ca, cb = a.kld_corpus, b.kld_corpus
    if ca is None or cb is None or ca.sha256 != cb.sha256:
        return "the corpora differ (sha256 " + " vs ".join(c.sha256[:12] if c else "unknown" for c in (ca, cb)) + ")"
    refs = []
    for rb in (a, b):
        ref = rb.sweep.kld.reference
        refs.append(next((c.model.sha256 for c in rb.provenance.candidates if c.candidate == ref), None))
    if refs[0] is None or refs[0] != refs[1]:
        return ("the references' models differ (sha256 " + " vs ".join(str(r)[:12] for r in refs) + ")")
    return None


def compare_kld(a: Runbook, b: Runbook, alpha: float = ALPHA) -> list[KldComparison]:
    """Per (candidate, `[kld]` context) scored ok on both sides: its per-chunk mean KLDs, B against A
    through the one comparison at the axis's margin (A's sweep `margins` override it); none when the
    corpus or the reference's model differ (`reason`)."""
    from benchd.stats.axes import margin as axis_margin

    def ok(rb: Runbook) -> dict[tuple[str, int], list[float]]:
        return {(r.candidate, r.context): list(r.chunk_kld) for r in rb.kld if r.status == "ok" and r.chunk_kld}

    ka, kb = ok(a), ok(b)
    shared = sorted(set(ka) & set(kb))
    why = _kld_mismatch(a, b) if shared else None
    return [KldComparison(candidate=c, context=x, reason=why, verdict=None if why else compare_axis(
                ka[(c, x)], kb[(c, x)], axis="kld", better=AXES["kld"].better, alpha=alpha,
                margin_pct=axis_margin("kld", dict(a.sweep.margins))))
            for c, x in shared]


def compare_runbooks(a: Runbook, b: Runbook, alpha: float | None = None, margin_pct: float | None = None) -> Comparison:
    """Every cell both runbooks have, every compared metric, one question each at `alpha` (default: the
    stop rule's α when either sweep stopped at planned looks, else 0.05); each metric's margin is the
    axis table's (A's sweep `margins` override it) unless `margin_pct` is given."""
    from benchd.results.pareto import view_alpha
    from benchd.stats.axes import margin as axis_margin

    sa, sb = _samples(a), _samples(b)
    source = "given"
    if alpha is None:
        (alpha_a, src_a), (alpha_b, src_b) = (view_alpha(rb.sweep, rb.design.order if rb.design else None)
                                              for rb in (a, b))
        alpha, source = min((alpha_a, src_a), (alpha_b, src_b))
    margin = DEFAULT_MARGIN_PCT if margin_pct is None else margin_pct

    def m_of(name: str) -> float:
        return axis_margin(name, dict(a.sweep.margins)) if margin_pct is None else margin_pct
    keys_a = {(r.candidate, r.context) for r in a.rows if r.kind == "probe"}
    keys_b = {(r.candidate, r.context) for r in b.rows if r.kind == "probe"}
    cells = [
        CellComparison(candidate=c, context=x, metrics=[
            compare_metric(m.name, m.better, sa.get((c, x), []), sb.get((c, x), []), margin_pct=m_of(m.name),
                           alpha=alpha)
            for m in compare_metrics() if m.name in Row.__struct_fields__])
        for c, x in sorted(keys_a & keys_b)
    ]
    return Comparison(
        a=a.id, b=b.id, test=TEST_NAME, alpha=alpha, margin_pct=margin, alpha_source=source,
        warnings=comparability_warnings(a, b), cells=cells,
        only_in_a=[f"{c}@{x}" for c, x in sorted(keys_a - keys_b)],
        only_in_b=[f"{c}@{x}" for c, x in sorted(keys_b - keys_a)], builds=compare_builds(a, b),
        ready=compare_ready(a, b),
        evals=compare_evals(a, b), images=compare_images(a, b), agentic=compare_agentic(a, b),
        kld=compare_kld(a, b, alpha),
    )
