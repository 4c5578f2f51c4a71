"""Compare two runbooks cell by cell: medians side by side, ratio B/A, and the one comparison's verdict
per metric (two sessions: probes never paired); what makes the two not like for like is listed first.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import msgspec
from msgspec import Struct

from benchd.results.evalcompare import EvalComparison, compare_evals
from benchd.results.ready import ready_times
from benchd.schemas import CandidateProvenance, Fingerprint, ReadyStart, Row, Runbook
from benchd.servers.fingerprint import changed_kinds, changes, runbook_fingerprint
from benchd.stats.axes import image_axis
from benchd.stats.axes import margin as axis_margin
from benchd.stats.comparison import (
    ALPHA,
    AXES,
    DEFAULT_MARGIN_PCT,
    AxisVerdict,
    compare_axis,
    compare_metrics,
)
from benchd.stats.rows import usable

TEST_NAME = ("the one comparison: 95 % CI of the ratio B/A (Welch on log values) within / outside ±margin, "
             "guarded by the exact Mann–Whitney test")


class MetricComparison(Struct, kw_only=True):
    """One metric of one cell: medians, ratio B/A, verdict (or `not measured: why`, why in `null_reason`), `detail`."""

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
    null_reason: str | None = None


class CellComparison(Struct, kw_only=True):
    candidate: str
    context: int
    metrics: list[MetricComparison]


class BuildComparison(Struct, kw_only=True):

    candidate: str
    a: Fingerprint | None
    b: Fingerprint | None
    changed: list[str]
    changes: list[str]


class ReadyComparison(Struct, kw_only=True):

    candidate: str
    cache: str  # "warm" | "cold"
    verdict: AxisVerdict


class ImageComparison(Struct, kw_only=True):
    """One vision candidate's TTFT with one resolution's images in A and B, and each side's median image tokens."""

    candidate: str
    resolution: str
    verdict: AxisVerdict
    image_tokens_a: float | None = None
    image_tokens_b: float | None = None


class AgenticComparison(Struct, kw_only=True):

    candidate: str
    context: int
    axis: str
    verdict: AxisVerdict


class KldComparison(Struct, kw_only=True):
    """A candidate's KL divergence at a `[kld]` context in A and B (no verdict, a `reason`: corpus or reference differ)."""

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
    #: Runbook A's per-axis margins that replace `margin_pct` on their axes (none when a margin was given).
    margins: dict[str, float] = {}


def _samples(rb: Runbook) -> dict[tuple[str, int], list[Row]]:
    cells: dict[tuple[str, int], list[Row]] = {}
    for r in rb.rows:
        if usable(r):
            cells.setdefault((r.candidate, r.context), []).append(r)
    return cells


def _null_reason(metric: str, rows: list[Row]) -> str | None:
    reasons = {getattr(r, "null_reasons", {}).get(metric) for r in rows} - {None}
    return "; ".join(sorted(str(x) for x in reasons)) or None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def compare_metric(metric: str, better: str, ra: list[Row], rb_: list[Row], *,
                   margin_pct: float = DEFAULT_MARGIN_PCT, alpha: float = ALPHA) -> MetricComparison:
    """One metric of one cell of A (`ra`) against B (`rb_`): ok probe rows of each side."""
    a = [float(v) for r in ra if (v := getattr(r, metric, None)) is not None]
    b = [float(v) for r in rb_ if (v := getattr(r, metric, None)) is not None]
    med_a, med_b = _median(a), _median(b)
    ratio = med_b / med_a if med_a not in (None, 0) and med_b is not None else None
    medians = MetricComparison(metric=metric, better=better, n_a=len(a), n_b=len(b), median_a=med_a,
                               median_b=med_b, ratio_b_over_a=ratio, verdict="", text="")
    if not a or not b:
        why = _null_reason(metric, [*ra, *rb_])
        verdict = "not measured" + (f": {why}" if why else "")
        return msgspec.structs.replace(medians, verdict=verdict, text=verdict, null_reason=why)
    v = compare_axis(a, b, axis=metric, better="lower" if better == "lower" else "higher",
                     margin_pct=margin_pct, alpha=alpha)
    return msgspec.structs.replace(medians, verdict=v.verdict, text=v.text, b_better=v.b_better, detail=v)


_MACHINE_FIELDS = ("hardware_model", "chip", "cpu_model", "cores_logical", "cores_physical", "memory_bytes",
                   "os", "os_version", "kernel", "arch")


def _machine_warnings(a: Runbook, b: Runbook) -> list[str]:
    out = []
    ma, mb = a.provenance.machine, b.provenance.machine
    diff = [f"{f}: {getattr(ma, f)!r} vs {getattr(mb, f)!r}" for f in _MACHINE_FIELDS if getattr(ma, f) != getattr(mb, f)]
    if diff:
        out.append("machines differ (" + "; ".join(diff) + ")")
    if ma.power_source != mb.power_source:
        out.append(f"power source differs: {ma.power_source!r} vs {mb.power_source!r}")
    return out


def _grid_warnings(a: Runbook, b: Runbook) -> list[str]:
    sa, sb = a.sweep, b.sweep
    grid = [(name, x, y) for name, x, y in (
        ("contexts", sa.contexts, sb.contexts), ("gen_tokens", sa.gen_tokens, sb.gen_tokens),
        ("probes", sa.probes, sb.probes), ("warmup", sa.warmup, sb.warmup),
        ("sampling", sa.sampling, sb.sampling), ("eval_tier", sa.eval_tier, sb.eval_tier),
        ("thinking", sa.thinking, sb.thinking), ("ignore_eos", sa.ignore_eos, sb.ignore_eos)) if x != y]
    return ["grids differ (" + "; ".join(d for n, x, y in grid for d in _differences(n, x, y)) + ")"] if grid else []


def _differences(name: str, x: object, y: object) -> list[str]:
    """`name: x vs y`, or for two structs one such entry per field that differs (`name.field: ...`)."""
    if isinstance(x, Struct) and type(x) is type(y):
        xs, ys = msgspec.structs.asdict(x), msgspec.structs.asdict(y)
        return [d for f in xs if xs[f] != ys[f] for d in _differences(f"{name}.{f}", xs[f], ys[f])]
    return [f"{name}: {x} vs {y}"]


def _setup_warnings(a: Runbook, b: Runbook) -> list[str]:
    out = []
    pa, pb = a.provenance.prompts.corpus_sha256, b.provenance.prompts.corpus_sha256
    if pa is None or pb is None:
        out.append("prompt hashes unknown for " + " and ".join(
            x for x, h in (("A", pa), ("B", pb)) if h is None) + ": cannot tell whether the prompts match")
    elif pa != pb:
        out.append(f"prompt hashes differ: {pa[:12]} vs {pb[:12]}")
    ea, eb = a.provenance.energy.source, b.provenance.energy.source
    if ea != eb:
        out.append(f"energy sources differ: {ea!r} vs {eb!r} (J/token is not comparable across counters)")
    if a.sweep.cooldown != b.sweep.cooldown:
        out.append("cooldown policies differ (" + "; ".join(_differences("cooldown", a.sweep.cooldown, b.sweep.cooldown)) + ")")
    return out


def _candidate_warnings(a: Runbook, b: Runbook, ca: CandidateProvenance, other: CandidateProvenance) -> list[str]:
    out = []
    if ca.model.sha256 != other.model.sha256:
        out.append(f"{ca.candidate}: model sha256 differs ({str(ca.model.sha256)[:12]} vs {str(other.model.sha256)[:12]})")
    if ca.server_version != other.server_version:
        out.append(f"{ca.candidate}: server version differs ({ca.server_version} vs {other.server_version})")
    ta, tb = _thinking_seen(a, ca.candidate), _thinking_seen(b, ca.candidate)
    if ta and tb and ta != tb:
        out.append(f"{ca.candidate}: thinking {'/'.join(ta)} vs {'/'.join(tb)}: one side's rates count "
                   "reasoning tokens the other did not generate")
    return out


def comparability_warnings(a: Runbook, b: Runbook) -> list[str]:
    """What makes the two runbooks not like for like: machine, grid, prompts, cooldown, models, servers."""
    out = _machine_warnings(a, b) + _grid_warnings(a, b) + _setup_warnings(a, b)
    cb = {c.candidate: c for c in b.provenance.candidates}
    for ca in a.provenance.candidates:
        if ca.candidate in cb:
            out += _candidate_warnings(a, b, ca, cb[ca.candidate])
    return out


def compare_builds(a: Runbook, b: Runbook) -> list[BuildComparison]:
    ids_b = {c.candidate for c in b.provenance.candidates}
    out = []
    for cand in (c.candidate for c in a.provenance.candidates if c.candidate in ids_b):
        fa, fb = runbook_fingerprint(a, cand), runbook_fingerprint(b, cand)
        both = fa is not None and fb is not None
        out.append(BuildComparison(candidate=cand, a=fa, b=fb, changed=changed_kinds(fa, fb) if both else [],  # type: ignore[arg-type]
                                   changes=changes(fa, fb) if both else []))  # type: ignore[arg-type]
    return out


def _thinking_seen(rb: Runbook, candidate: str) -> list[str]:
    return sorted({r.thinking for r in rb.rows if r.candidate == candidate and r.kind == "probe"
                   and r.status == "ok" and r.thinking})


def _starts_of(rb: Runbook, cand: str) -> list[ReadyStart]:
    return [s for s in rb.ready if s.candidate == cand]


def compare_ready(a: Runbook, b: Runbook, alpha: float = ALPHA) -> list[ReadyComparison]:
    """Per candidate with starts on both sides: warm and cold ready_s, B against A, at the axis's margin."""
    out = []
    ids_b = {s.candidate for s in b.ready}
    for cand in sorted({s.candidate for s in a.ready} & ids_b):
        for cache in ("warm", "cold"):
            xa, xb = ready_times(_starts_of(a, cand), cache), ready_times(_starts_of(b, cand), cache)
            if xa or xb:
                out.append(ReadyComparison(candidate=cand, cache=cache, verdict=compare_axis(
                    xa, xb, axis="ready_s", better=AXES["ready_s"].better, alpha=alpha,
                    margin_pct=axis_margin("ready_s", dict(a.sweep.margins)))))
    return out


def _image_samples(rb: Runbook) -> dict[tuple[str, str], list[Row]]:
    out: dict[tuple[str, str], list[Row]] = {}
    for r in rb.rows:
        if r.kind == "vision" and r.status == "ok" and r.image_ttft_ms is not None and r.image_width and r.image_height:
            out.setdefault((r.candidate, f"{r.image_width}x{r.image_height}"), []).append(r)
    return out


def _image_tokens(rows: list[Row]) -> list[int]:
    return [r.image_tokens for r in rows if r.image_tokens is not None]


def compare_images(a: Runbook, b: Runbook, alpha: float = ALPHA) -> list[ImageComparison]:

    sa, sb = _image_samples(a), _image_samples(b)
    out = []
    for cand, res in sorted(set(sa) & set(sb)):
        ra, rb_ = sa[(cand, res)], sb[(cand, res)]
        w, h = (int(x) for x in res.split("x"))
        axis = image_axis(w, h)
        toks_a, toks_b = _image_tokens(ra), _image_tokens(rb_)
        out.append(ImageComparison(
            candidate=cand, resolution=res,
            verdict=compare_axis([t for r in ra if (t := r.image_ttft_ms) is not None],  # all are (_image_samples)
                                 [t for r in rb_ if (t := r.image_ttft_ms) is not None], axis=axis.name,
                                 better=axis.better, margin_pct=axis_margin(axis.name, dict(a.sweep.margins)),
                                 alpha=alpha),
            image_tokens_a=_median(toks_a), image_tokens_b=_median(toks_b)))
    return out


def compare_agentic(a: Runbook, b: Runbook, alpha: float = ALPHA) -> list[AgenticComparison]:
    """Per cell with session or parallel rows on both sides: the session and level axes, B against A."""
    from benchd.results.agentic import samples

    sa, sb = samples(a.rows), samples(b.rows)
    out = []
    for ctx, cand in sorted(set(sa) & set(sb)):
        for axis in sorted(set(sa[(ctx, cand)]) & set(sb[(ctx, cand)])):
            out.append(AgenticComparison(candidate=cand, context=ctx, axis=axis, verdict=compare_axis(
                    sa[(ctx, cand)][axis], sb[(ctx, cand)][axis], axis=axis, better=AXES[axis].better,
                    margin_pct=axis_margin(axis, dict(a.sweep.margins)), alpha=alpha)))
    return out


def _reference_sha(rb: Runbook) -> str | None:
    ref = rb.sweep.kld.reference
    return next((c.model.sha256 for c in rb.provenance.candidates if c.candidate == ref), None)


def _kld_mismatch(a: Runbook, b: Runbook) -> str | None:
    """Why A's and B's KLDs are not against the same thing (corpus text, reference model), or None."""
    ca, cb = a.kld_corpus, b.kld_corpus
    if ca is None or cb is None or ca.sha256 != cb.sha256:
        return "the corpora differ (sha256 " + " vs ".join(c.sha256[:12] if c else "unknown" for c in (ca, cb)) + ")"
    refs = [_reference_sha(rb) for rb in (a, b)]
    if refs[0] is None or refs[0] != refs[1]:
        return ("the references' models differ (sha256 " + " vs ".join(str(r)[:12] for r in refs) + ")")
    return None


def compare_kld(a: Runbook, b: Runbook, alpha: float = ALPHA) -> list[KldComparison]:
    """Per (candidate, `[kld]` context) scored on both sides: per-chunk mean KLDs, B against A; none, with
    `reason`, when the corpus or the reference's model differ."""

    def ok(rb: Runbook) -> dict[tuple[str, int], list[float]]:
        return {(r.candidate, r.context): list(r.chunk_kld) for r in rb.kld if r.status == "ok" and r.chunk_kld}

    ka, kb = ok(a), ok(b)
    shared = sorted(set(ka) & set(kb))
    why = _kld_mismatch(a, b) if shared else None
    return [KldComparison(candidate=c, context=x, reason=why, verdict=None if why else compare_axis(
                ka[(c, x)], kb[(c, x)], axis="kld", better=AXES["kld"].better, alpha=alpha,
                margin_pct=axis_margin("kld", dict(a.sweep.margins))))
            for c, x in shared]


def _probed_cells(rb: Runbook) -> set[tuple[str, int]]:
    return {(r.candidate, r.context) for r in rb.rows if r.kind == "probe"}


def _compare_cells(a: Runbook, b: Runbook, keys: list[tuple[str, int]], alpha: float,
                   margin_pct: float | None) -> list[CellComparison]:

    sa, sb = _samples(a), _samples(b)

    def m_of(name: str) -> float:
        return axis_margin(name, dict(a.sweep.margins)) if margin_pct is None else margin_pct
    return [
        CellComparison(candidate=c, context=x, metrics=[
            compare_metric(m.name, m.better, sa.get((c, x), []), sb.get((c, x), []), margin_pct=m_of(m.name),
                           alpha=alpha)
            for m in compare_metrics() if m.name in Row.__struct_fields__])
        for c, x in keys
    ]


def compare_runbooks(a: Runbook, b: Runbook, alpha: float | None = None, margin_pct: float | None = None) -> Comparison:
    """Every cell both runbooks have, every compared metric, at `alpha` (default: the stop rule's α when
    either sweep stopped at planned looks, else 0.05) and the axis table's margins unless `margin_pct`."""
    from benchd.results.pareto import view_alpha

    source = "given"
    if alpha is None:
        alpha, source = min(view_alpha(rb.sweep, rb.design.order if rb.design else None) for rb in (a, b))
    keys_a, keys_b = _probed_cells(a), _probed_cells(b)
    return Comparison(
        a=a.id, b=b.id, test=TEST_NAME, alpha=alpha, alpha_source=source,
        margin_pct=DEFAULT_MARGIN_PCT if margin_pct is None else margin_pct,
        warnings=comparability_warnings(a, b), cells=_compare_cells(a, b, sorted(keys_a & keys_b), alpha, margin_pct),
        only_in_a=[f"{c}@{x}" for c, x in sorted(keys_a - keys_b)],
        only_in_b=[f"{c}@{x}" for c, x in sorted(keys_b - keys_a)], builds=compare_builds(a, b),
        ready=compare_ready(a, b, alpha),
        evals=compare_evals(a, b, alpha), images=compare_images(a, b, alpha), agentic=compare_agentic(a, b, alpha),
        kld=compare_kld(a, b, alpha), margins={} if margin_pct is not None else dict(a.sweep.margins),
    )
