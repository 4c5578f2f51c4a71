"""The report's KL divergence section: the corpus scored (path, sha256, tokens) and, per context and
candidate, the figures of `Runbook.kld` (benchd.engine.kld) with every null's reason."""

from __future__ import annotations

from benchd.results.text import fmt_value
from benchd.schemas import KldResult, Runbook
from benchd.stats.notation import fmt_bytes


def plus_minus(v: float | None, se: float | None, scale: float = 1.0, unit: str = "") -> str:
    """`v ± se` (each times `scale`, in `unit`) as every KLD view writes it; `null` without a value."""
    if v is None:
        return "null"
    return f"{fmt_value('kld', v * scale)}{unit}" + (f" ± {fmt_value('kld', se * scale)}{unit}" if se else "")


def _row(r: KldResult) -> str:
    if r.status != "ok":
        return f"  {r.candidate} @ {r.context}: {r.status}: {r.reason}"
    mem = fmt_bytes(r.mem_peak_bytes) if r.mem_peak_bytes else f"null ({r.null_reasons.get('mem_peak_bytes', '')})"
    parts = [f"KLD {plus_minus(r.kld_mean, r.kld_mean_se)}", f"median {fmt_value('kld', r.kld_median)}",
             f"p99 {fmt_value('kld', r.kld_p99)}", f"top-1 {plus_minus(r.top1_agree, r.top1_agree_se, 100, ' %')}",
             f"PPL ratio {plus_minus(r.ppl_ratio, r.ppl_ratio_se)}", f"{r.tokens_scored} tokens",
             f"{fmt_value('seconds', r.seconds)} s", f"peak {mem}"]
    extra = [f"{k}: {v}" for k, v in sorted(r.null_reasons.items()) if k != "mem_peak_bytes"]
    extra += list(r.notes) + ([r.comparability] if r.comparability else [])
    extra += [f"{r.attempts} runs of the tool"] if r.attempts > 1 else []
    return f"  {r.candidate} @ {r.context}: " + ", ".join(parts) + "".join(f"\n    ({e})" for e in extra)


def kld_lines(rb: Runbook) -> list[str]:
    """The section's lines (empty when the sweep has no `[kld]` reference)."""
    if rb.sweep.kld.reference is None:
        return []
    out = [f"KL divergence against {rb.sweep.kld.reference} (mean ± standard error over the scored tokens; "
           "lower is less quality lost; docs/kld.md):"]
    c = rb.kld_corpus
    if c is not None:
        tokens = f"{c.tokens} tokens ({c.tokens_source})" if c.tokens is not None else f"tokens: {c.tokens_source}"
        out.append(f"  corpus {c.path}: {c.source}, sha256 {c.sha256}, {c.bytes} bytes, {c.words} words, {tokens}")
    if not rb.kld:
        out.append("  no result (the step did not run: the job ended before it)")
    out += [_row(r) for r in rb.kld]
    return out
